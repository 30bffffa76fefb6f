"""Splitting a GPU budget between the pools: worked numbers and the laws of the issue."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pdscaler.models import BudgetSplit, ratio_model, split_budget, utilization
from pdscaler.types import Role

CHAT = ratio_model(20.0, 2000.0, 500.0, 3000.0, 800.0, 0.7, 0.7)


def chat_split(max_gpus: int, prefer: Role | None = None) -> BudgetSplit:
    return split_budget(
        max_gpus=max_gpus,
        want_prefill=CHAT.prefill_replicas,
        want_decode=CHAT.decode_replicas,
        prefill_gpus_per_replica=1,
        decode_gpus_per_replica=1,
        prefill_min=1,
        prefill_max=32,
        decode_min=1,
        decode_max=32,
        prefill_load_replicas=CHAT.n_prefill,
        decode_load_replicas=CHAT.n_decode,
        prefer=prefer,
    )


def test_wants_fit() -> None:
    """20 + 18 = 38 GPUs <= 64: the wants as they are, not limited."""
    assert chat_split(64) == BudgetSplit(prefill=20, decode=18, limited=False)
    assert chat_split(38) == BudgetSplit(prefill=20, decode=18, limited=False)


def test_chat_on_32_gpus_ties_go_to_the_bottleneck() -> None:
    """Loads 19.05 and 17.86 on 32 GPUs: 16/15 puts both at 119.05% (40000/2100/16 =
    10000/560/15); the 32nd GPU goes to prefill by default, to decode when it is the
    bottleneck. The worse pool ends at 119.05% either way."""
    assert chat_split(32) == BudgetSplit(prefill=17, decode=15, limited=True)
    assert chat_split(32, prefer=Role.PREFILL) == BudgetSplit(17, 15, True)
    assert chat_split(32, prefer=Role.DECODE) == BudgetSplit(16, 16, True)
    for split in (chat_split(32), chat_split(32, Role.DECODE)):
        worst = max(
            utilization(CHAT.n_prefill, split.prefill), utilization(CHAT.n_decode, split.decode)
        )
        assert worst == pytest.approx(1.1905, abs=1e-4)


def test_bigger_replicas_cost_more_gpus() -> None:
    """Prefill 2 GPUs/replica (load 9.5 replicas, wants 10 = 20 GPUs), decode 1 GPU/replica
    (load 17.86, wants 18) on 30 GPUs. Candidates: P 7/D 16 -> worse 9.5/7 = 135.7%;
    P 8/D 14 -> worse 17.86/14 = 127.6%; P 9/D 12 -> worse 17.86/12 = 148.8%.
    The split is P 8 / D 14 (16 + 14 = 30 GPUs)."""
    split = split_budget(30, 10, 18, 2, 1, 1, 16, 1, 32, 9.5, 17.86)
    assert split == BudgetSplit(prefill=8, decode=14, limited=True)
    assert split.gpus(2, 1) == 30
    worst = max(utilization(9.5, split.prefill), utilization(17.86, split.decode))
    assert worst == pytest.approx(1.2757, abs=1e-4)


def test_minimums_come_first() -> None:
    """Budget 6, decode min 4: decode keeps 4 even though prefill is far worse off."""
    split = split_budget(6, 10, 5, 1, 1, 1, 10, 4, 10, 9.0, 1.0)
    assert split == BudgetSplit(prefill=2, decode=4, limited=True)


def test_wants_below_min_and_above_max_are_clamped() -> None:
    split = split_budget(100, 0, 50, 1, 1, 2, 10, 1, 8, 0.0, 40.0)
    assert split == BudgetSplit(prefill=2, decode=8, limited=False)


def test_budget_below_minimums_splits_the_minimums() -> None:
    """maxGPUs 3 cannot hold min 2 + 2: each pool gets what the budget allows (2/1 by
    load: prefill is worse off at the third GPU)."""
    split = split_budget(3, 5, 5, 1, 1, 2, 5, 2, 5, 4.0, 1.0)
    assert split.gpus(1, 1) == 3
    assert split == BudgetSplit(prefill=2, decode=1, limited=True)


def test_bad_bounds_raise() -> None:
    with pytest.raises(ValueError, match="prefill_max"):
        split_budget(10, 1, 1, 1, 1, 5, 4, 1, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="decode_gpus_per_replica"):
        split_budget(10, 1, 1, 1, 0, 1, 4, 1, 2, 1.0, 1.0)


@st.composite
def budgets(draw: st.DrawFn) -> dict[str, Any]:
    g_p = draw(st.integers(1, 4))
    g_d = draw(st.integers(1, 4))
    p_min = draw(st.integers(0, 4))
    d_min = draw(st.integers(0, 4))
    return {
        "max_gpus": draw(st.integers(0, 40)),
        "want_prefill": draw(st.integers(0, 12)),
        "want_decode": draw(st.integers(0, 12)),
        "prefill_gpus_per_replica": g_p,
        "decode_gpus_per_replica": g_d,
        "prefill_min": p_min,
        "prefill_max": p_min + draw(st.integers(0, 10)),
        "decode_min": d_min,
        "decode_max": d_min + draw(st.integers(0, 10)),
        "prefill_load_replicas": draw(st.floats(0.0, 12.0)),
        "decode_load_replicas": draw(st.floats(0.0, 12.0)),
        "prefer": draw(st.sampled_from([None, Role.PREFILL, Role.DECODE])),
    }


def _cap(want: int, low: int, high: int) -> int:
    return min(max(want, low), high)


@given(budgets())
def test_split_laws(args: dict[str, Any]) -> None:
    """Never over budget, never more than clamp(want, min, max), never below min when the
    budget covers both minimums, and limited exactly when the clamped wants do not fit."""
    split = split_budget(**args)
    g_p, g_d = args["prefill_gpus_per_replica"], args["decode_gpus_per_replica"]
    budget = args["max_gpus"]
    cap_p = _cap(args["want_prefill"], args["prefill_min"], args["prefill_max"])
    cap_d = _cap(args["want_decode"], args["decode_min"], args["decode_max"])
    assert split.gpus(g_p, g_d) <= budget
    assert 0 <= split.prefill <= cap_p
    assert 0 <= split.decode <= cap_d
    p_min, d_min = args["prefill_min"], args["decode_min"]
    if p_min * g_p + d_min * g_d <= budget:
        assert split.prefill >= p_min
        assert split.decode >= d_min
    assert split.limited == (cap_p * g_p + cap_d * g_d > budget)


@given(budgets())
def test_split_minimises_the_worse_utilisation(args: dict[str, Any]) -> None:
    """Brute force over every feasible split with both minimums kept: none has a lower
    worse-pool utilisation than the one chosen."""
    split = split_budget(**args)
    g_p, g_d, budget = (
        args["prefill_gpus_per_replica"],
        args["decode_gpus_per_replica"],
        args["max_gpus"],
    )
    p_min, d_min = args["prefill_min"], args["decode_min"]
    load_p, load_d = args["prefill_load_replicas"], args["decode_load_replicas"]
    assume(p_min * g_p + d_min * g_d <= budget)
    cap_p = _cap(args["want_prefill"], p_min, args["prefill_max"])
    cap_d = _cap(args["want_decode"], d_min, args["decode_max"])

    def worst(p: int, d: int) -> float:
        return max(utilization(load_p, p), utilization(load_d, d))

    best = min(
        worst(p, d)
        for p, d in itertools.product(range(p_min, cap_p + 1), range(d_min, cap_d + 1))
        if p * g_p + d * g_d <= budget
    )
    chosen = worst(split.prefill, split.decode)
    assert chosen == best or (not math.isinf(best) and chosen == pytest.approx(best, rel=1e-9))
