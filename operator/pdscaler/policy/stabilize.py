"""Scale up fast, scale down slowly (HPA-style), with a tolerance band.

Owns: turning one tick's recommendation into what is applied. A scale-up applies at
once. A scale-down applies the HIGHEST recommendation of the stabilization window, and
only once the recorded history covers the whole window (so a restart or a brief dip
cannot shrink a pool); changes smaller than the tolerance band are ignored, and
nothing shrinks during a rollout step. A scale-down removes at most a third of the pool,
and the size it leaves is recorded as that tick's recommendation (``window_record``), so
the next step down waits a whole window. Must not: compute recommendations or read clocks.

Why steps: a pool that shrank takes T_s (plus a tick) to come back, and the window's
recommendations were sized at the window's rates with priors that may be optimistic.
Worked (prefill, 1,240 tokens per request, ~8,400 tok/s per replica, T_s 90 s): the
window recommends 11 for 55 req/s while the pool runs 22. One third at a time,
22 -> 15 -> 10 over two windows: 15 replicas still serve 15 x 8,400 / 1,240 = 100 req/s,
so a rise back to 75-90 req/s within T_s is absorbed, and a load that stays low still
reaches 10 one window later; 22 -> 11 at once would leave 11 x 8,400 / 1,240 = 75 req/s
and the TTFT over the SLO until new replicas start.

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
#: A scale-down removes at most this fraction of the pool (at least one replica):
#: 22 -> 15, 9 -> 6, 2 -> 1.
MAX_DOWN_FRACTION = 1 / 3

Record = tuple[float, int, int]


def prune(records: Sequence[Record], now: float, window: float) -> tuple[Record, ...]:
    """Records inside ``(now - window, now]`` plus the anchor: the newest record at or
    before the window start, dated from where its value began (the earliest of the run
    of equal records it ends). Window 300 at now 1000: records (600, 4, 4), (690, 5, 4),
    (700, 5, 4), (710, 6, 4), (1000, 6, 4) -> (690, 5, 4) (anchor), (710, 6, 4),
    (1000, 6, 4).

    Why the run start: the anchor's value is all the window reads of it, but its date is
    persisted (``status.memory_to_status``). The newest record before the start moves
    every tick, so a steady PDDeployment would rewrite its status every tick once its
    window is covered; where the steady value began does not move."""
    start = now - window
    ordered = sorted((r for r in records if r[0] <= now), key=lambda r: r[0])
    before = [r for r in ordered if r[0] <= start]
    first = len(before) - 1
    while first > 0 and before[first - 1][1:] == before[first][1:]:
        first -= 1
    return tuple(before[first : first + 1]) + tuple(r for r in ordered if r[0] > start)


#: Why a scale-down was withheld (``Stabilized.held_by``).
HELD_ROLLOUT = "rollout"
HELD_WINDOW = "window"
HELD_TOLERANCE = "tolerance"
HELD_DATA = "data"


@dataclass(frozen=True)
class Stabilized:
    """The replicas to apply and, when a scale-down was withheld, why (``deferred``, a
    sentence) and by what (``held_by``: rollout, window or tolerance). ``towards``: the
    size the window allowed when a scale-down stopped at ``down_step`` (22 -> 15,
    towards 11), else None."""

    replicas: int
    deferred: str | None = None
    held_by: str | None = None
    towards: int | None = None


def stabilize(
    current: int,
    recommended: int,
    window_values: Sequence[int],
    covered: bool,
    window_seconds: float,
    frozen: bool = False,
    blocked: str | None = None,
) -> Stabilized:
    """Apply ``recommended`` for a pool currently at ``current``.

    * 4 -> 6: applies (up is immediate).
    * 6 -> 4 with the window's values [6, 5, 4]: stays 6 (max of the window).
    * 6 -> 4 with window [4, 4] covered: 4. Not covered: stays 6 ("not yet observed").
    * 20 -> 19: ignored (tolerance); ``frozen`` (rollout): stays.
    * 6 -> 4 ``blocked`` by missing data (``"prefill queue depth unknown"``): stays.
    * 22 -> 8 with window [8, 9] covered: 15 (at most a third, ``down_step``).
    """
    if recommended >= current:
        return Stabilized(recommended)
    window = f"{window_seconds:g}s"
    if frozen:
        return Stabilized(
            current, f"scale-down to {recommended} deferred: rollout in progress", HELD_ROLLOUT
        )
    if blocked:
        return Stabilized(current, f"scale-down to {recommended} deferred: {blocked}", HELD_DATA)
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
    step = down_step(current)
    if step > target:
        return Stabilized(step, towards=target)
    return Stabilized(target)


def down_step(current: int) -> int:
    """The fewest replicas one scale-down leaves: ``current`` less a third (rounded
    down, at least one): 22 -> 15, 9 -> 6, 4 -> 3, 1 -> 0 (min bounds are ``limits``')."""
    return current - max(1, int(current * MAX_DOWN_FRACTION))


def window_record(
    now: float, recommended: tuple[int, int], current: tuple[int, int], applied: tuple[int, int]
) -> Record:
    """This tick's record for the window: the recommendation of each pool, or, for a pool
    scaled down on this tick, the size it was left at when that is higher. The next
    scale-down then needs a whole window of lower recommendations again: 22 -> 15 at
    t = 1290 s (recommended 11) records 15, and 15 -> 10 waits until t = 1590 s.
    A pool held or grown records its recommendation unchanged."""
    kept = [
        max(rec, app) if app < cur else rec
        for rec, cur, app in zip(recommended, current, applied, strict=True)
    ]
    return (now, kept[0], kept[1])
