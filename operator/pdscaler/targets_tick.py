"""One tick of a PDDeployment whose pools are scale targets (``spec.scale_targets``):
the I/O shell around ``targets`` (pure) that ``reconcile`` runs instead of the owned
pools' tick. Reads each target's ``/scale`` and pods and the namespace's autoscalers
(``kube.scale``), decides with the same policy (``policy.decide``) on the same metrics,
holds when ``targets.check`` finds a refused target or a mixed pair, and writes ONLY
``/scale`` (none in Recommend mode or paused): never a Deployment, router, Service or
pod. ``reconcile`` then publishes the Events and the status it returns.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdscaler import status, targets
from pdscaler.kube import KubeError
from pdscaler.kube import scale as scale_io
from pdscaler.objects import Meta
from pdscaler.policy import decide
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.tick import Event, decision_events
from pdscaler.types import (
    ConditionReason,
    Decision,
    MetricsSnapshot,
    PolicyMemory,
    PoolObservation,
    Role,
    TickInput,
)

log = logging.getLogger("pdscaler.targets")


@dataclass(frozen=True)
class TargetTick:
    """What the shell must still do: publish ``events``, write ``status`` when
    ``status_changed``; and what it keeps (``memory``)."""

    decision: Decision
    writes: tuple[targets.ScaleWrite, ...]
    status: PDDeploymentStatus
    status_changed: bool
    events: tuple[Event, ...]
    memory: PolicyMemory
    #: the pools as read (``/scale``'s replicas before the tick, the selected pods)
    pools: dict[Role, PoolObservation] = dataclasses.field(default_factory=dict)


def run(
    rt: Runtime,
    owner: Meta,
    spec: PDDeploymentSpec,
    raw_status: Mapping[str, Any] | None,
    generation: int,
    metrics: tuple[MetricsSnapshot | None, str | None, ConditionReason | None],
    unknown: tuple[str, ...],
    paused: bool,
) -> TargetTick:
    """Read, decide, check, write /scale (module docstring)."""
    now, ns = rt.clock(), owner.namespace
    reads = []
    for role in (Role.PREFILL, Role.DECODE):
        ref = spec.pool(role).scale_target_ref
        assert ref is not None  # spec.scale_targets: both pools have one (CEL)
        reads.append(scale_io.read_target(rt.kube, ns, role, ref))
    verdict = targets.check(
        owner.name, reads, scale_io.autoscalers(rt.kube, ns), spec.version_label
    )
    previous = status.parse_status(dict(raw_status) if raw_status else None)
    memory = rt.memory.get(owner.uid) or status.memory_from_status(
        previous.memory if previous else None, now
    )
    snapshot, metrics_error, metrics_reason = metrics
    prefill, decode = (targets.observation(r) for r in reads)
    decision = decide(
        TickInput(
            now=now, spec=spec, metrics=snapshot, prefill=prefill, decode=decode, memory=memory
        )
    )
    if verdict.refused is not None:
        decision = targets.held(decision, reads, verdict.refused[1])
    elif verdict.mixed is not None:
        # the condition says what is held back (the lastDecision of a steady hold stays)
        wanted = f"the policy wants prefill {decision.prefill}, decode {decision.decode}"
        why = f"{verdict.mixed}; {wanted}"
        verdict = dataclasses.replace(verdict, mixed=why)
        decision = targets.held(decision, reads, why)
    auto = spec.scaling.mode == "Auto" and not paused
    if not auto:  # nothing is scaled: the policy must not believe capacity is coming
        kept = dataclasses.replace(decision.memory, last_scale_time=memory.last_scale_time)
        decision = dataclasses.replace(decision, memory=kept)
    writes = targets.plan(decision, reads, verdict) if auto else []
    failures = []
    for write in writes:
        try:
            scale_io.patch_scale(rt.kube, ns, write.ref, write.replicas)
            log.info("%s/%s: %s", ns, owner.name, write.describe())
            rt.telemetry.record_write("scale", write.ref.kind)
        except KubeError as err:
            failures.append(f"{write.describe()}: {err.status} {err.reason}: {err.message}"[:300])
    version = ", ".join(verdict.versions) or "unknown"
    built = status.build_status(
        status.StatusInput(
            now=now,
            generation=generation,
            spec=spec,
            decision=decision,
            metrics=snapshot,
            prefill=prefill,
            decode=decode,
            active_version=version,
            target_version=version,
            progress=status.ProgressFacts(),
            previous=previous,
            memory_window_seconds=spec.scaling.scale_down_stabilization_seconds,
            metrics_error=metrics_error,
            metrics_reason=metrics_reason,
            unknown_fields=unknown,
            paused=paused,
        )
    )
    built = targets.with_check(built, verdict, now, generation, previous)
    built = status.with_write_failures(built, failures, now, generation, previous)
    raw = dict(raw_status) if raw_status is not None else None
    events = list(decision_events(built, previous, auto))
    if verdict.refused is not None:
        reason, message = verdict.refused
        events.append(Event("Warning", reason, message, once=(reason, owner.uid, message)))
    return TargetTick(
        decision=decision,
        writes=tuple(w for w in writes if not any(f.startswith(w.describe()) for f in failures)),
        status=built,
        status_changed=status.status_changed(built, raw),
        events=tuple(events),
        memory=decision.memory,
        pools={Role.PREFILL: prefill, Role.DECODE: decode},
    )
