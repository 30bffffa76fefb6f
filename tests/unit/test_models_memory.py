"""The decode memory bound (docs/models.md §2b): the long-context golden example, and
that it reduces to the ratio model when memory is ample."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pdscaler.models import (
    DecodeBound,
    decode_bound,
    decode_memory,
    fits_one_replica,
    memory_service_rate,
    ratio_model,
)

#: docs/models.md §2b: long-context chat.
LONG = {
    "rate": 3.5,
    "prompt_tokens": 12_000.0,
    "output_tokens": 350.0,
    "tpot_seconds": 0.03,
    "kv_cache_tokens": 100_000.0,
    "kv_utilization": 0.9,
}


def test_long_context_golden() -> None:
    """t_d = 350 x 30 ms = 10.5 s; 3.5 x 10.5 = 36.75 sequences of 12,175 tokens =
    447,431 tokens; / (100,000 x 0.9) = 4.97 -> 5 replicas."""
    mem = decode_memory(**LONG)
    assert mem.residence_seconds == pytest.approx(10.5)
    assert mem.resident_sequences == pytest.approx(36.75)
    assert mem.tokens_per_sequence == 12_175.0
    assert mem.resident_tokens == pytest.approx(447_431.25)
    assert mem.n_decode == pytest.approx(4.9715, abs=1e-4)
    assert mem.decode_replicas == 5


def test_memory_not_throughput_sizes_long_contexts() -> None:
    """Throughput: 3.5 x 350 / (1,400 x 0.7) = 1.25 -> 2 replicas; memory 4.97 -> 5:
    memory binds, and a throughput-only sizing starves decode 2.5x."""
    ratio = ratio_model(3.5, 12_000.0, 350.0, 8_500.0, 1_400.0, 0.7, 0.7)
    assert ratio.n_decode == pytest.approx(1.25)
    assert ratio.decode_replicas == 2
    n, bound = decode_bound(ratio.n_decode, decode_memory(**LONG))
    assert bound is DecodeBound.MEMORY
    assert n == pytest.approx(4.9715, abs=1e-4)


def test_chat_mix_is_throughput_bound() -> None:
    """The golden chat service (R 20, 2,000 in / 500 out, TPOT 50 ms, M 100,000):
    t_d 25 s, 500 sequences of 2,250 tokens = 1.125 M tokens -> 12.5 replicas, below
    the 17.86 of throughput: throughput binds, N_D unchanged."""
    mem = decode_memory(20.0, 2000.0, 500.0, 0.05, 100_000.0, 0.9)
    assert mem.n_decode == pytest.approx(12.5)
    n, bound = decode_bound(17.857, mem)
    assert (n, bound) == (17.857, DecodeBound.THROUGHPUT)
    assert decode_bound(17.857, None) == (17.857, DecodeBound.THROUGHPUT)


def test_service_rate_and_fit() -> None:
    """One replica at the KV limit: 90,000 / 12,175 = 7.39 sequences over 10.5 s =
    0.704 req/s. 126,000 + 300 tokens never fits 100,000; 99,700 + 300 does."""
    assert memory_service_rate(12_000.0, 350.0, 0.03, 100_000.0, 0.9) == pytest.approx(
        0.704, abs=1e-3
    )
    assert math.isinf(memory_service_rate(1000.0, 0.0, 0.03, 100_000.0))
    assert not fits_one_replica(126_000, 300, 100_000)
    assert fits_one_replica(99_700, 300, 100_000)


@pytest.mark.parametrize(
    ("name", "value"),
    [("rate", -1.0), ("tpot_seconds", math.nan), ("kv_cache_tokens", 0.0), ("kv_utilization", 1.5)],
)
def test_bad_inputs_are_errors(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        decode_memory(**{**LONG, name: value})


#: Idle, or at least one request in a million seconds: a subnormal rate (5e-324 req/s)
#: underflows the ratio model's N_D to 0 while the memory term stays 1e-323.
rates = st.just(0.0) | st.floats(min_value=1e-6, max_value=1e3, allow_nan=False)
lengths = st.floats(min_value=1.0, max_value=1e5, allow_nan=False)
tpots = st.floats(min_value=1e-3, max_value=0.5, allow_nan=False)


@given(rates, lengths, lengths, tpots, st.floats(min_value=1.0, max_value=1e5))
def test_ample_memory_reduces_to_the_ratio_model(
    rate: float, prompt: float, output: float, tpot: float, decode_tps: float
) -> None:
    """With a KV cache large enough for every resident sequence (M above the pool's
    whole resident KV), N_D is the ratio model's, and the bound says throughput."""
    ratio = ratio_model(rate, prompt, output, 1000.0, decode_tps, 0.7, 0.7)
    resident = rate * output * tpot * (prompt + output / 2.0)
    ample = 2 * resident / ratio.n_decode if ratio.n_decode > 0 else 1.0
    assume(math.isfinite(ample) and ample > 0)
    mem = decode_memory(rate, prompt, output, tpot, ample, 0.9)
    assert decode_bound(ratio.n_decode, mem) == (ratio.n_decode, DecodeBound.THROUGHPUT)


@given(rates, lengths, lengths, tpots, st.floats(min_value=1e3, max_value=1e6))
def test_memory_term_is_monotone(
    rate: float, prompt: float, output: float, tpot: float, kv: float
) -> None:
    """More load never needs fewer replicas; more KV per replica never needs more."""
    base = decode_memory(rate, prompt, output, tpot, kv)
    assert decode_memory(rate * 1.5, prompt, output, tpot, kv).n_decode >= base.n_decode
    assert decode_memory(rate, prompt * 2, output, tpot, kv).n_decode >= base.n_decode
    assert decode_memory(rate, prompt, output, tpot, kv * 2).n_decode <= base.n_decode
