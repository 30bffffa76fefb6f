"""Bottleneck attribution (docs/models.md §4): the pool under the larger pressure scales first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdscaler.models import PoolSignals, locate_bottleneck, pool_pressure
from pdscaler.types import Role

CALM_P = PoolSignals(latency_seconds=1.2, slo_seconds=2.0, queue_depth=0.0, utilization=0.5)
CALM_D = PoolSignals(
    latency_seconds=0.03, slo_seconds=0.05, queue_depth=0.0, utilization=0.5, kv_usage=0.4
)


def test_outputs_get_longer_decode_is_the_bottleneck() -> None:
    """Prefill TTFT 1.2 s of 2 s (0.6x); decode TPOT 62 ms of 50 ms (1.24x) -> decode."""
    decode = PoolSignals(latency_seconds=0.062, slo_seconds=0.05, kv_usage=0.5)
    result = locate_bottleneck(CALM_P, decode)
    assert result.pool is Role.DECODE
    assert result.pressures.prefill == pytest.approx(0.6)
    assert result.pressures.decode == pytest.approx(1.24)
    assert result.reasons == ("decode TPOT 0.062s > SLO 0.050s (1.24x)",)


def test_prompts_get_longer_prefill_is_the_bottleneck() -> None:
    """TTFT 3 s of 2 s (1.5x) beats decode KV usage 95% of 90% (1.06x): prefill first,
    and both reasons are reported, the worst first."""
    prefill = PoolSignals(latency_seconds=3.0, slo_seconds=2.0)
    decode = PoolSignals(latency_seconds=0.04, slo_seconds=0.05, kv_usage=0.95)
    result = locate_bottleneck(prefill, decode)
    assert result.pool is Role.PREFILL
    assert result.pressure(Role.DECODE) == pytest.approx(0.95 / 0.9)
    assert result.reasons[0].startswith("prefill TTFT 3.000s > SLO 2.000s (1.50x)")
    assert any("KV usage 95%" in r for r in result.reasons)


def test_queue_and_utilisation_are_leading_signals() -> None:
    """Latency still in SLO but prefill token utilisation 84% vs target 70% (1.2x) and
    decode queue 6 over a limit of 4 (1.5x): the decode queue is the larger pressure."""
    prefill = PoolSignals(0.9, 2.0, utilization=0.84, target_utilization=0.7)
    decode = PoolSignals(0.04, 0.05, queue_depth=6.0, queue_limit=4.0)
    result = locate_bottleneck(prefill, decode)
    assert result.pressures.prefill == pytest.approx(1.2)
    assert result.pressures.decode == pytest.approx(1.5)
    assert result.pool is Role.DECODE


def test_calm_pools_have_no_bottleneck() -> None:
    result = locate_bottleneck(CALM_P, CALM_D)
    assert result.pool is None
    assert result.reasons == ()


def test_unknown_signals_add_no_pressure() -> None:
    result = locate_bottleneck(PoolSignals(None, 2.0), PoolSignals(None, 0.05))
    assert (result.pool, result.pressures.prefill, result.pressures.decode) == (None, 0.0, 0.0)


def test_kv_usage_is_read_for_decode_only() -> None:
    prefill = PoolSignals(None, 2.0, kv_usage=0.99)
    assert pool_pressure(Role.PREFILL, prefill) == (0.0, ())
    assert pool_pressure(Role.DECODE, prefill)[0] == pytest.approx(1.1)


def test_equal_pressure_goes_to_prefill() -> None:
    """Both at 1.5x: prefill (its overload hits TTFT directly)."""
    result = locate_bottleneck(PoolSignals(3.0, 2.0), PoolSignals(0.075, 0.05))
    assert result.pool is Role.PREFILL


def test_bad_signals_raise() -> None:
    with pytest.raises(ValueError, match="slo_seconds"):
        locate_bottleneck(PoolSignals(1.0, 0.0), CALM_D)
    with pytest.raises(ValueError, match="queue_depth"):
        locate_bottleneck(PoolSignals(1.0, 2.0, queue_depth=-1.0), CALM_D)


signal = st.one_of(st.none(), st.floats(min_value=0.0, max_value=100.0))


@given(signal, signal, signal, signal, signal, signal, signal)
def test_bottleneck_is_the_pool_with_larger_pressure_over_the_limit(
    pl: float | None,
    pq: float | None,
    pu: float | None,
    dl: float | None,
    dq: float | None,
    du: float | None,
    kv: float | None,
) -> None:
    result = locate_bottleneck(
        PoolSignals(pl, 2.0, queue_depth=pq, utilization=pu),
        PoolSignals(dl, 0.05, queue_depth=dq, utilization=du, kv_usage=kv),
    )
    worst = max(result.pressures.prefill, result.pressures.decode)
    if worst <= 1.0:
        assert result.pool is None
        assert result.reasons == ()
    else:
        assert result.pool is not None
        assert result.pressure(result.pool) == worst
        assert all(r.startswith(("prefill", "decode")) for r in result.reasons)
        assert result.reasons


@given(st.floats(0.0, 10.0), st.floats(0.0, 10.0))
def test_higher_latency_never_lowers_pressure(a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert (
        pool_pressure(Role.PREFILL, PoolSignals(high, 2.0))[0]
        >= pool_pressure(Role.PREFILL, PoolSignals(low, 2.0))[0]
    )
