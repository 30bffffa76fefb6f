"""policy.history and the rules built on it: saturation, the queue's slope as the
arrival correction, the proportional fallback only where replicas relieve the
pressure, and the forecast's trend limited to the rate window. Worked numbers in each
docstring."""

from __future__ import annotations

import pytest

from pdscaler.policy import history
from pdscaler.policy.decide import arrival_rate
from pdscaler.policy.forecast import forecast_rate
from pdscaler.types import PolicyMemory, Role
from support.builders import chat_spec, points, run, snapshot


def test_saturated_seconds_counts_the_trailing_run() -> None:
    """10 ready, queues 3, 12, 15, 30: the trailing run 12, 15, 30 is 45 s; a newest
    queue below the ready count, or an unknown one, ends it (0 s)."""
    assert history.saturated_seconds(points([3, 12, 15, 30]), Role.PREFILL, 15.0) == 45.0
    assert history.saturated_seconds(points([12, 15, 3]), Role.PREFILL, 15.0) == 0.0
    assert history.saturated_seconds(points([12, None]), Role.PREFILL, 15.0) == 0.0
    assert history.saturated_seconds(points([12, 15]), Role.DECODE, 15.0) == 0.0


def test_arrivals_are_completions_corrected_by_the_queue() -> None:
    """50 req/s completed while the prefill queue fell 600 -> 0 over 120 s: 45 arrived.
    A growing queue (0 -> 240) adds 2 req/s; never below 0."""
    falling = points([600.0 - 75.0 * k for k in range(9)])
    assert history.queue_slope(falling, Role.PREFILL) == pytest.approx(-5.0)
    assert arrival_rate(50.0, falling) == pytest.approx(45.0)
    assert arrival_rate(50.0, points([0.0, 240.0 / 8 * 8])) == pytest.approx(66.0)
    assert arrival_rate(1.0, falling) == 0.0
    assert arrival_rate(50.0, points([600.0])) == 50.0


def test_backlog_draining_is_not_read_as_more_arrivals() -> None:
    """Through decide: the queue 300 -> 60 over 120 s while 22 req/s completed is
    20 req/s arriving (the forecast and the published rate use 20, not 22)."""
    memory = PolicyMemory()
    d = None
    for k in range(9):
        metrics = snapshot(22.0, prefill_queue=300.0 - 30.0 * k)
        d = run(chat_spec(), metrics, 30, 30, now=1000.0 + 15 * k, memory=memory)
        memory = d.memory
    assert d is not None
    assert d.model.forecast_rate == pytest.approx(20.0)


def test_prefill_latency_without_a_queue_adds_no_replica() -> None:
    """TTFT 4 s vs 2 s with nothing waiting and prefill at 48% of its capacity
    (14.4 x 2000 / (20 x 3000)): the TTFT is service time, no replica shortens it; the
    old fallback grew prefill 2x. With 30 waiting (>= one per ready replica) it grows."""
    calm = run(chat_spec(), snapshot(14.4, ttft=4.0), 20, 18)
    assert calm.prefill == 20
    queued = run(chat_spec(), snapshot(14.4, ttft=4.0, prefill_queue=30.0), 20, 18)
    assert queued.prefill > 20


def test_falling_queue_adds_no_proportional_replica() -> None:
    """Prefill queue 40 then 25 on 20 ready with TTFT 4 s: draining with what runs, so
    the proportional fallback does not fire (the drain model sees no shortfall)."""
    first = run(chat_spec(), snapshot(14.4, ttft=4.0, prefill_queue=40.0), 20, 18, now=1000.0)
    second = run(
        chat_spec(),
        snapshot(14.4, ttft=4.0, prefill_queue=25.0),
        20,
        18,
        now=1015.0,
        memory=first.memory.__class__(pool_history=first.memory.pool_history),
    )
    assert second.prefill == 20


def test_forecast_extrapolates_over_at_most_the_window() -> None:
    """A step 10 -> 20 read through a 120 s window ramps 1/12 req/s per s. At 15 req/s
    mid-ramp, T_s 300 + 15: the whole horizon would forecast 15 + 26.25 -> 30 (2x);
    limited to the window, 15 + 10 = 25."""
    ramp = [(15.0 * k, 10.0 + 15.0 * k / 12.0) for k in range(5)]
    assert forecast_rate(15.0, ramp, 315.0) == 30.0
    assert forecast_rate(15.0, ramp, 315.0, 120.0) == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("ready", "rose"), [((1, 3, 4), True), ((4, 4, 4), False), ((6, 5, 4), False), ((), False)]
)
def test_ready_rose_when_replicas_came_up_inside_the_window(
    ready: tuple[int, ...], rose: bool
) -> None:
    """Ready prefill 1, 3, 4 over the window: replicas came up (True); level or falling:
    False; no points: False. Decode's column is read for decode."""
    pts = tuple((float(k), 0.0, 0.0, r, 9) for k, r in enumerate(ready))
    assert history.ready_rose(pts, Role.PREFILL) is rose
    assert history.ready_rose(pts, Role.DECODE) is False


@pytest.mark.parametrize(
    ("ready_queue", "drained"),
    [
        (((1, 40.0), (5, 30.0), (5, 0.0), (5, 1.0)), True),  # the demo's chat phase
        (((6, 2.0), (9, 5.0), (9, 23.0), (9, 0.0)), False),  # 23 waited on 9 up: standing
        (((1, 40.0), (5, 30.0)), False),  # the rise is the newest point: nothing since
        (((5, 0.0), (5, 0.0), (5, 0.0)), False),  # no rise
        (((1, 40.0), (5, 30.0), (5, None)), False),  # an unknown queue proves nothing
    ],
)
def test_drained_since_rise_needs_every_queue_since_the_rise_low(
    ready_queue: tuple[tuple[int, float | None], ...], drained: bool
) -> None:
    """Prefill (ready, queue) per tick: drained only when the ready count rose and every
    queue sampled after the tick that first saw it is below one per ready replica."""
    pts = tuple((15.0 * k, q, 0.0, r, 4) for k, (r, q) in enumerate(ready_queue))
    assert history.drained_since_rise(pts, Role.PREFILL) is drained


@pytest.mark.parametrize(
    ("queues", "unqueued"),
    [
        ((3.0, 0.0, 5.0, 1.0, 0.0, 2.0, 4.0, 0.0), True),  # 8 ticks, 105 s, all below 46
        ((3.0, 0.0, 5.0, 60.0, 0.0, 2.0, 4.0, 0.0), False),  # 60 waited on 46 once
        ((3.0, 0.0, 5.0, None, 0.0, 2.0, 4.0, 0.0), False),  # an unknown queue
        ((3.0, 0.0, 5.0), False),  # 30 s of a 105 s span: unseen
        ((), False),
    ],
)
def test_unqueued_throughout_needs_the_whole_span_below_one_per_replica(
    queues: tuple[float | None, ...], unqueued: bool
) -> None:
    """Prefill 46 ready, one point every 15 s: unqueued only when the points span 105 s
    and every queue is known and below 46. Decode's column (queue 99 on 1) is not read."""
    pts = tuple((15.0 * k, q, 99.0, 46, 1) for k, q in enumerate(queues))
    assert history.unqueued_throughout(pts, Role.PREFILL, 105.0) is unqueued
