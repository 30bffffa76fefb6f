"""The engine's hand-written fast paths against what they replace: ``_bucket`` against
``bisect.bisect_left`` (every histogram observation goes through it), and the pool
queue's list-and-index line against a deque (the served prefix is cut off, lost work
goes back to the front)."""

from __future__ import annotations

import bisect
import math
import random
from collections import deque

from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS, _bucket, _no_cost, _Queue


def test_bucket_is_bisect_left() -> None:
    rng = random.Random(7)
    values = [rng.random() * 10 ** rng.uniform(-4, 4) for _ in range(20_000)]
    values += [0.0, -1.0, math.inf, -math.inf, math.nan]
    for bounds in (TTFT_BUCKETS, TPOT_BUCKETS):
        values_and_bounds = [*values, *bounds, *(math.nextafter(b, 0.0) for b in bounds)]
        got = [_bucket(bounds, x) for x in values_and_bounds]
        assert got == [bisect.bisect_left(bounds, x) for x in values_and_bounds]
    assert _bucket(TTFT_BUCKETS, 0.3) == 9  # the 0.5 s bucket (its docstring)


def test_fifo_queue_serves_as_a_deque_across_cuts_and_returns() -> None:
    rng = random.Random(3)
    arrival = [float(i) for i in range(40_000)]
    queue = _Queue(arrival, None, _no_cost)
    model: deque[int] = deque()
    nxt = 0
    served = 0
    for _ in range(60_000):
        r = rng.random()
        if r < 0.5 and nxt < len(arrival):
            queue.append(nxt)
            model.append(nxt)
            nxt += 1
        elif r < 0.55 and model:  # a lost replica's request back at the front
            back = model.popleft()
            assert queue.head(0.0) == back
            queue.popleft()
            queue.appendleft(back)
            model.appendleft(back)
        elif model:
            assert queue.head(0.0) == model[0]
            assert queue.popleft() == model.popleft()
            served += 1
        assert len(queue) == len(model)
        assert queue.waiting() == bool(model)
    assert served > 2 * _Queue.CUT  # the served prefix was cut off more than once
