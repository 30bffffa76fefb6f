"""The same-version rollout (docs/design.md §4) as a pure state machine over revision cells.

Owns: which cells exist and how many prefill/decode replicas each runs, so that the
policy's required totals are served while the engine version moves from one cell to
another, and the rollout's phase, reason, message, Events and persisted state. Must
not: read clocks (``now`` is passed in), talk to Kubernetes, size the totals (the
policy does) or render manifests (``manifests`` does, from ``RolloutStep.targets()``).

API (what ``reconcile`` calls each tick)::

    state = previous RolloutState (kept by the operator; after a restart
            state_from_status(status.rollout, spec, cells, now))
    busy  = in_progress(spec, cells, state)                  # -> TickInput.rollout_in_progress
    prefill_obs, decode_obs = policy_pools(cells, state)     # -> TickInput.prefill/decode
    decision = policy.decide(...)
    step  = step(spec, cells, (decision.prefill, decision.decode), now, state)
    desired = manifests.desired_objects(meta, spec, list(step.targets()))
    status: step.progress (ProgressFacts), step.active_version; Events: step.events
    keep step.state for the next tick

``cells`` maps revision -> a cell view with ``rev``, ``version``, ``created`` and
``prefill``/``decode`` ``PoolObservation``s (``observe.CellObservation`` fits), plus an
optional ``image`` (needed to re-render a cell whose image is not the spec's).

Rules
-----
* The target cell is the spec's revision (``naming.revision(image, version)``), or,
  after a rollback, the cell rolled back to while the spec still names the failed one.
* Stable (only the target cell): it runs the required totals; its prefill runs only
  once its decode has a Ready pod (decode up before prefill, also on first creation).
* Rolling (old cells present): the new cell grows in *levels*: level k is k prefill
  and ``ceil(D * k / P)`` decode replicas (the decode share of k prefill). A level is
  reserved (its decode first) when its GPUs fit the cap, counting every pod that
  exists (terminating ones too); its prefill starts only as far as its READY decode
  covers (``floor(P * decode_ready / D)``). The old cells keep ``P - k_ready``
  prefill, k_ready being the new cell's Ready prefill next to a Ready decode pod, and
  each old cell keeps the decode share of the prefill pods it still has (at least one
  while any is left): old prefill goes first, its decode follows once the prefill
  pods are gone. Old cells without pods stay at 0 / 0 (something to roll back to)
  until the new cell serves alone; then they are deleted (Complete). Ready capacity
  stays at the required totals throughout.
* The cap is the required GPUs + maxSurgeGPUs; when that cannot hold one level (one
  prefill, its decode share and a decode of rounding slack) but maxGPUs has room, one
  level. When the new cell's next step still does not fit and nothing of it is
  pending, the old cells give up capacity first: prefill levels while prefill stays
  at its min, then decode replicas (the new cell may then run one prefill level ahead
  of its decode). Capacity dips, never below the spec's minimums; when even that
  cannot make room (e.g. a 3-GPU prefill replica, 1 GPU of surge, no budget room,
  prefill at its min), the rollout holds with reason StepDoesNotFit, and the progress
  deadline rolls it back.
* Required totals that grow during a rollout go to the cells that can serve them now;
  nothing ever exceeds ``maxGPUs + maxSurgeGPUs`` because of a rollout step.
* No progress (new Ready pods or old pods gone) for ``rollout.progressDeadline``
  (the clock pauses while the required totals are zero) -> roll back: the cell the
  rollout started from becomes the target, the failed cell is drained the same safe
  way (RollingBack, then RolledBack); it is not retried until the spec names another
  revision.
* The spec's version changing again mid-rollout makes the newest revision the target;
  every other cell, the intermediate one included, is drained as an old cell.

Phases: Stable, Progressing, RollingBack, Complete (the last rollout finished),
RolledBack (the last rollout was rolled back).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from pdscaler import naming
from pdscaler.manifests import CellTarget
from pdscaler.spec import PDDeploymentSpec, RolloutStatus, rfc3339
from pdscaler.status import ProgressFacts
from pdscaler.types import PoolObservation, Role

STABLE = "Stable"
PROGRESSING = "Progressing"
ROLLING_BACK = "RollingBack"
COMPLETE = "Complete"
ROLLED_BACK = "RolledBack"
ROLLOUT_PHASES = frozenset({PROGRESSING, ROLLING_BACK})

# reasons (Events and RolloutStep.reason)
REASON_STABLE = "Stable"
REASON_STARTED = "RolloutStarted"
REASON_DECODE_FIRST = "WaitingForNewDecode"
REASON_SHIFTING = "ShiftingCapacity"
REASON_SURGE_BELOW_STEP = "SurgeBelowOneStep"
REASON_STEP_DOES_NOT_FIT = "StepDoesNotFit"
REASON_DRAINING = "DrainingOldCells"
REASON_COMPLETE = "RolloutComplete"
REASON_DEADLINE = "ProgressDeadlineExceeded"
REASON_NO_ROLLBACK = "NoRollbackTarget"
REASON_ROLLING_BACK = "RollingBack"
REASON_ROLLED_BACK = "RolledBack"

Event = tuple[str, str, str]  # (type, reason, message)


class CellView(Protocol):
    """What the rollout reads of one cell (``observe.CellObservation`` fits)."""

    @property
    def rev(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def created(self) -> float | None: ...
    @property
    def prefill(self) -> PoolObservation: ...
    @property
    def decode(self) -> PoolObservation: ...


@dataclass(frozen=True)
class RolloutState:
    """What the rollout carries from one tick to the next (kept by the operator).

    ``target_rev``: the cell being rolled to; ``from_rev``: the cell the rollout started
    from (where a rollback goes); ``failed_rev``: rolled back from, not retried while the
    spec names it; ``progress_at``/``progress_mark``: when the rollout last progressed
    and the best progress mark seen (new ready pods minus old pods left); ``required``:
    the totals of the last step (what the policy sees as the current size during a
    rollout); ``images``: (rev, image) of the cells rolled to, to re-render them."""

    phase: str = STABLE
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
    required: tuple[int, int] | None = None
    images: tuple[tuple[str, str], ...] = ()

    def to_status(self) -> RolloutStatus | None:
        """The status form (None before any rollout). During and after a rollback
        ``from_version`` is the failed version and ``to_version`` the one rolled back to."""
        if self.phase == STABLE and self.started_at is None:
            return None
        back = self.phase in (ROLLING_BACK, ROLLED_BACK)
        return RolloutStatus(
            phase=self.phase,
            from_version=self.failed_version if back else self.from_version,
            to_version=self.target_version,
            started_at=rfc3339(self.started_at) if self.started_at is not None else None,
            step=self.steps,
        )


@dataclass(frozen=True)
class CellPlan:
    """One cell to keep, with its desired replicas (0 keeps the Deployment, no pods)."""

    rev: str
    version: str
    image: str | None
    prefill: int
    decode: int

    def target(self) -> CellTarget:
        """The manifests' CellTarget; its revision must be this cell's."""
        if self.image is None:
            raise ValueError(f"cell {self.rev}: engine image unknown, cannot re-render it")
        cell = CellTarget(self.image, self.version, self.prefill, self.decode)
        if cell.rev != self.rev:
            raise ValueError(f"cell {self.rev}: image {self.image!r} gives revision {cell.rev}")
        return cell


@dataclass(frozen=True)
class RolloutStep:
    """The rollout's answer for this tick."""

    phase: str
    reason: str
    message: str
    cells: tuple[CellPlan, ...]
    delete: tuple[str, ...]
    active_version: str
    state: RolloutState
    events: tuple[Event, ...] = ()

    def targets(self) -> tuple[CellTarget, ...]:
        return tuple(c.target() for c in self.cells)

    @property
    def progress(self) -> ProgressFacts:
        return ProgressFacts(phase=self.phase, message=self.message, rollout=self.state.to_status())


# ------------------------------------------------------------------- cell views


@dataclass(frozen=True)
class _Cell:
    """One cell in numbers: replicas asked, Ready pods, pods being deleted (they still
    hold GPUs). ``*_live`` = max(replicas, ready): the pods that exist and stay."""

    rev: str
    version: str
    image: str | None
    created: float
    p_rep: int = 0
    p_ready: int = 0
    p_term: int = 0
    d_rep: int = 0
    d_ready: int = 0
    d_term: int = 0

    @property
    def p_live(self) -> int:
        return max(self.p_rep, self.p_ready)

    @property
    def d_live(self) -> int:
        return max(self.d_rep, self.d_ready)

    @property
    def p_pres(self) -> int:
        return self.p_live + self.p_term

    @property
    def d_pres(self) -> int:
        return self.d_live + self.d_term

    @property
    def empty(self) -> bool:
        return self.p_pres == 0 and self.d_pres == 0


def _image(spec: PDDeploymentSpec, cell: CellView, state: RolloutState) -> str | None:
    image = getattr(cell, "image", None)
    if isinstance(image, str) and image:
        return image
    known = dict(state.images)
    if cell.rev in known:
        return known[cell.rev]
    if naming.revision(spec.engine.image, cell.version) == cell.rev:
        return spec.engine.image
    return None


def _views(
    spec: PDDeploymentSpec, cells: Mapping[str, CellView] | Iterable[CellView], state: RolloutState
) -> dict[str, _Cell]:
    items = cells.values() if isinstance(cells, Mapping) else cells
    out: dict[str, _Cell] = {}
    for c in items:
        out[c.rev] = _Cell(
            rev=c.rev,
            version=c.version,
            image=_image(spec, c, state),
            created=c.created if c.created is not None else 0.0,
            p_rep=c.prefill.replicas,
            p_ready=c.prefill.ready,
            p_term=max(c.prefill.terminating, 0),
            d_rep=c.decode.replicas,
            d_ready=c.decode.ready,
            d_term=max(c.decode.terminating, 0),
        )
    return out


def _by_serving(cells: Iterable[_Cell]) -> list[_Cell]:
    """Most ready prefill first, then most ready decode, oldest, revision: deterministic."""
    return sorted(cells, key=lambda c: (-c.p_ready, -c.d_ready, c.created, c.rev))


# ---------------------------------------------------------------- public helpers


def _target(spec_rev: str, view: Mapping[str, _Cell], state: RolloutState) -> tuple[str, bool]:
    """(target revision, rolling back?)."""
    dest = state.target_rev
    if (
        state.failed_rev == spec_rev
        and state.phase in (ROLLING_BACK, ROLLED_BACK)
        and dest is not None
        and dest != spec_rev
        and dest in view
    ):
        return dest, True
    return spec_rev, False


def in_progress(
    spec: PDDeploymentSpec,
    cells: Mapping[str, CellView] | Iterable[CellView],
    state: RolloutState | None = None,
) -> bool:
    """True while cells other than the target exist, the target has no cell yet, or
    the state says a rollout or rollback is under way (the policy then never scales
    down)."""
    state = state or RolloutState()
    view = _views(spec, cells, state)
    target, _ = _target(naming.revision(spec.engine.image, spec.engine.version), view, state)
    return any(rev != target for rev in view) or target not in view or state.phase in ROLLOUT_PHASES


def policy_pools(
    cells: Mapping[str, CellView] | Iterable[CellView], state: RolloutState | None = None
) -> tuple[PoolObservation, PoolObservation]:
    """The (prefill, decode) observations the policy decides on.

    ``ready`` sums the cells (a prefill pod counts only in a cell whose decode has a
    Ready pod); ``unschedulable``, ``terminating`` and start-up samples add up. During a
    rollout ``replicas`` is the last step's required totals, not the sum over cells
    (which includes the surge: the policy would take it for the current size and, with
    scale-down frozen, ratchet it up); without a remembered total the largest cell's.
    """
    state = state or RolloutState()
    items = list(cells.values() if isinstance(cells, Mapping) else cells)
    rolling = len(items) > 1 or state.phase in ROLLOUT_PHASES
    out: list[PoolObservation] = []
    for index, role in enumerate((Role.PREFILL, Role.DECODE)):
        pools = [c.prefill if role is Role.PREFILL else c.decode for c in items]
        serving = [
            p.ready if role is Role.DECODE or c.decode.ready >= 1 else 0
            for c, p in zip(items, pools, strict=True)
        ]
        if rolling and state.required is not None:
            replicas = state.required[index]
        elif rolling:
            replicas = max((p.replicas for p in pools), default=0)
        else:
            replicas = sum(p.replicas for p in pools)
        samples = tuple(s for p in pools for s in p.startup_samples)
        out.append(
            PoolObservation(
                replicas=replicas,
                ready=sum(serving),
                unschedulable=sum(p.unschedulable for p in pools),
                startup_samples=samples[-20:],
                terminating=sum(p.terminating for p in pools),
            )
        )
    return out[0], out[1]


def state_from_status(
    status: RolloutStatus | None,
    spec: PDDeploymentSpec,
    cells: Mapping[str, CellView] | Iterable[CellView],
    now: float,
) -> RolloutState:
    """Best-effort state of a restarted operator from ``status.rollout``: phase, versions
    (matched to the cells by version), start time and step count. The progress clock
    restarts at ``now`` (a restart never causes an early rollback); a failed version is
    matched by version string (assumed to use the spec's image when its cell is gone)."""
    if status is None or status.phase is None:
        return RolloutState()
    view = _views(spec, cells, RolloutState())

    def rev_of(version: str | None) -> str | None:
        if version is None:
            return None
        matches = sorted(c.rev for c in view.values() if c.version == version)
        own = naming.revision(spec.engine.image, version)
        if own in matches or not matches:
            return own
        return matches[0]

    back = status.phase in (ROLLING_BACK, ROLLED_BACK)
    started = status.started_at.timestamp() if status.started_at is not None else None
    return RolloutState(
        phase=status.phase,
        target_rev=rev_of(status.to_version),
        target_version=status.to_version,
        from_rev=None if back else rev_of(status.from_version),
        from_version=None if back else status.from_version,
        failed_rev=rev_of(status.from_version) if back else None,
        failed_version=status.from_version if back else None,
        started_at=started,
        progress_at=now,
        steps=status.step or 0,
    )


# --------------------------------------------------------------------- the step


@dataclass(frozen=True)
class _Totals:
    prefill: int
    decode: int  # at least 1 when prefill > 0 (a prefill pod needs a decode pod)
    gp: int
    gd: int
    surge: int
    cap: int
    min_p: int
    min_d: int

    def d_for(self, k: int) -> int:
        """Decode share of k prefill replicas: ceil(D * k / P) (18/20 * 4 -> 4)."""
        if k <= 0 or self.prefill <= 0:
            return 0
        return math.ceil(self.decode * k / self.prefill - 1e-9)

    @property
    def level_gpus(self) -> int:
        """GPUs a step must be able to hold: one prefill, its ceil(D/P) decode share,
        and one decode of rounding slack (the shares of the two cells round up
        separately). Chat 20 / 18, 1 GPU each: 1 + 1 + 1 = 3."""
        if self.prefill <= 0:
            return self.gd
        return self.gp + (math.ceil(self.decode / self.prefill - 1e-9) + 1) * self.gd


def runnable(spec: PDDeploymentSpec, required: tuple[int, int]) -> tuple[int, int]:
    """The required totals as cells can run them: a prefill replica needs a decode
    replica, so 1 / 0 becomes 1 / 1, with fewer prefill replicas if that would not fit
    maxGPUs (2 x 2-GPU prefill / 0 decode on 4 GPUs -> 1 / 1). Others pass unchanged."""
    p, d = max(required[0], 0), max(required[1], 0)
    if p > 0 and d == 0:
        gp, gd = spec.prefill.gpus_per_replica, spec.decode.gpus_per_replica
        p = min(p, max(spec.scaling.max_gpus - gd, 0) // gp)
        d = 1 if p > 0 else 0
    return p, d


def _totals(spec: PDDeploymentSpec, required: tuple[int, int]) -> _Totals:
    """The totals and the GPU cap of the cells: required GPUs + maxSurgeGPUs; when the
    surge cannot hold one level but the budget has room, up to one level (never beyond
    maxGPUs + maxSurgeGPUs). Chat 20 / 18 (38 GPUs), surge 8 -> cap 46. 2 x 1-GPU
    prefill / 2 x 2-GPU decode (6 GPUs), surge 1, maxGPUs 9: a level is 1 + (1 + 1) x 2
    = 5 GPUs, the budget leaves 9 + 1 - 6 = 4 -> cap 10."""
    p, d = runnable(spec, required)
    gp, gd = spec.prefill.gpus_per_replica, spec.decode.gpus_per_replica
    surge = spec.rollout.max_surge_gpus
    need = min(p * gp + d * gd, spec.scaling.max_gpus)
    totals = _Totals(
        p, d, gp, gd, surge, need + surge, spec.prefill.replicas.min, spec.decode.replicas.min
    )
    if surge < totals.level_gpus:
        step = min(totals.level_gpus, spec.scaling.max_gpus + surge - need)
        totals = replace(totals, surge=max(surge, step), cap=need + max(surge, step))
    return totals


@dataclass
class _Sizes:
    """Desired replicas per revision, and the notes the message needs."""

    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)
    reason: str = REASON_SHIFTING
    note: str = ""


def step(
    spec: PDDeploymentSpec,
    cells: Mapping[str, CellView] | Iterable[CellView],
    required: tuple[int, int],
    now: float,
    state: RolloutState | None = None,
) -> RolloutStep:
    """The cells and their replicas for this tick (module docstring for the rules).

    Chat at 20 prefill / 18 decode on v1 (1 GPU each, maxSurgeGPUs 8, cap 46), spec
    now v2. Tick 1: v2 gets decode 4 (level 4: 4 prefill + ceil(18*4/20) = 4 decode =
    8 GPUs reserved), prefill 0 (no v2 decode Ready yet); v1 keeps 20 / 18. Once the
    4 decode are Ready: v2 prefill 4. Once those are Ready: v1 prefill 16; when those
    pods are gone, v1 decode ceil(18*16/20) = 15, freeing room for the next levels ...
    until v1 is empty and deleted: Complete.
    """
    state = state or RolloutState()
    view = _views(spec, cells, state)
    spec_rev = naming.revision(spec.engine.image, spec.engine.version)
    events: list[Event] = []
    totals = _totals(spec, required)
    idle = totals.prefill == 0 and totals.decode == 0
    state, target = _resolve(spec, spec_rev, view, state, now, idle, events)
    new = view.get(target) or _Cell(target, _target_version(spec, state, target), None, now)
    olds = [c for c in view.values() if c.rev != target and not c.empty]
    empty = sorted(c.rev for c in view.values() if c.rev != target and c.empty)
    sizes = _shift(totals, new, olds) if olds else _stable(totals, new)
    return _finish(spec, state, view, new, olds, empty, totals, sizes, now, events)


def _target_version(spec: PDDeploymentSpec, state: RolloutState, target: str) -> str:
    if target == state.target_rev and state.target_version is not None:
        return state.target_version
    return spec.engine.version


def _mark(new: _Cell, olds: Iterable[_Cell]) -> int:
    """Progress: new Ready pods minus old pods left. It only rises as a rollout moves."""
    return new.p_ready + new.d_ready - sum(c.p_pres + c.d_pres for c in olds)


def _resolve(
    spec: PDDeploymentSpec,
    spec_rev: str,
    view: Mapping[str, _Cell],
    state: RolloutState,
    now: float,
    idle: bool,
    events: list[Event],
) -> tuple[RolloutState, str]:
    """Phase transitions before sizing: start, retarget, progress, deadline, rollback.
    The deadline does not run while the required totals are zero (no pod is asked)."""
    if state.failed_rev is not None and state.failed_rev != spec_rev:
        state = replace(state, failed_rev=None, failed_version=None)  # the spec moved on
    target, back = _target(spec_rev, view, state)
    olds = [c for c in view.values() if c.rev != target]
    if back:
        phase = ROLLING_BACK if olds else ROLLED_BACK
        return replace(state, phase=phase), target
    continuing = state.phase in ROLLOUT_PHASES and state.target_rev == target
    if not continuing and (olds or target not in view):
        state = _start(spec, target, view, state, now)
        events.append(("Normal", REASON_STARTED, _start_message(state)))
    elif not continuing:
        if state.phase not in (STABLE, COMPLETE, ROLLED_BACK):
            state = replace(state, phase=STABLE)
        return state, target
    new = view.get(target) or _Cell(target, spec.engine.version, None, now)
    mark = _mark(new, olds)
    best = state.progress_mark
    if best is None or state.progress_at is None or mark > best or idle:
        return replace(state, progress_at=now, progress_mark=max(mark, best or mark)), target
    if now - state.progress_at <= spec.rollout.progress_deadline_seconds:
        return state, target
    dest = state.from_rev if state.from_rev in view and state.from_rev != target else None
    if dest is None and olds:
        dest = _by_serving(olds)[0].rev
    if dest is None:
        return state, target  # nothing to roll back to; the message says so
    dest_cell = view[dest]
    rolled = replace(
        state,
        phase=ROLLING_BACK,
        failed_rev=target,
        failed_version=state.target_version,
        target_rev=dest,
        target_version=dest_cell.version,
        progress_at=now,
        progress_mark=None,
        images=_remember(state.images, dest, dest_cell.image),
    )
    events.append(
        (
            "Warning",
            REASON_DEADLINE,
            f"{state.target_version} made no progress for "
            f"{spec.rollout.progress_deadline}: rolling back to {dest_cell.version}",
        )
    )
    return rolled, dest


def _remember(
    images: tuple[tuple[str, str], ...], rev: str, image: str | None
) -> tuple[tuple[str, str], ...]:
    if image is None or rev in dict(images):
        return images
    return (*images, (rev, image))[-8:]


def _start(
    spec: PDDeploymentSpec, target: str, view: Mapping[str, _Cell], state: RolloutState, now: float
) -> RolloutState:
    """A new rollout (or a new target mid-rollout: the origin is kept)."""
    if state.phase == PROGRESSING and state.from_rev in view:
        origin, origin_version, started = state.from_rev, state.from_version, state.started_at
    elif state.phase == ROLLING_BACK and state.target_rev in view:
        origin, origin_version, started = state.target_rev, state.target_version, now
    else:
        olds = _by_serving(c for c in view.values() if c.rev != target)
        origin = olds[0].rev if olds else None
        origin_version = olds[0].version if olds else None
        started = now
    images = state.images
    for cell in view.values():
        images = _remember(images, cell.rev, cell.image)
    return replace(
        state,
        phase=PROGRESSING,
        target_rev=target,
        target_version=spec.engine.version,
        from_rev=origin,
        from_version=origin_version,
        failed_rev=None,
        failed_version=None,
        started_at=started,
        progress_at=now,
        progress_mark=None,
        images=_remember(images, target, spec.engine.image),
    )


def _start_message(state: RolloutState) -> str:
    if state.from_version is None:
        return f"creating {state.target_version}"
    return f"rolling {state.from_version} -> {state.target_version}"


def _grow(room: int, live: int, want: int, gpus: int) -> tuple[int, int]:
    """``want``, or as far above the ``live`` pods as ``room`` GPUs allow; and the room
    left. Shrinking is free: _grow(3, 10, 8, 1) -> (8, 3); _grow(3, 10, 16, 2) -> (11, 1)."""
    if want <= live:
        return want, room
    add = min(want - live, max(room, 0) // gpus)
    return live + add, room - add * gpus


def _stable(t: _Totals, new: _Cell) -> _Sizes:
    """Only the target cell: the required totals (decode first), prefill once decode has
    a Ready pod; growth waits while pods being deleted still hold the GPUs it needs."""
    room = t.cap - t.gp * new.p_pres - t.gd * new.d_pres
    decode, room = _grow(room, new.d_live, t.decode, t.gd)
    prefill, room = _grow(room, new.p_live, t.prefill if new.d_ready >= 1 else 0, t.gp)
    reason = REASON_STABLE if prefill or not t.prefill else REASON_DECODE_FIRST
    return _Sizes(replicas={new.rev: (prefill, decode)}, reason=reason)


def _allocate_prefill(olds: list[_Cell], need: int) -> dict[str, int]:
    """``need`` prefill replicas over the old cells that have a Ready decode pod: their
    Ready pods first (most ready cell first), then their starting ones, then growth on
    the best-serving cell."""
    eligible = [c for c in _by_serving(olds) if c.d_ready >= 1]
    alloc = {c.rev: 0 for c in olds}
    left = need
    for ready_only in (True, False):
        for c in eligible:
            limit = c.p_ready if ready_only else c.p_rep
            take = min(max(limit - alloc[c.rev], 0), left)
            alloc[c.rev] += take
            left -= take
    if left > 0 and eligible:
        alloc[eligible[0].rev] += left
    return alloc


def _old_decode(
    t: _Totals, new: _Cell, olds: list[_Cell], prefill: dict[str, int], cut: int, settled: bool
) -> dict[str, int]:
    """Each old cell's decode: the share of the prefill pods it still has (desired or
    not yet gone; only the desired ones when ``settled``), at least 1 while it has any,
    less ``cut`` replicas, never below the decode minimum."""
    decode: dict[str, int] = {}
    for c in olds:
        pods = prefill[c.rev] if settled else max(prefill[c.rev], c.p_pres)
        decode[c.rev] = max(t.d_for(pods), 1 if pods > 0 else 0)
    _cut_decode(olds, prefill, decode, cut)
    _decode_floor(t, new, olds, decode)
    return decode


def _cut_decode(
    olds: list[_Cell], prefill: dict[str, int], decode: dict[str, int], cut: int
) -> None:
    """Remove ``cut`` decode replicas from the old cells (most decode first), keeping one
    in every cell that still has prefill pods, in place."""
    for c in sorted(olds, key=lambda c: (-decode[c.rev], c.rev)):
        keep = 1 if max(prefill[c.rev], c.p_pres) > 0 else 0
        take = min(cut, decode[c.rev] - keep)
        if take > 0:
            decode[c.rev] -= take
            cut -= take


def _decode_floor(t: _Totals, new: _Cell, olds: list[_Cell], decode: dict[str, int]) -> None:
    """Keep Ready decode at least at min (at the required total when no prefill is
    required), raising old cells towards their Ready pods, in place."""
    floor = t.decode if t.prefill == 0 else t.min_d
    kept = new.d_ready + sum(min(c.d_ready, decode[c.rev]) for c in olds)
    for c in sorted(olds, key=lambda c: (-c.d_ready, c.rev)):
        if kept >= floor:
            return
        add = min(c.d_ready - decode[c.rev], floor - kept)
        if add > 0:
            decode[c.rev] += add
            kept += add


def _coverage(t: _Totals, new: _Cell, lag: int) -> int:
    """Prefill replicas the new cell's Ready decode covers (``lag`` levels ahead)."""
    if t.prefill <= 0 or new.d_ready < 1:
        return 0
    return t.prefill * new.d_ready // t.decode + lag


@dataclass(frozen=True)
class _Old:
    """The old cells' sizes for one choice of ``need`` and decode ``cut``."""

    prefill: dict[str, int]
    decode: dict[str, int]
    gpus: int  # GPUs they hold after the step (pods that stay or are still going)
    kept: int  # GPUs of the replicas they keep (once removed pods are gone)


def _old_sizes(
    t: _Totals, new: _Cell, olds: list[_Cell], k_ready: int, need: int, cut: int, lag: int
) -> _Old:
    """Old cells serve ``need`` prefill replicas (Ready ones first) with the decode
    share of the prefill pods they still have, less ``cut`` decode replicas, never
    below the decode minimum; growth only into GPUs that are free."""
    room = (
        t.cap
        - _level_cost(t, new, k_ready, lag)
        - sum(t.gp * c.p_pres + t.gd * c.d_pres for c in olds)
    )
    prefill = _allocate_prefill(olds, need)
    for c in _by_serving(olds):
        prefill[c.rev], room = _grow(room, c.p_live, prefill[c.rev], t.gp)
    decode = _old_decode(t, new, olds, prefill, cut, settled=False)
    for c in _by_serving(olds):
        decode[c.rev], room = _grow(room, c.d_live, decode[c.rev], t.gd)
    gpus = sum(
        t.gp * (max(prefill[c.rev], c.p_live) + c.p_term)
        + t.gd * (max(decode[c.rev], c.d_live) + c.d_term)
        for c in olds
    )
    settled = _old_decode(t, new, olds, prefill, cut, settled=True)
    kept = sum(t.gp * prefill[c.rev] + t.gd * min(settled[c.rev], decode[c.rev]) for c in olds)
    return _Old(prefill, decode, gpus, kept)


def _next_step(t: _Totals, new: _Cell, lag: int) -> int:
    """GPUs the new cell's next step needs beyond the pods it has: one decode replica
    first (a version proves itself on decode), then the next level."""
    present = t.gp * new.p_pres + t.gd * new.d_pres
    if t.prefill == 0 or new.d_live == 0:
        return t.gd if new.d_live < max(t.decode, 1) else 0
    k = min(new.p_live, t.prefill)
    if k >= t.prefill:
        return (
            max(_level_cost(t, new, t.prefill, lag) + t.gd * (t.decode - new.d_live), present)
            - present
        )
    return max(_level_cost(t, new, k + 1, lag) - present, 0)


def _shift(t: _Totals, new: _Cell, olds: list[_Cell]) -> _Sizes:
    """The rolling sizes: old cells cover what the new cell's Ready pods do not.

    When the new cell's next step does not fit (surge and budget too small for it) and
    nothing of the new cell is pending, the old cells give up capacity first: prefill
    levels while prefill stays at its min (``give``), then decode replicas (``cut``,
    and the new cell may then run one prefill level ahead of its decode, ``lag``).
    Pending pods of the new cell hold their GPUs, so the old cells cannot grow back
    into them: no flapping."""
    # the new cell's serving prefill: Ready prefill next to a Ready decode pod
    k_ready = min(new.p_ready, t.prefill) if new.d_ready >= 1 else 0
    floor = max(t.min_p - k_ready, 0)
    need = max(t.prefill - k_ready, floor)
    give = cut = lag = 0
    old = _old_sizes(t, new, olds, k_ready, need, 0, 0)
    pending = new.p_live > new.p_ready or new.d_live > new.d_ready
    present = t.gp * new.p_pres + t.gd * new.d_pres
    stuck = False
    while not pending and t.cap - old.kept - present < _next_step(t, new, lag) > 0:
        if need - give > floor:
            give += 1
        elif cut < sum(old.decode.values()):
            cut, lag = cut + 1, 1
        else:
            stuck = True
            break
        shrunk = _old_sizes(t, new, olds, k_ready, need - give, cut, lag)
        if shrunk.kept >= old.kept and need - give <= floor and cut >= sum(old.decode.values()):
            stuck = True
            break
        old = shrunk
    new_p, new_d = _new_level(t, new, k_ready, old.gpus, lag)
    sizes = _Sizes(replicas={c.rev: (old.prefill[c.rev], old.decode[c.rev]) for c in olds})
    sizes.replicas[new.rev] = (new_p, new_d)
    if stuck:
        sizes.reason = REASON_STEP_DOES_NOT_FIT
        sizes.note = (
            f"the next step needs {_next_step(t, new, lag)} GPUs, which maxGPUs + "
            "maxSurgeGPUs cannot give without going below the replica minimums: "
            "raise maxSurgeGPUs or maxGPUs"
        )
    elif new.d_ready == 0 and t.prefill > 0 and not (give or cut):
        sizes.reason = REASON_DECODE_FIRST
    elif give or cut:
        sizes.reason = REASON_SURGE_BELOW_STEP
        sizes.note = (
            f"the next step ({_next_step(t, new, lag)} GPUs) does not fit maxGPUs + "
            "maxSurgeGPUs: old cells give up capacity first"
        )
    elif k_ready >= t.prefill and new.d_ready >= t.decode:
        sizes.reason = REASON_DRAINING
    return sizes


def _lagged(t: _Totals, k: int, lag: int) -> int:
    """Decode of level k run ``lag`` levels behind; a level with prefill has one."""
    return max(t.d_for(k - lag), 1 if k >= 1 else 0)


def _level_cost(t: _Totals, new: _Cell, k: int, lag: int = 0) -> int:
    """GPUs the new cell holds at level k (its decode ``lag`` levels behind), the pods
    it already has included."""
    prefill = max(k, new.p_live) + new.p_term
    decode = max(_lagged(t, k, lag), new.d_live) + new.d_term
    return t.gp * prefill + t.gd * decode


def _new_level(t: _Totals, new: _Cell, k_ready: int, used_old: int, lag: int) -> tuple[int, int]:
    """The new cell's (prefill, decode): the highest level whose GPUs fit the cap (its
    decode first), prefill as far as its Ready decode covers (never fewer than its
    Ready prefill pods), spare GPUs to the decode of the next level."""
    level = k_ready
    for k in range(t.prefill, k_ready, -1):
        if used_old + _level_cost(t, new, k, lag) <= t.cap:
            level = k
            break
    keep = min(new.p_ready, t.prefill) if new.d_ready >= 1 else 0
    prefill = min(t.prefill, max(min(level, _coverage(t, new, lag)), keep))
    floor = max(_lagged(t, level, lag), min(new.d_ready, t.decode))  # Ready pods stay
    base = max(floor, new.d_live)  # pods already there are paid for in the cost
    goal = _lagged(t, level + 1, lag) if level < t.prefill else t.decode
    spare = (t.cap - used_old - _level_cost(t, new, level, lag)) // t.gd
    decode = max(floor, min(goal, base + max(spare, 0)))
    # whatever the level says, growth only into GPUs that are free (decode first)
    room = t.cap - used_old - t.gp * new.p_pres - t.gd * new.d_pres
    decode, room = _grow(room, new.d_live, decode, t.gd)
    prefill, room = _grow(room, new.p_live, prefill, t.gp)
    return prefill, decode


def _finish(
    spec: PDDeploymentSpec,
    state: RolloutState,
    view: Mapping[str, _Cell],
    new: _Cell,
    olds: list[_Cell],
    empty: list[str],
    totals: _Totals,
    sizes: _Sizes,
    now: float,
    events: list[Event],
) -> RolloutStep:
    """Cells to keep and delete, completion, the message, the state to keep. Old cells
    without pods are kept at 0 / 0 (something to roll back to) until the new cell
    serves alone, then deleted."""
    # the new cell serves: a Ready decode pod, and a Ready prefill pod when prefill is
    # required (a rollout at zero replicas has proven nothing and stays in progress)
    serving = new.d_ready >= 1 and (new.p_ready >= 1 or totals.prefill == 0)
    done = not olds and serving
    plans: list[CellPlan] = []
    delete: list[str] = list(empty) if done else []
    zeros = dict.fromkeys(empty, (0, 0))
    kept = [view[rev] for rev in empty if not done]
    for c in [new, *sorted([*olds, *kept], key=lambda c: (c.created, c.rev))]:
        p, d = sizes.replicas.get(c.rev) or zeros[c.rev]
        image = c.image if c is not new else (c.image or dict(state.images).get(c.rev))
        if c is new and image is None and c.rev == naming.revision(spec.engine.image, c.version):
            image = spec.engine.image
        plans.append(CellPlan(c.rev, c.version, image, p, d))
    phase, reason = state.phase, sizes.reason
    if done and phase == PROGRESSING:
        phase, reason = COMPLETE, REASON_COMPLETE
        events.append(("Normal", REASON_COMPLETE, f"{new.version} serves alone"))
    elif done and phase == ROLLING_BACK:
        phase, reason = ROLLED_BACK, REASON_ROLLED_BACK
        events.append(("Normal", REASON_ROLLED_BACK, f"back on {new.version}"))
    elif phase == ROLLING_BACK and reason != REASON_STEP_DOES_NOT_FIT:
        reason = REASON_ROLLING_BACK
    elif phase not in ROLLOUT_PHASES:
        reason = REASON_STABLE
    elif state.progress_at is not None and _stalled(spec, state, now) and not olds:
        reason = REASON_NO_ROLLBACK
    changed = any(
        view.get(cp.rev) is None
        or (view[cp.rev].p_rep, view[cp.rev].d_rep) != (cp.prefill, cp.decode)
        for cp in plans
    )
    steps = state.steps + int(changed and state.phase in ROLLOUT_PHASES)
    new_state = replace(state, phase=phase, steps=steps, required=(totals.prefill, totals.decode))
    message = _message(new, olds, totals, phase, sizes.note, reason)
    active = _active_version(new, olds, phase)
    return RolloutStep(
        phase=phase,
        reason=reason,
        message=message,
        cells=tuple(plans),
        delete=tuple(delete),
        active_version=active,
        state=new_state,
        events=tuple(events),
    )


def _stalled(spec: PDDeploymentSpec, state: RolloutState, now: float) -> bool:
    return (
        state.progress_at is not None
        and now - state.progress_at > spec.rollout.progress_deadline_seconds
    )


def _active_version(new: _Cell, olds: list[_Cell], phase: str) -> str:
    """The version serving most: the new one once it has the most Ready prefill."""
    if not olds or phase not in ROLLOUT_PHASES:
        return new.version
    best = _by_serving(olds)[0]
    return new.version if new.p_ready > best.p_ready else best.version


def _message(new: _Cell, olds: list[_Cell], t: _Totals, phase: str, note: str, reason: str) -> str:
    """``Progressing: v2 prefill 4/20 ready, decode 6/18 ready; v1 prefill 16, decode 18``
    (old cells show the pods they still have)."""
    ready = f"prefill {new.p_ready}/{t.prefill} ready, decode {new.d_ready}/{t.decode} ready"
    parts = [f"{new.version} {ready}" if olds else f"{new.version} serving: {ready}"]
    parts += [f"{c.version} prefill {c.p_pres}, decode {c.d_pres}" for c in olds]
    if reason == REASON_NO_ROLLBACK:
        parts.append("no progress within progressDeadline and no previous version to roll back to")
    if reason == REASON_DECODE_FIRST:
        parts.append("waiting for a Ready decode pod before starting prefill")
    if note:
        parts.append(note)
    return f"{phase}: " + "; ".join(parts)
