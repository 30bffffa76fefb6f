"""The rollout's state machine: phases, targets, progress, the deadline and rollback.

Owns: ``RolloutState`` (what the rollout carries from one tick to the next), which cell
is the target, the phase transitions before sizing (start, retarget, progress, the
progress deadline, rollback), whether a rollout is in progress, what the policy sees of
the cells during one (``policy_pools``), the active version and the phase's message
(the state of a restarted operator is ``restore``'s). Must not: read
clocks (``now`` is passed in), size cells (``levels``) or talk to Kubernetes.

Phases (``RolloutPhase``): Stable (no rollout), Progressing, RollingBack, Complete (the
last rollout finished), RolledBack (the last rollout was rolled back).

* The target cell is the spec's revision (``manifests.spec_revision``: image, version
  and the engine configuration that decides KV compatibility), or,
  after a rollback, the cell rolled back to while the spec still names the failed one.
* No progress (new Ready pods or old pods gone) for ``rollout.progressDeadline``
  (the clock pauses while the required totals are zero) -> roll back: the cell the
  rollout started from becomes the target, the failed cell is drained the same safe
  way (RollingBack, then RolledBack); it is not retried until the spec names another
  revision.
* The spec's version changing again mid-rollout makes the newest revision the target;
  every other cell, the intermediate one included, is drained as an old cell.

Worked example: serving v1, the spec names v2 -> Progressing (Event RolloutStarted
"rolling v1 -> v2"), target v2, from v1; the progress mark (new Ready pods minus old
pods left) starts at 0 - 38 = -38 for chat at 20 / 18. v2 never gets a Ready pod and v1
keeps its pods: after the 10 minute progressDeadline -> RollingBack to v1 (Warning
Event ProgressDeadlineExceeded), v2 is drained; once v1 serves alone -> RolledBack, and
v2 is not retried while the spec names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from pdscaler import manifests
from pdscaler.rollout.cells import (
    NEEDS_READY_DECODE,
    Cell,
    Cells,
    by_serving,
    cell_list,
    observed,
    views,
)
from pdscaler.spec import PDDeploymentSpec, RolloutRequired, RolloutStatus, rfc3339
from pdscaler.types import PerRole, PoolObservation, Role, RolloutPhase, RolloutReason

Event = tuple[str, str, str]  # (type, reason, message)

#: The phases of a rollback and of its end.
BACK = frozenset({RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK})


@dataclass(frozen=True)
class RolloutState:
    """What the rollout carries from one tick to the next (kept by the operator).

    ``target_rev``: the cell being rolled to; ``from_rev``: the cell the rollout started
    from (where a rollback goes); ``failed_rev``: rolled back from, not retried while the
    spec names it; ``progress_at``/``progress_mark``: when the rollout last progressed
    and the best progress mark seen (new ready pods minus old pods left); ``required``:
    the totals of the last step (what the policy sees as the current size during a
    rollout); ``checked_at``: when the last tick ran (a longer gap than ``gap_counted``
    does not count against the deadline); ``images``: (rev, image) of the cells rolled
    to, to re-render them. Everything but ``images`` is persisted in ``status.rollout``
    (``to_status``/``state_from_status``); images are re-read from the cells.
    ``checked_at`` moves only while cells move (a settled status stays unchanged)."""

    phase: RolloutPhase = RolloutPhase.STABLE
    target_rev: str | None = None
    target_version: str | None = None
    from_rev: str | None = None
    from_version: str | None = None
    failed_rev: str | None = None
    failed_version: str | None = None
    started_at: float | None = None
    progress_at: float | None = None
    progress_mark: int | None = None
    steps: int = 0
    required: PerRole[int] | None = None
    checked_at: float | None = None
    images: tuple[tuple[str, str], ...] = ()

    def to_status(self) -> RolloutStatus | None:
        """The status form (None before any rollout). During and after a rollback
        ``from_version`` is the failed version and ``to_version`` the one rolled back to."""
        if self.phase == RolloutPhase.STABLE and self.started_at is None:
            return None
        back = self.phase in BACK
        required = self.required
        return RolloutStatus(
            phase=self.phase,
            from_version=self.failed_version if back else self.from_version,
            to_version=self.target_version,
            from_revision=self.failed_rev if back else self.from_rev,
            to_revision=self.target_rev,
            started_at=_time(self.started_at),
            step=self.steps,
            required=(
                RolloutRequired(prefill=required.prefill, decode=required.decode)
                if required is not None
                else None
            ),
            progress_at=_time(self.progress_at),
            progress_mark=self.progress_mark,
            checked_at=_time(self.checked_at),
        )


def _time(t: float | None) -> datetime | None:
    return rfc3339(t) if t is not None else None


#: The most a gap between two ticks counts against the progress deadline, in
#: scaling intervals and at least in seconds: a tick that ran late or a quick restart
#: counts in full; time when no tick ran (the operator down, the API server
#: unreachable) does not: the rollout cannot have been moved on then.
GAP_INTERVALS, GAP_SECONDS = 2.0, 60.0


def gap_counted(spec: PDDeploymentSpec) -> float:
    """Seconds of one gap between ticks that count against the deadline."""
    return max(GAP_INTERVALS * spec.scaling.interval_seconds, GAP_SECONDS)


def spec_revision(spec: PDDeploymentSpec) -> str:
    """The revision the spec names (its image, version and engine configuration)."""
    return manifests.spec_revision(spec)


def target(spec_rev: str, view: Mapping[str, Cell], state: RolloutState) -> tuple[str, bool]:
    """(target revision, rolling back?)."""
    dest = state.target_rev
    if (
        state.failed_rev == spec_rev
        and state.phase in BACK
        and dest is not None
        and dest != spec_rev
        and dest in view
    ):
        return dest, True
    return spec_rev, False


def in_progress(spec: PDDeploymentSpec, cells: Cells, state: RolloutState | None = None) -> bool:
    """True while cells other than the target exist, the target has no cell yet, or
    the state says a rollout or rollback is under way (the policy then never scales
    down)."""
    state = state or RolloutState()
    view = views(spec, cells, state.images)
    rev, _ = target(spec_revision(spec), view, state)
    return any(r != rev for r in view) or rev not in view or state.phase.moving


def policy_pools(
    cells: Cells, state: RolloutState | None = None
) -> tuple[PoolObservation, PoolObservation]:
    """The (prefill, decode) observations the policy decides on.

    ``ready`` sums the cells (a prefill pod counts only in a cell whose decode has a
    Ready pod); ``unschedulable``, ``terminating`` and start-up samples add up. During a
    rollout ``replicas`` is the last step's required totals (kept, or restored from
    ``status.rollout``), not the sum of the cells' replicas (which includes the surge:
    the policy would take it for the current size and, with scale-down frozen, ratchet
    it up); without a known total, the pods serving summed over the cells (at least the
    largest cell's replicas): never one cell's size, which would shrink the others.
    Chat rolling v1 -> v2 at 20 / 18, v1 at 16 / 15 and v2 at 4 / 4, all Ready: the
    policy sees 20 / 18 replicas, 20 / 19 Ready; split 10 / 9 + 10 / 9 with no known
    total it sees 20 / 18.
    """
    state = state or RolloutState()
    items = [observed(c) for c in cell_list(cells)]
    rolling = len(items) > 1 or state.phase.moving

    def pool(role: Role) -> PoolObservation:
        pools = [c.pool(role) for c in items]
        serving = [
            p.ready if not NEEDS_READY_DECODE.pool(role) or c.decode.ready >= 1 else 0
            for c, p in zip(items, pools, strict=True)
        ]
        if rolling and state.required is not None:
            replicas = state.required.pool(role)
        elif rolling:
            replicas = max(sum(serving), max((p.replicas for p in pools), default=0))
        else:
            replicas = sum(p.replicas for p in pools)
        samples = tuple(s for p in pools for s in p.startup_samples)
        return PoolObservation(
            replicas=replicas,
            ready=sum(serving),
            unschedulable=sum(p.unschedulable for p in pools),
            startup_samples=samples[-20:],
            terminating=sum(p.terminating for p in pools),
        )

    out = PerRole.build(pool)
    return out.prefill, out.decode


# ------------------------------------------------------------ transitions


def target_version(spec: PDDeploymentSpec, state: RolloutState, rev: str) -> str:
    """The version of the target cell ``rev`` (the spec's unless rolled back)."""
    if rev == state.target_rev and state.target_version is not None:
        return state.target_version
    return spec.engine.version


def _mark(new: Cell, olds: Iterable[Cell]) -> int:
    """Progress: new Ready pods minus old pods left. It only rises as a rollout moves."""
    return new.ready_pods - sum(c.present_pods for c in olds)


def resolve(
    spec: PDDeploymentSpec,
    view: Mapping[str, Cell],
    state: RolloutState,
    now: float,
    idle: bool,
    events: list[Event],
) -> tuple[RolloutState, str]:
    """Phase transitions before sizing: start, retarget, progress, deadline, rollback;
    the state and the target revision. The deadline does not run while the required
    totals are zero (``idle``: no pod is asked), nor across a gap between ticks beyond
    ``gap_counted`` (no tick ran: the clock moves on by the uncounted part)."""
    state = _pause_for_gap(spec, state, now)
    spec_rev = spec_revision(spec)
    if state.failed_rev is not None and state.failed_rev != spec_rev:
        state = replace(state, failed_rev=None, failed_version=None)  # the spec moved on
    rev, back = target(spec_rev, view, state)
    olds = [c for c in view.values() if c.rev != rev]
    if back:
        phase = RolloutPhase.ROLLING_BACK if olds else RolloutPhase.ROLLED_BACK
        return replace(state, phase=phase), rev
    continuing = state.phase.moving and state.target_rev == rev
    if not continuing and (olds or rev not in view):
        state = _start(spec, rev, view, state, now)
        events.append(("Normal", RolloutReason.STARTED, _start_message(state)))
    elif not continuing:
        if state.phase not in (
            RolloutPhase.STABLE,
            RolloutPhase.COMPLETE,
            RolloutPhase.ROLLED_BACK,
        ):
            state = replace(state, phase=RolloutPhase.STABLE)
        return state, rev
    new = view.get(rev) or Cell(rev, spec.engine.version, None, now)  # not created yet
    mark = _mark(new, olds)
    best = state.progress_mark
    if best is None or state.progress_at is None or mark > best or idle:
        return replace(state, progress_at=now, progress_mark=max(mark, best or mark)), rev
    if now - state.progress_at <= spec.rollout.progress_deadline_seconds:
        return state, rev
    dest = state.from_rev if state.from_rev in view and state.from_rev != rev else None
    if dest is None and olds:
        dest = by_serving(olds)[0].rev
    if dest is None:
        return state, rev  # nothing to roll back to; the message says so
    dest_cell = view[dest]
    rolled = replace(
        state,
        phase=RolloutPhase.ROLLING_BACK,
        failed_rev=rev,
        failed_version=state.target_version,
        target_rev=dest,
        target_version=dest_cell.version,
        progress_at=now,
        progress_mark=None,
        images=remember_image(state.images, dest, dest_cell.image),
    )
    events.append(
        (
            "Warning",
            RolloutReason.DEADLINE,
            f"{state.target_version} made no progress for "
            f"{spec.rollout.progress_deadline}: rolling back to {dest_cell.version}",
        )
    )
    return rolled, dest


def _pause_for_gap(spec: PDDeploymentSpec, state: RolloutState, now: float) -> RolloutState:
    """Move the progress clock on by the part of the gap since the last tick that does
    not count (15 s interval: 60 s count; last tick 20 m ago: the clock moves on by
    19 m, so a 10 m progressDeadline is not passed by the gap alone)."""
    if state.progress_at is None or state.checked_at is None or not state.phase.moving:
        return state
    skipped = now - state.checked_at - gap_counted(spec)
    if skipped <= 0:
        return state
    return replace(state, progress_at=state.progress_at + skipped)


def discount_unobserved(state: RolloutState, seconds: float, now: float) -> RolloutState:
    """Move the progress clock and the last tick's time on by ``seconds`` during which
    every tick of this PDDeployment failed (the API server or etcd unreachable: nothing
    could be read, so nothing could be moved on), at most up to ``now``. The outage
    then counts neither as time without progress nor as part of a gap between ticks.
    Example: last good tick at 100 (progress at 95), ticks failing from 102 to 140,
    good again at 141 with ``seconds`` 39: progress at 134, last tick at 139."""
    if seconds <= 0 or state.progress_at is None or not state.phase.moving:
        return state
    shift = min(seconds, now - max(state.progress_at, state.checked_at or state.progress_at))
    if shift <= 0:
        return state
    checked = None if state.checked_at is None else state.checked_at + shift
    return replace(state, progress_at=state.progress_at + shift, checked_at=checked)


def remember_image(
    images: tuple[tuple[str, str], ...], rev: str, image: str | None
) -> tuple[tuple[str, str], ...]:
    """``images`` with ``rev``'s image added (the last 8 kept)."""
    if image is None or rev in dict(images):
        return images
    return (*images, (rev, image))[-8:]


def _start(
    spec: PDDeploymentSpec, rev: str, view: Mapping[str, Cell], state: RolloutState, now: float
) -> RolloutState:
    """A new rollout (or a new target mid-rollout: the origin is kept)."""
    if state.phase == RolloutPhase.PROGRESSING and state.from_rev in view:
        origin, origin_version, started = state.from_rev, state.from_version, state.started_at
    elif state.phase == RolloutPhase.ROLLING_BACK and state.target_rev in view:
        origin, origin_version, started = state.target_rev, state.target_version, now
    else:
        olds = by_serving(c for c in view.values() if c.rev != rev)
        origin = olds[0].rev if olds else None
        origin_version = olds[0].version if olds else None
        started = now
    images = state.images
    for cell in view.values():
        images = remember_image(images, cell.rev, cell.image)
    return replace(
        state,
        phase=RolloutPhase.PROGRESSING,
        target_rev=rev,
        target_version=spec.engine.version,
        from_rev=origin,
        from_version=origin_version,
        failed_rev=None,
        failed_version=None,
        started_at=started,
        progress_at=now,
        progress_mark=None,
        images=remember_image(images, rev, spec.engine.image),
    )


def _start_message(state: RolloutState) -> str:
    if state.from_version is None:
        return f"creating {state.target_version}"
    return f"rolling {state.from_version} -> {state.target_version}"


def stalled(spec: PDDeploymentSpec, state: RolloutState, now: float) -> bool:
    """No progress for longer than the progress deadline."""
    return (
        state.progress_at is not None
        and now - state.progress_at > spec.rollout.progress_deadline_seconds
    )


# ------------------------------------------------------------ what it shows


def active_version(new: Cell, olds: list[Cell], phase: RolloutPhase) -> str:
    """The version serving most: the new one once it has the most Ready prefill."""
    if not olds or not phase.moving:
        return new.version
    best = by_serving(olds)[0]
    return new.version if new.pods.prefill.ready > best.pods.prefill.ready else best.version


def message(
    new: Cell,
    olds: list[Cell],
    required: PerRole[int],
    phase: RolloutPhase,
    note: str,
    reason: RolloutReason,
) -> str:
    """``Progressing: v2 prefill 4/20 ready, decode 6/18 ready; v1 prefill 16, decode 18``
    (old cells show the pods they still have)."""
    ready = ", ".join(
        f"{role} {new.pods.pool(role).ready}/{n} ready" for role, n in required.items()
    )
    parts = [f"{new.version} {ready}" if olds else f"{new.version} serving: {ready}"]
    parts += [
        f"{c.version} " + ", ".join(f"{role} {n}" for role, n in c.present.items()) for c in olds
    ]
    if reason == RolloutReason.NO_ROLLBACK:
        parts.append("no progress within progressDeadline and no previous version to roll back to")
    if reason == RolloutReason.DECODE_FIRST:
        parts.append("waiting for a Ready decode pod before starting prefill")
    if note:
        parts.append(note)
    return f"{phase}: " + "; ".join(parts)
