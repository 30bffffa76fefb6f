"""The decode memory bound in the policy (docs/models.md §2b): with
``decode.kvCacheTokens`` decode is sized by the larger of throughput and KV memory, the
decision says which; without it (no M known) the policy is today's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdscaler.policy import decide
from pdscaler.types import Action, MetricsSnapshot, Role
from support.builders import chat_spec, run, snapshot, tick

#: Long-context chat: P_prefill 8,500, P_decode 1,400 tok/s, u 0.7; M = 100,000 tokens.
LONG_POOLS = {
    "prefill": {"tokensPerSecond": 8500},
    "decode": {"tokensPerSecond": 1400, "kvCacheTokens": 100_000},
}


def long_snapshot(**kwargs: float) -> MetricsSnapshot:
    """3.5 req/s of 12,000 in / 350 out, decode TPOT 30 ms observed (SLO 50 ms)."""
    return snapshot(3.5, 12_000.0, 350.0, tpot=0.03, **kwargs)


def test_memory_bound_grows_decode_beyond_the_throughput_size() -> None:
    """docs/models.md §2b: N_D 1.25 by throughput, 4.97 by memory. Decode at 2 ready
    holds 447,431 / 200,000 = 224% of its KV (> 90%): short. Its 2 replicas serve
    2 x 0.704 = 1.41 req/s of the 3.5 arriving, so during T_s = 60 s a backlog of
    (3.5 - 1.41) x 60 = 125.5 builds; the deadline (60 s, not above T_s) is infeasible,
    sized to drain 60 s after start-up: 3.5 + 125.5 / 60 = 5.59 req/s -> 7.94 -> 8
    replicas (the memory target alone: 5). The decision says memory binds."""
    d = run(chat_spec(**LONG_POOLS), long_snapshot(), 8, 2)
    assert d.decode == 8
    assert d.model.n_decode == pytest.approx(4.9715, abs=1e-4)
    assert d.model.n_decode_memory == pytest.approx(4.9715, abs=1e-4)
    assert d.model.decode_bound == "memory"
    assert d.action in (Action.SCALED_DECODE, Action.SCALED_BOTH)
    assert d.message.startswith("Scaled decode 2->8: load needs 224% of the ready KV cache")
    assert "drain model needs 8 for a backlog of 126 requests" in d.message


def test_without_kv_cache_tokens_decode_stays_at_the_throughput_size() -> None:
    """The same load without ``kvCacheTokens``: throughput says 1.25 -> 2 and the 2
    ready are within target (1,225 / 2,800 = 44% < 70%): decode is not grown, no bound
    is reported (the memory term is off). Without the term the memory-aware spec above
    would decide the same 2: that test fails on today's model."""
    spec = chat_spec(prefill={"tokensPerSecond": 8500}, decode={"tokensPerSecond": 1400})
    d = run(spec, long_snapshot(), 8, 2)
    assert d.decode == 2
    assert d.model.n_decode == pytest.approx(1.25)
    assert d.model.decode_bound is None
    assert d.model.n_decode_memory is None


def test_memory_bound_holds_when_met() -> None:
    """At 8 / 5 the long-context pools hold (prefill 42,000 / 5,950 = 7.06 -> 8;
    5 x 0.704 = 3.52 req/s >= 3.5: no backlog), and the sentence names the bound."""
    d = run(chat_spec(**LONG_POOLS), long_snapshot(), 8, 5)
    assert (d.prefill, d.decode) == (8, 5)
    assert d.action is Action.HOLD
    assert "N_D 4.97 by KV memory at 3.5 req/s" in d.message


def test_chat_mix_with_kv_is_throughput_bound() -> None:
    """The golden chat tick (docs/models.md §2) with M = 100,000: memory needs
    20 x 500 x 50 ms x 2,250 / 90,000 = 12.5 < 17.86 by throughput: 20 / 18 as
    without M, bound ``throughput``."""
    spec = chat_spec(decode={"tokensPerSecond": 800, "kvCacheTokens": 100_000})
    d = run(spec, snapshot(), 14, 13)
    assert (d.prefill, d.decode) == (20, 18)
    assert d.model.decode_bound == "throughput"
    assert d.model.n_decode_memory == pytest.approx(12.5)


def test_decode_drain_uses_the_memory_service_rate() -> None:
    """With a decode queue the drain model prices a replica at what its KV holds:
    90,000 / 12,175 / 10.5 s = 0.704 req/s, not 1,400 / 350 = 4 req/s. 40 queued on 5
    ready, T_s 60, deadline 60 s (infeasible: sized to drain 60 s after start-up):
    B = 40 + (3.5 - 3.52) x 60 = 38.9 -> mu_min = 3.5 + 38.9 / 60 = 4.15 -> 6 replicas;
    at 4 req/s per replica no replica would be added."""
    d = run(chat_spec(**LONG_POOLS), long_snapshot(decode_queue=40.0), 8, 5)
    assert d.decode == 6
    assert d.pool is Role.DECODE


loads = st.tuples(
    st.floats(min_value=0.1, max_value=50.0),  # rate
    st.floats(min_value=100.0, max_value=4000.0),  # prompt
    st.floats(min_value=10.0, max_value=1000.0),  # output
    st.integers(min_value=1, max_value=30),  # decode ready
)


@settings(max_examples=60, deadline=None)
@given(loads)
def test_ample_memory_decides_as_without_the_term(load: tuple[float, float, float, int]) -> None:
    """With a KV cache far larger than anything resident (10^9 tokens), every decision
    is the one without ``kvCacheTokens`` (replicas, action, N_D), bound throughput."""
    rate, prompt, output, ready = load
    snap = snapshot(rate, prompt, output, tpot=0.03)
    plain = chat_spec()
    ample = chat_spec(decode={"tokensPerSecond": 800, "kvCacheTokens": 1_000_000_000})
    a = decide(tick(plain, snap, 10, ready))
    b = decide(tick(ample, snap, 10, ready))
    assert (a.prefill, a.decode, a.action) == (b.prefill, b.decode, b.action)
    assert a.model.n_decode == b.model.n_decode
    assert b.model.decode_bound == "throughput"
