"""One reconcile tick of one PDDeployment: ``reconcile_once`` (docs/design.md §2), and the
process-wide ``Runtime`` it runs in.

Owns: the shell of a tick, level-triggered and idempotent (sample-controller's
``syncHandler``), in three steps:

1. read: the PDDeployment (gone or being deleted: nothing to do; read leniently: fields
   this version does not know are ignored with a Warning Event ``UnknownFields``, a spec
   the pure model refuses gets ``InvalidSpec``, each once per generation), its owned
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
anything except through ``kube.py``. The policy memory and rollout state live in the
Runtime between ticks and, compacted, in the status for a restarted operator.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pydantic

from pdscaler import rollout, status, tick
from pdscaler.kube import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    Kube,
    KubeError,
    TokenBucket,
    load_api_client,
)
from pdscaler.manifests import Meta
from pdscaler.plan import Action, Plan
from pdscaler.prometheus import (
    DEFAULT_ALLOWED_URLS,
    DEFAULT_MAX_BODY_BYTES,
    Credentials,
    MetricsUnavailableError,
    PrometheusClient,
    PrometheusStats,
    SecretCache,
    SecretUnreadableError,
    credentials_from,
    parse_allowed_urls,
    read_snapshot,
    url_allowed,
)
from pdscaler.spec import PDDeploymentSpec, parse_spec_lenient
from pdscaler.telemetry import Telemetry
from pdscaler.types import (
    ConditionReason,
    Decision,
    EventReason,
    MetricsErrorReason,
    MetricsSnapshot,
    PolicyMemory,
    Role,
)

log = logging.getLogger("pdscaler.reconcile")

#: Overrides every PDDeployment's ``metrics.prometheus.url`` (an operator run outside
#: the cluster, e.g. the lab demo, reaching Prometheus on another address).
PROMETHEUS_URL_ENV = "PDSCALER_PROMETHEUS_URL"
#: The Prometheus URLs (comma-separated prefixes) a PDDeployment may name; unset: only
#: ``prometheus.DEFAULT_ALLOWED_URLS`` (the CRD's default URL).
PROMETHEUS_ALLOWED_URLS_ENV = "PDSCALER_PROMETHEUS_ALLOWED_URLS"
#: The largest Prometheus answer read, in bytes (default 4 MiB).
PROMETHEUS_MAX_BODY_ENV = "PDSCALER_PROMETHEUS_MAX_BODY_BYTES"
#: The API client's rate limit (requests a second, burst; ``kube.DEFAULT_QPS`` and
#: ``DEFAULT_BURST`` when unset; 0 qps: none) and whether ticks read the owned objects
#: from watch caches (default) or LIST them every tick (``0``).
KUBE_QPS_ENV = "PDSCALER_KUBE_QPS"
KUBE_BURST_ENV = "PDSCALER_KUBE_BURST"
KUBE_CACHE_ENV = "PDSCALER_KUBE_CACHE"
PROMETHEUS_TIMEOUT_SECONDS = 5.0  # the total deadline of one query
#: How long a PDDeployment whose query ran into its deadline is not read again: its
#: ticks fail at once with the same error instead of each holding a tick thread for a
#: whole deadline (per PDDeployment, so one tenant's slow query pauses no one else).
PROMETHEUS_PAUSE_SECONDS = 30.0

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
    Prometheus clients by URL (one per PDDeployment when it has credentials,
    ``metrics.prometheus.auth``), the Secrets those name, telemetry, the policy memory
    and rollout state by PDDeployment uid, what a tick left (``failing_since``,
    ``urls``, the Events published once), and a lock per PDDeployment (kopf may run a
    spec-change handler while its daemon ticks).

    ``prometheus_url`` replaces every PDDeployment's URL (then no PDDeployment's own URL
    is ever contacted); otherwise a PDDeployment's URL is queried only if it is under one
    of ``prometheus_allowed`` (``prometheus.url_allowed``; None: any URL, for tests and
    embedding; ``from_environment`` always sets a list).
    """

    kube: Kube
    telemetry: Telemetry = field(default_factory=Telemetry)
    clock: Callable[[], float] = time.time
    prometheus_url: str | None = None
    prometheus_allowed: tuple[str, ...] | None = None
    prometheus_max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    prometheus_timeout: float = PROMETHEUS_TIMEOUT_SECONDS
    prometheus_pause: float = PROMETHEUS_PAUSE_SECONDS
    monotonic: Callable[[], float] = time.monotonic  # for the pauses (tests replace it)
    #: Replaces Prometheus (tests, the overhead benchmark): returns the snapshot or
    #: raises ``MetricsUnavailableError``.
    metrics_source: Callable[[PDDeploymentSpec, str, str, float], MetricsSnapshot] | None = None
    memory: dict[str, PolicyMemory] = field(default_factory=dict)
    last: dict[tuple[str, str], TickReport] = field(default_factory=dict)
    intervals: dict[tuple[str, str], float] = field(default_factory=dict)
    rollouts: dict[str, rollout.RolloutState] = field(default_factory=dict)
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    #: (namespace, name) -> when its first failed tick since its last good one started
    #: (``TickFacts.unobserved``); kept when a new leader clears the memory
    failing_since: dict[tuple[str, str], float] = field(default_factory=dict)
    warned: set[tuple[str, ...]] = field(default_factory=set)
    #: (namespace, name) -> the Prometheus URL its last snapshot was read from
    urls: dict[tuple[str, str], str] = field(default_factory=dict)
    ticks: int = 0  # reconcile_once calls so far (tests, the benchmark)
    #: Queries and connections of every Prometheus client (``pdscaler_prometheus_*``).
    prometheus_stats: PrometheusStats = field(default_factory=PrometheusStats)
    _clients: dict[str, PrometheusClient] = field(default_factory=dict)
    #: (namespace, name) -> its client with credentials (metrics.prometheus.auth)
    _auth_clients: dict[tuple[str, str], tuple[str, PrometheusClient]] = field(default_factory=dict)
    _secrets: SecretCache | None = None
    #: (namespace, name) -> (paused until, the URL, its error)
    _paused: dict[tuple[str, str], tuple[float, str, MetricsUnavailableError]] = field(
        default_factory=dict
    )
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def from_environment() -> Runtime:
        """The kubeconfig / in-cluster API client, ``$PDSCALER_PROMETHEUS_URL``, the
        allow-list ``$PDSCALER_PROMETHEUS_ALLOWED_URLS`` (unset or empty: the CRD's default
        URL only) and ``$PDSCALER_PROMETHEUS_MAX_BODY_BYTES``. Raises ValueError for a
        body cap that is not a positive integer."""
        allowed = parse_allowed_urls(os.environ.get(PROMETHEUS_ALLOWED_URLS_ENV, ""))
        cap = os.environ.get(PROMETHEUS_MAX_BODY_ENV, "").strip()
        max_body = int(cap) if cap else DEFAULT_MAX_BODY_BYTES
        if max_body <= 0:
            raise ValueError(f"{PROMETHEUS_MAX_BODY_ENV} must be a positive number of bytes")
        qps = float(os.environ.get(KUBE_QPS_ENV, "").strip() or DEFAULT_QPS)
        burst = int(os.environ.get(KUBE_BURST_ENV, "").strip() or DEFAULT_BURST)
        if qps < 0 or burst < 1:
            raise ValueError(f"{KUBE_QPS_ENV} must be >= 0 and {KUBE_BURST_ENV} >= 1")
        cache = os.environ.get(KUBE_CACHE_ENV, "1").strip().lower() not in ("0", "false", "no")
        kube = Kube(load_api_client())
        kube.limiter = TokenBucket(qps, burst)
        kube.cache = cache
        rt = Runtime(
            kube=kube,
            prometheus_url=os.environ.get(PROMETHEUS_URL_ENV) or None,
            prometheus_allowed=allowed or DEFAULT_ALLOWED_URLS,
            prometheus_max_body_bytes=max_body,
        )
        stats = rt.prometheus_stats
        rt.telemetry.track_requests(
            lambda: rt.kube.request_counts.snapshot(), lambda: (stats.queries, stats.connections)
        )
        return rt

    def prometheus(
        self,
        url: str,
        credentials: Credentials | None = None,
        owner: tuple[str, str] | None = None,
    ) -> PrometheusClient:
        """The client for a PDDeployment's ``metrics.prometheus.url`` (or the override),
        with the ``credentials`` of PDDeployment ``owner`` if any (one such client per
        PDDeployment, rebuilt when they change). Raises ``MetricsUnavailableError``
        (``PrometheusNotAllowed``) for a URL outside the allow-list: no request is made
        and no Secret read."""
        target = self.prometheus_url or url
        allowed = self.prometheus_allowed
        if self.prometheus_url is None and allowed is not None and not url_allowed(url, allowed):
            raise MetricsUnavailableError(
                MetricsErrorReason.NOT_ALLOWED,
                f"metrics.prometheus.url is not one the operator may query "
                f"(allowed: {', '.join(allowed)}); no query sent",
            )
        if credentials is not None and owner is not None:
            key = f"{target} {credentials.fingerprint()}"
            with self._guard:
                held = self._auth_clients.get(owner)
                if held is not None and held[0] == key:
                    return held[1]
            client = PrometheusClient(
                target,
                self.prometheus_timeout,
                self.prometheus_max_body_bytes,
                credentials,
                stats=self.prometheus_stats,
            )
            with self._guard:
                replaced = self._auth_clients.get(owner)
                self._auth_clients[owner] = (key, client)
            if replaced is not None:
                replaced[1].close()  # its kept-alive connections
            return client
        with self._guard:
            shared = target.rstrip("/")  # the client's own url: what ``urls`` holds
            if shared not in self._clients:
                self._clients[shared] = PrometheusClient(
                    target,
                    self.prometheus_timeout,
                    self.prometheus_max_body_bytes,
                    stats=self.prometheus_stats,
                )
            return self._clients[shared]

    def _set_url(self, key: tuple[str, str], url: str | None) -> PrometheusClient | None:
        """Under ``_guard``: PDDeployment ``key`` now reads ``url`` (None: gone); returns
        the shared client of its previous URL if nothing reads that one any more (the
        caller closes it outside the guard)."""
        old = self.urls.pop(key, None)
        if url is not None:
            self.urls[key] = url
        if old is None or old == url or old in self.urls.values():
            return None
        return self._clients.pop(old, None)

    def snapshot(
        self, spec: PDDeploymentSpec, namespace: str, name: str, now: float
    ) -> MetricsSnapshot:
        """``read_snapshot`` through the allow-list (``prometheus``), unless the
        PDDeployment is paused: after a query that ran into its deadline, its Prometheus
        is not asked again for ``prometheus_pause`` seconds and its ticks get the same
        error at once. Raises ``MetricsUnavailableError``."""
        key = (namespace, name)
        prom = spec.metrics.prometheus
        if prom.auth is None and not prom.insecure_skip_verify:
            self._drop_auth_client(key)
            self.secrets().forget(key)
            client = self.prometheus(prom.url)
        else:
            self.prometheus(prom.url)  # the allow-list first: no Secret read for a refused URL
            names = prom.auth.secret_names() if prom.auth is not None else []
            data = self.secrets().read(namespace, names, user=key)
            client = self.prometheus(prom.url, credentials_from(prom, data, namespace), key)
        with self._guard:
            unused = self._set_url(key, client.url)
            paused = self._paused.get(key)
            if paused is not None and (self.monotonic() >= paused[0] or paused[1] != client.url):
                del self._paused[key]
                paused = None
        if unused is not None:
            unused.close()  # its kept-alive connections
        if paused is not None:
            raise paused[2]
        try:
            return read_snapshot(client, spec, namespace, name, now)
        except MetricsUnavailableError as err:
            if err.reason == MetricsErrorReason.UNAUTHORIZED and prom.auth is not None:
                self.secrets().refresh(namespace, prom.auth.secret_names())  # rotated?
            if err.timed_out and self.prometheus_pause > 0:
                with self._guard:
                    until = self.monotonic() + self.prometheus_pause
                    self._paused[key] = (until, client.url, err)
            raise

    def _drop_auth_client(self, key: tuple[str, str]) -> None:
        """Drop and close PDDeployment ``key``'s client with credentials, if it has one."""
        with self._guard:
            dropped = self._auth_clients.pop(key, None)
        if dropped is not None:
            dropped[1].close()  # its kept-alive connections

    def secrets(self) -> SecretCache:
        """The cache of the Secrets ``metrics.prometheus.auth`` names (read through
        ``kube.read_secret``)."""
        with self._guard:
            if self._secrets is None:
                self._secrets = SecretCache(_secret_reader(self.kube))
            return self._secrets

    def lock(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def interval(self, namespace: str, name: str) -> float:
        """The PDDeployment's ``scaling.interval`` as last read (15 s before a tick)."""
        return self.intervals.get((namespace, name), 15.0)

    def forget(self, namespace: str, name: str) -> None:
        """Drop everything kept for a PDDeployment that is gone (deleted, or out of the
        operator's scope): its policy memory and rollout state, reports, the Events
        published once, its lock, its metric series, the Prometheus client no other
        PDDeployment uses, and the namespace's caches when no PDDeployment is left.
        Waits for a tick of it that is running (which would record its series again)."""
        with self.lock(namespace, name):
            self._forget(namespace, name)

    def _forget(self, namespace: str, name: str) -> None:
        """``forget`` under the PDDeployment's lock (a tick that found it gone)."""
        uid = self.uids.pop((namespace, name), None)
        if uid is not None:
            self._forget_uid(uid)
        self.last.pop((namespace, name), None)
        self.intervals.pop((namespace, name), None)
        self.failing_since.pop((namespace, name), None)
        with self._guard:
            self._paused.pop((namespace, name), None)
            self._locks.pop((namespace, name), None)
            client = self._set_url((namespace, name), None)
        if client is not None:
            client.close()
        self._drop_auth_client((namespace, name))
        self.secrets().forget((namespace, name))
        self.telemetry.forget(namespace, name)
        if not any(ns == namespace for ns, _ in self.uids):
            self.kube.release(namespace)

    def _forget_uid(self, uid: str) -> None:
        """Drop what is kept by uid (a PDDeployment deleted, or replaced by a new one
        of the same name)."""
        self.memory.pop(uid, None)
        self.rollouts.pop(uid, None)
        self.warned = {key for key in self.warned if len(key) < 2 or key[1] != uid}

    def tick(self, namespace: str, name: str) -> TickReport | None:
        """``reconcile_once`` under the PDDeployment's lock; errors are logged and
        counted, never raised (the next tick retries: level-triggered). The start of
        the first failed tick since the last good one is kept in ``failing_since``."""
        with self.lock(namespace, name):
            started = self.clock()
            try:
                report = reconcile_once(self, namespace, name)
            except Exception:
                log.exception("reconcile of %s/%s failed", namespace, name)
                self.telemetry.errors.labels(namespace, name).inc()
                self.failing_since.setdefault((namespace, name), started)
                return None
            return report


def _secret_reader(kube: Kube) -> Callable[[str, str], dict[str, bytes] | None]:
    """``kube.read_secret`` with the API's refusals as ``SecretUnreadableError``."""

    def read(namespace: str, name: str) -> dict[str, bytes] | None:
        try:
            return kube.read_secret(namespace, name)
        except KubeError as err:
            raise SecretUnreadableError(err.status, err.reason) from None

    return read


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
        if read == "not found":
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


def _read(rt: Runtime, namespace: str, name: str) -> tuple[Obj, tick.TickFacts] | str:
    """The tick's facts from the API server, Prometheus and the Runtime's memory, or
    why there is nothing to do (``not found``, ``being deleted``, ``invalid spec``)."""
    pdd = rt.kube.get_pdd(namespace, name)
    if pdd is None:
        rt._forget(namespace, name)
        return "not found"
    meta = pdd["metadata"]
    if meta.get("deletionTimestamp"):
        return "being deleted"
    spec = _parse_spec(rt, pdd)
    if spec is None:
        return "invalid spec"
    rt.intervals[(namespace, name)] = spec.scaling.interval_seconds
    now = rt.clock()
    uid = str(meta["uid"])
    previous = rt.uids.get((namespace, name))
    if previous is not None and previous != uid:  # deleted and made again meanwhile
        rt._forget_uid(previous)
    rt.uids[(namespace, name)] = uid
    owner = Meta(name=name, namespace=namespace, uid=uid)
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
    )


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
    if changed:
        try:
            rt.kube.patch_status(namespace, name, new_status.to_k8s(), pdd.get("status"))
            rt.telemetry.record_write("status", "PDDeployment")
        except KubeError as err:
            log.warning("status of %s/%s not written: %s", namespace, name, err)
    # the status as written (with the refused writes), not as computed
    rt.telemetry.record_status(
        namespace,
        name,
        ((c.type, c.status) for c in new_status.conditions or []),
        new_status.rollout.phase if new_status.rollout else None,
    )
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
    rt.telemetry.record_write(action.verb.value, action.kind)
    return None


def _publish(rt: Runtime, pdd: Obj, event: tick.Event) -> str | None:
    """Publish one Event (a keyed one at most once per process); its log line, or None
    when the API server refused it (an Event is never worth failing the tick for)."""
    if event.once is not None:
        rt.warned.add(event.once)
    try:
        rt.kube.event(pdd, event.reason, event.message, event.type)
    except KubeError as err:
        log.warning("event %s not published: %s", event.reason, err)
        return None
    rt.telemetry.record_write("event", "Event")
    return event.line()


def _parse_spec(rt: Runtime, pdd: Obj) -> PDDeploymentSpec | None:
    """The typed spec, read leniently (``spec.parse_spec_lenient``): fields this operator
    does not know (a CRD newer than the operator) are ignored and named in one Warning
    Event ``UnknownFields`` per generation, and the PDDeployment keeps scaling. A spec the
    model refuses in the fields it knows gets one Warning Event per generation."""
    meta = pdd["metadata"]
    try:
        spec, unknown = parse_spec_lenient(pdd.get("spec") or {})
    except pydantic.ValidationError as err:
        key = ("invalid", str(meta.get("uid")), str(meta.get("generation")))
        if key not in rt.warned:
            rt.warned.add(key)
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            rt.kube.event(pdd, EventReason.INVALID_SPEC, f"spec.{where}: {first['msg']}", "Warning")
        return None
    key = ("unknown", str(meta.get("uid")), str(meta.get("generation")))
    if unknown and key not in rt.warned:
        rt.warned.add(key)
        rt.kube.event(pdd, EventReason.UNKNOWN_FIELDS, unknown_fields_message(unknown), "Warning")
    return spec


def unknown_fields_message(unknown: tuple[str, ...]) -> str:
    """``spec.a, spec.b.c: not known to this pdscaler version (a newer CRD?); ignored``
    (at most 10 paths, then how many more)."""
    shown = ", ".join(unknown[:10]) + (
        f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
    )
    return f"{shown}: not known to this pdscaler version (a newer CRD?); ignored"


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
