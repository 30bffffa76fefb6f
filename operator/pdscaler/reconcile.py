"""One reconcile tick of one PDDeployment: ``reconcile_once`` (docs/design.md §2), run in
the process-wide ``runtime.Runtime``; ``run_tick`` runs it under the PDDeployment's lock.

Owns: the shell of a tick, level-triggered and idempotent (sample-controller's
``syncHandler``), in three steps:

1. read: the PDDeployment (gone or being deleted: nothing to do; read leniently: fields
   this version does not know are ignored with a Warning Event ``UnknownFields``, a spec
   the pure model refuses gets ``InvalidSpec``, each once per generation, and a refused
   spec's status says Stalled, ``InvalidSpec``: ``status.refused_status``; an
   annotation ``pdscaler.io/paused: "true"`` makes the tick write nothing but its status
   and Events, as in Recommend mode), its owned
   Deployments, Services and pods (``kube.observe``), and a Prometheus snapshot
   (``Runtime.snapshot``: only from an allowed URL, a paused PDDeployment fails at once;
   unreachable -> ``None``: the policy holds and never scales down);
2. compute: ``tick.compute(TickFacts) -> TickEffects``, pure (decision, rollout step,
   desired objects, plan, status, Events, what to remember);
3. apply: the writes (none in Recommend mode), each on its own: a refused write is
   logged, its Event dropped, a Warning ``WriteFailed`` Event published once per process
   and the WritesFailing condition names it with the API's reason, and every other
   write, Event and the status patch still happen; then the Events, the status when it
   changed, the operator's metrics (``telemetry``).

A converged PDDeployment costs reads only: ZERO writes (the lab test counts them through
``Kube.audit``). Must not: decide anything (``tick`` and the pure modules do), or write
anything except through ``kube``. The policy memory and rollout state live in the
Runtime between ticks and, compacted, in the status for a restarted operator.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pydantic

from pdscaler import identity, manifests, status, targets_tick, tick
from pdscaler.kube import (
    KubeError,
)
from pdscaler.naming import ANNOTATION_PAUSED
from pdscaler.objects import Meta
from pdscaler.plan import Action
from pdscaler.prometheus import (
    MetricsUnavailableError,
)
from pdscaler.runtime import Runtime, TickReport
from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus, parse_spec_lenient
from pdscaler.types import (
    ConditionReason,
    EventReason,
    MetricsSnapshot,
    Role,
)

log = logging.getLogger("pdscaler.reconcile")

Obj = dict[str, Any]


# ------------------------------------------------------------------------ the tick


def reconcile_once(rt: Runtime, namespace: str, name: str) -> TickReport:
    """One level-triggered tick for PDDeployment ``namespace/name``: read, compute
    (``tick.compute``, pure), apply (module docstring)."""
    started = time.perf_counter()
    began = rt.clock()
    writes_before = rt.kube.audit.count
    rt.ticks += 1
    read = _read(rt, namespace, name)
    fx: tick.TickEffects | None = None
    facts: tick.TickFacts | None = None
    events: tuple[str, ...] = ()
    if isinstance(read, str):
        if read == NOT_FOUND:
            return TickReport(namespace, name, 0.0, 0, skipped=read)
    else:
        pdd, facts = read
        fx = tick.compute(facts)
        events = _apply(rt, pdd, facts, fx)
        if rt.clock() - began > 2 * facts.spec.scaling.interval_seconds + SLOW_TICK_S:
            # it hung on the API server (stopped mid-request) and saw nothing meanwhile:
            # like a failed tick's, that time is not a rollout without progress (this
            # tick's read already used the previous mark)
            rt.failing_since[(namespace, name)] = began
        else:
            rt.failing_since.pop((namespace, name), None)
    done = TickReport(
        namespace,
        name,
        seconds=time.perf_counter() - started,
        writes=rt.kube.audit.count - writes_before,
        decision=fx.decision if fx else None,
        plan=fx.plan if fx else None,
        metrics=facts.metrics if facts else None,
        metrics_error=facts.metrics_error if facts else None,
        applied=fx.applied if fx else False,
        status_written=fx.status_changed if fx else False,
        events=events,
        skipped=read if isinstance(read, str) else None,
    )
    rt.last[(namespace, name)] = done
    if fx is not None and facts is not None:
        before = {Role.PREFILL: fx.prefill.replicas, Role.DECODE: fx.decode.replicas}
        ready = {Role.PREFILL: fx.prefill, Role.DECODE: fx.decode}
        rt.telemetry.record_tick(
            namespace, name, fx.decision, before, ready, facts.metrics, done.seconds
        )
    return done


def run_tick(rt: Runtime, namespace: str, name: str) -> TickReport | None:
    """``reconcile_once`` under the PDDeployment's lock (``Runtime.lock``); errors are
    logged and counted, never raised (the next tick retries: level-triggered). The start
    of the first failed tick since the last good one is kept in ``rt.failing_since``."""
    with rt.lock(namespace, name):
        started = rt.clock()
        try:
            report = reconcile_once(rt, namespace, name)
        except Exception:
            log.exception("reconcile of %s/%s failed", namespace, name)
            rt.telemetry.errors.labels(namespace, name).inc()
            rt.failing_since.setdefault((namespace, name), started)
            return None
        return report


def _read(rt: Runtime, namespace: str, name: str) -> tuple[Obj, tick.TickFacts] | str:
    """The tick's facts from the API server, Prometheus and the Runtime's memory, or
    why there is nothing to do (``not found``, ``being deleted``, ``invalid spec``)."""
    pdd = rt.kube.get_pdd(namespace, name)
    if pdd is None:
        rt._forget(namespace, name)
        return NOT_FOUND
    meta = pdd["metadata"]
    if meta.get("deletionTimestamp"):
        return "being deleted"
    parsed = _parse_spec(rt, pdd)
    if isinstance(parsed, str):
        _refuse(rt, pdd, parsed)
        return "invalid spec"
    spec, unknown = parsed
    rt.intervals[(namespace, name)] = spec.scaling.interval_seconds
    now = rt.clock()
    uid = str(meta["uid"])
    previous = rt.uids.get((namespace, name))
    if previous is not None and previous != uid:  # deleted and made again meanwhile
        rt._forget_uid(previous)
    rt.uids[(namespace, name)] = uid
    owner = Meta(name=name, namespace=namespace, uid=uid)
    if spec.scale_targets:  # pools pdscaler does not own: /scale only (targets_tick)
        _scale_targets(rt, pdd, owner, spec, unknown, now)
        return "scale targets"
    spec = _with_configmaps(rt, namespace, spec)
    observed = rt.kube.observe(namespace, name, tick.wanted_objects(owner, spec))
    metrics, metrics_error, metrics_reason = _read_metrics(rt, spec, namespace, name, now)
    return pdd, tick.TickFacts(
        now=now,
        owner=owner,
        generation=int(meta.get("generation") or 0),
        spec=spec,
        observed=observed,
        metrics=metrics,
        metrics_error=metrics_error,
        metrics_reason=metrics_reason,
        raw_status=pdd.get("status"),
        memory=rt.memory.get(uid),
        rollout=rt.rollouts.get(uid),
        unobserved=max(0.0, now - rt.failing_since.get((namespace, name), now)),
        unknown_fields=unknown,
        paused=paused(pdd),
    )


def _with_configmaps(rt: Runtime, namespace: str, spec: PDDeploymentSpec) -> PDDeploymentSpec:
    """``spec`` carrying the digests of the ConfigMaps its pool templates read (part of
    the cell's identity: an edited ConfigMap names a new cell); ``spec`` itself when
    they read none (no request)."""
    names = identity.configmaps_of(spec.pool(role).template for role in Role)
    if not names:
        return spec
    found = rt.kube.read_configmaps(namespace, names)
    return manifests.with_configmaps(
        spec, {n: identity.configmap_digest(found.get(n)) for n in names}
    )


def _scale_targets(
    rt: Runtime, pdd: Obj, owner: Meta, spec: PDDeploymentSpec, unknown: tuple[str, ...], now: float
) -> None:
    """The tick of a PDDeployment whose pools are scale targets (``targets_tick``); then
    its Events and status, as ``_apply`` publishes and writes them."""
    metrics = _read_metrics(rt, spec, owner.namespace, owner.name, now)
    meta = pdd["metadata"]
    done = targets_tick.run(
        rt,
        owner,
        spec,
        pdd.get("status"),
        int(meta.get("generation") or 0),
        metrics,
        unknown,
        paused(pdd),
    )
    for event in done.events:
        if event.once is None or event.once not in rt.warned:
            _publish(rt, pdd, event)
    _write_status(rt, pdd, done.status, done.status_changed)
    rt.memory[owner.uid] = done.memory
    # the operator's metrics, as for owned pools (desired, ready, decisions, targets)
    before = {role: pool.replicas for role, pool in done.pools.items()}
    seconds = rt.clock() - now
    rt.telemetry.record_tick(
        owner.namespace, owner.name, done.decision, before, done.pools, metrics[0], seconds
    )
    rt.telemetry.record_targets(owner.namespace, owner.name, spec, done.status)


#: Why a tick did nothing when its read found no PDDeployment (404): ``TickReport.skipped``.
NOT_FOUND = "not found"

#: A tick longer than 2 intervals plus this hung (an API server stopped mid-request):
#: the next tick discounts it from the rollout's progress clock, as a failed tick's.
SLOW_TICK_S = 5.0

#: How much of the API's message one failed write keeps (condition and Event).
MAX_FAILURE_TEXT = 300


def _apply(rt: Runtime, pdd: Obj, facts: tick.TickFacts, fx: tick.TickEffects) -> tuple[str, ...]:
    """The writes, each on its own (``_write``); the Events (keyed ones once per process,
    none for a write that failed, a ``WriteFailed`` Warning per failed write); the
    status when it changed, with WritesFailing naming the failed writes; and what the
    Runtime keeps for the next tick. Returns the Events' log lines."""
    meta = pdd["metadata"]
    namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta["uid"])
    failed: list[tuple[Action, str]] = []
    for action in fx.writes:
        why = _write(rt, namespace, action, facts)
        if why is not None:
            failed.append((action, why))
    failures = tuple(f"{a.verb.value} {a.kind}/{a.name}: {why}" for a, why in failed)
    warnings = [
        tick.Event(
            "Warning",
            EventReason.WRITE_FAILED,
            text,
            once=("write-failed", uid, str(facts.generation), a.verb.value, a.kind, a.name),
        )
        for (a, _), text in zip(failed, failures, strict=True)
    ]
    refused = [a for a, _ in failed]
    wanted = [e for e in fx.events if not any(e.action is a for a in refused)]
    events = [
        line
        for e in [*wanted, *warnings]
        if e.once is None or e.once not in rt.warned
        if (line := _publish(rt, pdd, e)) is not None
    ]
    new_status, changed = fx.status, fx.status_changed
    if failures:
        previous = status.parse_status(dict(facts.raw_status) if facts.raw_status else None)
        new_status = status.with_write_failures(
            fx.status, failures, facts.now, facts.generation, previous
        )
        raw = dict(facts.raw_status) if facts.raw_status is not None else None
        changed = status.status_changed(new_status, raw)
    # the status as written (with the refused writes), not as computed
    _write_status(rt, pdd, new_status, changed)
    rt.telemetry.record_targets(namespace, name, facts.spec, new_status)
    rt.memory[uid] = fx.memory
    if fx.rollout is not None:
        rt.rollouts[uid] = fx.rollout
    return tuple(events)


def _write(rt: Runtime, namespace: str, action: Action, facts: tick.TickFacts) -> str | None:
    """Carry out one write; None when it was applied, else why not: the API's status,
    reason and message (``422 Invalid: Deployment.apps "x" is invalid: ...``), cut to
    ``MAX_FAILURE_TEXT`` characters. Only ``KubeError`` (the API server answered) is
    caught: a transport error fails the tick, as a read would."""
    try:
        rt.kube.execute(namespace, action, facts.observed)
    except KubeError as err:
        log.warning("%s failed: %s", action.describe(), err)
        text = f"{err.status} {err.reason}: {err.message}".strip()
        return text if len(text) <= MAX_FAILURE_TEXT else text[: MAX_FAILURE_TEXT - 3] + "..."
    log.info("%s/%s: %s", namespace, facts.owner.name, action.describe())
    rt.telemetry.record_write(action.verb.value, action.kind)
    return None


def _publish(rt: Runtime, pdd: Obj, event: tick.Event) -> str | None:
    """Publish one Event (a keyed one at most once per process: marked sent only once
    the API server took it, so a refused POST is tried again on the next tick); its log
    line, or None when the API server refused it (an Event is never worth failing the
    tick for)."""
    try:
        rt.kube.event(pdd, event.reason, event.message, event.type)
    except KubeError as err:
        log.warning("event %s not published: %s", event.reason, err)
        return None
    if event.once is not None:
        rt.warned.add(event.once)
    rt.telemetry.record_write("event", "Event")
    return event.line()


def paused(pdd: Obj) -> bool:
    """Whether the PDDeployment carries ``pdscaler.io/paused: "true"`` (any case)."""
    annotations = pdd.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(ANNOTATION_PAUSED, "")).strip().lower() == "true"


def _refuse(rt: Runtime, pdd: Obj, why: str) -> None:
    """A stored spec this operator refuses: the status says so (Stalled, ``InvalidSpec``,
    observedGeneration moved: ``status.refused_status``), written once per generation,
    and the operator's metrics carry the conditions (the PdscalerStalled alert)."""
    meta, raw = pdd["metadata"], pdd.get("status")
    new = status.refused_status(
        status.parse_status(raw), int(meta.get("generation") or 0), rt.clock(), why
    )
    _write_status(rt, pdd, new, status.status_changed(new, raw))


def _write_status(rt: Runtime, pdd: Obj, new: PDDeploymentStatus, changed: bool) -> None:
    """Patch ``new`` when ``changed`` (a refusal is logged, not raised: the next tick
    tries again) and export its conditions and rollout phase (the alerts' series)."""
    namespace, name = str(pdd["metadata"]["namespace"]), str(pdd["metadata"]["name"])
    if changed:
        try:
            rt.kube.patch_status(namespace, name, new.to_k8s(), pdd.get("status"), pdd["metadata"])
            rt.telemetry.record_write("status", "PDDeployment")
        except KubeError as err:
            log.warning("status of %s/%s not written: %s", namespace, name, err)
    rt.telemetry.record_status(
        namespace,
        name,
        ((c.type, c.status) for c in new.conditions or []),
        new.rollout.phase if new.rollout else None,
    )


def _parse_spec(rt: Runtime, pdd: Obj) -> tuple[PDDeploymentSpec, tuple[str, ...]] | str:
    """The typed spec, read leniently (``spec.parse_spec_lenient``), and the fields this
    operator does not know (a CRD newer than the operator): they are ignored, named in
    the condition FieldsIgnored and in one Warning Event ``UnknownFields`` per
    generation, and the PDDeployment keeps scaling. A spec the model refuses in the
    fields it knows gets one Warning Event per generation, and its first error is
    returned (``spec.router.args: Value error, router.args must not ...``)."""
    meta = pdd["metadata"]
    try:
        spec, unknown = parse_spec_lenient(pdd.get("spec") or {})
    except pydantic.ValidationError as err:
        key = ("invalid", str(meta.get("uid")), str(meta.get("generation")))
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        why = f"spec.{where}: {first['msg']}" if where else f"spec: {first['msg']}"
        if key not in rt.warned:
            _publish(rt, pdd, tick.Event("Warning", EventReason.INVALID_SPEC, why, once=key))
        return why
    key = ("unknown", str(meta.get("uid")), str(meta.get("generation")))
    if unknown and key not in rt.warned:
        text = status.unknown_fields_message(unknown)
        _publish(rt, pdd, tick.Event("Warning", EventReason.UNKNOWN_FIELDS, text, once=key))
    return spec, tuple(unknown)


def _read_metrics(
    rt: Runtime, spec: PDDeploymentSpec, namespace: str, name: str, now: float
) -> tuple[MetricsSnapshot | None, str | None, ConditionReason | None]:
    """(snapshot, None, None), or (None, why, the MetricsAvailable reason)."""
    try:
        if rt.metrics_source is not None:
            return rt.metrics_source(spec, namespace, name, now), None, None
        return rt.snapshot(spec, namespace, name, now), None, None
    except MetricsUnavailableError as err:
        return None, err.message, err.condition_reason


# ---------------------------------------------------------------- benchmark hook


def overhead(rt: Runtime, namespace: str, name: str, ticks: int = 10) -> list[tuple[float, int]]:
    """Time ``ticks`` consecutive reconcile ticks of one PDDeployment against a live
    API server and Prometheus: [(seconds, writes), ...]. For the operator-overhead
    benchmark (a converged PDDeployment should show ~constant seconds and 0 writes)::

        rt = Runtime.from_environment()
        samples = overhead(rt, "serving", "chat", ticks=20)
    """
    out: list[tuple[float, int]] = []
    for _ in range(ticks):
        with rt.lock(namespace, name):
            rep = reconcile_once(rt, namespace, name)
        out.append((rep.seconds, rep.writes))
    return out
