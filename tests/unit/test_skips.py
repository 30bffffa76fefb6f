"""When a test may skip (support.skips): CI skips nothing the machine can run.

``.ci/run`` exports ``CI=1`` (CI services ``CI=true``): a missing lab-built tool fails the
chart tests there and skips them locally; the engine-server tests skip only where the
kernel cannot bind their address (``EADDRNOTAVAIL``) and fail on a busy port
(``EADDRINUSE``), in CI or not; ``tests/conftest.py`` fails any other skip under CI.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import pytest

from pdlab.engine.pods import PodInfo
from pdscaler.types import Role
from support import skips
from support.chartkit import tool
from support.pod_servers import served

pytest_plugins = ["pytester"]

#: TEST-NET-1 (RFC 5737): never a local address, so the kernel cannot bind it
NOT_LOCAL = "192.0.2.1"


@pytest.mark.parametrize(
    ("value", "ci"),
    [("1", True), ("true", True), ("TRUE", True), ("yes", True),
     ("", False), ("0", False), ("false", False), (None, False)],
)  # fmt: skip
def test_ci_is_read_from_the_ci_variable(
    monkeypatch: pytest.MonkeyPatch, value: str | None, ci: bool
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert skips.in_ci() is ci


@pytest.mark.parametrize("value", ["1", "true"])
def test_a_missing_tool_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="missing: run `make lab-build`"):
        tool(tmp_path / "helm")


def test_a_missing_tool_skips_locally(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="missing: run `make lab-build`"):
        tool(tmp_path / "helm")
    assert tool(tmp_path) == tmp_path  # a built tool is returned


def test_the_kernel_says_why_an_address_does_not_bind() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert skips.bind_errno("127.0.0.1", port) == errno.EADDRINUSE
    assert skips.bind_errno(NOT_LOCAL) == errno.EADDRNOTAVAIL
    assert skips.bind_errno("127.0.0.1") is None


def pod(ip: str, port: int) -> PodInfo:
    return PodInfo("ns", "chat-r1-decode-0", "chat", Role.DECODE, "v1", True,
                   ip=ip, port=port, revision="r1", uid="uid-d")  # fmt: skip


@pytest.mark.parametrize("value", ["1", None])
def test_a_busy_port_fails_the_engine_tests_it_does_not_skip_them(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        refused = pytest.raises(pytest.fail.Exception, match=r"ports did not.*in use")
        with refused, served(pod("127.0.0.1", port)):
            pass


def test_an_address_the_kernel_cannot_bind_is_a_platform_skip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "1")
    skipped = pytest.raises(pytest.skip.Exception, match=r"^platform cannot: bind .*192\.0\.2\.1")
    with skipped as info, served(pod(NOT_LOCAL, 18000)):
        pass
    assert not skips.ci_refuses(f"Skipped: {info.value.msg}")  # CI lets it pass


def test_under_ci_every_other_skip_counts_as_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert skips.ci_refuses("Skipped: /x/helm missing: run `make lab-build`")
    assert skips.ci_refuses("flaky on a loaded machine")  # an xfail's reason
    assert not skips.ci_refuses("Skipped: platform cannot: bind ['127.0.125.1'] ...")
    monkeypatch.setenv("CI", "0")
    assert not skips.ci_refuses("Skipped: /x/helm missing: run `make lab-build`")


def test_the_suite_fails_a_skip_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook in tests/conftest.py, run on a suite of one skip and one platform skip."""
    pytester.makeconftest((Path(__file__).parents[1] / "conftest.py").read_text())
    pytester.makepyfile(
        """
        import pytest
        from support.skips import platform_cannot

        def test_skips():
            pytest.skip("helm missing")

        @pytest.mark.xfail(reason="known flake")
        def test_xfails():
            assert False

        def test_cannot():
            platform_cannot("bind 127.0.125.1 (EADDRNOTAVAIL)")
        """
    )
    pytester.syspathinsert(Path(__file__).parents[1])
    monkeypatch.setenv("CI", "1")
    pytester.runpytest_inprocess().assert_outcomes(failed=2, skipped=1)
    monkeypatch.delenv("CI")
    pytester.runpytest_inprocess().assert_outcomes(skipped=2, xfailed=1)
