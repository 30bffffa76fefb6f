"""Markdown helpers of the decision-quality reports: a GitHub table and number formats.

Owns: formatting only. Must not: compute or measure anything.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub table, the first column left-aligned and the others right-aligned:
    ``table(["a", "b"], [["x", "1"]])`` -> ``| a | b |``, ``|---|---:|``, ``| x | 1 |``."""
    if any(len(r) != len(headers) for r in rows):
        raise ValueError("every row needs one cell per header")
    lines = [
        "| " + " | ".join(headers) + " |",
        "|---|" + "---:|" * (len(headers) - 1),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def secs(value: float | None) -> str:
    """0.0412 -> ``41 ms``, 2.345 -> ``2.35 s``, inf/None -> ``never``."""
    if value is None or math.isinf(value):
        return "never"
    if math.isnan(value):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
