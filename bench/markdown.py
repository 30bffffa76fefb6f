"""Markdown for every report in bench/: the one GitHub table renderer, and number formats.

Owns: formatting only. Must not: compute or measure anything.

    table(["a", "b"], [["x", "1"]])                       # | a | b | / |---|---:| / | x | 1 |
    table(h, rows, right=numeric_columns(rows, len(h)))    # right-align numeric columns only
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None
) -> str:
    """A GitHub table; column i right-aligned when ``right[i]``, by default every column
    but the first: ``table(["a", "b"], [["x", "1"]])`` -> ``| a | b |``, ``|---|---:|``,
    ``| x | 1 |``."""
    if any(len(r) != len(headers) for r in rows):
        raise ValueError("every row needs one cell per header")
    align = [i > 0 for i in range(len(headers))] if right is None else list(right)
    if len(align) != len(headers):
        raise ValueError("one alignment per header")
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---:" if r else "---" for r in align) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def numeric_columns(rows: Sequence[Sequence[str]], width: int) -> list[bool]:
    """Per column: every cell starts with a digit, ``<`` or ``~`` (a measured figure),
    and there is at least one row: ``numeric_columns([["tick", "12 ms"]], 2)`` ->
    ``[False, True]``."""
    return [bool(rows) and all(_numeric(r[i : i + 1]) for r in rows) for i in range(width)]


def _numeric(cell: Sequence[str]) -> bool:
    """The cell (a one-item slice, empty past a short row) starts like a figure."""
    return bool(cell) and (cell[0][:1].isdigit() or cell[0][:1] in "<~")


def secs(value: float | None) -> str:
    """0.0412 -> ``41 ms``, 2.345 -> ``2.35 s``, inf/None -> ``never``."""
    if value is None or math.isinf(value):
        return "never"
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
