"""Every Python file of the repository is linted: ``make lint`` runs ruff on ``.`` (not a
list of folders that a new one falls outside of: ``charts/values_table.py`` did, with a
finding), and mypy's ``files`` name every tracked Python file's tree.

Worked example: ``git ls-files '*.py'`` lists ``charts/values_table.py``; ``ruff check
--show-files .`` must list it too, and the Makefile's lint target must say ``ruff check .``.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).with_name("ruff")


def _tracked_python() -> set[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return {(REPO / line).resolve() for line in out.splitlines() if line}


def test_ruff_sees_every_tracked_python_file() -> None:
    out = subprocess.run(
        [str(RUFF), "check", "--show-files", "."],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    seen = {Path(line.strip()).resolve() for line in out.splitlines() if line.strip()}
    missing = sorted(str(p.relative_to(REPO)) for p in _tracked_python() - seen)
    assert not missing, f"outside ruff's scope: {missing}"
    assert REPO / "charts" / "values_table.py" in seen


def test_make_lint_runs_ruff_on_the_whole_repository() -> None:
    makefile = (REPO / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "$(BIN)/ruff check .\n" in lint + "\n", lint
    assert "$(BIN)/ruff format --check .\n" in lint + "\n", lint


def test_mypy_files_cover_every_tracked_python_file() -> None:
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    roots = [(REPO / f).resolve() for f in files]
    uncovered = sorted(
        str(p.relative_to(REPO))
        for p in _tracked_python()
        if not any(p == r or r in p.parents for r in roots)
    )
    assert not uncovered, f"outside mypy's files: {uncovered}"
