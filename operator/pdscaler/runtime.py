"""The process-wide ``Runtime`` a reconcile tick runs in (docs/design.md §2), and what
one tick reports (``TickReport``).

Owns: everything that outlives a tick: the API client (``from_environment``: the
kubeconfig or in-cluster client, its rate limit and caches, the Prometheus URL override,
allow-list and body cap from ``$PDSCALER_*``), the Prometheus clients by URL (one per
PDDeployment with credentials) and the Secrets they name, the pause of a PDDeployment
whose query ran into its deadline (``snapshot``), telemetry, the policy memory and
rollout state by uid, a lock per PDDeployment, and ``forget`` for one that is gone.
Must not: decide or write anything (``reconcile`` reads, computes and applies a tick,
and ``reconcile.run_tick`` runs it under the PDDeployment's lock), or import
``reconcile`` (which imports this module).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdscaler import rollout
from pdscaler.kube import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    Kube,
    KubeError,
    TokenBucket,
    load_api_client,
)
from pdscaler.plan import Plan
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
from pdscaler.spec import PDDeploymentSpec
from pdscaler.telemetry import Telemetry
from pdscaler.types import (
    Decision,
    MetricsErrorReason,
    MetricsSnapshot,
    PolicyMemory,
)

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
#: A snapshot that took at least this fraction of the query deadline (4 s of 5 s: its
#: queries ran close to the deadline, e.g. heavy custom queries) is used, then its
#: PDDeployment is paused as above, the pause doubled for each such snapshot in a row
#: (30, 60, 120, 240 s at most): one tenant's slow queries cannot hold the tick threads
#: every interval. A fast snapshot resets the doubling.
SLOW_SNAPSHOT_FRACTION = 0.8
MAX_PAUSE_DOUBLINGS = 3

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
    #: (namespace, name) -> its slow snapshots in a row (``SLOW_SNAPSHOT_FRACTION``)
    _slow: dict[tuple[str, str], int] = field(default_factory=dict)
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
        rt.telemetry.track_retries(lambda: rt.kube.retry_snapshot())
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
            # a fresh traceback: raising the stored error as it is would add this tick's
            # frames to those of every paused tick before it, and keep them all alive
            raise paused[2].with_traceback(None)
        try:
            started = self.monotonic()
            snap = read_snapshot(client, spec, namespace, name, now)
            self._back_off_if_slow(key, client.url, self.monotonic() - started)
            return snap
        except MetricsUnavailableError as err:
            if err.reason == MetricsErrorReason.UNAUTHORIZED and prom.auth is not None:
                self.secrets().refresh(namespace, prom.auth.secret_names())  # rotated?
            if err.timed_out and self.prometheus_pause > 0:
                said = MetricsUnavailableError(  # the status says the tenant is backed off
                    err.reason,
                    f"{err.message}; not read again for {self.prometheus_pause:g}s",
                    timed_out=True,
                )
                with self._guard:
                    until = self.monotonic() + self.prometheus_pause
                    self._paused[key] = (until, client.url, said)
                raise said from None
            raise

    def _back_off_if_slow(self, key: tuple[str, str], url: str, took: float) -> None:
        """Pause PDDeployment ``key`` after a snapshot that took ``took`` seconds, at
        least ``SLOW_SNAPSHOT_FRACTION`` of the deadline: ``prometheus_pause`` doubled
        per slow snapshot in a row; its ticks meanwhile fail at once, saying why
        ("the last snapshot took 4.6s of the 5s deadline ...")."""
        with self._guard:
            slow = took >= SLOW_SNAPSHOT_FRACTION * self.prometheus_timeout
            if not slow or self.prometheus_pause <= 0:
                self._slow.pop(key, None)
                return
            row = self._slow.get(key, 0) + 1
            self._slow[key] = row
            pause = self.prometheus_pause * 2 ** min(row - 1, MAX_PAUSE_DOUBLINGS)
            err = MetricsUnavailableError(
                MetricsErrorReason.UNREACHABLE,
                f"{url}: the last snapshot took {took:.1f}s of the"
                f" {self.prometheus_timeout:g}s deadline; not read again for {pause:g}s",
            )
            self._paused[key] = (self.monotonic() + pause, url, err)

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
            self._slow.pop((namespace, name), None)
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


def _secret_reader(kube: Kube) -> Callable[[str, str], dict[str, bytes] | None]:
    """``kube.read_secret`` with the API's refusals as ``SecretUnreadableError``."""

    def read(namespace: str, name: str) -> dict[str, bytes] | None:
        try:
            return kube.read_secret(namespace, name)
        except KubeError as err:
            raise SecretUnreadableError(err.status, err.reason) from None

    return read
