"""The operator's own metrics and its HTTP endpoint (``/metrics`` and ``/healthz``).

Owns: the prometheus-client series the operator exports about itself, per
PDDeployment (``namespace``, ``name`` labels):

* ``pdscaler_decisions_total{pool,direction,reason}``: decisions that changed (or, in
  Recommend mode, would change) a pool; direction ``up``/``down``/``none``;
* ``pdscaler_role_flips_total{source,target}``: replicas a decision moved (or, in
  Recommend mode, would move) from one pool to the other by a role flip;
* ``pdscaler_desired_replicas{pool}`` / ``pdscaler_ready_replicas{pool}``;
* what the last tick measured, one unit per name (unknown = NaN, never 0):
  ``pdscaler_observed_requests_per_second`` (R), ``pdscaler_observed_prompt_tokens``
  (L_p) and ``pdscaler_observed_output_tokens`` (L_d) (means per request),
  ``pdscaler_observed_queue_requests{pool}``, ``pdscaler_observed_ttft_seconds`` and
  ``pdscaler_observed_tpot_seconds`` (at the SLO percentile);
* the models' numbers of the last decision: ``pdscaler_model_replicas{pool}``
  (fractional N_P, N_D), ``pdscaler_model_pd_ratio`` (N_P / N_D),
  ``pdscaler_model_drain_seconds``, ``pdscaler_model_replica_tokens_per_second{pool}``
  (the per-replica capacities used), ``pdscaler_model_startup_seconds`` (T_s),
  ``pdscaler_model_forecast_requests_per_second``;
* ``pdscaler_reconcile_duration_seconds`` (histogram), ``pdscaler_reconcile_errors_total``;
* ``pdscaler_api_writes_total{verb,kind}``: every write to the API server;
* ``pdscaler_condition{type,status}``: 1 for the status each condition of
  ``status.conditions`` has, 0 for the two others (kube-state-metrics' convention: the
  series of a condition exist from the first tick, so an alert's ``for`` clock is not
  reset by a series appearing); at most 6 types x 3 statuses per PDDeployment;
* ``pdscaler_rollout_phase{phase}``: 1 for ``status.rollout.phase`` (Stable, Progressing,
  RollingBack, Complete, RolledBack), 0 for the others; 5 series per PDDeployment;
* ``pdscaler_condition_reason{type,reason}``: 1 while the condition is True, 0 while
  False, one series per condition type (its current reason: the dashboard's legend);
* ``pdscaler_rollout_step``: capacity-shift steps of the version rollout in flight or
  the last one;
* ``pdscaler_slo_seconds{slo}`` (``ttft``/``tpot``), ``pdscaler_gpu_budget``
  (``scaling.maxGPUs``) and ``pdscaler_gpus_per_replica{pool}``: the spec's targets, so
  a dashboard draws them next to what was measured;
* ``pdscaler_leader``: 1 while this replica may write (holds the Lease, fence open);
* ``pdscaler_writes_sent_total``: writes that passed the fence and were sent, counted
  as they leave (``Kube.audit``, a counter read at scrape time: ``track_writes_sent``),
  so a write in flight when the process was stopped is counted before the stop;
* ``pdscaler_build_info{version,commit,python}``: 1 (the package version, the commit
  from ``$PDSCALER_COMMIT`` else the source checkout's ``git`` HEAD else ``unknown``);
* prometheus-client's process (``process_cpu_seconds_total``,
  ``process_resident_memory_bytes``, ``process_open_fds``, ...), platform
  (``python_info``) and garbage-collector (``python_gc_*``) collectors;
* ``pdscaler_kube_requests_total{verb,resource}``: every request to the API server
  (reads, watches, writes, the Lease), ``pdscaler_prometheus_requests_total`` (queries)
  and ``pdscaler_prometheus_connections_total`` (connections opened): read from the
  clients' own counters at scrape time (``track_requests``);
* ``pdscaler_kube_retries_total{verb,resource,reason}``: requests the API client sent
  again (``reason``: the answer's status, ``connect`` or ``read``), read from its own
  counter at scrape time (``track_retries``): a brown-out shows here, not only as slow
  ticks;

and a small HTTP server for them plus a liveness probe (``/healthz``: 200 while the
``healthy`` callback says so: ``liveness.verdict`` of the tick loop's and the elector's
progress). Each ``Telemetry`` has its own
registry, so tests can make several. Must not: decide anything or talk to
Kubernetes. Every per-PDDeployment series is dropped when the PDDeployment goes
(``forget``). Example: a tick that scaled decode 4 -> 6 on chat adds one to
``pdscaler_decisions_total{namespace="serving",name="chat",pool="decode",direction="up",
reason="ScaledDecode"}`` and sets ``pdscaler_desired_replicas{...,pool="decode"}`` to 6;
with MetricsAvailable=False it sets ``pdscaler_condition{...,type="MetricsAvailable",
status="False"}`` to 1 and the ``True`` and ``Unknown`` series to 0 (the chart's
PrometheusRule alerts on these).
"""

from __future__ import annotations

import functools
import http.server
import math
import os
import platform
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.types import (
    ConditionType,
    Decision,
    MetricsSnapshot,
    ModelOutputs,
    PoolObservation,
    Role,
    RolloutPhase,
)

_KEY = ("namespace", "name")
_POOL = ("pool",)
#: The tick's inputs: key -> (metric, extra labels, help); one unit per metric name.
OBSERVED: dict[str, tuple[str, tuple[str, ...], str]] = {
    "rate": (
        "pdscaler_observed_requests_per_second",
        (),
        "R: requests/s arriving, as the last tick measured it over the metrics window.",
    ),
    "prompt_tokens": (
        "pdscaler_observed_prompt_tokens",
        (),
        "L_p: mean prompt tokens per request over the metrics window.",
    ),
    "output_tokens": (
        "pdscaler_observed_output_tokens",
        (),
        "L_d: mean output tokens per request over the metrics window.",
    ),
    "queue": ("pdscaler_observed_queue_requests", _POOL, "Requests waiting in a pool."),
    "ttft": ("pdscaler_observed_ttft_seconds", (), "TTFT at the SLO percentile."),
    "tpot": ("pdscaler_observed_tpot_seconds", (), "TPOT at the SLO percentile."),
}
#: The models' numbers of the last decision: key -> (metric, extra labels, help).
MODEL: dict[str, tuple[str, tuple[str, ...], str]] = {
    "replicas": (
        "pdscaler_model_replicas",
        _POOL,
        "Fractional replicas the ratio model sizes a pool at (N_P, N_D).",
    ),
    "ratio": ("pdscaler_model_pd_ratio", (), "N_P / N_D of the ratio model."),
    "drain": (
        "pdscaler_model_drain_seconds",
        (),
        "Predicted drain time of the scaled pool's backlog (NaN: never).",
    ),
    "replica_tps": (
        "pdscaler_model_replica_tokens_per_second",
        _POOL,
        "Tokens/s one replica of a pool sustains, as used (after online refinement).",
    ),
    "startup": ("pdscaler_model_startup_seconds", (), "T_s: replica startup time used."),
    "forecast": (
        "pdscaler_model_forecast_requests_per_second",
        (),
        "The forecast request rate the decision sized for.",
    ),
}
CONDITION_STATUSES = ("True", "False", "Unknown")
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: A tick starts up to the loop's 0.5 s pass after it is due when the tick threads are
#: idle; seconds later when they cannot keep up (bench/results/overhead.md).
LATENESS_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0)


@functools.cache
def build_labels() -> tuple[str, str, str]:
    """``pdscaler_build_info``'s labels: (version, commit, python), e.g. ``("0.1.0",
    "0638ebd4a1b2", "3.11.9")``. The commit is ``$PDSCALER_COMMIT`` (an image build
    sets it), else the HEAD of the git checkout the package runs from (12 digits),
    else ``unknown``."""
    try:
        version = metadata.version("pdscaler")
    except metadata.PackageNotFoundError:
        version = "unknown"
    commit = os.environ.get("PDSCALER_COMMIT", "").strip() or _git_head() or "unknown"
    return version, commit, platform.python_version()


def _git_head() -> str | None:
    """The commit of the source checkout this package runs from (``operator/pdscaler``
    of a pdscaler clone), never of a repository an installed wheel happens to sit in."""
    here = Path(__file__).resolve().parent
    if here.parent.name != "operator" or not (here.parents[1] / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    head = done.stdout.strip()
    return head if done.returncode == 0 and head else None


def direction(before: int, after: int) -> str:
    """``up`` (4 -> 6), ``down`` (6 -> 4) or ``none``."""
    return "up" if after > before else "down" if after < before else "none"


class Telemetry:
    """The metric families of one operator process, in their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "pdscaler_decisions",
            "Decisions that change (Auto) or would change (Recommend) a pool's replicas.",
            [*_KEY, "pool", "direction", "reason"],
            registry=r,
        )
        self.flips = Counter(
            "pdscaler_role_flips",
            "Replicas a decision moves (Auto) or would move (Recommend) to the other pool.",
            [*_KEY, "source", "target"],
            registry=r,
        )
        self.desired = Gauge(
            "pdscaler_desired_replicas", "Replicas the policy wants.", [*_KEY, "pool"], registry=r
        )
        self.ready = Gauge(
            "pdscaler_ready_replicas", "Ready pods of a pool.", [*_KEY, "pool"], registry=r
        )
        self.observed = {
            key: Gauge(metric, text, [*_KEY, *labels], registry=r)
            for key, (metric, labels, text) in OBSERVED.items()
        }
        self.model = {
            key: Gauge(metric, text, [*_KEY, *labels], registry=r)
            for key, (metric, labels, text) in MODEL.items()
        }
        self.duration = Histogram(
            "pdscaler_reconcile_duration_seconds",
            "Wall time of one reconcile tick.",
            list(_KEY),
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.lateness = Histogram(
            "pdscaler_tick_lateness_seconds",
            "How long after it was due a tick started (every PDDeployment together).",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "pdscaler_reconcile_errors", "Ticks that failed.", list(_KEY), registry=r
        )
        self.writes = Counter(
            "pdscaler_api_writes", "Writes sent to the API server.", ["verb", "kind"], registry=r
        )
        self.condition = Gauge(
            "pdscaler_condition",
            "1 for the status a PDDeployment condition has, 0 for the others.",
            [*_KEY, "type", "status"],
            registry=r,
        )
        self.rollout_phase = Gauge(
            "pdscaler_rollout_phase",
            "1 for the phase of the PDDeployment's version rollout, 0 for the others.",
            [*_KEY, "phase"],
            registry=r,
        )
        self.condition_reason = Gauge(
            "pdscaler_condition_reason",
            "1 while the PDDeployment's condition is True, 0 while False (its current reason).",
            [*_KEY, "type", "reason"],
            registry=r,
        )
        self.rollout_step = Gauge(
            "pdscaler_rollout_step",
            "Capacity-shift steps the rollout has taken.",
            list(_KEY),
            registry=r,
        )
        self.slo = Gauge(
            "pdscaler_slo_seconds",
            "The latency objectives of spec.slo (ttft, tpot) at slo.percentile.",
            [*_KEY, "slo"],
            registry=r,
        )
        self.gpu_budget = Gauge(
            "pdscaler_gpu_budget", "spec.scaling.maxGPUs.", list(_KEY), registry=r
        )
        self.gpus_per_replica = Gauge(
            "pdscaler_gpus_per_replica",
            "GPUs of one replica of a pool (spec.<pool>.gpusPerReplica).",
            [*_KEY, "pool"],
            registry=r,
        )
        self.leader = Gauge(
            "pdscaler_leader",
            "1 while this replica may write (holds the Lease and its fence is open).",
            registry=r,
        )
        self.build_info = Gauge(
            "pdscaler_build_info",
            "1, labelled with the operator's version, commit and Python version.",
            ["version", "commit", "python"],
            registry=r,
        )
        self.build_info.labels(*build_labels()).set(1.0)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def track_writes_sent(self, count: Callable[[], int]) -> None:
        """Export ``pdscaler_writes_sent_total``, ``count()`` read at scrape time (the
        audit's count of writes that passed the fence and were sent)."""
        self.registry.register(_SentCollector(count))

    def track_requests(
        self,
        kube: Callable[[], Mapping[tuple[str, str], int]],
        prometheus: Callable[[], tuple[int, int]],
    ) -> None:
        """Export the request counters: ``kube()`` -> {(verb, resource): count},
        ``prometheus()`` -> (queries, connections opened); both read at scrape time."""
        self.registry.register(_RequestCollector(kube, prometheus))

    def track_retries(self, kube: Callable[[], Mapping[tuple[str, str, str], int]]) -> None:
        """Export ``pdscaler_kube_retries_total``: ``kube()`` -> {(verb, resource,
        reason): requests sent again}, read at scrape time."""
        self.registry.register(_RetryCollector(kube))

    def record_tick(
        self,
        namespace: str,
        name: str,
        decision: Decision,
        before: Mapping[Role, int],
        ready: Mapping[Role, PoolObservation],
        metrics: MetricsSnapshot | None,
        seconds: float,
    ) -> None:
        """One tick's numbers. ``before`` is what the pools were asked for before it."""
        for role in Role:
            after = decision.replicas(role)
            self.desired.labels(namespace, name, role.value).set(after)
            self.ready.labels(namespace, name, role.value).set(ready[role].ready)
            moved = direction(before[role], after)
            if moved != "none":
                self.decisions.labels(namespace, name, role.value, moved, decision.action).inc()
        if decision.flip is not None:
            flip = decision.flip
            self.flips.labels(namespace, name, flip.source.value, flip.target.value).inc(flip.count)
        if metrics is not None:  # no answer: the last measured values stay
            self._set_all(self.observed, namespace, name, _observed(metrics))
        self._set_all(self.model, namespace, name, _model(decision.model))
        self.duration.labels(namespace, name).observe(seconds)

    def record_status(
        self,
        namespace: str,
        name: str,
        conditions: Iterable[tuple[str, str]],
        rollout_phase: str | None,
    ) -> None:
        """The conditions (``(type, status)`` pairs) and rollout phase a tick wrote.
        Only the known condition types and phases are exported (bounded cardinality);
        a known type absent from ``conditions`` keeps its last series."""
        known = {t.value for t in ConditionType}
        for ctype, cstatus in conditions:
            if ctype not in known:
                continue
            for value in CONDITION_STATUSES:
                self.condition.labels(namespace, name, ctype, value).set(
                    1.0 if value == cstatus else 0.0
                )
        phase = rollout_phase or RolloutPhase.STABLE.value
        if phase in {p.value for p in RolloutPhase}:
            for p in RolloutPhase:
                self.rollout_phase.labels(namespace, name, p.value).set(
                    1.0 if p.value == phase else 0.0
                )

    def record_targets(
        self, namespace: str, name: str, spec: PDDeploymentSpec, status: PDDeploymentStatus
    ) -> None:
        """The spec's targets, each condition's current reason and the rollout's step,
        as written by the tick: ``Ready`` True with reason ``Serving`` sets
        ``pdscaler_condition_reason{type="Ready",reason="Serving"}`` to 1 and removes the
        series of the type's previous reason (at most one series per condition type)."""
        self.slo.labels(namespace, name, "ttft").set(spec.slo.ttft_seconds)
        self.slo.labels(namespace, name, "tpot").set(spec.slo.tpot_seconds)
        self.gpu_budget.labels(namespace, name).set(spec.scaling.max_gpus)
        for role in Role:
            pool = spec.pool(role)
            self.gpus_per_replica.labels(namespace, name, role.value).set(pool.gpus_per_replica)
        current = {(c.type, c.reason): c.status == "True" for c in status.conditions or []}
        for labels in _label_sets(self.condition_reason):
            if labels[:2] == (namespace, name) and (labels[2], labels[3]) not in current:
                self.condition_reason.remove(*labels)
        for (kind, reason), on in current.items():
            self.condition_reason.labels(namespace, name, kind, reason).set(1.0 if on else 0.0)
        rollout = status.rollout
        self.rollout_step.labels(namespace, name).set((rollout.step if rollout else None) or 0)

    def _set_all(
        self,
        gauges: Mapping[str, Gauge],
        namespace: str,
        name: str,
        values: Mapping[tuple[str, str], float | None],
    ) -> None:
        """``values``: (key, pool or "") -> value; unknown is NaN on the gauge (never a
        fake 0)."""
        for (key, pool), value in values.items():
            labels = (namespace, name, pool) if pool else (namespace, name)
            gauges[key].labels(*labels).set(math.nan if value is None else value)

    def record_write(self, verb: str, kind: str) -> None:
        self.writes.labels(verb, kind).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted PDDeployment (its counters and histogram too:
        an alert on a rate that stopped must not fire for a PDDeployment that is gone)."""
        families: tuple[Gauge | Counter | Histogram, ...] = (
            self.desired,
            self.ready,
            *self.observed.values(),
            *self.model.values(),
            self.condition,
            self.condition_reason,
            self.rollout_phase,
            self.rollout_step,
            self.slo,
            self.gpu_budget,
            self.gpus_per_replica,
            self.decisions,
            self.flips,
            self.duration,
            self.errors,
        )
        for family in families:
            for labels in list(_label_sets(family)):
                if labels[:2] == (namespace, name):
                    family.remove(*labels)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _RequestCollector(Collector):
    def __init__(
        self,
        kube: Callable[[], Mapping[tuple[str, str], int]],
        prometheus: Callable[[], tuple[int, int]],
    ) -> None:
        self.kube = kube
        self.prometheus = prometheus

    def collect(self) -> Iterator[CounterMetricFamily]:
        requests = CounterMetricFamily(
            "pdscaler_kube_requests",
            "Requests sent to the API server (reads, watches, writes, the Lease).",
            labels=["verb", "resource"],
        )
        for (verb, resource), count in sorted(self.kube().items()):
            requests.add_metric([verb, resource], float(count))
        yield requests
        queries, connections = self.prometheus()
        yield CounterMetricFamily(
            "pdscaler_prometheus_requests", "Queries sent to Prometheus.", value=float(queries)
        )
        yield CounterMetricFamily(
            "pdscaler_prometheus_connections",
            "Connections opened to Prometheus.",
            value=float(connections),
        )


class _RetryCollector(Collector):
    def __init__(self, kube: Callable[[], Mapping[tuple[str, str, str], int]]) -> None:
        self.kube = kube

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "pdscaler_kube_retries",
            "Requests the API client sent again after a 429, a 5xx or a connection error "
            "(reason: the status, connect or read).",
            labels=["verb", "resource", "reason"],
        )
        for labels, count in sorted(self.kube().items()):
            family.add_metric(list(labels), float(count))
        yield family


class _SentCollector(Collector):
    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "pdscaler_writes_sent",
            "Writes that passed the fence and were sent, counted before the request leaves.",
            value=float(self.count()),
        )


def _label_sets(family: Gauge | Counter | Histogram) -> list[tuple[str, ...]]:
    # prometheus-client keeps a family's children keyed by their label values, under
    # the family's lock (other threads' ticks add children while one is forgotten)
    with family._lock:
        return [tuple(key) for key in family._metrics]


def _observed(m: MetricsSnapshot) -> dict[tuple[str, str], float | None]:
    return {
        ("rate", ""): m.request_rate,
        ("prompt_tokens", ""): m.prompt_tokens,
        ("output_tokens", ""): m.output_tokens,
        ("queue", Role.PREFILL.value): m.prefill.queue_depth,
        ("queue", Role.DECODE.value): m.decode.queue_depth,
        ("ttft", ""): m.prefill.latency_seconds,
        ("tpot", ""): m.decode.latency_seconds,
    }


def _model(m: ModelOutputs) -> dict[tuple[str, str], float | None]:
    return {
        ("replicas", Role.PREFILL.value): m.n_prefill,
        ("replicas", Role.DECODE.value): m.n_decode,
        ("ratio", ""): m.ratio,
        ("drain", ""): m.drain_seconds,
        ("replica_tps", Role.PREFILL.value): m.prefill_tps,
        ("replica_tps", Role.DECODE.value): m.decode_tps,
        ("startup", ""): m.startup_seconds,
        ("forecast", ""): m.forecast_rate,
    }


class MetricsServer:
    """``/metrics`` and ``/healthz`` on ``host:port`` in a daemon thread (port 0 = any;
    ``port`` holds the bound one). ``host`` defaults to loopback: the chart binds
    ``0.0.0.0`` explicitly (the series carry names, replica counts and latencies, no
    secrets)."""

    def __init__(
        self,
        telemetry: Telemetry,
        port: int,
        host: str = "127.0.0.1",
        healthy: Callable[[], bool] = lambda: True,
    ) -> None:
        tel = telemetry

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, tel.exposition(), CONTENT_TYPE_LATEST)
                elif path in ("/healthz", "/livez"):
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="pdscaler-metrics", daemon=True
        )

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
