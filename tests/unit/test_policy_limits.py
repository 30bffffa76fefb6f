"""Hard limits in decide: per-pool bounds, maxGPUs shared by the pools, and the
schedulable capacity re-split in favour of the bottleneck pool (docs/design.md §3.5)."""

from __future__ import annotations

from pdscaler.models import split_budget
from pdscaler.policy.limits import capacity, clamp, scheduled_gpus
from pdscaler.types import Action, PoolObservation, Role
from support.builders import chat_spec, run, snapshot

LONG_OUTPUTS = snapshot(20.0, output=650.0)
"""Chat with L_d 650: N_P 19.05 -> 20, N_D 13000/560 = 23.21 -> 24 (44 GPUs)."""


def test_budget_split_when_the_wants_exceed_max_gpus() -> None:
    """Golden pools 14 / 13 want 20 / 18 (38 GPUs) but maxGPUs is 32. Growing pools
    count their wants as load (20 and 18); the min-max split is 17 / 15 (worse pool
    18/15 = 1.2; 16 / 16 would leave prefill at 1.25)."""
    d = run(chat_spec(scaling={"maxGPUs": 32}), snapshot(), 14, 13)
    expected = split_budget(32, 20, 18, 1, 1, 1, 32, 1, 32, 20.0, 18.0, Role.DECODE)
    assert (d.prefill, d.decode) == (expected.prefill, expected.decode) == (17, 15)
    assert d.prefill + d.decode == 32
    assert not d.capacity_limited
    assert d.message.endswith("maxGPUs 32 reached, decode first")


def test_gpus_per_replica_count_against_the_budget() -> None:
    """Decode replicas of 2 GPUs: the golden wants cost 20 + 2 x 18 = 56 > 48 GPUs.
    14 / 13 use 40; the split of 48 at loads 20 / 18 is 18 / 15 (worse pool 18/15 =
    1.2; 16 / 16 would leave prefill at 1.25, 20 / 14 decode at 1.29)."""
    spec = chat_spec(decode={"gpusPerReplica": 2}, scaling={"maxGPUs": 48})
    d = run(spec, snapshot(), 14, 13)
    expected = split_budget(48, 20, 18, 1, 2, 1, 32, 1, 32, 20.0, 18.0, Role.DECODE)
    assert (d.prefill, d.decode) == (expected.prefill, expected.decode) == (18, 15)
    assert d.prefill + 2 * d.decode == 48


def test_unschedulable_pods_resplit_what_the_cluster_gives_to_the_bottleneck() -> None:
    """Decode asks 24 but 6 pods are Pending for lack of GPUs; prefill runs 20. The
    cluster gives (20 - 0) + (24 - 6) = 38 GPUs. Decode (utilisation 13000/14400 = 90%)
    is the bottleneck, prefill (67%) is not. Re-split 38 GPUs at loads 19.05 / 24:
    17 / 21 (worse pool 24/21 = 1.14; 20 / 18 would leave decode at 1.33): decode gets
    3 more running replicas, prefill gives them up."""
    d = run(chat_spec(), LONG_OUTPUTS, 20, PoolObservation(24, 18, unschedulable=6))
    expected = split_budget(38, 20, 24, 1, 1, 1, 32, 1, 32, 40000 / 2100, 24.0, Role.DECODE)
    assert (d.prefill, d.decode) == (expected.prefill, expected.decode) == (17, 21)
    assert d.capacity_limited
    assert d.action == Action.CAPACITY_LIMITED
    assert "the cluster schedules 38 GPUs (6 pods pending), decode first" in d.message
    assert (d.memory.capacity_gpus, d.memory.capacity_time) == (38, 10_000.0)


def test_learnt_capacity_prevents_flapping_then_expires() -> None:
    """The tick after the re-split (17 / 21 all running, nothing pending) keeps within
    the learnt 38 GPUs instead of asking 20 / 24 again; 400 s later (> the 300 s
    window) the full wants are tried again: the cluster may have grown."""
    first = run(chat_spec(), LONG_OUTPUTS, 20, PoolObservation(24, 18, unschedulable=6))
    second = run(chat_spec(), LONG_OUTPUTS, 17, 21, now=10_015.0, memory=first.memory)
    assert (second.prefill, second.decode) == (17, 21)
    assert second.capacity_limited
    assert second.action == Action.HOLD_AT_LIMIT
    later = run(chat_spec(), LONG_OUTPUTS, 17, 21, now=10_400.0, memory=second.memory)
    assert (later.prefill, later.decode) == (20, 24)
    assert not later.capacity_limited
    assert later.memory.capacity_gpus is None


def test_capacity_rises_with_what_gets_scheduled() -> None:
    """Learnt 38 GPUs; now 40 run with nothing pending (a node joined): 40."""
    spec = chat_spec()
    cap = capacity(spec, PoolObservation(20, 20), PoolObservation(20, 20), 38, 100.0, 200.0, 300.0)
    assert cap.gpus == 40
    assert scheduled_gpus(spec, PoolObservation(20, 20), PoolObservation(24, 18, 6)) == 38


def test_bounds_apply_to_the_bottleneck() -> None:
    """Longer prompts want 29 prefill; max 25 -> 25 and the message says so."""
    spec = chat_spec(prefill={"replicas": {"min": 1, "max": 25}})
    d = run(spec, snapshot(prompt=3000.0), 20, 18)
    assert d.prefill == 25
    assert "prefill at its max 25 (wants 29)" in d.message


def test_at_max_and_still_short_holds_at_limit() -> None:
    """Already at max 25 and still short: HoldAtLimit on the prefill pool."""
    spec = chat_spec(prefill={"replicas": {"min": 1, "max": 25}})
    d = run(spec, snapshot(prompt=3000.0), 25, 18)
    assert (d.prefill, d.action, d.pool) == (25, Action.HOLD_AT_LIMIT, Role.PREFILL)


def test_min_raises_an_idle_pool() -> None:
    """min 3 with 1 running at zero load: raised to 3 at once (a bound, not load)."""
    spec = chat_spec(decode={"replicas": {"min": 3, "max": 32}})
    d = run(spec, snapshot(0.0, None, None), 1, 1)
    assert (d.prefill, d.decode) == (1, 3)


def test_clamp() -> None:
    assert (clamp(40, 1, 32), clamp(0, 1, 32), clamp(7, 1, 32)) == (32, 1, 7)
