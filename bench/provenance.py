"""Where a results file came from: the commit and the UTC date it was measured at.

Owns: ``measured_at`` (asked of git when a measurement is written: the short commit of
HEAD, ``+dirty`` when the measured code had uncommitted changes, and the date), the
``measured_at`` entry every JSON results file carries, ``line``, the sentence every
markdown render puts in its header, and ``engine_label``, how this process's simulator
runs (compiled by ``bench.native``, or pure Python), which the reports print. Must not:
guess: without git (a tarball, no git binary) the commit is ``unknown``; an entry
written after the fact (a file measured before this module existed) says so in
``recorded``.

    measured_at()            # {"commit": "48bfd55+dirty", "date": "2026-12-05 09:41 UTC"}
    line({"commit": "0620c79", "date": "2026-12-03 15:57 UTC",
          "recorded": "afterwards, from git log: ec44434 ..."})
    # 'Measured at commit 0620c79, 2026-12-03 15:57 UTC (recorded afterwards, from
    #  git log: ec44434 ...).'
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
UNKNOWN = "unknown"
#: The code a measurement depends on (its results, bench/results/, are not).
MEASURED: tuple[str, ...] = (
    "operator",
    "pdlab",
    "bench",
    "tests",
    "deploy",
    "crds",
    "data",
    "pyproject.toml",
    ":(exclude)bench/results",
)
#: The key of the entry in a JSON results file.
KEY = "measured_at"


def _git(args: Sequence[str], repo: Path) -> str | None:
    """git's stdout, stripped; None when git is missing, fails or takes over 10 s."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def now() -> str:
    """The current UTC time as results files write it: ``2026-12-05 09:41 UTC``."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def measured_at(repo: Path = REPO, paths: Sequence[str] = MEASURED) -> dict[str, str]:
    """``{"commit": <short HEAD>[+dirty], "date": <UTC now>}``; ``+dirty`` when
    ``git status`` lists a change under ``paths``; commit ``unknown`` without git."""
    head = _git(["rev-parse", "--short=7", "HEAD"], repo)
    if not head:
        return {"commit": UNKNOWN, "date": now()}
    status = _git(["status", "--porcelain", "--untracked-files=no", "--", *paths], repo)
    dirty = status is None or bool(status)
    return {"commit": head + ("+dirty" if dirty else ""), "date": now()}


def line(entry: Mapping[str, Any] | None) -> str:
    """The header sentence of a markdown render; a missing entry says so."""
    if not entry:
        return "Measured at: not recorded."
    text = f"Measured at commit {entry.get('commit', UNKNOWN)}, {entry.get('date', UNKNOWN)}"
    recorded = entry.get("recorded")
    return text + (f" ({recorded})." if recorded else ".")


def engine_label() -> str:
    """How this process's simulator runs, for the reports: ``compiled with mypyc
    (bench/native.py)`` when ``pdscaler.sim.engine`` is loaded from an extension module
    (``bench.native``'s build), else ``pure Python``."""
    import pdscaler.sim.engine as engine

    compiled = not str(engine.__file__).endswith(".py")
    return "compiled with mypyc (bench/native.py)" if compiled else "pure Python"
