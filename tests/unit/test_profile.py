"""Capacity as a function of the workload (docs/models.md §2d): a pool's measured
profile is read at this tick's mix, the online correction carries from one mix to the
next, and without a profile the policy is the constant-prior model exactly."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from pdscaler.models.profile import capacity_at, decode_context, prompt_for_context
from pdscaler.policy.refine import carry
from pdscaler.spec import MSG_PROFILE_UNIQUE, PoolSpec
from pdscaler.status import memory_from_status, memory_to_status
from pdscaler.types import Decision, PolicyMemory
from support.builders import chat_spec, run, snapshot

#: The default simulated engine's prefill, measured (docs/models.md §2d).
PREFILL_PROFILE = [
    {"tokens": 16384, "tokensPerSecond": 6500},
    {"tokens": 1024, "tokensPerSecond": 8200},
    {"tokens": 8192, "tokensPerSecond": 7300},
]
POINTS = ((1024, 8200.0), (8192, 7300.0), (16384, 6500.0))


def test_golden_reads_of_the_prefill_profile() -> None:
    """Linear between points, flat beyond the ends (the module's golden numbers)."""
    assert capacity_at(9999.0, POINTS, 1155) == pytest.approx(8183.55, abs=0.01)
    assert capacity_at(9999.0, POINTS, 12_000) == pytest.approx(6928.13, abs=0.01)
    assert capacity_at(9999.0, POINTS, 4608) == pytest.approx(7750.0)
    assert capacity_at(9999.0, POINTS, 500) == 8200.0
    assert capacity_at(9999.0, POINTS, 131_072) == 6500.0
    assert capacity_at(9999.0, POINTS, 8192) == 7300.0


@pytest.mark.parametrize("tokens", [0.0, -5.0, math.nan, math.inf])
def test_unknown_tokens_or_no_points_read_the_constant(tokens: float) -> None:
    assert capacity_at(3000.0, POINTS, tokens) == 3000.0
    assert capacity_at(3000.0, (), 12_000) == 3000.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 200_000), st.floats(1.0, 50_000.0)),
        min_size=1,
        max_size=8,
        unique_by=lambda p: p[0],
    ),
    st.floats(1.0, 400_000.0),
)
def test_a_read_lies_between_its_neighbours(points: list[tuple[int, float]], x: float) -> None:
    """Interpolation never leaves the range of the measured values."""
    ordered = tuple(sorted(points))
    ys = [y for _, y in ordered]
    assert min(ys) - 1e-6 <= capacity_at(1.0, ordered, x) <= max(ys) + 1e-6


def test_decode_context_is_prompt_plus_half_the_output() -> None:
    assert decode_context(1155, 211) == 1260.5
    assert prompt_for_context(1260.5, 211) == 1155
    assert prompt_for_context(decode_context(7000, 350), 350) == 7000


def test_the_correction_carries_to_the_next_mix() -> None:
    """7,000 learnt against 8,184 (0.855 of it) -> 0.855 of 6,928 = 5,926; a constant
    prior carries it unchanged; nothing learnt stays nothing."""
    assert carry(7000.0, 8184.0, 6928.0) == pytest.approx(7000 * 6928 / 8184)
    assert carry(7000.0, 8184.0, 8184.0) == 7000.0
    assert carry(7000.0, None, 6928.0) == 7000.0
    assert carry(None, 8184.0, 6928.0) is None


def test_the_spec_sorts_its_points_and_rejects_a_tokens_twice() -> None:
    pool = PoolSpec.model_validate({"tokensPerSecond": 8200, "profile": PREFILL_PROFILE})
    assert pool.profile_points() == POINTS
    assert PoolSpec.model_validate({"tokensPerSecond": 8200}).profile_points() == ()
    assert pool.peak_tokens_per_second == 8200
    higher = PoolSpec.model_validate(
        {"tokensPerSecond": 5000, "profile": [{"tokens": 256, "tokensPerSecond": 9000}]}
    )
    assert higher.peak_tokens_per_second == 9000
    with pytest.raises(ValidationError, match=MSG_PROFILE_UNIQUE):
        PoolSpec.model_validate(
            {"tokensPerSecond": 1, "profile": [PREFILL_PROFILE[0], PREFILL_PROFILE[0]]}
        )
    with pytest.raises(ValidationError, match="at most 32"):
        PoolSpec.model_validate(
            {
                "tokensPerSecond": 1,
                "profile": [{"tokens": t, "tokensPerSecond": 1} for t in range(1, 34)],
            }
        )


def long_prompt_decision(profile: bool, memory: PolicyMemory | None = None) -> Decision:
    """3 req/s of 12,000 in / 350 out on 7 prefill and 2 decode ready; prefill's
    constant prior 8,200 tok/s (what a short-prompt benchmark gives)."""
    prefill = {"tokensPerSecond": 8200, **({"profile": PREFILL_PROFILE} if profile else {})}
    spec = chat_spec(prefill=prefill)
    return run(spec, snapshot(3.0, 12_000.0, 350.0), 7, 2, memory=memory)


def test_long_prompts_size_prefill_at_the_profiles_capacity() -> None:
    """The profile says 6,928 tok/s at 12,000 tokens: N_P = 36,000 / (6,928 x 0.7) =
    7.42 -> 8, and the 7 ready run at 74% (> 70%): prefill grows to 8. With the constant
    8,200 the same tick sees 6.27 -> 7 at 63% and holds 7: this test fails without the
    profile."""
    d = long_prompt_decision(profile=True)
    assert d.model.prefill_tps == pytest.approx(6928.13, abs=0.01)
    assert d.model.n_prefill == pytest.approx(36_000 / (6928.125 * 0.7), abs=1e-3)
    assert d.prefill == 8
    assert d.memory.prefill_prior == pytest.approx(6928.13, abs=0.01)
    flat = long_prompt_decision(profile=False)
    assert flat.model.n_prefill == pytest.approx(36_000 / (8200 * 0.7))
    assert flat.prefill == 7
    assert flat.memory.prefill_prior is None  # a constant prior is not kept


def test_a_learnt_correction_follows_the_mix() -> None:
    """Learnt 7,000 while the mix was 1,155 tokens (the profile said 8,184 there): at
    12,000 tokens it sizes with 7,000 x 6,928 / 8,184 = 5,926 tok/s (N_P 8.68 -> 9),
    not with the stale 7,000 (7.35 -> 8)."""
    memory = PolicyMemory(prefill_tps=7000.0, prefill_prior=8183.55)
    d = long_prompt_decision(profile=True, memory=memory)
    assert d.model.prefill_tps == pytest.approx(7000 * 6928.13 / 8183.55, abs=0.05)
    assert d.prefill == 9


def test_the_prior_is_kept_in_status_memory() -> None:
    """A restarted operator carries the correction too: the priors round-trip (3
    significant digits, like the capacities); an old status without them reads None."""
    memory = PolicyMemory(prefill_tps=7000.0, prefill_prior=8183.55, decode_prior=1400.0)
    back = memory_from_status(memory_to_status(memory, 100.0, 300.0), 100.0)
    assert (back.prefill_tps, back.prefill_prior, back.decode_prior) == (7000.0, 8180.0, 1400.0)
    assert memory_from_status({"prefillTps": 7000.0}, 100.0).prefill_prior is None


def test_a_constant_prior_edit_keeps_what_was_learnt() -> None:
    """Without a profile nothing is rescaled: learnt 3,180 under a 3,000 prior, the
    user now declares 4,000: the pool still sizes with 3,180 (inside [2,000, 6,000])."""
    memory = PolicyMemory(prefill_tps=3180.0)
    d = run(chat_spec(prefill={"tokensPerSecond": 4000}), snapshot(), 14, 13, memory=memory)
    assert d.model.prefill_tps == 3180.0
    assert d.memory.prefill_prior is None
