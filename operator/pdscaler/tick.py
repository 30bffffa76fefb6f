"""The middle of one reconcile tick as ONE pure function: ``compute(TickFacts) -> TickEffects``.

Owns: everything a tick decides once the edges have read the cluster and Prometheus —
the policy memory and rollout state to resume from, the per-pool observations, the
policy's decision, the rollout step, the desired objects, the minimal plan, the typed
status, the Events to publish and what to remember for the next tick. The shape is
NVIDIA Dynamo's planner core (facts in, effects out): ``reconcile.reconcile_once`` reads,
calls ``compute``, and applies; the offline simulator and the unit tests call
``compute`` directly with the same facts, so a rollout or a restart replays exactly as
the operator would run it.

Must not: read the clock (``facts.now``), talk to Kubernetes or Prometheus, or mutate
its inputs. Recommend mode is decided here too: ``effects.writes`` is empty and the
policy's memory keeps the last real scale time (nothing was scaled).

Worked example (tests/unit/test_tick.py): a PDDeployment at R = 1 req/s, L_p = 2000,
L_d = 500 with prefill 3000 tok/s, decode 800 tok/s, u = 0.7 and no objects yet: the
ratio model wants N_P = 0.95 -> 1 and N_D = 0.89 -> 1, so the effects are seven creates
(the cell's decode, prefill and router Deployments, the router at 0 replicas until both
pools have a Ready pod; the routers' ServiceAccount, Role and RoleBinding; the front
Service), a status with ``prefill.desiredReplicas = 1`` and one ``Created...`` Event per create.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pdscaler import manifests, naming, observe, roles, rollout, router, status
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta, stamp
from pdscaler.plan import Action, Observed, Plan, Verb, owned_by, plan
from pdscaler.policy import decide
from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.types import (
    ConditionReason,
    Decision,
    EventReason,
    FlipOptions,
    MetricsSnapshot,
    PolicyMemory,
    PoolObservation,
    TickInput,
)

Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    """One Kubernetes Event to publish; ``once`` (when set) is a key the shell publishes
    at most once per process (a Warning about an object we do not own); ``action`` (when
    set) is the write the Event tells of: the shell drops the Event if that write fails."""

    type: str
    reason: str
    message: str
    once: tuple[str, ...] | None = None
    action: Action | None = None

    def line(self) -> str:
        """``Normal CreatedDeployment: Deployment chat-abcde-decode``."""
        return f"{self.type} {self.reason}: {self.message}"


@dataclass(frozen=True)
class TickFacts:
    """Everything one tick's decisions depend on, as read by the edges.

    ``raw_status`` is the PDDeployment's status as stored (to write only on change);
    ``memory`` / ``rollout`` are what this process kept from its previous tick (None
    after a restart: rebuilt from the status and the cluster); ``unobserved``: seconds
    since this PDDeployment's first failed tick when its ticks failed since the last
    good one (the cluster could not be read then: not counted against the rollout's
    progress deadline), else 0."""

    now: float
    owner: Meta
    generation: int
    spec: PDDeploymentSpec
    observed: Observed
    metrics: MetricsSnapshot | None
    metrics_error: str | None = None
    metrics_reason: ConditionReason | None = None  # MetricsAvailable's, when metrics is None
    raw_status: Mapping[str, Any] | None = None
    memory: PolicyMemory | None = None
    rollout: rollout.RolloutState | None = None
    unobserved: float = 0.0
    unknown_fields: tuple[str, ...] = ()  # spec fields this version ignores (newer CRD)
    #: ``pdscaler.io/paused: "true"`` on the PDDeployment: computed as in Recommend mode
    #: (nothing written but the status and Events), and said in the Paused condition
    paused: bool = False


@dataclass(frozen=True)
class TickEffects:
    """What the shell must do, and what it keeps: ``writes`` (empty in Recommend mode)
    in order, ``events`` in order, ``status`` to patch when ``status_changed``, and the
    ``memory`` / ``rollout`` to hand to the next tick (``rollout`` None: keep none)."""

    decision: Decision
    plan: Plan
    step: rollout.RolloutStep
    writes: tuple[Action, ...]
    status: PDDeploymentStatus
    status_changed: bool
    events: tuple[Event, ...]
    memory: PolicyMemory
    rollout: rollout.RolloutState | None
    prefill: PoolObservation
    decode: PoolObservation

    @property
    def applied(self) -> bool:
        return bool(self.writes)


def wanted_objects(owner: Meta, spec: PDDeploymentSpec) -> list[tuple[str, str]]:
    """(kind, name) of the objects the spec's own cell would render: what the edge must
    read beside everything the PDDeployment owns (a squatter holding one of these names
    is refused with a Warning, never adopted)."""
    target = manifests.spec_cell(spec)
    return [
        (str(o["kind"]), str(o["metadata"]["name"]))
        for o in manifests.desired_objects(owner, spec, [target])
    ]


def compute(facts: TickFacts) -> TickEffects:
    """One tick's decisions from its facts (module docstring). Purely computational."""
    owner, now = facts.owner, facts.now
    spec = manifests.adopt(facts.spec, owner, facts.observed.deployments)
    previous = status.parse_status(dict(facts.raw_status) if facts.raw_status else None)
    cells = observe.cells(facts.observed, owner.uid)
    memory = facts.memory or status.memory_from_status(previous.memory if previous else None, now)
    roll = rollout.discount_unobserved(
        facts.rollout
        or rollout.state_from_status(
            previous.rollout if previous else None,
            spec,
            cells,
            now,
            _marks(facts.observed, owner),
        ),
        facts.unobserved,
        now,
    )
    prefill_obs, decode_obs = rollout.policy_pools(cells, roll)
    decision = decide(
        TickInput(
            now=now,
            spec=spec,
            metrics=facts.metrics,
            prefill=prefill_obs,
            decode=decode_obs,
            memory=memory,
            rollout_in_progress=rollout.in_progress(spec, cells, roll),
            flips=flip_options(spec),
        )
    )
    step = rollout.step(spec, cells, (decision.prefill, decision.decode), now, roll)
    running = facts.metrics.decode.running_by_pod if facts.metrics else {}
    targets, relabels = _with_flips(
        spec, _with_routers(spec, step, cells, facts.observed), cells, decision, running
    )
    desired = _freeze_other_versions(
        manifests.desired_objects(owner, spec, targets),
        facts.observed,
        spec,
        owner.uid,
    )
    desired = manifests.keep_rendered(desired, facts.observed.deployments, owner.uid)
    desired = _with_marks(desired, owner, step.state)
    desired, reverted, stuck = manifests.revert_drift(desired, list(facts.observed.deployments))
    the_plan = plan(owner.uid, desired, facts.observed, running)
    if relabels:  # a flip first: the Deployments' new replicas count the flipped pods
        the_plan = dataclasses.replace(the_plan, actions=(*relabels, *the_plan.actions))

    auto = spec.scaling.mode == "Auto" and not facts.paused
    # Recommend mode scaled nothing: the policy must not believe capacity is coming.
    kept_memory = (
        decision.memory
        if auto
        else dataclasses.replace(decision.memory, last_scale_time=memory.last_scale_time)
    )
    decision = dataclasses.replace(decision, memory=kept_memory)
    new_status = status.build_status(
        status.StatusInput(
            now=now,
            generation=facts.generation,
            spec=spec,
            decision=decision,
            metrics=facts.metrics,
            prefill=prefill_obs,
            decode=decode_obs,
            active_version=step.active_version,
            target_version=spec.engine.version,
            progress=step.progress,
            previous=previous,
            memory_window_seconds=spec.scaling.scale_down_stabilization_seconds,
            metrics_error=facts.metrics_error,
            metrics_reason=facts.metrics_reason,
            unknown_fields=facts.unknown_fields,
            paused=facts.paused,
        )
    )
    if not auto:  # nothing is applied in Recommend mode: the drift is only reported
        reverted, stuck = [], [*reverted, *stuck]
    events = [*_foreign_events(owner.uid, the_plan), *_drift_events(owner.uid, reverted, stuck)]
    if auto:
        events += _action_events(the_plan)
    events += decision_events(new_status, previous, auto)
    events += [Event(type_, reason, message) for type_, reason, message in step.events]
    raw = dict(facts.raw_status) if facts.raw_status is not None else None
    return TickEffects(
        decision=decision,
        plan=the_plan,
        step=step,
        writes=the_plan.writes if auto else (),
        status=new_status,
        status_changed=status.status_changed(new_status, raw),
        events=tuple(events),
        memory=kept_memory,
        rollout=step.state if auto else None,
        prefill=prefill_obs,
        decode=decode_obs,
    )


def _with_routers(
    spec: PDDeploymentSpec,
    step: rollout.RolloutStep,
    cells: Mapping[str, observe.CellObservation],
    observed: Observed,
) -> list[CellTarget]:
    """The rollout's cells with their routers (``router.allot``: one total split over the
    serving cells in proportion to their Ready prefill); a retiring cell keeps its
    prefill pods until its router pods are gone (``router.hold_prefill``). With
    ``scaleToZero`` the front Service selects the holding proxy, so a cell's last routers
    need not stay for it (``router.keep_front`` would keep them, and with them the
    prefill, for ever at zero)."""
    routers_ready = observe.ready_routers(observed.pods)
    present = observe.present_routers(observed.pods)
    targets = list(step.targets())
    have: list[tuple[int, int, int]] = []
    for target in targets:
        cell = cells.get(target.rev)
        have.append(
            (cell.prefill.replicas, cell.prefill.ready, cell.decode.ready) if cell else (0, 0, 0)
        )
    counts = router.allot(
        spec, [((t.prefill, t.decode), (h[1], h[2])) for t, h in zip(targets, have, strict=True)]
    )
    out: list[CellTarget] = []
    for target, (replicas, _, _), wanted in zip(targets, have, counts, strict=True):
        here = routers_ready.get(target.rev, 0)
        count = router.keep_front(wanted, here, sum(routers_ready.values()) - here)
        if spec.scale_to_zero is not None:  # the holder fronts the cell: routers may all go
            count = wanted
        prefill = router.hold_prefill(target.prefill, replicas, present.get(target.rev, 0))
        out.append(dataclasses.replace(target, prefill=prefill, router=count))
    return out


def flip_options(spec: PDDeploymentSpec) -> FlipOptions | None:
    """What the policy may flip with (``scaling.roleFlips``); None when it is off."""
    flips = spec.scaling.role_flips
    if not flips.enabled:
        return None
    return FlipOptions(
        reconfigure_seconds=flips.reconfigure_seconds, window_seconds=flips.window_seconds
    )


def _with_flips(
    spec: PDDeploymentSpec,
    targets: list[CellTarget],
    cells: Mapping[str, observe.CellObservation],
    decision: Decision,
    running: Mapping[str, float],
) -> tuple[list[CellTarget], tuple[Action, ...]]:
    """The cells' serving sizes as their Deployments' replicas, and the pod relabels of
    this tick (``roles.carry_out``): the decision's flip happens in the spec's cell (the
    policy flips only outside a rollout, when it is the one serving)."""
    spec_rev = manifests.spec_revision(spec)
    out: list[CellTarget] = []
    relabels: list[Action] = []
    for target in targets:
        flip = decision.flip if target.rev == spec_rev else None
        placed, actions = roles.carry_out(target, cells.get(target.rev), flip, running)
        out.append(placed)
        relabels.extend(actions)
    return out, tuple(relabels)


def _front(objs: Iterable[Obj], owner: Meta) -> Obj | None:
    """The front Service ``<name>`` among ``objs`` (controlled by ``owner``)."""
    for obj in objs:
        meta = obj.get("metadata") or {}
        named = obj.get("kind") == "Service" and meta.get("name") == owner.name
        if named and owned_by(obj, owner.uid):
            return obj
    return None


def _marks(observed: Observed, owner: Meta) -> dict[str, str]:
    """The rollout marks (``rollout.to_marks``) on the observed front Service."""
    front = _front(observed.services, owner)
    annotations = ((front or {}).get("metadata") or {}).get("annotations") or {}
    keys = (naming.ANNOTATION_FAILED_REVISION, naming.ANNOTATION_REQUIRED)
    return {k: str(v) for k, v in annotations.items() if k in keys}


def _with_marks(desired: list[Obj], owner: Meta, state: rollout.RolloutState) -> list[Obj]:
    """The desired front Service carrying this tick's rollout marks (none when settled:
    a settled PDDeployment's Service is unchanged), re-stamped."""
    marks = rollout.to_marks(state)
    front = _front(desired, owner)
    if front is None or not marks:
        return desired
    marked = copy.deepcopy(front)
    marked["metadata"].setdefault("annotations", {}).update(marks)
    stamp(marked)
    return [marked if obj is front else obj for obj in desired]


def _freeze_other_versions(
    desired: list[Obj], observed: Observed, spec: PDDeploymentSpec, uid: str
) -> list[Obj]:
    """Pool Deployments of cells other than the spec's version keep the template they
    were rendered with (``manifests.frozen_pool``); only their replicas follow the plan."""
    spec_rev = manifests.spec_revision(spec)
    have = {str(d["metadata"]["name"]): d for d in observed.deployments if owned_by(d, uid)}
    out: list[Obj] = []
    for obj in desired:
        labels = obj["metadata"].get("labels") or {}
        name = str(obj["metadata"]["name"])
        old = have.get(name)
        if obj["kind"] == "Deployment" and labels.get(naming.LABEL_REVISION) != spec_rev and old:
            out.append(manifests.frozen_pool(old, int(obj["spec"]["replicas"])))
        else:
            out.append(obj)
    return out


# -------------------------------------------------------------------------- events

_VERB_REASON = {
    Verb.CREATE: EventReason.CREATED,
    Verb.UPDATE: EventReason.UPDATED,
    Verb.DELETE: EventReason.DELETED,
}


def _action_events(the_plan: Plan) -> list[Event]:
    """One Event per create/update/delete, one per batch of deletion-cost annotations.
    Replica changes are told by the decision's Event (its sentence has the numbers)."""
    out: list[Event] = []
    costs = [a for a in the_plan.writes if a.verb is Verb.ANNOTATE_POD]
    flips = [a for a in the_plan.writes if a.verb is Verb.RELABEL_POD]
    if flips:
        pods = ", ".join(f"{a.name} {a.message}" for a in flips)
        out.append(Event("Normal", EventReason.FLIPPED_ROLE, f"pod role changed: {pods}"))
    for action in the_plan.writes:
        reason = _VERB_REASON.get(action.verb)
        if reason is not None:
            out.append(Event("Normal", reason.of(action.kind), _describe(action), action=action))
    if costs:
        pods = ", ".join(f"{a.name}={a.message.split('=')[-1]}" for a in costs)
        out.append(
            Event("Normal", EventReason.SET_DELETION_COST, f"decode pod-deletion-cost: {pods}")
        )
    return out


def _describe(action: Action) -> str:
    """``Deployment chat-v1-abcde-decode (cell retired)``."""
    return f"{action.kind} {action.name}" + (f" ({action.message})" if action.message else "")


def _foreign_events(uid: str, the_plan: Plan) -> list[Event]:
    """A Warning per object we want but do not own (the shell publishes each once)."""
    return [
        Event("Warning", EventReason.NOT_OWNED, a.describe(), once=("foreign", uid, a.kind, a.name))
        for a in the_plan.actions
        if a.verb is Verb.WARN
    ]


def _drift_events(uid: str, reverted: list[str], stuck: list[str]) -> list[Event]:
    """A Warning per pool Deployment whose engine container was changed outside the
    operator: reverted this tick, or (an old cell's engine configuration) not revertible."""
    out = [
        Event(
            "Warning",
            EventReason.DRIFT_REVERTED,
            f"Deployment {name}: engine container changed "
            "outside pdscaler (image, args, env, envFrom, resources); reverted to what was "
            "rendered",
        )
        for name in reverted
    ]
    out += [
        Event(
            "Warning",
            EventReason.DRIFT_DETECTED,
            f"Deployment {name}: engine container changed "
            "outside pdscaler and is not restored (an old cell's engine configuration, or "
            "Recommend mode)",
            once=("drift", uid, name),
        )
        for name in stuck
    ]
    return out


def decision_events(
    new: PDDeploymentStatus, previous: PDDeploymentStatus | None, auto: bool
) -> list[Event]:
    """An Event when a new decision is published (not for a steady Hold)."""
    ld = new.last_decision
    old = previous.last_decision if previous else None
    if ld is None or ld == old or (ld.action or "").startswith("Hold"):
        return []
    reason: str = ld.action or EventReason.DECISION
    message = ld.message or reason
    if not auto:
        reason = EventReason.RECOMMEND.of(reason)
        message = f"(Recommend mode, not applied) {message}"
    return [Event("Normal", reason, message)]
