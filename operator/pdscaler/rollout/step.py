"""One rollout step: the cells to keep (with their replicas) and to delete this tick.

Owns: ``RolloutStep`` (the rollout's answer for a tick), ``CellPlan`` (one cell to
keep, turned into the manifests' ``CellTarget``) and ``step()``, which puts the phase
transitions (``phases``) and the sizing (``levels``) together: the cells to keep and
delete, completion, the step count, the message, the Events and the state to keep.
Must not: read clocks, talk to Kubernetes, size the totals (the policy does) or render
manifests (``manifests`` does, from ``RolloutStep.targets()``).

Old cells without pods stay at 0 / 0 (something to roll back to) until the new cell
serves alone; then they are deleted (Complete, or RolledBack after a rollback).

Worked example: chat at 20 / 18 on v1, the spec now v2, first tick: cells v2 0 / 4
and v1 20 / 18, nothing deleted, Progressing with reason WaitingForNewDecode, one
Event (Normal, RolloutStarted, "rolling v1 -> v2"), active version v1, step 1, message
"Progressing: v2 prefill 0/20 ready, decode 0/18 ready; v1 prefill 20, decode 18;
waiting for a Ready decode pod before starting prefill".
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdscaler import manifests
from pdscaler.manifests import CellTarget
from pdscaler.rollout import levels, phases
from pdscaler.rollout.cells import Cell, Cells, views
from pdscaler.rollout.phases import Event, RolloutState
from pdscaler.spec import PDDeploymentSpec
from pdscaler.status import ProgressFacts
from pdscaler.types import PerRole, RolloutPhase, RolloutReason


@dataclass(frozen=True)
class CellPlan:
    """One cell to keep, with its desired replicas per role (0 keeps the Deployment,
    no pods)."""

    rev: str
    version: str
    image: str | None
    replicas: PerRole[int]
    config: str = ""

    def target(self) -> CellTarget:
        """The manifests' CellTarget; its revision must be this cell's."""
        if self.image is None:
            raise ValueError(f"cell {self.rev}: engine image unknown, cannot re-render it")
        cell = CellTarget(
            self.image,
            self.version,
            self.replicas.prefill,
            self.replicas.decode,
            config=self.config,
        )
        if cell.rev != self.rev:
            raise ValueError(f"cell {self.rev}: image {self.image!r} gives revision {cell.rev}")
        return cell


@dataclass(frozen=True)
class RolloutStep:
    """The rollout's answer for this tick."""

    phase: RolloutPhase
    reason: RolloutReason
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


def step(
    spec: PDDeploymentSpec,
    cells: Cells,
    required: tuple[int, int],
    now: float,
    state: RolloutState | None = None,
) -> RolloutStep:
    """The cells and their replicas for this tick, at the ``required`` (prefill,
    decode) totals (the package docstring has the rules).

    Chat at 20 prefill / 18 decode on v1 (1 GPU each, maxSurgeGPUs 8, cap 46), spec
    now v2. Tick 1: v2 gets decode 4 (level 4: 4 prefill + ceil(18*4/20) = 4 decode =
    8 GPUs reserved), prefill 0 (no v2 decode Ready yet); v1 keeps 20 / 18. Once the
    4 decode are Ready: v2 prefill 4. Once those are Ready: v1 prefill 16; when those
    pods are gone, v1 decode ceil(18*16/20) = 15, freeing room for the next levels ...
    until v1 is empty and deleted: Complete.
    """
    state = state or RolloutState()
    view = views(spec, cells, state.images)
    events: list[Event] = []
    totals = levels.totals(spec, PerRole(prefill=required[0], decode=required[1]))
    idle = all(n == 0 for _, n in totals.replicas.items())
    state, rev = phases.resolve(spec, view, state, now, idle, events)
    new = view.get(rev) or Cell(rev, phases.target_version(spec, state, rev), None, now)
    olds = [c for c in view.values() if c.rev != rev and not c.empty]
    empty = sorted(c.rev for c in view.values() if c.rev != rev and c.empty)
    sizes = levels.shift(totals, new, olds) if olds else levels.stable(totals, new)
    return _finish(spec, state, view, new, olds, empty, totals, sizes, now, events)


def _finish(
    spec: PDDeploymentSpec,
    state: RolloutState,
    view: dict[str, Cell],
    new: Cell,
    olds: list[Cell],
    empty: list[str],
    totals: levels.Totals,
    sizes: levels.Sizes,
    now: float,
    events: list[Event],
) -> RolloutStep:
    """Cells to keep and delete, completion, the message, the state to keep. Old cells
    without pods are kept at 0 / 0 (something to roll back to) until the new cell
    serves alone, then deleted."""
    # the new cell serves: a Ready decode pod, and a Ready prefill pod when prefill is
    # required (a rollout at zero replicas has proven nothing and stays in progress)
    ready = new.pods.map(lambda pods: pods.ready)
    serving = ready.decode >= 1 and (ready.prefill >= 1 or totals.replicas.prefill == 0)
    done = not olds and serving
    plans: list[CellPlan] = []
    delete: list[str] = list(empty) if done else []
    zeros = dict.fromkeys(empty, PerRole(prefill=0, decode=0))
    kept = [view[rev] for rev in empty if not done]
    for c in [new, *sorted([*olds, *kept], key=lambda c: (c.created, c.rev))]:
        replicas = sizes.replicas.get(c.rev) or zeros[c.rev]
        image = c.image if c is not new else (c.image or dict(state.images).get(c.rev))
        config = c.config
        if c is new and c.rev == phases.spec_revision(spec):
            image, config = image or spec.engine.image, manifests.spec_config(spec)
        plans.append(CellPlan(c.rev, c.version, image, replicas, config))
    phase, reason = state.phase, sizes.reason
    if done and phase == RolloutPhase.PROGRESSING:
        phase, reason = RolloutPhase.COMPLETE, RolloutReason.COMPLETE
        events.append(("Normal", RolloutReason.COMPLETE, f"{new.version} serves alone"))
    elif done and phase == RolloutPhase.ROLLING_BACK:
        phase, reason = RolloutPhase.ROLLED_BACK, RolloutReason.ROLLED_BACK
        events.append(("Normal", RolloutReason.ROLLED_BACK, f"back on {new.version}"))
    elif phase == RolloutPhase.ROLLING_BACK and reason != RolloutReason.STEP_DOES_NOT_FIT:
        reason = RolloutReason.ROLLING_BACK
    elif not phase.moving:
        reason = RolloutReason.STABLE
    elif state.progress_at is not None and phases.stalled(spec, state, now) and not olds:
        reason = RolloutReason.NO_ROLLBACK
    changed = any(view.get(cp.rev) is None or view[cp.rev].replicas != cp.replicas for cp in plans)
    steps = state.steps + int(changed and state.phase.moving)
    checked = now if state.phase.moving else state.checked_at
    new_state = replace(
        state, phase=phase, steps=steps, required=totals.replicas, checked_at=checked
    )
    return RolloutStep(
        phase=phase,
        reason=reason,
        message=phases.message(new, olds, totals.replicas, phase, sizes.note, reason),
        cells=tuple(plans),
        delete=tuple(delete),
        active_version=phases.active_version(new, olds, phase),
        state=new_state,
        events=tuple(events),
    )
