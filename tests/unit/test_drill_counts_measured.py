"""Drill sample counts are measured, never typed: every ``drill.sampled(samples, ...)``
in tests/drills counts something the drill observed (``len(seen)``, ``tl.samples``,
``sum(...)`` over what a window counted), or is the literal 1 of one observed event (a
refused write). A count typed as a constant (``drill.sampled(FLEET, 0)``,
``drill.sampled(2, 0)``) says the drill sampled what it only intended to, and it feeds
bench/results/reliability.md and the README's sample total."""

from __future__ import annotations

import ast
from pathlib import Path

DRILLS = Path(__file__).resolve().parents[1] / "drills"


def typed(node: ast.expr) -> bool:
    """True when ``node`` reads nothing measured: an int literal other than 1, an
    UPPER_CASE constant, or arithmetic of those. ``typed(FLEET)``, ``typed(2)``,
    ``typed(2 * COUNT)`` are True; ``typed(len(seen))``, ``typed(tl.samples)``,
    ``typed(1)`` are False."""
    if isinstance(node, ast.Constant):
        return node.value != 1
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.BinOp):
        return typed(node.left) and typed(node.right)
    if isinstance(node, ast.UnaryOp):
        return typed(node.operand)
    return False


def sample_counts() -> list[tuple[str, int, ast.expr]]:
    """(file, line, first argument) of every ``.sampled(...)`` call in tests/drills."""
    out = []
    for path in sorted(DRILLS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "sampled"
                and node.args
            ):
                out.append((path.name, node.lineno, node.args[0]))
    return out


def test_the_rule_tells_typed_from_measured() -> None:
    def first(src: str) -> ast.expr:
        call = ast.parse(src, mode="eval").body
        assert isinstance(call, ast.Call)
        return call.args[0]

    for src in ("d.sampled(FLEET, 0)", "d.sampled(2, 0)", "d.sampled(2 * COUNT, 0)"):
        assert typed(first(src)), src
    for src in ("d.sampled(len(seen), 0)", "d.sampled(tl.samples, 0)", "d.sampled(1, 1)",
                "d.sampled(sum(r['n'] for r in rs), 0)", "d.sampled(n, 0)"):  # fmt: skip
        assert not typed(first(src)), src


def test_every_drill_sample_count_is_measured() -> None:
    calls = sample_counts()
    assert len(calls) >= 20  # the drills' calls were found
    found = [f"{f}:{line}: {ast.unparse(arg)}" for f, line, arg in calls if typed(arg)]
    assert found == []
