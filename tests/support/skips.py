"""When a test may skip: the suite's one rule, "CI skips nothing the machine can run".

Owns: ``in_ci()`` (``$CI`` set to anything but empty, ``0``, ``false`` or ``no``: ``.ci/run``
exports ``CI=1``, GitHub Actions and most CI services ``CI=true``); ``skip_unless_ci``:
something a local checkout may lack (a tool ``make lab-build`` builds) skips the test
locally and fails it under CI; ``platform_cannot``: the one skip CI allows, for what this
platform cannot do at all, its message saying which (``platform cannot: ...``);
``bind_errno``: the kernel's answer to binding an address (``None``: bindable). Must not:
decide for the lab tests (they never skip; a missing lab tool fails them).

    skip_unless_ci(f"{path} missing: run `make lab-build`")   # skip locally, fail in CI
    platform_cannot("bind 127.0.125.1 (EADDRNOTAVAIL): ...")  # skip everywhere
"""

from __future__ import annotations

import os
import socket
from typing import NoReturn

import pytest

#: what a platform skip's message starts with (the only skip CI lets pass)
PLATFORM = "platform cannot: "
NOT_CI = ("", "0", "false", "no")


def in_ci() -> bool:
    """``CI=1`` and ``CI=true`` are CI; unset, ``CI=``, ``CI=0`` and ``CI=false`` are not."""
    return os.environ.get("CI", "").strip().lower() not in NOT_CI


def skip_unless_ci(reason: str) -> NoReturn:
    """Skip with ``reason`` locally; under CI fail with it (CI skips nothing)."""
    if in_ci():
        pytest.fail(f"{reason} (CI=1: a skip here would hide the test)")
    pytest.skip(reason)


def platform_cannot(what: str) -> NoReturn:
    """Skip, in CI too: this platform cannot do ``what`` (say what and why)."""
    pytest.skip(PLATFORM + what)


def bind_errno(host: str, port: int = 0) -> int | None:
    """The errno binding ``(host, port)`` fails with (``SO_REUSEADDR``, as asyncio's
    servers bind), ``None`` when it binds. Port 0 asks only whether the kernel can bind
    the address at all: ``EADDRNOTAVAIL`` where it is not a local address (macOS serves
    only 127.0.0.1 of the loopback range), ``EADDRINUSE`` for a busy ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return err.errno
    return None


def ci_refuses(reason: str) -> bool:
    """Whether a skipped (or xfailed) test with ``reason`` must count as failed: under CI,
    unless the reason is a platform's (``platform_cannot``). ``tests/conftest.py`` asks it
    of every skip, ``pytest.mark.skipif`` and ``xfail`` included."""
    return in_ci() and not reason.removeprefix("Skipped: ").startswith(PLATFORM)
