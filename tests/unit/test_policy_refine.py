"""Online refinement (P_prefill, P_decode, T_s), the rate forecast and the metrics
sanitizer: bounded, explained corrections; garbage is unknown, never 0."""

from __future__ import annotations

import math

import pytest

from pdscaler.policy import history
from pdscaler.policy.forecast import forecast_rate, trend
from pdscaler.policy.memory import record_rate
from pdscaler.policy.refine import quantile, refine_startup, refine_tps
from pdscaler.policy.sanitize import clean, sanitize
from pdscaler.types import MetricsSnapshot, PolicyMemory, PoolMetrics, PoolObservation, Role
from support.builders import chat_spec, run, snapshot

# ------------------------------------------------------------------ throughput


def test_refine_tps_worked_example() -> None:
    """Saturated, 4 ready serving 14,400 tok/s: 3600 per replica, above the prior 3000,
    so raised: 0.3 x 3600 + 0.7 x 3000 = 3180 (for any saturated share: what was served
    is a lower bound). 8,000 tok/s saturated the whole window: 0.3 x 2000 + 0.7 x 3000
    = 2700."""
    assert refine_tps(3000.0, None, 14_400.0, 4, 0.125) == pytest.approx(3180.0)
    assert refine_tps(3000.0, None, 14_400.0, 4, 1.0) == pytest.approx(3180.0)
    assert refine_tps(3000.0, None, 8_000.0, 4, 1.0) == pytest.approx(2700.0)


def test_refine_tps_lowers_only_what_saturation_proves() -> None:
    """A pool that was not saturated for the whole window says little about its limit.
    2000 per replica (8,000 tok/s on 4) saturated for half the window: C <= 4000, above
    3000, no change; for 1/8 of it: no change; never saturated: no change (the old rule
    learnt from any queue and drifted to ~0.6x the truth). Saturated for 0.6 of the
    window: C <= 3333, still no change; at 2400 per replica and 0.9: C <= 2667 ->
    0.3 x 2667 + 0.7 x 3000 = 2900. Nothing observed or nobody ready keeps the value."""
    assert refine_tps(3000.0, None, 8_000.0, 4, 0.5) == 3000.0
    assert refine_tps(3000.0, None, 8_000.0, 4, 0.125) == 3000.0
    assert refine_tps(3000.0, None, 8_000.0, 4, 0.0) == 3000.0
    assert refine_tps(3000.0, None, 14_400.0, 4, 0.0) == 3000.0  # not saturated
    assert refine_tps(3000.0, None, 8_000.0, 4, 0.6) == 3000.0
    assert refine_tps(3000.0, None, 9_600.0, 4, 0.9) == pytest.approx(2900.0)
    assert refine_tps(3000.0, 3300.0, None, 4, 1.0) == 3300.0
    assert refine_tps(3000.0, None, 14_400.0, 0, 1.0) == 3000.0  # nobody ready


def test_refine_tps_divides_by_the_ready_count_over_the_window() -> None:
    """Decide keeps the ready counts of the window: 10 ready for 4 ticks then 20 for 4
    average to 15. Saturated, 60,000 tok/s over 15 is 4000 per replica, raising a 3000
    prior to 0.3 x 4000 + 0.7 x 3000 = 3300; the count now (20) would give 3000 per
    replica and learn nothing (the old rule's drift right after a scale-up)."""
    memory = PolicyMemory()
    for k in range(8):
        ready = 10 if k < 4 else 20
        d = run(chat_spec(), snapshot(), ready, 18, now=10_000.0 + 15 * k, memory=memory)
        memory = d.memory
    recent = history.in_window(memory.pool_history, 10_105.0, 120.0)
    assert [p[3] for p in recent] == [10, 10, 10, 10, 20, 20, 20, 20]
    assert history.mean_ready(recent, Role.PREFILL, 20) == 15.0
    assert refine_tps(3000.0, None, 60_000.0, 15.0, 0.125) == pytest.approx(3300.0)
    assert refine_tps(3000.0, None, 60_000.0, 20.0, 0.125) == 3000.0


@pytest.mark.parametrize(("per_replica", "bound"), [(10_000.0, 4500.0), (100.0, 1500.0)])
def test_refinement_through_decide_is_bounded(per_replica: float, bound: float) -> None:
    """A saturated prefill pool (queue 40, two waiting per ready replica) of 20
    replicas reporting ``per_replica`` tok/s each: the refined P_prefill moves
    monotonically towards the bound (1.5 x 3000 = 4500 or 0.5 x 3000 = 1500) and never
    passes it; the ratio model sizes with it (N_P = 40000 / (P x 0.7)). (The queue was
    5 when one waiting request anywhere counted as saturation.)"""
    memory = PolicyMemory()
    seen = []
    for k in range(40):
        metrics = snapshot(prefill_queue=40.0, prefill_tps=20 * per_replica)
        d = run(chat_spec(), metrics, 20, 18, now=10_000.0 + 15 * k, memory=memory)
        memory = d.memory
        assert d.model.prefill_tps == memory.prefill_tps
        seen.append(memory.prefill_tps)
    assert all(s is not None for s in seen)
    values = [s for s in seen if s is not None]
    distances = [abs(v - bound) for v in values]
    assert distances == sorted(distances, reverse=True)
    assert values[-1] == pytest.approx(bound, rel=1e-4)
    assert min(values) >= 1500.0
    assert max(values) <= 4500.0
    assert d.model.n_prefill == pytest.approx(40_000 / (values[-1] * 0.7))


def test_decode_refinement_uses_decode_signals() -> None:
    """Decode saturated (queue 20, at least one per ready replica; it was 3 when any
    queue counted) at 18 x 1000 tok/s: 0.3 x 1000 + 0.7 x 800 = 860."""
    d = run(chat_spec(), snapshot(decode_queue=20.0, decode_tps=18_000.0), 20, 18)
    assert d.memory.decode_tps == pytest.approx(860.0)
    assert d.memory.prefill_tps == 3000.0


# --------------------------------------------------------------------- startup


def test_startup_is_the_p90_of_samples_bounded() -> None:
    """Prior 60 s. Samples 40..130 s -> p90 = 120 s; 400 s -> 180 s (3x); 5 s -> 30 s
    (0.5x); none -> the previous value; NaN and negative samples are ignored."""
    assert refine_startup(60.0, None, [40.0 + 10 * k for k in range(10)]) == 120.0
    assert refine_startup(60.0, None, [400.0]) == 180.0
    assert refine_startup(60.0, None, [5.0]) == 30.0
    assert refine_startup(60.0, 75.0, []) == 75.0
    assert refine_startup(60.0, None, [math.nan, -1.0]) == 60.0
    assert quantile([], 0.9) is None


def test_decide_sizes_the_drain_with_the_refined_startup() -> None:
    """Pods took 400 s to start: T_s = 180 s goes into the model outputs and memory."""
    slow = PoolObservation(20, 20, startup_samples=(400.0, 400.0))
    d = run(chat_spec(), snapshot(), slow, 18)
    assert d.model.startup_seconds == 180.0
    assert d.memory.startup_seconds == 180.0


# -------------------------------------------------------------------- forecast


def test_forecast_worked_examples() -> None:
    """(0, 10), (15, 11), (30, 12): slope 1/15. Current 12, horizon 75 s -> 17;
    slope 1 req/s per s -> 87 clamped to 24 (2x); falling -> 12; 2 points -> 12."""
    rising = [(0.0, 10.0), (15.0, 11.0), (30.0, 12.0)]
    assert trend(rising) == pytest.approx(1 / 15)
    assert forecast_rate(12.0, rising, 75.0) == pytest.approx(17.0)
    steep = [(0.0, 10.0), (1.0, 11.0), (2.0, 12.0)]
    assert forecast_rate(12.0, steep, 75.0) == 24.0
    falling = [(0.0, 14.0), (15.0, 13.0), (30.0, 12.0)]
    assert forecast_rate(12.0, falling, 75.0) == 12.0
    assert forecast_rate(12.0, rising[:2], 75.0) == 12.0


def test_rate_history_is_bounded() -> None:
    """Lookback 120 s at now 1000: points before 880 s (and any from the future) go;
    at most 32 points are kept."""
    history = ((700.0, 1.0), (880.0, 2.0), (990.0, 3.0), (1005.0, 9.0))
    assert record_rate(history, 1000.0, 4.0, 120.0) == ((880.0, 2.0), (990.0, 3.0), (1000.0, 4.0))
    long = tuple((float(t), 1.0) for t in range(100))
    assert len(record_rate(long, 100.0, 1.0, 1000.0)) == 32


# -------------------------------------------------------------------- sanitize


def test_clean() -> None:
    """A measured zero is knowledge; negative, NaN and infinite are unknown."""
    assert [clean(v) for v in (0.0, 2.5, -1.0, math.nan, math.inf, None)] == [
        0.0,
        2.5,
        None,
        None,
        None,
        None,
    ]


def test_sanitize_names_every_bad_value() -> None:
    """TTFT NaN and a garbage per-pod count become unknown and are listed; the load
    shape is intact so the snapshot is usable."""
    snap = MetricsSnapshot(
        time=0.0,
        request_rate=20.0,
        prompt_tokens=2000.0,
        output_tokens=500.0,
        prefill=PoolMetrics(latency_seconds=math.nan),
        decode=PoolMetrics(running_by_pod={"a": 3.0, "b": -1.0}),
    )
    result = sanitize(snap)
    assert result.usable
    assert result.snapshot is not None
    assert result.snapshot.prefill.latency_seconds is None
    assert result.snapshot.decode.running_by_pod == {"a": 3.0}
    assert "prefill latency_seconds is invalid (nan)" in result.problems
    assert not sanitize(None).usable
