"""A restarted operator resumes a rollout from ``status.rollout`` and the cells alone
(level-triggered): the required totals, the progress clock and the revisions survive,
and time when no tick ran does not count against the progress deadline.

Worked numbers: chat at 20 prefill / 18 decode rolling v1 -> v2, split 10 + 10 / 9 + 9,
all Ready. The operator restarts with Prometheus down (the policy holds what it sees as
the current size): it must see 20 / 18, not one cell's 10 / 9, and v1 must keep 10 / 9.
"""

from __future__ import annotations

from pdscaler import rollout
from pdscaler.rollout.phases import RolloutState
from pdscaler.types import RolloutPhase, RolloutReason
from support.rollout_world import CHAT, Cluster, Pool, rev, rolling, until_done


def split_10_10() -> Cluster:
    """v1 -> v2 under way (the first tick taken), then the cells at 10 / 9 each, all Ready."""
    c = rolling()
    c.tick(CHAT)
    for version in ("v1", "v2"):
        cell = c.cells[rev(version)]
        cell.prefill, cell.decode = Pool(10, 10), Pool(9, 9)
    return c


def restart(c: Cluster) -> None:
    """Drop the process memory: only the status (as persisted) and the cells survive."""
    status = c.state.to_status()
    c.state = rollout.state_from_status(status, c.spec, c.views(), c.now)


def test_restart_restores_the_required_totals_from_status() -> None:
    """After a restart the policy sees 20 / 18 (the persisted totals), not 10 / 9."""
    c = split_10_10()
    c.tick(CHAT)
    restart(c)
    prefill, decode = rollout.policy_pools(c.views(), c.state)
    assert (prefill.replicas, decode.replicas) == CHAT
    assert (prefill.ready, decode.ready) == CHAT


def test_restart_with_prometheus_down_does_not_shrink_the_old_cell() -> None:
    """Restarted with metrics down, the policy holds what it sees (``replicas``); the
    rollout then keeps serving 20 / 18: v1 keeps 10 / 9 while v2 covers the other half."""
    c = split_10_10()
    c.tick(CHAT)
    restart(c)
    for _ in range(3):
        prefill, decode = rollout.policy_pools(c.views(), c.state)
        held = (prefill.replicas, decode.replicas)  # the metrics-unavailable hold
        c.tick(held)
        c.ripen()
        assert c.serving_capacity() >= CHAT
    assert c.sizes()["v1"][0] + c.sizes()["v2"][0] >= CHAT[0]


def test_without_a_status_the_current_size_is_the_sum_over_serving_cells() -> None:
    """No persisted totals (a status from before they were kept, or lost): the current
    size during a rollout is the sum over the serving cells, 20 / 18, never the largest
    cell's 10 / 9."""
    c = split_10_10()
    prefill, decode = rollout.policy_pools(c.views(), RolloutState())
    assert (prefill.replicas, decode.replicas) == CHAT


def test_the_progress_clock_survives_restarts() -> None:
    """v2 never gets a Ready pod and the operator restarts before every tick (each
    60 s apart, faster than the 10 m progressDeadline): it still rolls back after the
    deadline, as without restarts."""
    c = rolling()
    c.broken = {"v2"}
    phases = []
    for _ in range(15):
        restart(c)
        phases.append(c.tick(CHAT).phase)
        c.ripen()
    assert RolloutPhase.ROLLING_BACK in phases[:13]


def test_time_without_ticks_does_not_count_against_the_deadline() -> None:
    """One tick starts v1 -> v2, then no tick runs for 20 minutes (the API server
    unreachable, the operator down): the first good tick does not roll back; the
    deadline counts only time the operator was watching."""
    c = rolling()
    c.tick(CHAT)
    c.now += 1200
    again = c.tick(CHAT)
    assert again.phase == RolloutPhase.PROGRESSING
    assert not any(e[1] == RolloutReason.DEADLINE for e in again.events)


def test_time_without_ticks_across_a_restart_does_not_count_either() -> None:
    """The same gap across a restart (the status carries when the last tick ran)."""
    c = rolling()
    c.tick(CHAT)
    c.now += 1200
    restart(c)
    again = c.tick(CHAT)
    assert again.phase == RolloutPhase.PROGRESSING


def test_the_status_round_trips_the_state() -> None:
    """Everything the rollout carries survives to_status -> state_from_status, except
    the images (re-read from the cells)."""
    c = split_10_10()
    c.tick(CHAT)
    before = c.state
    restart(c)
    after = c.state
    for field in (
        "phase",
        "target_rev",
        "target_version",
        "from_rev",
        "from_version",
        "required",
        "progress_mark",
        "steps",
    ):
        assert getattr(after, field) == getattr(before, field), field
    assert before.progress_at is not None
    assert after.progress_at is not None
    assert abs(after.progress_at - before.progress_at) < 1.0


def wipe_status(c: Cluster) -> None:
    """Drop the process memory AND the status (a restore without status, a status
    wiped by hand): only the cells and the marks on the front Service survive."""
    marks = rollout.to_marks(c.state)
    c.state = rollout.state_from_status(None, c.spec, c.views(), c.now, marks)


def test_wiped_status_after_a_rollback_does_not_retry_the_failed_version() -> None:
    """v2 never gets Ready, rolled back to v1 and its cell deleted; then the status is
    wiped and the operator restarts: v2 (still named by the spec) is not created again,
    the rollout shows RolledBack. Without the marks the spec's v2 looked new and was
    rolled out again (the same broken version, another progressDeadline of waiting)."""
    c = rolling()
    c.broken.add("v2")
    for _ in range(14):
        c.tick(CHAT)
        c.ripen()
    assert c.state.phase == RolloutPhase.ROLLED_BACK
    assert c.sizes() == {"v1": CHAT}
    wipe_status(c)
    for _ in range(3):
        step = c.tick(CHAT)
        c.ripen()
        assert step.phase == RolloutPhase.ROLLED_BACK
        assert c.sizes() == {"v1": CHAT}
    status = step.progress.rollout
    assert status is not None
    assert (status.from_version, status.to_version) == ("v2", "v1")


def test_wiped_status_mid_rollout_keeps_the_required_totals() -> None:
    """v1 -> v2 under way with v2's reserved decode Ready (v1 20 / 18, v2 0 / 4): the
    status is wiped and the operator restarts. The policy must still see 20 / 18, not
    the 22 Ready decode of both cells (scale-down is frozen during a rollout, so the
    surge taken for the size would stay until the rollout ends)."""
    c = rolling()
    c.tick(CHAT)
    c.ripen()
    assert c.sizes()["v2"][1] > 0
    prefill, decode = rollout.policy_pools(c.views(), c.state)
    assert decode.ready > CHAT[1]  # the surge is Ready
    wipe_status(c)
    prefill, decode = rollout.policy_pools(c.views(), c.state)
    assert (prefill.replicas, decode.replicas) == CHAT


def test_marks_are_empty_when_settled() -> None:
    """A settled PDDeployment carries no marks (its front Service is never rewritten)."""
    c = rolling()
    until_done(c)
    assert rollout.to_marks(c.state) == {}
    wipe_status(c)
    assert c.state == RolloutState()
