"""The recent queues and ready counts of both pools, kept tick to tick in the memory.

Owns: recording one point per tick (``(time, prefill queue, decode queue, prefill
ready, decode ready)``), the policy's one test of a backlog (``backlogged``: at least
one request waiting per ready replica), and the facts the policy reads from the points:

* ``mean_ready``: the ready replicas averaged over the metrics window. The pools'
  tokens/s are window rates, so they are divided by the replicas that served over the
  same window, not by the count now: 10 ready for the first half of a 120 s window and
  20 for the second, 150,000 tok/s -> 10,000 per replica, not 7,500 (the count now).
* ``saturated_seconds``: how long the pool's queue has held at least one waiting
  request per ready replica at every tick. Only for that time did the replicas serve
  what they CAN; a queue seen once at 70% utilisation (a burst) is not saturation.
* ``ready_rose``: whether the pool's ready replicas went up inside the given points
  (the last two: the tick new replicas first show ready).
* ``drained_since_rise``: whether replicas came up inside the window and the queue has
  stayed below one per ready replica at every tick since, so the latency percentile (a
  window figure) is what queued before them, not a standing shortage.
* ``unqueued_throughout``: whether the points cover the latency window and at every
  one fewer requests waited than the pool has ready replicas, so a latency percentile
  over its SLO is not a shortage of this pool's replicas (see the function).
* ``queue_slope``: requests/s the prefill queue grew (or shrank) over the window. The
  request rate is read as prefill completions; while a backlog drains, completions run
  above arrivals by exactly the queue's fall: 50 req/s completed while the queue went
  600 -> 0 in 120 s is 50 - 5 = 45 req/s arriving.

Must not: read clocks or metrics itself; it is handed the points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from pdscaler.types import Role

#: (time, prefill queue, decode queue, prefill ready, decode ready); a queue is None
#: when it was unknown at that tick.
Point = tuple[float, float | None, float | None, int, int]
#: where each role's queue and ready count sit in a ``Point``
_QUEUE_AT = {Role.PREFILL: 1, Role.DECODE: 2}
_READY_AT = {Role.PREFILL: 3, Role.DECODE: 4}


def record(history: Sequence[Point], point: Point, lookback: float) -> tuple[Point, ...]:
    """``history`` with ``point`` appended and points older than ``lookback`` before it
    (or after it, after a clock jump) dropped."""
    now = point[0]
    kept = tuple(p for p in history if now - lookback <= p[0] < now)
    return (*kept, point)


def in_window(history: Sequence[Point], now: float, window: float) -> tuple[Point, ...]:
    """The points at ``now - window`` or later (``now`` included)."""
    return tuple(p for p in history if now - window <= p[0] <= now)


def _queue(point: Point, role: Role) -> float | None:
    return cast(float | None, point[_QUEUE_AT[role]])


def _ready(point: Point, role: Role) -> int:
    return cast(int, point[_READY_AT[role]])


def backlogged(queue: float | None, ready: int) -> bool:
    """Whether a pool's queue holds at least one waiting request per ready replica (one
    when none is ready): the policy's single test of "requests wait". 10 ready: queue
    10 True, queue 3 False; 0 ready: queue 1 True; unknown queue False."""
    return queue is not None and queue >= max(1, ready)


def mean_ready(points: Sequence[Point], role: Role, ready_now: int) -> float:
    """The pool's ready replicas averaged over ``points`` (``ready_now`` when there are
    none): points with 10, 10, 20, 20 ready -> 15."""
    if not points:
        return float(ready_now)
    return sum(_ready(p, role) for p in points) / len(points)


def saturated_seconds(points: Sequence[Point], role: Role, interval: float) -> float:
    """How long the pool has had at least one request waiting per ready replica at every
    tick, counting one interval per saturated tick: the trailing ticks' queues 3, 12,
    15, 30 with 10 ready and a 15 s interval -> 45.0 (the run 12, 15, 30); the newest
    below its ready count -> 0.0."""
    run = 0
    for p in reversed(points):
        if not backlogged(_queue(p, role), _ready(p, role)):
            break
        run += 1
    return run * interval


def ready_rose(points: Sequence[Point], role: Role) -> bool:
    """True when the newest point's ready replicas exceed the fewest seen in ``points``:
    ready 1, 3, 4 -> True; 4, 4, 4 or 6, 5, 4 -> False; no points -> False."""
    if not points:
        return False
    return _ready(points[-1], role) > min(_ready(p, role) for p in points)


def drained_since_rise(points: Sequence[Point], role: Role) -> bool:
    """True when the pool's ready replicas rose inside ``points`` and every queue sampled
    AFTER the tick that first saw the latest rise is known and below one request per
    ready replica: the new replicas drained the backlog and it has stayed drained.
    Prefill (ready, queue) (1, 40), (5, 30), (5, 0), (5, 1) -> True; (6, 2), (9, 5),
    (9, 23), (9, 0) -> False (23 waited on 9 replicas after they were all up); a rise
    seen only at the newest point, or no rise -> False."""
    last_rise = None
    for k in range(1, len(points)):
        if _ready(points[k], role) > _ready(points[k - 1], role):
            last_rise = k
    if last_rise is None or last_rise == len(points) - 1:
        return False
    return _unqueued(points[last_rise + 1 :], role)


def _unqueued(points: Sequence[Point], role: Role) -> bool:
    """Every queue in ``points`` known and below one request per ready replica."""
    return all(
        (q := _queue(p, role)) is not None and not backlogged(q, _ready(p, role)) for p in points
    )


def unqueued_throughout(points: Sequence[Point], role: Role, span: float) -> bool:
    """True when ``points`` span at least ``span`` seconds and every queue in them is
    known and below one request per ready replica. Then the pool's latency percentile
    over its SLO (a window figure) is not a shortage of its replicas: at no tick of the
    window did requests wait for one. It is the requests' own service time, the other
    pool's admission (a first token waits for decode), or bursts shorter than a tick,
    which no reactive size catches in time (``scaling.burstHeadroom`` holds head-room
    for those). Prefill (ready, queue) every 15 s over 105 s: 46 ready, queues 3, 0, 5,
    ... -> True; one queue of 60 on 46 -> False; an unknown queue -> False; points
    spanning 30 s -> False (the operator just started: the window is unseen)."""
    if not points or points[-1][0] - points[0][0] < span:
        return False
    return _unqueued(points, role)


def queue_slope(points: Sequence[Point], role: Role) -> float:
    """Requests/s the pool's queue changed from the oldest to the newest known point:
    600 -> 0 over 120 s -> -5.0; fewer than two known points or no time between -> 0."""
    known = [(p[0], q) for p in points if (q := _queue(p, role)) is not None]
    if len(known) < 2 or known[-1][0] <= known[0][0]:
        return 0.0
    return (known[-1][1] - known[0][1]) / (known[-1][0] - known[0][0])


def queue_falling(points: Sequence[Point], role: Role) -> bool:
    """True when the newest known queue is below the one before it (the backlog is
    draining on its own): 40 then 25 -> True; 25 then 40, or a single point -> False."""
    known = [q for p in points if (q := _queue(p, role)) is not None]
    return len(known) >= 2 and known[-1] < known[-2]
