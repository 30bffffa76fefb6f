"""The suite's own layout: a test module imports its helpers from ``tests/support`` (or
``tests/drills``' harness), never from another test module, so running one file, or
deleting one, cannot break another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def _imported(path: Path) -> set[str]:
    """The top-level module names ``path`` imports (``from a.b import c`` gives ``a.b``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_test_module_imports_another() -> None:
    found = {
        str(path.relative_to(TESTS)): sorted(
            m for m in _imported(path) if m.split(".")[-1].startswith("test_")
        )
        for path in sorted(TESTS.rglob("test_*.py"))
    }
    offenders = {file: mods for file, mods in found.items() if mods}
    assert len(found) > 100  # the walk found the suite
    assert offenders == {}


def test_the_check_sees_an_import_from_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text("from test_tick import run\nimport unit.test_rate_source\nimport os\n")
    assert _imported(module) == {"test_tick", "unit.test_rate_source", "os"}
