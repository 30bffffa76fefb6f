"""The same-version rollout state machine (docs/design.md §4) on a small simulated cluster:
worked steps, completion, rollback, retargeting, scaling during a rollout, small
surges. Every tick the support module checks the invariants (prefill only with a Ready
decode of its own cell, GPUs <= maxGPUs + maxSurgeGPUs with terminating pods counted,
serving capacity >= min once served)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from pdscaler import manifests, rollout
from pdscaler.manifests import CellTarget
from pdscaler.spec import RolloutStatus
from pdscaler.types import PerRole, PoolObservation, RolloutPhase, RolloutReason
from support.rollout_world import (
    CHAT,
    IMAGE,
    Cluster,
    Pool,
    View,
    rev,
    rolling,
    spec_for,
    until_done,
)


def test_first_steps_bring_decode_up_before_prefill() -> None:
    """maxSurgeGPUs 8, cap 38 + 8 = 46. Level 4 costs 4 prefill + ceil(18*4/20) = 4
    decode = 8 GPUs: v2 gets decode 4, prefill 0 (no Ready v2 decode yet). Once Ready:
    v2 prefill 4 (covered: floor(20*4/18) = 4). Once those are Ready: v1 prefill 16
    (v1 decode stays 18 while its 4 removed prefill pods terminate); then v1 decode
    ceil(18*16/20) = 15."""
    c = rolling()
    first = c.tick(CHAT)
    assert first.phase == RolloutPhase.PROGRESSING
    assert first.reason == RolloutReason.DECODE_FIRST
    assert first.events == (("Normal", RolloutReason.STARTED, "rolling v1 -> v2"),)
    assert c.sizes() == {"v1": (20, 18), "v2": (0, 4)}
    c.ripen()
    c.tick(CHAT)
    assert c.sizes()["v2"] == (4, 4)
    c.ripen()
    c.tick(CHAT)
    assert c.sizes()["v1"] == (16, 18)
    c.ripen()
    c.tick(CHAT)
    assert c.sizes()["v1"] == (16, 15)


def test_rollout_completes_and_deletes_the_old_cell() -> None:
    """All pods Ready after every tick: v2 ends at 20 / 18 alone, v1 deleted, Complete,
    with the from/to versions and the steps in the rollout status."""
    c = rolling()
    ticks = until_done(c)
    assert ticks <= 25
    last = c.steps[-1]
    assert last.phase == RolloutPhase.COMPLETE
    assert last.delete == (rev("v1"),)
    assert ("Normal", RolloutReason.COMPLETE, "v2 serves alone") in last.events
    assert c.sizes() == {"v2": CHAT}
    assert last.active_version == "v2"
    status = last.progress.rollout
    assert status is not None
    assert (status.phase, status.from_version, status.to_version) == ("Complete", "v1", "v2")
    assert status.step is not None
    assert status.step >= 5
    # settled: the next tick changes nothing
    again = c.tick(CHAT)
    assert (again.phase, again.reason, again.events) == (
        RolloutPhase.COMPLETE,
        RolloutReason.STABLE,
        (),
    )
    assert c.sizes() == {"v2": CHAT}


def test_old_decode_outlives_old_prefill() -> None:
    """Whenever an old cell still has prefill pods when a step is decided, the step
    keeps at least one of its decode replicas (prefill goes first, decode after)."""
    c = rolling()
    for _ in range(30):
        before = {cell.rev: cell.prefill.replicas for cell in c.cells.values()}
        step = c.tick(CHAT)
        c.ripen()
        for plan in step.cells:
            if plan.rev != rev("v2") and before.get(plan.rev, 0) > 0:
                assert plan.replicas.decode >= 1
        if step.phase == RolloutPhase.COMPLETE:
            break
    assert c.sizes() == {"v2": CHAT}


def test_first_creation_is_decode_first() -> None:
    """No cell yet: v1 decode 18 and prefill 0; prefill 20 once decode is Ready."""
    c = Cluster(spec=spec_for("v1"))
    step = c.tick(CHAT)
    assert (step.phase, step.reason) == (RolloutPhase.PROGRESSING, RolloutReason.DECODE_FIRST)
    assert step.events == (("Normal", RolloutReason.STARTED, "creating v1"),)
    assert c.sizes() == {"v1": (0, 18)}
    c.ripen()
    c.tick(CHAT)
    assert c.sizes() == {"v1": CHAT}
    c.ripen()
    assert c.tick(CHAT).phase == RolloutPhase.COMPLETE


def test_stable_cell_follows_the_required_totals() -> None:
    """A settled cell scales with the policy: 20 / 18 -> 24 / 22 in one step."""
    c = Cluster.serving(spec_for("v1"), "v1", *CHAT)
    step = c.tick((24, 22))
    assert (step.phase, step.reason) == (RolloutPhase.STABLE, RolloutReason.STABLE)
    assert c.sizes() == {"v1": (24, 22)}
    assert step.progress.rollout is None


def test_broken_version_rolls_back_after_the_deadline() -> None:
    """v2 never gets a Ready pod. Ticks every 60 s: at 660 s without progress (> 10m)
    the rollout turns back to v1 (Warning Event), drains v2 and ends RolledBack. The
    failed version is not retried while the spec names it; a new version is."""
    c = rolling()
    c.broken.add("v2")
    phases = []
    for _ in range(14):
        phases.append(c.tick(CHAT).phase)
        c.ripen()
    assert phases.count(RolloutPhase.PROGRESSING) == 11
    back = c.steps[11]
    assert back.phase == RolloutPhase.ROLLING_BACK
    assert back.events[0][:2] == ("Warning", RolloutReason.DEADLINE)
    assert back.events[0][2] == "v2 made no progress for 10m: rolling back to v1"
    assert c.steps[12].phase == RolloutPhase.ROLLED_BACK
    assert c.sizes() == {"v1": CHAT}
    status = c.steps[-1].progress.rollout
    assert status is not None
    assert (status.phase, status.from_version, status.to_version) == ("RolledBack", "v2", "v1")
    assert not rollout.in_progress(c.spec, c.views(), c.state)
    c.spec = spec_for("v3")
    assert rollout.in_progress(c.spec, c.views(), c.state)
    assert until_done(c) <= 25
    assert c.sizes() == {"v3": CHAT}


def test_slow_but_steady_progress_is_not_a_failure() -> None:
    """One pod per pool becomes Ready every 4 minutes: the rollout takes far longer than
    10m but progresses each tick, so it completes without rolling back."""
    c = rolling()
    for _ in range(80):
        step = c.tick(CHAT, seconds=240.0)
        c.ripen(lambda pending: min(pending, 1))
        assert step.phase != RolloutPhase.ROLLING_BACK
        if step.phase == RolloutPhase.COMPLETE:
            break
    assert c.sizes() == {"v2": CHAT}
    assert c.now - 1000.0 > 1800


def test_version_changed_mid_rollout_converges_to_the_newest() -> None:
    """v1 -> v2 for 6 ticks, then the spec says v3: v2 (half up) is drained like v1,
    never growing again, and v3 ends alone; the status keeps v1 as the origin."""
    c = rolling()
    c.run(CHAT, 6)
    assert set(c.sizes()) == {"v1", "v2"}
    c.spec = spec_for("v3")
    v2_prefill = c.cells[rev("v2")].prefill.replicas
    step = c.tick(CHAT)
    assert ("Normal", RolloutReason.STARTED, "rolling v1 -> v3") in step.events
    c.ripen()
    for _ in range(40):
        step = c.tick(CHAT)
        c.ripen()
        if rev("v2") in c.cells:
            assert c.cells[rev("v2")].prefill.replicas <= v2_prefill
        if step.phase == RolloutPhase.COMPLETE:
            break
    assert c.sizes() == {"v3": CHAT}
    status = step.progress.rollout
    assert status is not None
    assert (status.from_version, status.to_version) == ("v1", "v3")


def test_scaling_keeps_working_during_a_rollout() -> None:
    """The policy asks 26 / 22 halfway through: the cells serve the new totals (Ready
    prefill and decode reach 26 / 22 before the end) and v2 ends at 26 / 22."""
    c = rolling()
    c.run(CHAT, 5)
    seen = (0, 0)
    for _ in range(40):
        step = c.tick((26, 22))
        c.ripen()
        seen = max(seen, c.serving_capacity())
        if step.phase == RolloutPhase.COMPLETE:
            break
    assert c.sizes() == {"v2": (26, 22)}
    assert seen >= (26, 22)


@pytest.mark.parametrize(
    ("required", "overrides"),
    [
        # one level = 1 prefill + ceil(18/2) = 9 decode (+1 slack) > surge 2, no budget room
        ((2, 18), {"rollout": {"maxSurgeGPUs": 2}, "scaling": {"maxGPUs": 20}}),
        # prefill at its min 1: the old cells give up decode instead
        ((1, 9), {"rollout": {"maxSurgeGPUs": 8}, "scaling": {"maxGPUs": 10}}),
        # a decode replica needs 4 GPUs, the surge is 2
        (
            (4, 4),
            {
                "rollout": {"maxSurgeGPUs": 2},
                "decode": {"gpusPerReplica": 4},
                "scaling": {"maxGPUs": 20},
            },
        ),
    ],
)
def test_surge_smaller_than_one_step_still_completes(
    required: tuple[int, int], overrides: dict[str, object]
) -> None:
    """When neither maxSurgeGPUs nor the budget can hold one level, old cells give up a
    level first (after the new decode has a Ready pod); the rollout still completes,
    never below min, never above maxGPUs + maxSurgeGPUs."""
    c = Cluster.serving(spec_for("v2", **overrides), "v1", *required)
    until_done(c, required)
    assert c.sizes() == {"v2": required}
    assert any(s.reason == RolloutReason.SURGE_BELOW_STEP for s in c.steps)


def test_budget_room_makes_a_small_surge_step_one_level() -> None:
    """2 prefill / 18 decode (20 GPUs), maxSurgeGPUs 2, maxGPUs 64: one level is
    1 + 9 + 1 = 11 GPUs, which the budget has room for, so steps are one level (at
    most 31 GPUs held) and capacity never dips below the required 2 / 18."""
    c = Cluster.serving(spec_for("v2", rollout={"maxSurgeGPUs": 2}), "v1", 2, 18)
    most = 0
    for _ in range(30):
        step = c.tick((2, 18))
        most = max(most, c.gpus())
        c.ripen()
        assert c.serving_capacity() >= (2, 18)
        if step.phase == RolloutPhase.COMPLETE:
            break
    assert c.sizes() == {"v2": (2, 18)}
    assert most <= 31
    assert all(s.reason != RolloutReason.SURGE_BELOW_STEP for s in c.steps)


def test_policy_pools_during_a_rollout() -> None:
    """v1 16 prefill / 15 decode Ready, v2 4 prefill Ready but its decode not Ready: the
    policy sees the last required totals (20 / 18) as the current size, and 16 Ready
    prefill (v2's cannot serve), 15 Ready decode."""
    views = {
        "a": View("a", "v1", IMAGE, 0.0, PoolObservation(16, 16), PoolObservation(15, 15)),
        "b": View("b", "v2", IMAGE, 9.0, PoolObservation(4, 4, 1), PoolObservation(4, 0)),
    }
    state = rollout.RolloutState(
        phase=RolloutPhase.PROGRESSING, required=PerRole(prefill=20, decode=18)
    )
    prefill, decode = rollout.policy_pools(views, state)
    assert (prefill.replicas, prefill.ready, prefill.unschedulable) == (20, 16, 1)
    assert (decode.replicas, decode.ready) == (18, 15)
    alone, _ = rollout.policy_pools({"a": views["a"]})
    assert (alone.replicas, alone.ready) == (16, 16)


def test_in_progress() -> None:
    """No cell yet, or another revision present: in progress; the target alone: not."""
    spec = spec_for("v1")
    one = Cluster.serving(spec, "v1", *CHAT)
    assert not rollout.in_progress(spec, one.views())
    assert rollout.in_progress(spec, {})
    assert rollout.in_progress(spec_for("v2"), one.views())


def test_restart_mid_rollout_resumes_without_an_early_rollback() -> None:
    """The operator restarts 6 ticks into v1 -> v2 and rebuilds the state from the
    status: the progress clock restarts at the restart (no rollback although v2's cell
    is old), and the rollout completes."""
    c = rolling()
    c.run(CHAT, 6)
    status = c.state.to_status()
    c.now += 3600
    c.state = rollout.state_from_status(status, c.spec, c.views(), c.now)
    assert (c.state.phase, c.state.target_rev, c.state.from_rev) == (
        RolloutPhase.PROGRESSING,
        rev("v2"),
        rev("v1"),
    )
    until_done(c)
    assert c.sizes() == {"v2": CHAT}


def test_restart_after_a_rollback_does_not_retry_the_failed_version() -> None:
    """RolledBack from v2 to v1, persisted in status, operator restarted: still v1."""
    status = RolloutStatus(phase="RolledBack", from_version="v2", to_version="v1")
    c = rolling()
    c.state = rollout.state_from_status(status, c.spec, c.views(), c.now)
    step = c.tick(CHAT)
    assert step.phase == RolloutPhase.ROLLED_BACK
    assert c.sizes() == {"v1": CHAT}


def test_cell_plans_render_to_manifest_targets() -> None:
    """CellPlan.target() is the manifests' CellTarget of the same revision; a cell whose
    image is unknown (not the spec's, none observed or remembered) refuses to render."""
    c = rolling()
    step = c.tick(CHAT)
    config = manifests.kv_config(c.spec)
    assert step.targets() == (
        CellTarget(IMAGE, "v2", 0, 4, config=config),
        CellTarget(IMAGE, "v1", 20, 18, config=config),
    )
    stranger = rollout.CellPlan("v1-zzzzz", "v1", None, PerRole(prefill=1, decode=1))
    with pytest.raises(ValueError, match="engine image unknown"):
        stranger.target()


@dataclass(frozen=True)
class _NoImage:
    """A cell view without ``image`` (``observe.CellObservation`` today)."""

    rev: str
    version: str
    created: float | None
    prefill: PoolObservation
    decode: PoolObservation


def test_image_is_recovered_without_an_image_field() -> None:
    """A view without ``image``: the spec's image when the revision matches it."""
    view = _NoImage(rev("v1"), "v1", 0.0, PoolObservation(20, 20), PoolObservation(18, 18))
    step = rollout.step(spec_for("v2"), [view], CHAT, 100.0)
    assert {t.rev for t in step.targets()} == {rev("v1"), rev("v2")}


def test_terminating_pods_hold_back_growth() -> None:
    """A settled v1 at 20 / 18 with 10 decode pods still terminating (48 GPUs held): a
    raise to 24 prefill may use only what the cap leaves, 24 + 18 + 8 - 48 = 2 GPUs:
    prefill 22 now, the rest once the pods are gone."""
    c = Cluster.serving(spec_for("v1"), "v1", *CHAT)
    c.cells[rev("v1")].decode = Pool(18, 18, 10)
    views = c.views()
    step = rollout.step(c.spec, views, (24, 18), c.now, c.state)
    assert step.cells[0].replicas.prefill == 22
    c.cells[rev("v1")].decode = Pool(18, 18, 0)
    assert rollout.step(c.spec, c.views(), (24, 18), c.now, c.state).cells[0].replicas.prefill == 24
