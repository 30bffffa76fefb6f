"""The ratio model (docs/models.md §2): golden chat numbers and the laws of the issue."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdscaler.models import ceil_replicas, ratio_model

CHAT = {
    "rate": 20.0,
    "prompt_tokens": 2000.0,
    "output_tokens": 500.0,
    "prefill_tps": 3000.0,
    "decode_tps": 800.0,
    "prefill_utilization": 0.7,
    "decode_utilization": 0.7,
}

rates = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)
lengths = st.floats(min_value=1.0, max_value=1e5, allow_nan=False)
throughputs = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)
utils = st.floats(min_value=0.05, max_value=1.0, allow_nan=False)
factors = st.floats(min_value=0.01, max_value=100.0, allow_nan=False)


def test_chat_service_golden() -> None:
    """R=20, L_p=2000, L_d=500, P_prefill=3000, P_decode=800, u=0.7:
    N_P = 40000/2100 = 19.05 -> 20, N_D = 10000/560 = 17.86 -> 18, ratio ~1:1."""
    result = ratio_model(**CHAT)
    assert result.n_prefill == pytest.approx(19.0476, abs=1e-4)
    assert result.n_decode == pytest.approx(17.8571, abs=1e-4)
    assert result.prefill_replicas == 20
    assert result.decode_replicas == 18
    assert result.ratio == pytest.approx(19.0476 / 17.8571, rel=1e-4)
    assert result.prefill_load_tps == 40000.0
    assert result.decode_load_tps == 10000.0


def test_long_document_mix_moves_the_ratio_by_an_order_of_magnitude() -> None:
    """Same service, long prompts and short outputs (8000 in / 100 out): the ratio goes
    from ~1.07 to 8000/2100 / (100/560) = 21.3, i.e. x20."""
    chat = ratio_model(**CHAT)
    summary = ratio_model(**{**CHAT, "prompt_tokens": 8000.0, "output_tokens": 100.0})
    assert summary.ratio == pytest.approx(21.333, rel=1e-3)
    assert summary.ratio / chat.ratio > 10


def test_separate_utilisations() -> None:
    """u_P = 0.6, u_D = 0.8: N_P = 40000/1800 = 22.2 -> 23, N_D = 10000/640 = 15.6 -> 16."""
    result = ratio_model(**{**CHAT, "prefill_utilization": 0.6, "decode_utilization": 0.8})
    assert result.n_prefill == pytest.approx(22.222, abs=1e-3)
    assert (result.prefill_replicas, result.decode_replicas) == (23, 16)


def test_exact_integers_are_not_bumped_by_float_noise() -> None:
    """19.0000000001 is 19 replicas, not 20; 19.05 is 20; 0 is 0."""
    assert ceil_replicas(19.0000000001) == 19
    assert ceil_replicas(19.0) == 19
    assert ceil_replicas(19.05) == 20
    assert ceil_replicas(0.0) == 0
    # 0.1*3/0.3 is 1.0000000000000002 in floats: still exactly one replica.
    result = ratio_model(0.1, 3.0, 3.0, 0.3, 0.3, 1.0, 1.0)
    assert result.n_prefill != 1.0
    assert result.prefill_replicas == 1


def test_zero_load_and_degenerate_ratio() -> None:
    """No traffic needs no replicas but the ratio is still the shape's; L_d = 0 -> inf,
    no work at all -> nan."""
    idle = ratio_model(**{**CHAT, "rate": 0.0})
    assert (idle.prefill_replicas, idle.decode_replicas) == (0, 0)
    assert idle.ratio == pytest.approx(ratio_model(**CHAT).ratio)
    assert math.isinf(ratio_model(**{**CHAT, "output_tokens": 0.0}).ratio)
    assert math.isnan(ratio_model(**{**CHAT, "prompt_tokens": 0.0, "output_tokens": 0.0}).ratio)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate", -1.0),
        ("rate", math.nan),
        ("prompt_tokens", -5.0),
        ("prefill_tps", 0.0),
        ("decode_tps", -800.0),
        ("prefill_utilization", 0.0),
        ("decode_utilization", 1.5),
        ("output_tokens", math.inf),
    ],
)
def test_bad_inputs_are_errors_naming_the_argument(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        ratio_model(**{**CHAT, field: value})


@given(rates, rates, lengths, lengths, throughputs, throughputs, utils, utils)
def test_more_load_never_yields_fewer_replicas(
    r1: float, r2: float, lp: float, ld: float, pp: float, pd: float, up: float, ud: float
) -> None:
    low, high = sorted((r1, r2))
    a = ratio_model(low, lp, ld, pp, pd, up, ud)
    b = ratio_model(high, lp, ld, pp, pd, up, ud)
    assert b.prefill_replicas >= a.prefill_replicas
    assert b.decode_replicas >= a.decode_replicas


@given(rates, lengths, lengths, lengths, throughputs, throughputs, utils)
def test_longer_prompts_never_yield_fewer_prefill_replicas(
    r: float, lp1: float, lp2: float, ld: float, pp: float, pd: float, u: float
) -> None:
    short, long_ = sorted((lp1, lp2))
    assert (
        ratio_model(r, long_, ld, pp, pd, u, u).prefill_replicas
        >= ratio_model(r, short, ld, pp, pd, u, u).prefill_replicas
    )


@given(
    st.floats(min_value=0.01, max_value=1e4),
    factors,
    lengths,
    lengths,
    throughputs,
    throughputs,
    utils,
    utils,
)
def test_ratio_does_not_depend_on_the_rate(
    r: float, k: float, lp: float, ld: float, pp: float, pd: float, up: float, ud: float
) -> None:
    assert ratio_model(r * k, lp, ld, pp, pd, up, ud).ratio == pytest.approx(
        ratio_model(r, lp, ld, pp, pd, up, ud).ratio, rel=1e-9
    )


@given(rates, factors, lengths, lengths, throughputs, throughputs, utils)
def test_ratio_depends_only_on_length_and_capability_ratios(
    r: float, k: float, lp: float, ld: float, pp: float, pd: float, u: float
) -> None:
    """Scaling L_p and P_prefill together, or L_d and P_decode together, or both
    lengths together, leaves N_P / N_D unchanged; with equal u it is
    (L_p/P_prefill)/(L_d/P_decode)."""
    base = ratio_model(r, lp, ld, pp, pd, u, u).ratio
    assert base == pytest.approx((lp / pp) / (ld / pd), rel=1e-9)
    assert ratio_model(r, lp * k, ld, pp * k, pd, u, u).ratio == pytest.approx(base, rel=1e-9)
    assert ratio_model(r, lp, ld * k, pp, pd * k, u, u).ratio == pytest.approx(base, rel=1e-9)
    assert ratio_model(r, lp * k, ld * k, pp, pd, u, u).ratio == pytest.approx(base, rel=1e-9)


@given(rates, lengths, lengths, throughputs, throughputs, utils, utils)
def test_replicas_cover_the_load_at_target_utilisation(
    r: float, lp: float, ld: float, pp: float, pd: float, up: float, ud: float
) -> None:
    """The ceilings are the smallest integers whose capacity covers the load."""
    result = ratio_model(r, lp, ld, pp, pd, up, ud)
    assert result.prefill_replicas >= result.n_prefill * (1 - 1e-9)
    assert result.prefill_replicas - 1 < result.n_prefill
    assert result.decode_replicas >= result.n_decode * (1 - 1e-9)
    assert result.decode_replicas - 1 < result.n_decode
