"""The baselines: the HPA's default behaviour (tolerance, 300 s scale-down
stabilization, +100%/+4 pods scale-up), static sizing from the trace's minutes, the
fixed ratio and the forecast-only planner, all with the spec's priors."""

from __future__ import annotations

import numpy as np
import pytest

from pdscaler.sim.baselines import (
    FixedRatioController,
    ForecastOnlyController,
    HpaBehavior,
    HpaQueueController,
    hpa_recommendation,
    static_mean,
    static_peak,
)
from pdscaler.sim.controllers import View
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import Trace
from pdscaler.types import PoolObservation
from support.builders import snapshot

SPEC = sim_spec(startup_s=60.0)  # priors 10,000 / 1,400 tok/s, u = 0.7, min 1, max 64


def view(
    now: float,
    rate: float | None,
    prompt: float = 1000.0,
    output: float = 200.0,
    queues: tuple[float | None, float | None] = (0.0, 0.0),
    replicas: tuple[int, int] = (4, 4),
) -> View:
    metrics = snapshot(
        rate, prompt, output, prefill_queue=queues[0], decode_queue=queues[1], time=now
    )
    return View(
        now,
        metrics,
        PoolObservation(replicas[0], replicas[0]),
        PoolObservation(replicas[1], replicas[1]),
    )


def test_hpa_recommendation_with_tolerance() -> None:
    assert hpa_recommendation(4, 10.0, 2.0) == 5  # ratio 1.25
    assert hpa_recommendation(4, 8.5, 2.0) == 4  # ratio 1.06: within 10%
    assert hpa_recommendation(4, 7.0, 2.0) == 4  # ratio 0.875 -> ceil(3.5) = 4
    assert hpa_recommendation(4, 0.0, 2.0) == 0  # bounds hold it at min


def test_hpa_behavior_stabilizes_down_and_rate_limits_up() -> None:
    beh = HpaBehavior(1, 64)
    assert beh.apply(0.0, 4, 8) == 8  # up at once (+4 allowed)
    assert beh.apply(15.0, 8, 2) == 8  # 8 is in the 300 s window
    assert beh.apply(299.0, 8, 2) == 8
    assert beh.apply(330.0, 8, 2) == 2  # 8 left the window
    fresh = HpaBehavior(1, 64)
    assert fresh.apply(0.0, 3, 20) == 7  # max(+100% = 6, +4 = 7)
    assert fresh.apply(15.0, 7, 20) == 14  # +100%
    first_down = HpaBehavior(1, 64)
    assert first_down.apply(0.0, 6, 1) == 6  # no history yet: nothing shrinks at once
    assert first_down.apply(301.0, 6, 1) == 1


def test_hpa_queue_controller_scales_each_pool_on_its_queue() -> None:
    hpa = HpaQueueController(SPEC)
    target = hpa.tick(view(15.0, 10.0, queues=(20.0, 0.0), replicas=(4, 4)))
    assert target is not None
    assert (target.prefill, target.decode) == (8, 4)  # ceil(20 / 2) = 10, limited to 4 + 4
    assert hpa.tick(View(30.0, None, PoolObservation(8, 4), PoolObservation(4, 4))) is None


def minute_trace() -> Trace:
    """Minute 1: 10 req/s, minute 2: 2 req/s; 1000 prompt / 100 output tokens."""
    first = np.arange(600) / 10.0
    second = 60.0 + np.arange(120) / 2.0
    arrival = np.concatenate([first, second])
    n = len(arrival)
    return Trace("m", arrival, np.full(n, 1000), np.full(n, 100), 120.0)


def test_static_sizes_from_peak_and_mean_minutes() -> None:
    trace = minute_trace()
    peak = static_peak(trace, SPEC)
    # peak prefill 10,000 tok/s / 7,000 -> 2; decode 1,000 / 980 -> 2
    assert (peak.prefill, peak.decode) == (2, 2)
    assert peak.initial == (2, 2)
    mean = static_mean(trace, SPEC)
    # mean prefill 6,000 tok/s -> 1; decode 600 -> 1
    assert (mean.prefill, mean.decode) == (1, 1)


def test_fixed_ratio_scales_the_total_on_decode_load() -> None:
    ctrl = FixedRatioController.profiled(minute_trace(), SPEC)
    # (1000 / 7000) / (100 / 980) = 1.4 prefill per decode
    assert ctrl.ratio == pytest.approx(1.4)
    target = ctrl.tick(view(15.0, 20.0, output=100.0, replicas=(1, 1)))
    assert target is not None
    # decode 20 x 100 / 980 = 2.04 -> 3; prefill ceil(1.4 x 2.04) = 3, limits allow +4
    assert (target.prefill, target.decode) == (3, 3)
    assert ctrl.tick(view(30.0, None)) is None
    with pytest.raises(ValueError, match="positive"):
        FixedRatioController(SPEC, 0.0)


def test_forecast_only_sizes_on_the_forecast_without_a_drain_term() -> None:
    ctrl = ForecastOnlyController(SPEC)
    # flat 20 req/s: prefill 20,000 / 7,000 -> 3, decode 4,000 / 980 -> 5; a huge queue
    # changes nothing (no backlog term)
    for k, t in enumerate((15.0, 30.0, 45.0)):
        target = ctrl.tick(view(t, 20.0, queues=(500.0 * k, 0.0), replicas=(3, 5)))
        assert target is not None
        assert (target.prefill, target.decode) == (3, 5)
    rising = ForecastOnlyController(SPEC)
    for t, r in ((15.0, 10.0), (30.0, 12.0), (45.0, 14.0)):
        target = rising.tick(view(t, r, replicas=(3, 5)))
    assert target is not None
    # slope 2/15 req/s per s over T_s + interval = 75 s -> 14 + 10 = 24 req/s (< 2x):
    # prefill 24,000 / 7,000 -> 4
    assert target.prefill == 4
