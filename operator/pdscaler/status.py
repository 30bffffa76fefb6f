"""The status builder: one tick's facts -> the typed ``PDDeploymentStatus`` (KEDA-style
conditions, typed by ``ConditionType`` with a ``ConditionReason``), and the policy
memory as persisted in status.

Owns: the conditions Ready, MetricsAvailable, Progressing, CapacityLimited,
DeadlineInfeasible, SLOUnreachable, WritesFailing (set True by the shell, through
``with_write_failures``, when a write the tick planned was refused), FieldsIgnored,
kstatus's Reconciling and Stalled, and Paused; the status of a stored spec this
operator refuses (``refused_status``: Stalled, ``InvalidSpec``)
(``lastTransitionTime`` kept while a condition's status does not change, as
Kubernetes conventions ask), the printer-column strings, when
``lastDecision`` is replaced, and the (de)serialisation of ``PolicyMemory``.

Zero writes when converged: the status is built so that a steady cluster yields the
SAME status every tick. Noisy numbers (measured rates, latencies) only enter it with
a decision that changes something: ``lastDecision`` is replaced when the decision
changes replicas or its machine action, and the TTFT/TPOT columns show that
decision's inputs. The persisted memory is compact: recommendation change points
inside the stabilization window and the refined capacities to 3 significant digits.

Purely computational: no Kubernetes client, no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pdscaler.naming import ANNOTATION_PAUSED
from pdscaler.policy import seasonal
from pdscaler.presets import rate_source
from pdscaler.spec import (
    Condition,
    ConditionStatus,
    DecisionInputs,
    DecisionModel,
    LastDecision,
    PDDeploymentSpec,
    PDDeploymentStatus,
    PoolStatus,
    RolloutStatus,
    strip_unknown,
)
from pdscaler.types import (
    ConditionReason,
    ConditionType,
    Decision,
    MetricsSnapshot,
    PolicyMemory,
    PoolObservation,
    RateSource,
    RolloutPhase,
)

#: The condition types, in the order they are written.
CONDITION_TYPES = tuple(ConditionType)


def rfc3339(t: float) -> datetime:
    """Epoch seconds -> an aware UTC datetime, whole seconds (what metav1.Time keeps)."""
    return datetime.fromtimestamp(math.floor(t), tz=UTC)


@dataclass(frozen=True, init=False)
class ProgressFacts:
    """The rollout's state as the Progressing condition shows it.

    ``phase``: ``Stable`` (no rollout), ``Progressing``, ``RollingBack``, ``Complete``
    (the last rollout finished) or ``RolledBack`` (the deadline passed, the old version
    serves again). Given as a ``RolloutPhase`` or its value (``"RollingBack"`` ->
    ``RolloutPhase.ROLLING_BACK``; an unknown phase raises ValueError).
    """

    phase: RolloutPhase
    message: str
    rollout: RolloutStatus | None

    def __init__(
        self,
        phase: RolloutPhase | str = RolloutPhase.STABLE,
        message: str = "",
        rollout: RolloutStatus | None = None,
    ) -> None:
        object.__setattr__(self, "phase", RolloutPhase(phase))
        object.__setattr__(self, "message", message)
        object.__setattr__(self, "rollout", rollout)


@dataclass(frozen=True)
class StatusInput:
    """Everything the status of one tick depends on."""

    now: float
    generation: int
    spec: PDDeploymentSpec
    decision: Decision
    metrics: MetricsSnapshot | None
    prefill: PoolObservation
    decode: PoolObservation
    active_version: str
    target_version: str
    progress: ProgressFacts
    previous: PDDeploymentStatus | None = None
    memory_window_seconds: float = 300.0
    metrics_error: str | None = None  # why Prometheus did not answer (metrics is None)
    #: The MetricsAvailable reason when ``metrics`` is None (default: PrometheusUnreachable).
    metrics_reason: ConditionReason | None = None
    write_failures: tuple[str, ...] = ()  # the writes refused, with the API's reason
    #: spec fields this operator does not know (a CRD newer than it), ignored
    unknown_fields: tuple[str, ...] = ()
    #: the PDDeployment carries ``pdscaler.io/paused: "true"``: nothing is written
    paused: bool = False


def condition(
    type_: ConditionType,
    status: ConditionStatus,
    reason: ConditionReason,
    message: str,
    now: float,
    generation: int,
    previous: list[Condition] | None,
) -> Condition:
    """A condition whose ``lastTransitionTime`` is kept when ``status`` is unchanged.

    Ready False (since 10:00) -> False again at 10:05: time stays 10:00; -> True at
    10:05: time becomes 10:05.
    """
    when = rfc3339(now)
    for old in previous or []:
        if old.type == type_ and old.status == status:
            when = old.last_transition_time
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=when,
        observed_generation=generation,
    )


def _condition(
    inp: StatusInput,
    type_: ConditionType,
    true: bool,
    reason: ConditionReason,
    message: str,
) -> Condition:
    """``condition`` at the tick's time and generation, against the previous status."""
    previous = inp.previous.conditions if inp.previous else None
    status: ConditionStatus = "True" if true else "False"
    return condition(type_, status, reason, message, inp.now, inp.generation, previous)


def _conditions(inp: StatusInput, published: str) -> list[Condition]:
    """Every condition, in ``CONDITION_TYPES`` order. ``published``: the message of the
    published lastDecision (stable while the decision is), which DeadlineInfeasible
    quotes."""
    return [
        ready(inp),
        metrics_available(inp),
        progressing(inp),
        capacity_limited(inp),
        deadline_infeasible(inp, published),
        slo_unreachable(inp),
        writes_failing(inp),
        fields_ignored(inp),
        reconciling(inp),
        stalled(inp),
        paused(inp),
    ]


#: What Ready adds with ``router.type: external``: pdscaler does not pair requests.
MSG_ROUTER_EXTERNAL = (
    "router.type external: pdscaler deploys no router and no front Service; "
    "pairing each request's prefill and decode (and keeping the pair in one version) "
    "is the stack's job"
)


def ready(inp: StatusInput) -> Condition:
    """Ready: both pools have at least their minimum ready (at least one each):
    prefill 4 ready (min 2), decode 5 ready (min 1) -> True, ``Serving``; prefill 1
    ready (min 2) -> False, ``NotServing``. With ``router.type: external`` True is
    ``RouterExternal`` and the message (True or False) ends with
    ``MSG_ROUTER_EXTERNAL``: the pools are ready, the request path is the stack's."""
    floor_p = max(1, inp.spec.prefill.replicas.min)
    floor_d = max(1, inp.spec.decode.replicas.min)
    serving = inp.prefill.ready >= floor_p and inp.decode.ready >= floor_d
    external = inp.spec.router_type == "external"
    message = (
        f"prefill {inp.prefill.ready} ready (min {floor_p}), "
        f"decode {inp.decode.ready} ready (min {floor_d})"
    )
    if not serving:
        reason = ConditionReason.NOT_SERVING
    elif external:
        reason = ConditionReason.ROUTER_EXTERNAL
    else:
        reason = ConditionReason.SERVING
    return _condition(
        inp,
        ConditionType.READY,
        serving,
        reason,
        f"{message}; {MSG_ROUTER_EXTERNAL}" if external else message,
    )


def metrics_available(inp: StatusInput) -> Condition:
    """MetricsAvailable: the load shape (R, L_p, L_d) is known. No snapshot ->
    False, ``inp.metrics_reason`` (``PrometheusUnreachable`` unless said otherwise:
    ``PrometheusNotAllowed`` for a URL outside the operator's allow-list,
    ``InvalidQuery`` for a custom query refused before sending) with why; a snapshot
    without R (or a decision that held for missing metrics) -> False,
    ``MetricsIncomplete`` naming the problems (``request rate: empty answer; holding
    replicas, no scale-down``); else True, ``MetricsOK`` (``load shape known; R =
    completed requests/s (vllm:request_success_total, prefill pool)``: what R counts, per
    preset). A decision that lacked a pool's data (``Decision.data_gaps``) -> False,
    ``MetricsIncomplete`` naming it (``prefill targets: 1 of 2 ready pods scraped (up);
    no scale-down of the pools concerned``)."""
    metrics = inp.metrics
    if metrics is None:
        return _condition(
            inp,
            ConditionType.METRICS_AVAILABLE,
            False,
            inp.metrics_reason or ConditionReason.PROMETHEUS_UNREACHABLE,
            f"{inp.metrics_error or 'Prometheus did not answer'}; holding replicas, no scale-down",
        )
    held = not metrics.complete or not inp.decision.metrics_available
    if held or inp.decision.data_gaps:
        named = inp.decision.data_gaps if not held else ()
        problems = "; ".join(named or inp.decision.data_gaps or metrics.problems)
        problems = problems or "request rate or token lengths unknown"
        consequence = (
            "holding replicas, no scale-down" if held else ("no scale-down of the pools concerned")
        )
        return _condition(
            inp,
            ConditionType.METRICS_AVAILABLE,
            False,
            ConditionReason.METRICS_INCOMPLETE,
            f"{problems}; {consequence}"[:32768],
        )
    return _condition(
        inp,
        ConditionType.METRICS_AVAILABLE,
        True,
        ConditionReason.METRICS_OK,
        "load shape known; R = "
        + rate_source(inp.spec.metrics.preset, metrics.rate_source is RateSource.ARRIVALS),
    )


#: The Progressing condition of each rollout phase: (status, reason).
_PROGRESS: dict[RolloutPhase, tuple[bool, ConditionReason]] = {
    RolloutPhase.PROGRESSING: (True, ConditionReason.ROLLOUT_IN_PROGRESS),
    RolloutPhase.ROLLING_BACK: (True, ConditionReason.ROLLING_BACK),
    RolloutPhase.ROLLED_BACK: (False, ConditionReason.ROLLED_BACK),
    RolloutPhase.COMPLETE: (False, ConditionReason.ROLLOUT_COMPLETE),
    RolloutPhase.STABLE: (False, ConditionReason.STABLE),
}


def progressing(inp: StatusInput) -> Condition:
    """Progressing: True while cells are being shifted. Phase Progressing -> True,
    ``RolloutInProgress``; RollingBack -> True, ``RollingBack``; RolledBack -> False,
    ``ProgressDeadlineExceeded``; Complete -> False, ``RolloutComplete``; Stable ->
    False, ``Stable``. The message is the rollout's, or ``serving v1``."""
    true, reason = _PROGRESS[inp.progress.phase]
    message = inp.progress.message or f"serving {inp.active_version}"
    return _condition(inp, ConditionType.PROGRESSING, true, reason, message)


def capacity_limited(inp: StatusInput) -> Condition:
    """CapacityLimited: pods are Pending for lack of GPUs, or the decision was cut to
    the schedulable capacity. Decode 6 asked, 2 unschedulable -> True,
    ``InsufficientGPUs``, ``2 pod(s) unschedulable for lack of GPUs; ...``; else False,
    ``CapacityAvailable``."""
    pending = inp.prefill.unschedulable + inp.decode.unschedulable
    limited = inp.decision.capacity_limited or pending > 0
    return _condition(
        inp,
        ConditionType.CAPACITY_LIMITED,
        limited,
        ConditionReason.INSUFFICIENT_GPUS if limited else ConditionReason.CAPACITY_AVAILABLE,
        (
            f"{pending} pod(s) unschedulable for lack of GPUs; "
            "schedulable GPUs go to the bottleneck pool"
            if limited
            else "all pods schedulable"
        ),
    )


def deadline_infeasible(inp: StatusInput, published: str) -> Condition:
    """DeadlineInfeasible: a scale-up cannot drain its backlog by slo.recoverySeconds.
    True, ``RecoveryDeadlineInfeasible``, quoting the published decision
    (``... deadline infeasible: decode drain 95s > 60s at 32 replicas (needs 41)``);
    else False, ``DeadlineFeasible``."""
    infeasible = inp.decision.deadline_infeasible
    return _condition(
        inp,
        ConditionType.DEADLINE_INFEASIBLE,
        infeasible,
        (ConditionReason.DEADLINE_INFEASIBLE if infeasible else ConditionReason.DEADLINE_FEASIBLE),
        published if infeasible else "scale-ups can drain within slo.recoverySeconds",
    )


#: SLOUnreachable's message while it is False.
MSG_SLO_WITHIN_REACH = "no TTFT breach that the allowed burst head-room cannot absorb"


def slo_unreachable(inp: StatusInput) -> Condition:
    """SLOUnreachable: prefill's TTFT is breached in bursts the mean load does not
    explain and no head-room the spec allows will absorb them (``policy.reach``): True,
    with the reason naming why (``BurstHeadroomOff``, ``BurstHeadroomLimited``,
    ``BurstHeadroomCapped``) and what absorbing them would cost (``... burst head-room
    is off: spec.scaling.burstHeadroom holds up to 58 prefill replicas for them (x3.0),
    38 more (38 GPUs) than now``); else False, ``SLOWithinReach``. While it stays True
    for the same reason the message is the one it turned True with: the figures move
    every tick, and a status write per tick is churn. For the same reason, once True it
    stays True for a scale-down stabilization window (a bursty p95 crosses the SLO on
    and off from tick to tick): True at 10:00 with a 5-minute window, no breach at
    10:03 -> still True, since 10:00; no breach at 10:05 -> False."""
    why = inp.decision.slo_unreachable
    previous = inp.previous.conditions if inp.previous else None
    was = next(
        (
            c
            for c in previous or []
            if c.type == ConditionType.SLO_UNREACHABLE and c.status == "True"
        ),
        None,
    )
    hold = inp.spec.scaling.scale_down_stabilization_seconds
    if why is None and was is not None and inp.now - was.last_transition_time.timestamp() < hold:
        return was.model_copy(update={"observed_generation": inp.generation})
    if why is None:
        return _condition(
            inp,
            ConditionType.SLO_UNREACHABLE,
            False,
            ConditionReason.SLO_WITHIN_REACH,
            MSG_SLO_WITHIN_REACH,
        )
    message = was.message if was is not None and was.reason == why.reason else why.message
    return _condition(inp, ConditionType.SLO_UNREACHABLE, True, why.reason, message)


def writes_failing(inp: StatusInput) -> Condition:
    """WritesFailing: True, ``WriteFailed``, naming each refused write
    (``inp.write_failures``, cut to ``MAX_WRITE_FAILURE_MESSAGE``); else False,
    ``WritesApplied``. The pure tick builds it False (a refused write is only known
    after the writes); the shell sets it with ``with_write_failures``."""
    previous = inp.previous.conditions if inp.previous else None
    return _write_condition(inp.write_failures, inp.now, inp.generation, previous)


def fields_ignored(inp: StatusInput) -> Condition:
    """FieldsIgnored: True, ``UnknownFields``, naming the spec fields this operator
    version does not know (a CRD newer than the operator: they are ignored and the rest
    of the spec is acted on; ``unknown_fields_message``); else False,
    ``AllFieldsKnown``."""
    previous = inp.previous.conditions if inp.previous else None
    if not inp.unknown_fields:
        return condition(
            ConditionType.FIELDS_IGNORED,
            "False",
            ConditionReason.ALL_FIELDS_KNOWN,
            "every spec field is known to this pdscaler version",
            inp.now,
            inp.generation,
            previous,
        )
    return condition(
        ConditionType.FIELDS_IGNORED,
        "True",
        ConditionReason.UNKNOWN_FIELDS,
        unknown_fields_message(inp.unknown_fields),
        inp.now,
        inp.generation,
        previous,
    )


# ---- kstatus: Reconciling and Stalled ------------------------------------------
# sigs.k8s.io/cli-utils pkg/kstatus/status (Flux, kpt) computes a custom resource's
# status as: Terminating while deleted; InProgress while status.observedGeneration !=
# metadata.generation; else the FIRST condition in the list that is Reconciling=True
# (InProgress) or Stalled=True (Failed); else Current. So every tick writes
# observedGeneration (a refused spec too: ``refused_status``) and never both True.


def pool_targets(inp: StatusInput) -> tuple[int, int]:
    """The replicas each pool is being brought to: the decision's in Auto mode, the
    Deployments' own (``PoolObservation.replicas``) when nothing is applied (Recommend
    mode, or paused): a recommendation nobody carries out is no work in flight."""
    if inp.spec.scaling.mode == "Auto" and not inp.paused:
        return inp.decision.prefill, inp.decision.decode
    return inp.prefill.replicas, inp.decode.replicas


#: Reconciling True for a moving rollout: phase -> reason.
_MOVING = {
    RolloutPhase.PROGRESSING: ConditionReason.ROLLOUT_PROGRESSING,
    RolloutPhase.ROLLING_BACK: ConditionReason.ROLLBACK_PROGRESSING,
}


def reconciling(inp: StatusInput) -> Condition:
    """Reconciling (kstatus): True while the operator works towards the spec. In order:
    Stalled True -> False, ``Blocked`` (kstatus must read Failed, not InProgress);
    paused -> False, ``ReconcilePaused``; a rollout Progressing -> True,
    ``RolloutProgressing`` (RollingBack -> ``RollbackProgressing``), with the rollout's
    message; a pool whose Ready replicas differ from its target (``pool_targets``:
    decode 5 Ready of 6 asked) -> True, ``ScalingInProgress``, ``prefill 4/4 ready,
    decode 5/6 ready``; else False, ``Reconciled``, ``prefill 4/4 ready, decode 6/6
    ready``. In Recommend mode a pending rollout is not work in flight either (the
    operator carries none out: ``Reconciled``, saying so), as a paused one is not. Pods
    Pending for GPUs keep it True (the work is not done; CapacityLimited says why), as
    kstatus keeps a Deployment InProgress until its pods are Ready."""
    want_p, want_d = pool_targets(inp)
    counts = f"prefill {inp.prefill.ready}/{want_p} ready, decode {inp.decode.ready}/{want_d} ready"
    if _stalled(inp) is not None:
        return _condition(
            inp,
            ConditionType.RECONCILING,
            False,
            ConditionReason.BLOCKED,
            "not reconciling: Stalled says what must change",
        )
    if inp.paused:
        return _condition(
            inp,
            ConditionType.RECONCILING,
            False,
            ConditionReason.RECONCILE_PAUSED,
            paused_message(),
        )
    recommend = inp.spec.scaling.mode != "Auto"
    moving = None if recommend else _MOVING.get(inp.progress.phase)
    if moving is not None:
        message = inp.progress.message or f"rolling out {inp.target_version}"
        return _condition(inp, ConditionType.RECONCILING, True, moving, message)
    if inp.prefill.ready != want_p or inp.decode.ready != want_d:
        return _condition(
            inp, ConditionType.RECONCILING, True, ConditionReason.SCALING_IN_PROGRESS, counts
        )
    if recommend:
        counts += f"; {MSG_RECOMMEND_ONLY}"
    return _condition(inp, ConditionType.RECONCILING, False, ConditionReason.RECONCILED, counts)


#: Reconciled's addition in Recommend mode, where no scale and no rollout is carried out.
MSG_RECOMMEND_ONLY = "Recommend mode: decisions and rollouts are published, not carried out"


#: Stalled's message while it is False.
MSG_NOT_STALLED = "nothing blocks progress towards the spec"


def _stalled(inp: StatusInput) -> str | None:
    """Why the tick cannot progress without a change by a person, or None: a rollout
    rolled back at its progressDeadline (the failed revision is never retried: only a
    new spec.engine or template moves it)."""
    if inp.progress.phase is RolloutPhase.ROLLED_BACK:
        return inp.progress.message or (
            f"the rollout to {inp.target_version} missed rollout.progressDeadline and was "
            f"rolled back; {inp.active_version} serves"
        )
    return None


def stalled(inp: StatusInput) -> Condition:
    """Stalled (kstatus): True when the operator cannot make progress without a change:
    the rollout was rolled back -> True, ``RolledBack``, with the rollout's message
    (``spec.engine.version v2 not Ready within 10m0s; rolled back to v1``); else False,
    ``NotStalled``. A refused stored spec is Stalled too, ``InvalidSpec``, written by
    ``refused_status`` (no tick runs for it). SLOUnreachable, CapacityLimited and
    DeadlineInfeasible are not Stalled: the pools are at what the spec allows (they are
    reconciled); WritesFailing is not either: each tick retries, and most causes (quota,
    a webhook, a conflict) pass without a spec change."""
    why = _stalled(inp)
    if why is None:
        return _condition(
            inp, ConditionType.STALLED, False, ConditionReason.NOT_STALLED, MSG_NOT_STALLED
        )
    return _condition(inp, ConditionType.STALLED, True, ConditionReason.ROLLOUT_ROLLED_BACK, why)


def paused_message() -> str:
    """What a paused PDDeployment's conditions say."""
    return (
        f'{ANNOTATION_PAUSED} is "true": the operator writes none of the pools, routers '
        "or Services (it reads, decides and reports as in Recommend mode); remove the "
        "annotation to resume"
    )


def paused(inp: StatusInput) -> Condition:
    """Paused: True, ``PausedByAnnotation`` while the PDDeployment carries
    ``pdscaler.io/paused: "true"``; else False, ``NotPaused``."""
    if inp.paused:
        return _condition(
            inp, ConditionType.PAUSED, True, ConditionReason.PAUSED_BY_ANNOTATION, paused_message()
        )
    return _condition(
        inp,
        ConditionType.PAUSED,
        False,
        ConditionReason.NOT_PAUSED,
        f"no {ANNOTATION_PAUSED} annotation: the operator applies its decisions",
    )


def refused_status(
    previous: PDDeploymentStatus | None, generation: int, now: float, why: str
) -> PDDeploymentStatus:
    """The status of a stored spec this operator refuses (``why``: the first validation
    error, ``spec.router.args: Value error, router.args must not give ...``): the
    previous status kept (its pools, rollout and conditions tell the last spec acted
    on), ``observedGeneration`` moved to ``generation`` (the spec WAS read: kstatus then
    reads Stalled, Failed, instead of InProgress forever), Stalled True, ``InvalidSpec``
    naming the error, and Reconciling False, ``Blocked``. Same inputs -> equal status
    (one write per generation). No previous status -> just those."""
    before = previous.conditions if previous else None
    message = (
        f"the stored spec is refused: {why}; nothing of this PDDeployment is written "
        "(its pools keep running as last reconciled) until the spec is fixed"
    )[:32768]
    added = [
        condition(
            ConditionType.RECONCILING,
            "False",
            ConditionReason.BLOCKED,
            "not reconciling: Stalled says what must change",
            now,
            generation,
            before,
        ),
        condition(
            ConditionType.STALLED,
            "True",
            ConditionReason.INVALID_SPEC,
            message,
            now,
            generation,
            before,
        ),
    ]
    kept = [
        c for c in before or [] if c.type not in (ConditionType.RECONCILING, ConditionType.STALLED)
    ]
    base = previous or PDDeploymentStatus()
    return replace_conditions(
        base.model_copy(update={"observed_generation": generation}), [*kept, *added]
    )


def unknown_fields_message(unknown: Sequence[str]) -> str:
    """``spec.a, spec.b.c: not known to this pdscaler version (a newer CRD?); ignored``
    (at most 10 paths, then how many more)."""
    shown = ", ".join(unknown[:10]) + (
        f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
    )
    return f"{shown}: not known to this pdscaler version (a newer CRD?); ignored"


def _write_condition(
    failures: Sequence[str], now: float, generation: int, previous: list[Condition] | None
) -> Condition:
    if not failures:
        return condition(
            ConditionType.WRITES_FAILING,
            "False",
            ConditionReason.WRITES_APPLIED,
            "no write failed",
            now,
            generation,
            previous,
        )
    message = "; ".join(failures)
    if len(message) > MAX_WRITE_FAILURE_MESSAGE:
        message = message[: MAX_WRITE_FAILURE_MESSAGE - 3] + "..."
    return condition(
        ConditionType.WRITES_FAILING,
        "True",
        ConditionReason.WRITE_FAILED,
        message,
        now,
        generation,
        previous,
    )


#: The longest message WritesFailing carries (the API's messages can be long).
MAX_WRITE_FAILURE_MESSAGE = 1024


def with_write_failures(
    built: PDDeploymentStatus,
    failures: Sequence[str],
    now: float,
    generation: int,
    previous: PDDeploymentStatus | None,
) -> PDDeploymentStatus:
    """``built`` with WritesFailing True, ``WriteFailed``, naming every refused write
    (``create Deployment chat-v2--abcde-decode: 422 Invalid: ...``), cut to
    ``MAX_WRITE_FAILURE_MESSAGE`` characters; its ``lastTransitionTime`` kept from
    ``previous`` while it stays True. No failures -> ``built`` unchanged."""
    if not failures:
        return built
    failing = _write_condition(failures, now, generation, previous.conditions if previous else None)
    kept = [c for c in built.conditions or [] if c.type != ConditionType.WRITES_FAILING]
    return replace_conditions(built, [*kept, failing])


def replace_conditions(
    built: PDDeploymentStatus, conditions: list[Condition]
) -> PDDeploymentStatus:
    """A copy of ``built`` with ``conditions``, in ``CONDITION_TYPES`` order."""
    order: dict[str, int] = {t.value: i for i, t in enumerate(CONDITION_TYPES)}
    ordered = sorted(conditions, key=lambda c: order.get(c.type, len(order)))
    return built.model_copy(update={"conditions": ordered})


def _finite(value: float | None) -> float | None:
    """``value`` when it is a finite number; NaN and +/-Inf are not JSON (the API server
    refuses a status holding them), so they are left out like an unknown value."""
    return value if value is not None and math.isfinite(value) else None


def _inputs(m: MetricsSnapshot | None) -> DecisionInputs | None:
    """The measured inputs of a decision, finite ones only: a NaN rate from a garbage
    exporter -> ``requestRate`` left out (the status must still be writable)."""
    if m is None:
        return None
    return DecisionInputs(
        request_rate=_finite(m.request_rate),
        prompt_tokens=_finite(m.prompt_tokens),
        output_tokens=_finite(m.output_tokens),
        prefill_queue=_finite(m.prefill.queue_depth),
        decode_queue=_finite(m.decode.queue_depth),
        ttft_seconds=_finite(m.prefill.latency_seconds),
        tpot_seconds=_finite(m.decode.latency_seconds),
    )


def last_decision(
    decision: Decision,
    metrics: MetricsSnapshot | None,
    now: float,
    previous: LastDecision | None,
    previous_desired: tuple[int | None, int | None] | None = None,
) -> LastDecision:
    """The decision to publish: a new one when the action or the desired replicas
    changed, else the previous one. A steady Hold keeps its first time and inputs, and
    so does a repeated ``ScaledDecode`` to the same 6 replicas (Recommend mode, or pods
    still Pending): no status churn, no repeated Event.
    """
    same_target = previous_desired == (decision.prefill, decision.decode)
    if previous is not None and previous.action == decision.action and same_target:
        return previous
    m = decision.model
    return LastDecision(
        time=rfc3339(now),
        action=decision.action,
        pool=decision.pool.value if decision.pool else None,
        reason=decision.action,
        message=decision.message,
        inputs=_inputs(metrics),
        model=DecisionModel(
            n_prefill=_finite(m.n_prefill),
            n_decode=_finite(m.n_decode),
            ratio=_finite(m.ratio),
            drain_seconds=_finite(m.drain_seconds),
            prefill_tokens_per_second=_finite(m.prefill_tps),
            decode_tokens_per_second=_finite(m.decode_tps),
            startup_seconds=_finite(m.startup_seconds),
            forecast_rate=_finite(m.forecast_rate),
            decode_bound=m.decode_bound,
            n_decode_memory=_finite(m.n_decode_memory),
            burst_headroom_replicas=m.burst_headroom_replicas,
        ),
    )


def duration_text(seconds: float | None) -> str | None:
    """``0.85`` -> ``"850ms"``, ``0.042`` -> ``"42ms"``, ``2.5`` -> ``"2.5s"``."""
    if seconds is None or math.isnan(seconds):
        return None
    if seconds < 1.0:
        return f"{seconds * 1000:.0f}ms"
    return f"{seconds:.1f}s"


def ratio_text(prefill: int, decode: int) -> str | None:
    """P:D replica ratio normalised to 1 on the prefill side: 4 and 6 -> ``"1:1.5"``."""
    if prefill <= 0 or decode <= 0:
        return None
    return f"1:{decode / prefill:.2g}"


def _pool(obs: PoolObservation, desired: int, version: str) -> PoolStatus:
    return PoolStatus(
        replicas=obs.replicas,
        ready_replicas=obs.ready,
        desired_replicas=desired,
        version=version,
        summary=f"{obs.ready}/{desired}",
    )


def build_status(inp: StatusInput) -> PDDeploymentStatus:
    """The status of this tick. Same facts + same previous status -> equal status."""
    prev = inp.previous
    prev_decision = prev.last_decision if prev else None
    prev_desired = (
        (
            prev.prefill.desired_replicas if prev.prefill else None,
            prev.decode.desired_replicas if prev.decode else None,
        )
        if prev
        else None
    )
    ld = last_decision(inp.decision, inp.metrics, inp.now, prev_decision, prev_desired)
    inputs = ld.inputs
    return PDDeploymentStatus(
        observed_generation=inp.generation,
        active_version=inp.active_version,
        target_version=inp.target_version,
        prefill=_pool(inp.prefill, inp.decision.prefill, inp.active_version),
        decode=_pool(inp.decode, inp.decision.decode, inp.active_version),
        ratio=ratio_text(inp.decision.prefill, inp.decision.decode),
        ttft=duration_text(inputs.ttft_seconds if inputs else None),
        tpot=duration_text(inputs.tpot_seconds if inputs else None),
        last_decision=ld,
        conditions=_conditions(inp, ld.message or inp.decision.message),
        rollout=inp.progress.rollout,
        memory=memory_to_status(inp.decision.memory, inp.now, inp.memory_window_seconds),
    )


def status_changed(new: PDDeploymentStatus, observed: dict[str, Any] | None) -> bool:
    """True when the API server's status differs from ``new`` (compared in the API's
    JSON form, after re-parsing the observed one so 3 and 3.0 compare equal)."""
    if not observed:
        return True
    old = parse_status(observed)
    return old is None or old.to_k8s() != new.to_k8s()


def parse_status(observed: dict[str, Any] | None) -> PDDeploymentStatus | None:
    """The observed status as the typed model; None when absent or unreadable. Read
    leniently, as the spec is: fields this operator does not know (a newer CRD that
    defaults them, so every read carries them) are dropped, not a reason to forget the
    whole status (its rollout state, memory and transition times)."""
    if not observed:
        return None
    known, _ = strip_unknown(PDDeploymentStatus, observed, "status")
    try:
        return PDDeploymentStatus.model_validate(known)
    except ValueError:
        return None


# ---- the policy memory, persisted ------------------------------------------------


def _sig(x: float | None, digits: int = 3) -> float | None:
    """Round to ``digits`` significant digits: 2987.4 -> 2990.0, 0.012345 -> 0.0123."""
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


#: The most change points ``status.memory.recommendations`` keeps (about 5 KB): a
#: recommendation that changes every tick under a long window grew a status by 187 KB in
#: 12,000 ticks before the cap.
MAX_RECOMMENDATION_POINTS = 256


def memory_to_status(memory: PolicyMemory, now: float, window_seconds: float) -> dict[str, Any]:
    """The compact, tick-stable form of the memory kept in ``status.memory``.

    recommendations (t, P, D): only change points, and only from the last change
    before ``now - window`` on. (100,4,4) (115,4,4) (130,5,4) (145,5,4) at now=145,
    window 300 -> [[100,4,4],[130,5,4]]. Beyond ``MAX_RECOMMENDATION_POINTS`` the oldest
    points become one, dated at the first, holding their maximum (a restart scales down
    no earlier than the whole history would). The rate history is not kept (the forecast
    warms up again); refined capacities keep 3 significant digits; the season its
    folded profile and start (``seasonal.encode``, under 3 KiB, changed at most hourly).
    """
    points: list[list[float]] = []
    for t, p, d in memory.recommendations:
        if points and points[-1][1:] == [p, d]:
            continue
        points.append([math.floor(t), p, d])
    start = now - window_seconds
    while len(points) > 1 and points[1][0] <= start:
        points.pop(0)
    if len(points) > MAX_RECOMMENDATION_POINTS:  # the oldest merged into their maximum
        excess = len(points) - MAX_RECOMMENDATION_POINTS + 1
        oldest = points[:excess]
        merged = [oldest[0][0], max(p[1] for p in oldest), max(p[2] for p in oldest)]
        points = [merged, *points[excess:]]
    out: dict[str, Any] = {"recommendations": points}
    for key, value in (
        ("prefillTps", _sig(memory.prefill_tps)),
        ("decodeTps", _sig(memory.decode_tps)),
        ("prefillPrior", _sig(memory.prefill_prior)),
        ("decodePrior", _sig(memory.decode_prior)),
        ("startupSeconds", _sig(memory.startup_seconds)),
        ("lastScaleTime", memory.last_scale_time),
        ("capacityGPUs", memory.capacity_gpus),
        ("capacityTime", memory.capacity_time),
    ):
        if value is not None:
            out[key] = value
    season = seasonal.encode(memory.season)  # the day's shape: changes at most hourly
    if season is not None:
        out["season"] = season
    return out


def memory_from_status(data: dict[str, Any] | None, now: float) -> PolicyMemory:
    """Rebuild the memory a restarted operator resumes with.

    Each change point's value held until the next one, and the last one until now (it
    would have been persisted had it changed): [[100,4,4],[130,5,4]] at now=200 ->
    (100,4,4) (130,4,4) (130,5,4) (200,5,4). Garbage -> an empty memory.
    """
    if not data:
        return PolicyMemory()
    try:
        points = [(float(t), int(p), int(d)) for t, p, d in data.get("recommendations", [])]
        recs: list[tuple[float, int, int]] = []
        for i, point in enumerate(points):
            if i > 0:
                recs.append((point[0], points[i - 1][1], points[i - 1][2]))
            recs.append(point)
        if points and points[-1][0] < now:
            recs.append((now, points[-1][1], points[-1][2]))

        def num(key: str) -> float | None:
            v = data.get(key)
            return float(v) if v is not None else None

        return PolicyMemory(
            recommendations=tuple(recs),
            prefill_tps=num("prefillTps"),
            decode_tps=num("decodeTps"),
            prefill_prior=num("prefillPrior"),
            decode_prior=num("decodePrior"),
            startup_seconds=num("startupSeconds"),
            last_scale_time=num("lastScaleTime"),
            capacity_gpus=int(data["capacityGPUs"]) if "capacityGPUs" in data else None,
            capacity_time=num("capacityTime"),
            season=seasonal.decode(data.get("season")),
        )
    except (TypeError, ValueError):
        return PolicyMemory()
