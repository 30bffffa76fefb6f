"""One reconcile tick of one PDDeployment: ``reconcile_once`` (docs/design.md §2), and the
process-wide ``Runtime`` it runs in.

Owns: the order of a tick, level-triggered and idempotent (sample-controller's
``syncHandler``):

1. read the PDDeployment (gone or being deleted: nothing to do; a spec the pure model
   refuses: a Warning Event once per generation), its owned Deployments, Services and
   pods (``kube.observe``) -> per-cell and per-pool observations (``observe``);
2. read a Prometheus snapshot (``prometheus.read_snapshot``; unreachable -> ``None``,
   the policy holds and never scales down);
3. the rollout state (``rollout``), then the policy (``policy.decide``), then the cells
   the rollout wants at the decided totals -> desired objects (``manifests``) -> the
   minimal plan (``plan``);
4. apply the plan unless ``scaling.mode`` is Recommend (then nothing but the status
   and Events is written); objects not ours are refused with a Warning Event;
5. the typed status (``status``), patched only when it changed; an Event per action;
   the operator's metrics (``telemetry``).

A converged PDDeployment therefore costs reads only: ZERO writes (the lab test counts
them through ``Kube.audit``). Must not: hold policy, rollout or planning logic (the pure
modules do), or write anything except through ``kube.py``.

The policy memory lives in the Runtime between ticks (the rate history for the
forecast included) and, compacted, in ``status.memory`` for a restarted operator.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic

from pdscaler import manifests, naming, observe, rollout, status
from pdscaler.kube import Kube, load_api_client
from pdscaler.manifests import CellTarget, Meta
from pdscaler.plan import Action, Observed, Plan, Verb, owned_by, plan
from pdscaler.policy import decide
from pdscaler.prometheus import MetricsUnavailableError, PrometheusClient, read_snapshot
from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.telemetry import Telemetry
from pdscaler.types import Decision, MetricsSnapshot, PolicyMemory, Role, TickInput

log = logging.getLogger("pdscaler.reconcile")

#: Overrides every PDDeployment's ``metrics.prometheus.url`` (an operator run outside
#: the cluster, e.g. the lab demo, reaching Prometheus on another address).
PROMETHEUS_URL_ENV = "PDSCALER_PROMETHEUS_URL"
PROMETHEUS_TIMEOUT_SECONDS = 5.0

Obj = dict[str, Any]


@dataclass(frozen=True)
class TickReport:
    """What one tick did (for logs, ``explain``, tests and the overhead benchmark)."""

    namespace: str
    name: str
    seconds: float
    writes: int
    decision: Decision | None = None
    plan: Plan | None = None
    metrics: MetricsSnapshot | None = None
    metrics_error: str | None = None
    applied: bool = False
    status_written: bool = False
    events: tuple[str, ...] = ()
    skipped: str | None = None


@dataclass
class Runtime:
    """Everything a tick needs that outlives it: the API client (with its write audit),
    Prometheus clients by URL, telemetry, the policy memory by PDDeployment uid, and a
    lock per PDDeployment (kopf may run a spec-change handler while its daemon ticks).
    """

    kube: Kube
    telemetry: Telemetry = field(default_factory=Telemetry)
    clock: Callable[[], float] = time.time
    prometheus_url: str | None = None
    #: Replaces Prometheus (tests, the overhead benchmark): returns the snapshot or
    #: raises ``MetricsUnavailableError``.
    metrics_source: Callable[[PDDeploymentSpec, str, str, float], MetricsSnapshot] | None = None
    memory: dict[str, PolicyMemory] = field(default_factory=dict)
    last: dict[tuple[str, str], TickReport] = field(default_factory=dict)
    intervals: dict[tuple[str, str], float] = field(default_factory=dict)
    rollouts: dict[str, rollout.RolloutState] = field(default_factory=dict)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    warned: set[tuple[str, ...]] = field(default_factory=set)
    ticks: int = 0  # reconcile_once calls so far (tests, the benchmark)
    _clients: dict[str, PrometheusClient] = field(default_factory=dict)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def from_environment() -> Runtime:
        """The kubeconfig / in-cluster API client and ``$PDSCALER_PROMETHEUS_URL``."""
        return Runtime(
            kube=Kube(load_api_client()), prometheus_url=os.environ.get(PROMETHEUS_URL_ENV)
        )

    def prometheus(self, url: str) -> PrometheusClient:
        target = self.prometheus_url or url
        with self._guard:
            if target not in self._clients:
                self._clients[target] = PrometheusClient(target, PROMETHEUS_TIMEOUT_SECONDS)
            return self._clients[target]

    def lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def interval(self, namespace: str, name: str) -> float:
        """The PDDeployment's ``scaling.interval`` as last read (15 s before a tick)."""
        return self.intervals.get((namespace, name), 15.0)

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept for a PDDeployment that is gone (memory, series, reports)."""
        uid = self.uids.pop((namespace, name), None)
        if uid is not None:
            self.memory.pop(uid, None)
            self.rollouts.pop(uid, None)
        self.last.pop((namespace, name), None)
        self.intervals.pop((namespace, name), None)
        self.telemetry.forget(namespace, name)

    def tick(self, namespace: str, name: str) -> TickReport | None:
        """``reconcile_once`` under the PDDeployment's lock; errors are logged and
        counted, never raised (the next tick retries: level-triggered)."""
        with self.lock(namespace, name):
            try:
                return reconcile_once(self, namespace, name)
            except Exception:
                log.exception("reconcile of %s/%s failed", namespace, name)
                self.telemetry.errors.labels(namespace, name).inc()
                return None


# ------------------------------------------------------------------------ the tick


def reconcile_once(rt: Runtime, namespace: str, name: str) -> TickReport:
    """One level-triggered tick for PDDeployment ``namespace/name`` (module docstring)."""
    started = time.perf_counter()
    writes_before = rt.kube.audit.count
    rt.ticks += 1

    def report(**kw: Any) -> TickReport:
        done = TickReport(
            namespace,
            name,
            seconds=time.perf_counter() - started,
            writes=rt.kube.audit.count - writes_before,
            **kw,
        )
        rt.last[(namespace, name)] = done
        return done

    pdd = rt.kube.get_pdd(namespace, name)
    if pdd is None:
        rt.forget(namespace, name)
        return TickReport(namespace, name, 0.0, 0, skipped="not found")
    meta = pdd["metadata"]
    if meta.get("deletionTimestamp"):
        return report(skipped="being deleted")
    spec = _parse_spec(rt, pdd)
    if spec is None:
        return report(skipped="invalid spec")
    rt.intervals[(namespace, name)] = spec.scaling.interval_seconds

    now = rt.clock()
    uid = str(meta["uid"])
    rt.uids[(namespace, name)] = uid
    owner = Meta(name=name, namespace=namespace, uid=uid)
    previous = status.parse_status(pdd.get("status"))
    target = CellTarget(spec.engine.image, spec.engine.version, 0, 0)
    wanted = [
        (str(o["kind"]), str(o["metadata"]["name"]))
        for o in manifests.desired_objects(owner, spec, [target])
    ]
    observed = rt.kube.observe(namespace, name, wanted)
    cells = observe.cells(observed, uid)

    metrics, metrics_error = _read_metrics(rt, spec, namespace, name, now)
    memory = rt.memory.get(uid) or status.memory_from_status(
        previous.memory if previous else None, now
    )
    roll = rt.rollouts.get(uid) or rollout.state_from_status(
        previous.rollout if previous else None, spec, cells, now
    )
    prefill_obs, decode_obs = rollout.policy_pools(cells, roll)
    decision = decide(
        TickInput(
            now=now,
            spec=spec,
            metrics=metrics,
            prefill=prefill_obs,
            decode=decode_obs,
            memory=memory,
            rollout_in_progress=rollout.in_progress(spec, cells, roll),
        )
    )
    step = rollout.step(spec, cells, (decision.prefill, decision.decode), now, roll)
    desired = _freeze_other_versions(
        manifests.desired_objects(owner, spec, list(step.targets())), observed, spec, uid
    )
    running = metrics.decode.running_by_pod if metrics else {}
    the_plan = plan(uid, desired, observed, running)

    auto = spec.scaling.mode == "Auto"
    events: list[str] = []
    if auto:
        for action in the_plan.writes:
            rt.kube.execute(namespace, action, observed)
            rt.telemetry.record_write(action.verb.value, action.kind)
    events += _warn_foreign(rt, pdd, the_plan)

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
            generation=int(meta.get("generation") or 0),
            spec=spec,
            decision=decision,
            metrics=metrics,
            prefill=prefill_obs,
            decode=decode_obs,
            active_version=step.active_version,
            target_version=spec.engine.version,
            progress=step.progress,
            previous=previous,
            memory_window_seconds=spec.scaling.scale_down_stabilization_seconds,
            metrics_error=metrics_error,
        )
    )
    if auto:
        events += _action_events(rt, pdd, the_plan)
    events += _decision_events(rt, pdd, new_status, previous, auto)
    events += _rollout_events(rt, pdd, step.events)
    written = status.status_changed(new_status, pdd.get("status"))
    if written:
        rt.kube.patch_status(namespace, name, new_status.to_k8s(), pdd.get("status"))
        rt.telemetry.record_write("status", "PDDeployment")
    rt.memory[uid] = kept_memory
    if auto:
        rt.rollouts[uid] = step.state
    done = report(
        decision=decision,
        plan=the_plan,
        metrics=metrics,
        metrics_error=metrics_error,
        applied=auto and bool(the_plan.writes),
        status_written=written,
        events=tuple(events),
    )
    before = {Role.PREFILL: prefill_obs.replicas, Role.DECODE: decode_obs.replicas}
    ready = {Role.PREFILL: prefill_obs, Role.DECODE: decode_obs}
    rt.telemetry.record_tick(namespace, name, decision, before, ready, metrics, done.seconds)
    return done


def _parse_spec(rt: Runtime, pdd: Obj) -> PDDeploymentSpec | None:
    """The typed spec; a spec the API server admitted but the model refuses (a CRD
    older than the operator) gets one Warning Event per generation."""
    try:
        return PDDeploymentSpec.model_validate(pdd.get("spec") or {})
    except pydantic.ValidationError as err:
        meta = pdd["metadata"]
        key = ("invalid", str(meta.get("uid")), str(meta.get("generation")))
        if key not in rt.warned:
            rt.warned.add(key)
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            rt.kube.event(pdd, "InvalidSpec", f"spec.{where}: {first['msg']}", "Warning")
        return None


def _freeze_other_versions(
    desired: list[Obj], observed: Observed, spec: PDDeploymentSpec, uid: str
) -> list[Obj]:
    """Pool Deployments of cells other than the spec's version keep the template they
    were rendered with (``manifests.frozen_pool``); only their replicas follow the plan."""
    spec_rev = naming.revision(spec.engine.image, spec.engine.version)
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


def _read_metrics(
    rt: Runtime, spec: PDDeploymentSpec, namespace: str, name: str, now: float
) -> tuple[MetricsSnapshot | None, str | None]:
    try:
        if rt.metrics_source is not None:
            return rt.metrics_source(spec, namespace, name, now), None
        client = rt.prometheus(spec.metrics.prometheus.url)
        return read_snapshot(client, spec, namespace, name, now), None
    except MetricsUnavailableError as err:
        return None, err.message


# -------------------------------------------------------------------------- events


def _event(rt: Runtime, pdd: Obj, reason: str, message: str, type_: str = "Normal") -> str:
    rt.kube.event(pdd, reason, message, type_)
    rt.telemetry.record_write("event", "Event")
    return f"{type_} {reason}: {message}"


_VERB_REASON = {
    Verb.CREATE: "Created",
    Verb.UPDATE: "Updated",
    Verb.DELETE: "Deleted",
}


def _action_events(rt: Runtime, pdd: Obj, the_plan: Plan) -> list[str]:
    """One Event per create/update/delete, one per batch of deletion-cost annotations.
    Replica changes are told by the decision's Event (its sentence has the numbers)."""
    out: list[str] = []
    costs = [a for a in the_plan.writes if a.verb is Verb.ANNOTATE_POD]
    for action in the_plan.writes:
        reason = _VERB_REASON.get(action.verb)
        if reason is not None:
            out.append(_event(rt, pdd, f"{reason}{action.kind}", _describe(action)))
    if costs:
        pods = ", ".join(f"{a.name}={a.message.split('=')[-1]}" for a in costs)
        out.append(_event(rt, pdd, "SetDeletionCost", f"decode pod-deletion-cost: {pods}"))
    return out


def _describe(action: Action) -> str:
    """``Deployment chat-v1-abcde-decode (cell retired)``."""
    return f"{action.kind} {action.name}" + (f" ({action.message})" if action.message else "")


def _warn_foreign(rt: Runtime, pdd: Obj, the_plan: Plan) -> list[str]:
    """A Warning Event per object we want but do not own, once per process."""
    uid = str(pdd["metadata"]["uid"])
    out: list[str] = []
    for action in the_plan.actions:
        key = ("foreign", uid, action.kind, action.name)
        if action.verb is Verb.WARN and key not in rt.warned:
            rt.warned.add(key)
            out.append(_event(rt, pdd, "NotOwned", action.describe(), "Warning"))
    return out


def _decision_events(
    rt: Runtime,
    pdd: Obj,
    new: PDDeploymentStatus,
    previous: PDDeploymentStatus | None,
    auto: bool,
) -> list[str]:
    """An Event when a new decision is published (not for a steady Hold)."""
    ld = new.last_decision
    old = previous.last_decision if previous else None
    if ld is None or ld == old or (ld.action or "").startswith("Hold"):
        return []
    reason = ld.action or "Decision"
    message = ld.message or reason
    if not auto:
        reason, message = f"Recommend{reason}", f"(Recommend mode, not applied) {message}"
    return [_event(rt, pdd, reason, message)]


def _rollout_events(rt: Runtime, pdd: Obj, events: tuple[tuple[str, str, str], ...]) -> list[str]:
    return [_event(rt, pdd, reason, message, type_) for type_, reason, message in events]


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
