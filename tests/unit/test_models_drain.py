"""The drain-time model (docs/models.md §3): the golden table and the laws of the issue."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pdscaler.models import (
    backlog,
    drain_time,
    min_service_rate,
    replicas_for_deadline,
)

LAMBDA, T_S, DEADLINE = 3.5, 10.0, 60.0

rates = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)
positive_rates = st.floats(min_value=0.01, max_value=1e4, allow_nan=False)
backlogs = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
times = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)


def test_golden_backlog() -> None:
    """lambda = 3.5 req/s for T_s = 10 s -> B = 35 requests."""
    assert backlog(LAMBDA, T_S) == pytest.approx(35.0)


@pytest.mark.parametrize(
    ("configuration", "mu", "drained_at", "meets"),
    [
        ("disaggregated P/D", 4.55, 43.3, True),
        ("ideal chunked colo", 4.17, 62.2, False),
        ("unchunked colo", 3.02, None, False),
    ],
)
def test_golden_drain_table(
    configuration: str, mu: float, drained_at: float | None, meets: bool
) -> None:
    """docs/models.md §3 table: 10 + 35/1.05 = 43.3 s; 10 + 35/0.67 = 62.2 s; 3.02 < 3.5 never."""
    result = drain_time(LAMBDA, mu, T_S, backlog(LAMBDA, T_S))
    assert result.backlog == pytest.approx(35.0)
    assert result.margin == pytest.approx(mu - LAMBDA)
    if drained_at is None:
        assert result.drain_seconds is None
    else:
        assert result.drain_seconds == pytest.approx(drained_at, abs=0.05)
    assert result.meets(DEADLINE) is meets


def test_backlog_counts_the_queue_and_what_current_capacity_serves() -> None:
    """12 queued + (3.5 - 2) * 10 = 27; 5 queued with 4 req/s served -> 0, not negative."""
    assert backlog(LAMBDA, T_S, queued=12.0, current_service_rate=2.0) == pytest.approx(27.0)
    assert backlog(LAMBDA, T_S, queued=5.0, current_service_rate=4.0) == 0.0
    assert backlog(LAMBDA, T_S, queued=40.0, current_service_rate=4.0) == pytest.approx(35.0)


def test_inverse_golden() -> None:
    """mu_min = 3.5 + 35/50 = 4.2 req/s; at 0.65 req/s per replica: 7 replicas (4.55)."""
    assert min_service_rate(LAMBDA, 35.0, T_S, DEADLINE) == pytest.approx(4.2)
    assert replicas_for_deadline(LAMBDA, 35.0, T_S, DEADLINE, 0.65) == 7
    assert drain_time(LAMBDA, 7 * 0.65, T_S, 35.0).meets(DEADLINE)
    assert not drain_time(LAMBDA, 6 * 0.65, T_S, 35.0).meets(DEADLINE)


def test_deadline_not_after_startup_is_infeasible() -> None:
    """D <= T_s: no scale-up can meet it."""
    assert min_service_rate(LAMBDA, 35.0, T_S, 10.0) is None
    assert min_service_rate(LAMBDA, 35.0, T_S, 5.0) is None
    assert replicas_for_deadline(LAMBDA, 35.0, T_S, 10.0, 0.65) is None


def test_no_backlog_still_needs_more_than_the_arrival_rate() -> None:
    """B = 0 at 1 req/s per replica for 3 req/s: 3 replicas only match, 4 drain."""
    assert min_service_rate(3.0, 0.0, T_S, DEADLINE) == 3.0
    assert replicas_for_deadline(3.0, 0.0, T_S, DEADLINE, 1.0) == 4
    assert drain_time(3.0, 3.0, T_S, 0.0).drain_seconds is None
    assert drain_time(3.0, 4.0, T_S, 0.0).drain_seconds == T_S


@pytest.mark.parametrize(
    "call",
    [
        lambda: backlog(-1.0, T_S),
        lambda: backlog(LAMBDA, T_S, queued=-3.0),
        lambda: drain_time(LAMBDA, float("nan"), T_S, 35.0),
        lambda: min_service_rate(LAMBDA, 35.0, T_S, 0.0),
        lambda: replicas_for_deadline(LAMBDA, 35.0, T_S, DEADLINE, 0.0),
    ],
)
def test_bad_inputs_raise(call: object) -> None:
    with pytest.raises(ValueError, match="must be"):
        call()  # type: ignore[operator]


@given(rates, rates, times, backlogs)
def test_drain_is_never_exactly_when_mu_le_lambda(
    lam: float, mu: float, ts: float, b: float
) -> None:
    result = drain_time(lam, mu, ts, b)
    assert (result.drain_seconds is None) == (mu <= lam)
    if result.drain_seconds is not None:
        assert result.drain_seconds >= ts


@given(rates, st.floats(min_value=0.01, max_value=1e6), times, st.floats(0.01, 3600.0))
def test_inverse_and_forward_agree(lam: float, b: float, ts: float, extra: float) -> None:
    """drain_time at min_service_rate drains exactly at the deadline (B > 0)."""
    deadline = ts + extra
    mu = min_service_rate(lam, b, ts, deadline)
    assert mu is not None
    assert mu == pytest.approx(lam + b / extra)
    # the margin mu - lambda must be resolvable in floats (not lost next to lambda)
    assume(b / extra > 1e-7 * lam)
    result = drain_time(lam, mu, ts, b)
    assert result.drain_seconds == pytest.approx(deadline, rel=1e-6)
    assert result.meets(deadline)


@given(rates, backlogs, times, st.floats(0.01, 3600.0), st.floats(0.01, 100.0))
def test_replicas_for_deadline_is_the_fewest_that_meet_it(
    lam: float, b: float, ts: float, extra: float, per: float
) -> None:
    deadline = ts + extra
    n = replicas_for_deadline(lam, b, ts, deadline, per)
    assert n is not None
    assume(n < 10**7)
    assert drain_time(lam, n * per, ts, b).meets(deadline)
    mu_min = min_service_rate(lam, b, ts, deadline)
    assert mu_min is not None
    if n > 0:  # one replica fewer falls short of mu_min, or does not exceed lambda
        assert (n - 1) * per < mu_min or (n - 1) * per <= lam


@given(rates, rates, times, backlogs, backlogs)
def test_more_backlog_or_arrival_never_needs_less_service(
    l1: float, l2: float, ts: float, b1: float, b2: float
) -> None:
    deadline = ts + 30.0
    lo_l, hi_l = sorted((l1, l2))
    lo_b, hi_b = sorted((b1, b2))
    low = min_service_rate(lo_l, lo_b, ts, deadline)
    high = min_service_rate(hi_l, hi_b, ts, deadline)
    assert low is not None
    assert high is not None
    assert high >= low


def test_replicas_for_deadline_survives_float_noise_near_lambda() -> None:
    """Found by hypothesis: mu_min / rate = 48720.0000001 rounds down to 48720 replicas
    (584.64 req/s), and B / (mu - lambda) = 68.02 / 0.1164 then misses the deadline by
    1.6 ms; one more replica meets it."""
    lam, b, extra, per = 584.5236234846712, 68.02499110669781, 584.5234375, 0.012
    n = replicas_for_deadline(lam, b, 0.0, extra, per)
    assert n is not None
    assert drain_time(lam, n * per, 0.0, b).meets(extra)
