"""Markdown for every report in bench/: the one GitHub table renderer, number formats,
and the one way a generated section replaces the text between its two markers.

Owns: formatting only. Must not: compute or measure anything.

    table(["a", "b"], [["x", "1"]])                       # | a | b | / |---|---:| / | x | 1 |
    table(h, rows, right=numeric_columns(rows, len(h)))    # right-align numeric columns only
    spread({"mean": 0.5, "min": 0.4, "max": 0.6}, two)     # 0.50 [0.40-0.60]
    between("a\n<b>\nold\n<e>\n", "<b>", "<e>", "new")    # a\n<b>\nnew\n<e>\n
    diurnal_span({"warmup_hours": 0.5, "scored_hours": 2.0}, 0)  # day 0's last 0.5 h [...]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any


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


def two(x: float) -> str:
    """Two decimals (GPU-hours, ratios): 4.031 -> ``4.03``."""
    return f"{x:.2f}"


def spread(st: Mapping[str, float | None], fmt: Callable[[float], str]) -> str:
    """``mean [min-max]`` of a stats dict (``mean``, ``min``, ``max``), or the mean alone
    when min and max read the same; ``-`` when a figure is missing (None or NaN)."""
    vals = [st.get(k) for k in ("mean", "min", "max")]
    if any(v is None or math.isnan(v) for v in vals):
        return "-"
    mean, lo, hi = (fmt(v) for v in vals if v is not None)
    return mean if lo == hi else f"{mean} [{lo}-{hi}]"


def markers(text: str, begin: str, end: str, name: str = "README.md") -> tuple[int, int]:
    """Where ``begin`` starts and where ``end`` stops in ``text``: ``markers("a<b>x<e>z",
    "<b>", "<e>")`` -> ``(1, 8)``; ValueError when either is missing or out of order."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{name} lacks the markers {begin!r} ... {end!r}")
    return start, stop + len(end)


def between(text: str, begin: str, end: str, body: str, name: str = "README.md") -> str:
    """``text`` with what lies between the markers replaced by ``body`` on its own lines
    (the markers kept)."""
    start, stop = markers(text, begin, end, name)
    return text[:start] + begin + "\n" + body + "\n" + end + text[stop:]


def diurnal_span(plan: Mapping[str, Any], warmup_day: int) -> str:
    """The spans a diurnal.json's ``plan`` replays (``bench.diurnal.Plan``; its warm-up is
    day ``warmup_day``): ``({"warmup_hours": 0.5, "scored_hours": 2.0}, 0)`` -> ``day 0's
    last 0.5 h replayed as every dynamic policy's pre-roll (scored apart) and used to
    size and tune the out-of-sample baselines, the 2 h from day 1's start scored``."""
    return (
        f"day {warmup_day}'s last {plan['warmup_hours']:g} h replayed as every dynamic "
        "policy's pre-roll (scored apart) and used to size and tune the out-of-sample "
        f"baselines, the {plan['scored_hours']:g} h from day {warmup_day + 1}'s start scored"
    )
