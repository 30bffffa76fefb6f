"""Scale up fast, scale down slowly (HPA-style), with a tolerance band.

Owns: turning one tick's recommendation into what is applied. A scale-up applies at
once. A scale-down applies the HIGHEST recommendation of the stabilization window, and
only once the recorded history covers the whole window (so a restart or a brief dip
cannot shrink a pool); changes smaller than the tolerance band are ignored, and
nothing shrinks during a rollout step. Must not: compute recommendations or read clocks.

Recommendations form a step function: each (time, p, d) record holds until the next.
The window's maximum therefore includes the last record at or before the window start
(the "anchor"), which is also what proves the window is covered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Ignore a scale-down smaller than this fraction of the current replicas (10%:
#: 20 -> 19 is ignored, 20 -> 18 applies, 4 -> 3 applies).
TOLERANCE = 0.1

Record = tuple[float, int, int]


def prune(records: Sequence[Record], now: float, window: float) -> tuple[Record, ...]:
    """Records inside ``(now - window, now]`` plus the anchor (the newest at or before
    the window start). Window 300 at now 1000: records at 600, 690, 710, 1000 -> 690
    (anchor), 710, 1000."""
    start = now - window
    ordered = sorted((r for r in records if r[0] <= now), key=lambda r: r[0])
    anchor = [r for r in ordered if r[0] <= start][-1:]
    return tuple(anchor) + tuple(r for r in ordered if r[0] > start)


#: Why a scale-down was withheld (``Stabilized.held_by``).
HELD_ROLLOUT = "rollout"
HELD_WINDOW = "window"
HELD_TOLERANCE = "tolerance"


@dataclass(frozen=True)
class Stabilized:
    """The replicas to apply and, when a scale-down was withheld, why (``deferred``, a
    sentence) and by what (``held_by``: rollout, window or tolerance)."""

    replicas: int
    deferred: str | None = None
    held_by: str | None = None


def stabilize(
    current: int,
    recommended: int,
    window_values: Sequence[int],
    covered: bool,
    window_seconds: float,
    frozen: bool = False,
) -> Stabilized:
    """Apply ``recommended`` for a pool currently at ``current``.

    * 4 -> 6: applies (up is immediate).
    * 6 -> 4 with the window's values [6, 5, 4]: stays 6 (max of the window).
    * 6 -> 4 with window [4, 4] covered: 4. Not covered: stays 6 ("not yet observed").
    * 20 -> 19: ignored (tolerance); ``frozen`` (rollout): stays.
    """
    if recommended >= current:
        return Stabilized(recommended)
    window = f"{window_seconds:g}s"
    if frozen:
        return Stabilized(
            current, f"scale-down to {recommended} deferred: rollout in progress", HELD_ROLLOUT
        )
    target = max([recommended, *window_values])
    if target >= current:
        return Stabilized(
            current,
            f"scale-down to {recommended} deferred: a recommendation of {target} "
            f"within the {window} stabilization window",
            HELD_WINDOW,
        )
    if not covered:
        return Stabilized(
            current,
            f"scale-down to {target} deferred: {window} stabilization window not yet observed",
            HELD_WINDOW,
        )
    if current - target < TOLERANCE * current:
        return Stabilized(
            current,
            f"scale-down to {target} ignored: within the {TOLERANCE:.0%} tolerance",
            HELD_TOLERANCE,
        )
    return Stabilized(target)
