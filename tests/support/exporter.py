"""A settable vLLM-like exporter for lab tests: engine pods whose vLLM-named metrics carry
the values a test chooses, found by the lab's REAL Prometheus through Kubernetes service
discovery, as in a cluster.

Owns: the engine pods of the pools a test sets (``set_pool``/``set_deployment``). In a
namespace that does not exist yet (a made-up one), it creates the namespace and REAL
kwok pods with the names given (labels ``pdscaler.io/name``, ``pdscaler.io/role`` and
``pdlab.pdscaler.io/exporter``, a port 8000 named ``http``), each with its own load, and
deletes both at ``stop``. In a namespace that exists (a test's namespace, where an
operator or the test makes the pool's pods), it serves the Ready pods of the pool that
are there, whatever their names, sharing the pool's load evenly over them. Each served
pod answers ``GET /metrics`` on its pod IP, port 8000 (kwok gives pods loopback IPs);
Prometheus' pod discovery and relabelling (``deploy/prometheus/kubernetes-sd.yaml``)
give ``up`` and every series the labels ``namespace``, ``pod``, ``pdscaler_io_name``,
``pdscaler_io_role``: the series themselves carry none, as vLLM's do. A name that is not
a valid Kubernetes label value (a test of PromQL escaping) cannot be a pod label: such a
pod has no name label and its series export ``pdscaler_io_name`` themselves (Prometheus
keeps it: the target has none). Counters and histograms are integrated over wall time
from the piecewise-constant load a test sets, so ``rate()`` and ``histogram_quantile()``
in Prometheus give back what was set. Must not start or stop Prometheus or the lab, nor
touch pods it did not create beyond serving their metrics.

What each pod serves (vLLM's names, see the sources cited in ``pdscaler.metricsql``):

* counters ``vllm:request_success_total`` (rate), ``vllm:prompt_tokens_total``
  (rate x prompt_tokens), ``vllm:generation_tokens_total`` (rate x output_tokens);
* histograms ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` (one
  observation per request), ``vllm:time_to_first_token_seconds`` (one per request, at
  ``ttft``), ``vllm:inter_token_latency_seconds`` (one per output token, at ``tpot``),
  ``vllm:request_time_per_output_token_seconds`` (one per request, at ``tpot``);
  with ``legacy_names=True`` the only TPOT histogram is
  ``vllm:time_per_output_token_seconds`` (one per output token)
  and the KV gauge ``vllm:gpu_cache_usage_perc`` (older vLLM releases);
* gauges ``vllm:num_requests_waiting``, ``vllm:num_requests_running``,
  ``vllm:kv_cache_usage_perc``.

Histogram buckets: every value ever observed ``v`` (rounded to 6 significant digits)
adds the bucket bounds ``0.99 v`` and ``v``, so a point mass at ``v`` reads back as
``histogram_quantile(q) = 0.99 v + 0.01 v q``, within 1 % of ``v`` for any percentile:
TTFT 0.8 s at p95 -> 0.7996 s.

    with EngineExporter(lab) as exp:
        exp.set_deployment("ns", "chat", ["chat-p-0"], ["chat-d-0", "chat-d-1"],
                           rate=4, prompt_tokens=2000, output_tokens=500,
                           ttft=0.8, tpot=0.04, prefill_waiting=3)
        exp.wait_scraped()           # every pod Ready, served and scraped twice since
        # Prometheus now has sum(rate(vllm:request_success_total{...prefill}[10s])) ~ 4
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.kwok import GPU_TAINT, STARTUP_DELAY_ANNOTATION
from pdlab.cluster.lab import Lab
from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from support.httpkit import QuietHandler
from support.leftovers import labelled_namespace

PREFILL, DECODE = "prefill", "decode"
_BUCKET_LOWER = 0.99  # lower bound of a value's own bucket, as a fraction of the value
#: The label on every pod the exporter creates (value: the exporter's id).
EXPORTER_LABEL = "pdlab.pdscaler.io/exporter"
ENGINE_PORT = 8000
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class PodLoad:
    """What one engine pod reports, constant until changed.

    ``rate``: requests finishing per second; ``prompt_tokens`` / ``output_tokens``: per
    request; ``ttft`` (seconds, one observation per request) and ``tpot`` (seconds per
    output token, one observation per output token): None = nothing observed (the
    quantile is NaN in Prometheus); gauges ``waiting``, ``running``, ``kv_usage`` (0..1)
    may be NaN to test how NaN answers are read. ``request_tpot`` False: the per-request
    TPOT histogram observes nothing while the inter-token latency counts every token
    (no request finished in the window: outputs that take longer than the window).
    """

    rate: float = 0.0
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    ttft: float | None = None
    tpot: float | None = None
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    request_tpot: bool = True


def split(load: PodLoad, pods: int) -> PodLoad:
    """A pool's load shared evenly by ``pods`` pods: rate, waiting and running divided,
    per-request sizes, latencies and KV usage unchanged. 4 req/s, 6 waiting over 2 pods
    -> 2 req/s, 3 waiting each."""
    n = max(pods, 1)
    return dataclasses.replace(
        load, rate=load.rate / n, waiting=load.waiting / n, running=load.running / n
    )


def _num(v: float) -> str:
    """A sample value in the text exposition format: 3.0, NaN, +Inf, -Inf."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _round(v: float) -> float:
    return float(f"{v:.6g}")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


@dataclass
class _Histogram:
    """Observations by value; bucket bounds grow with the values seen (module docstring)."""

    counts: dict[float, float] = field(default_factory=dict)
    bounds: set[float] = field(default_factory=set)
    total: float = 0.0

    def observe(self, value: float, count: float) -> None:
        if count <= 0:
            return
        v = _round(value)
        self.counts[v] = self.counts.get(v, 0.0) + count
        self.bounds.update((_round(v * _BUCKET_LOWER), v))
        self.total += v * count

    def lines(self, name: str, labels: dict[str, str]) -> Iterator[str]:
        for bound in sorted(self.bounds):
            cum = sum(c for v, c in self.counts.items() if v <= bound)
            yield f"{name}_bucket{_labels({**labels, 'le': repr(bound)})} {_num(cum)}"
        count = sum(self.counts.values())
        yield f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {_num(count)}"
        yield f"{name}_sum{_labels(labels)} {_num(self.total)}"
        yield f"{name}_count{_labels(labels)} {_num(count)}"


@dataclass
class _Pod:
    """One fake pod: its labels, current load, integrated counters and histograms."""

    labels: dict[str, str]
    load: PodLoad
    since: float
    ip: str = ""
    server: http.server.ThreadingHTTPServer | None = None
    requests: float = 0.0
    prompt_total: float = 0.0
    generation_total: float = 0.0
    scrapes: int = 0
    hist: dict[str, _Histogram] = field(
        default_factory=lambda: {
            k: _Histogram() for k in ("prompt", "generation", "ttft", "tpot", "request_tpot")
        }
    )

    def advance(self, now: float) -> None:
        """Integrate the current load from ``since`` to ``now``."""
        n = self.load.rate * max(now - self.since, 0.0)
        self.since = now
        if n <= 0:
            return
        self.requests += n
        self.prompt_total += n * self.load.prompt_tokens
        self.generation_total += n * self.load.output_tokens
        self.hist["prompt"].observe(self.load.prompt_tokens, n)
        self.hist["generation"].observe(self.load.output_tokens, n)
        if self.load.ttft is not None:
            self.hist["ttft"].observe(self.load.ttft, n)
        if self.load.tpot is not None:
            self.hist["tpot"].observe(self.load.tpot, n * self.load.output_tokens)
            if self.load.request_tpot:
                self.hist["request_tpot"].observe(self.load.tpot, n)


def merge(loads: Sequence[PodLoad]) -> PodLoad:
    """The pool load of pods sharing it evenly (inverse of ``split``): rate, waiting and
    running summed, the rest taken from the first."""
    if not loads:
        return PodLoad()
    return dataclasses.replace(
        loads[0],
        rate=sum(ld.rate for ld in loads),
        waiting=sum(ld.waiting for ld in loads),
        running=sum(ld.running for ld in loads),
    )


def valid_label_value(value: str) -> bool:
    """Kubernetes label value rules: ``chat`` yes, ``x"} or vector(1) #`` no."""
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def _ready_ip(pod: Any) -> str | None:
    """The pod IP of a Running, Ready, not terminating pod (kubernetes-client V1Pod)."""
    st = pod.status
    if pod.metadata.deletion_timestamp is not None or st is None or st.phase != "Running":
        return None
    ready = any(c.type == "Ready" and c.status == "True" for c in st.conditions or [])
    return st.pod_ip if ready and st.pod_ip else None


class EngineExporter:
    """Fake vLLM pods served to the lab's Prometheus (module docstring).

    ``start()`` (or ``with``) starts the reconcile thread; pools are served as they are
    set and pods stop being served (and the pods it created are deleted) by
    ``remove_pod``/``stop()``. Thread-safe.
    """

    def __init__(self, lab: Lab, *, legacy_names: bool = False, model_name: str = "lab") -> None:
        self.lab = lab
        self.legacy_names = legacy_names
        self.model_name = model_name
        self.ident = f"exp-{id(self):x}-{int(time.time() * 1000) % 10**8}"
        api_client = config.new_client_from_config(config_file=str(lab.kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        #: (namespace, name, role) -> pod -> load, as the test set them
        self._declared: dict[tuple[str, str, str], dict[str, PodLoad]] = {}
        #: namespace -> True if it existed (serve its real pods), False if created here
        self._existing: dict[str, bool] = {}
        self._own: dict[tuple[str, str], tuple[str, str]] = {}  # pods created here
        self._pods: dict[tuple[str, str], _Pod] = {}  # pods served now
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----- lifecycle -------------------------------------------------------------------
    def start(self) -> EngineExporter:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="exporter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (series go stale) and delete the pods and namespaces it created."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for key in list(self._pods):
                self._unserve(key)
            for ns, pod in list(self._own):
                self._delete_pod(ns, pod)
            for ns, existed in self._existing.items():
                if not existed:
                    with contextlib.suppress(ApiException):
                        self._core.delete_namespace(ns, propagation_policy="Background")

    def __enter__(self) -> EngineExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- what the pods report ----------------------------------------------------------
    def set_pod(
        self,
        namespace: str,
        pod: str,
        *,
        name: str,
        role: str,
        load: PodLoad | None = None,
        **changes: float | None,
    ) -> None:
        """Add pod ``namespace/pod`` of PDDeployment ``name`` in pool ``role``, or change
        what it reports: ``load`` replaces the whole load, ``changes`` single fields
        (``set_pod("ns", "p-0", name="chat", role="prefill", waiting=5)``). Counters
        keep counting; the new load applies from now on."""
        with self._lock:
            for key, pods in self._declared.items():
                if key[0] == namespace and pod in pods and key[1:] != (name, role):
                    del pods[pod]  # the pod moved to another pool
            pool = self._declared.setdefault((namespace, name, role), {})
            pool[pod] = dataclasses.replace(load or pool.get(pod) or PodLoad(), **changes)  # type: ignore[arg-type]
            self._reconcile_pool_loads(namespace, name, role)

    def remove_pod(self, namespace: str, pod: str) -> None:
        """Stop serving a pod (Prometheus marks its series stale at the next scrape)."""
        with self._lock:
            for key, pods in self._declared.items():
                if key[0] == namespace and pods.pop(pod, None) is not None:
                    self._reconcile_pool_loads(*key)

    def set_pool(
        self, namespace: str, name: str, role: str, pods: Sequence[str], load: PodLoad
    ) -> None:
        """Make pool ``role`` of ``name`` exactly ``pods`` (others of that pool removed),
        sharing the pool's ``load`` evenly (``split``)."""
        share = split(load, len(pods))
        with self._lock:
            self._declared[(namespace, name, role)] = dict.fromkeys(pods, share)
            self._reconcile_pool_loads(namespace, name, role)

    def set_deployment(
        self,
        namespace: str,
        name: str,
        prefill_pods: Sequence[str],
        decode_pods: Sequence[str],
        *,
        rate: float,
        prompt_tokens: float,
        output_tokens: float,
        ttft: float | None = None,
        tpot: float | None = None,
        prefill_waiting: float = 0.0,
        decode_waiting: float = 0.0,
        prefill_running: float = 0.0,
        decode_running: float = 0.0,
        kv_usage: float = 0.0,
    ) -> None:
        """Both pools of a P/D deployment the way vLLM's P/D setups report them: every
        request passes the prefill pool (its prompt, ONE output token, the TTFT) and then
        the decode pool (the prompt again, all ``output_tokens``, the TPOT)."""
        self.set_pool(
            namespace,
            name,
            PREFILL,
            prefill_pods,
            PodLoad(
                rate=rate,
                prompt_tokens=prompt_tokens,
                output_tokens=1.0,
                ttft=ttft,
                waiting=prefill_waiting,
                running=prefill_running,
            ),
        )
        self.set_pool(
            namespace,
            name,
            DECODE,
            decode_pods,
            PodLoad(
                rate=rate,
                prompt_tokens=prompt_tokens,
                output_tokens=output_tokens,
                tpot=tpot,
                waiting=decode_waiting,
                running=decode_running,
                kv_usage=kv_usage,
            ),
        )

    def pods(self) -> list[tuple[str, str]]:
        """(namespace, pod) of every pod served."""
        with self._lock:
            return sorted(self._pods)

    # ----- waiting for Prometheus ---------------------------------------------------------
    def scrapes(self) -> dict[tuple[str, str], int]:
        """How many times each served pod's /metrics was fetched (by Prometheus)."""
        with self._lock:
            return {key: p.scrapes for key, p in self._pods.items()}

    def _unserved_pools(self) -> list[tuple[str, str, str]]:
        """Pools with declared pods not (all) served yet."""
        with self._lock:
            served = {(ns, p.labels["pdscaler_io_name"], p.labels["pdscaler_io_role"])
                      for (ns, _), p in self._pods.items()}  # fmt: skip
            out = []
            for key, pods in self._declared.items():
                if not pods:
                    continue
                if self._existing.get(key[0]) is False:
                    if any((key[0], pod) not in self._pods for pod in pods):
                        out.append(key)
                elif key not in served:
                    out.append(key)
            return out

    def wait_scraped(self, times: int = 2, timeout: float = 60.0) -> None:
        """Block until every pool is served and each served pod was scraped ``times``
        more times (a new pod: Ready ~0.1 s, discovered within ~5 s, then scraped every
        2 s). Raises TimeoutError naming the pods or pools still waiting."""
        start = self.scrapes()
        deadline = time.monotonic() + timeout
        while True:
            now = self.scrapes()
            missing: list[Any] = [k for k, n in now.items() if n < start.get(k, 0) + times]
            missing += self._unserved_pools()
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pods not scraped {times} times in {timeout:.0f}s: {missing}")
            time.sleep(0.2)

    # ----- exposition ---------------------------------------------------------------------
    def text(self, namespace: str, pod: str) -> str | None:
        """The exposition of one pod now (None if not served); counts as no scrape."""
        with self._lock:
            p = self._pods.get((namespace, pod))
            if p is None:
                return None
            p.advance(time.time())
            return "\n".join(self._lines(p)) + "\n"

    def _serve_metrics(self, key: tuple[str, str]) -> str | None:
        text = self.text(*key)
        if text is not None:
            with self._lock:
                self._pods[key].scrapes += 1
        return text

    def _lines(self, p: _Pod) -> Iterator[str]:
        base = {"model_name": self.model_name, "engine": "0"}
        name = p.labels["pdscaler_io_name"]
        if not valid_label_value(name):
            base["pdscaler_io_name"] = name  # no pod label can carry it (module docstring)
        tpot = "time_per_output_token" if self.legacy_names else "inter_token_latency"
        kv = "gpu_cache_usage_perc" if self.legacy_names else "kv_cache_usage_perc"
        gauges: list[tuple[str, Callable[[PodLoad], float]]] = [
            ("vllm:num_requests_waiting", lambda ld: ld.waiting),
            ("vllm:num_requests_running", lambda ld: ld.running),
            (f"vllm:{kv}", lambda ld: ld.kv_usage),
        ]
        for metric, get in gauges:
            yield f"# TYPE {metric} gauge"
            yield f"{metric}{_labels(base)} {_num(get(p.load))}"
        counters = [
            ("vllm:prompt_tokens", p.prompt_total, base),
            ("vllm:generation_tokens", p.generation_total, base),
            ("vllm:request_success", p.requests, {**base, "finished_reason": "length"}),
        ]
        for metric, value, labels in counters:
            yield f"# TYPE {metric} counter"
            yield f"{metric}_total{_labels(labels)} {_num(value)}"
        histograms = [
            ("vllm:request_prompt_tokens", "prompt"),
            ("vllm:request_generation_tokens", "generation"),
            ("vllm:time_to_first_token_seconds", "ttft"),
            (f"vllm:{tpot}_seconds", "tpot"),
        ]
        if not self.legacy_names:
            histograms.append(("vllm:request_time_per_output_token_seconds", "request_tpot"))
        for metric, key in histograms:
            yield f"# TYPE {metric} histogram"
            yield from p.hist[key].lines(metric, base)

    # ----- the pods ---------------------------------------------------------------------
    @staticmethod
    def _pod_labels(namespace: str, pod: str, name: str, role: str) -> dict[str, str]:
        """The labels Prometheus' discovery gives the pod (what the tests read back)."""
        return {
            "namespace": namespace,
            "pod": pod,
            "pdscaler_io_name": name,
            "pdscaler_io_role": role,
        }

    def _manifest(self, pod: str, name: str, role: str) -> dict[str, Any]:
        labels = {EXPORTER_LABEL: self.ident, LABEL_ROLE: role}
        if valid_label_value(name):
            labels[LABEL_NAME] = name
        tolerations = [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "labels": labels,
                "annotations": {STARTUP_DELAY_ANNOTATION: "100ms"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "engine",
                        "image": "pdlab.invalid/fake-engine:0",
                        "ports": [{"name": "http", "containerPort": ENGINE_PORT}],
                    }
                ],
                "tolerations": tolerations,
                "terminationGracePeriodSeconds": 0,
            },
        }

    def _delete_pod(self, namespace: str, pod: str) -> None:
        self._own.pop((namespace, pod), None)
        with contextlib.suppress(ApiException):
            self._core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)

    def _namespace_existed(self, namespace: str) -> bool:
        """Whether ``namespace`` existed before this exporter (created here if not)."""
        if namespace not in self._existing:
            try:
                self._core.read_namespace(namespace)
                self._existing[namespace] = True
            except ApiException as err:
                if err.status != 404:
                    raise
                body: Any = labelled_namespace(namespace)
                self._core.create_namespace(body)
                self._existing[namespace] = False
        return self._existing[namespace]

    def _reconcile_pool_loads(self, namespace: str, name: str, role: str) -> None:
        """Apply the declared loads to the pool's served pods now (caller holds the lock)."""
        declared = self._declared.get((namespace, name, role), {})
        served = [
            (key, p)
            for key, p in self._pods.items()
            if key[0] == namespace
            and (p.labels["pdscaler_io_name"], p.labels["pdscaler_io_role"]) == (name, role)
        ]
        now = time.time()
        if self._existing.get(namespace) is False:
            for key, p in served:
                load = declared.get(key[1])
                if load is not None and load != p.load:
                    p.advance(now)
                    p.load = load
            return
        share = split(merge(list(declared.values())), len(served))
        for _, p in served:
            if share != p.load:
                p.advance(now)
                p.load = share

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as err:  # the API server may be busy; retry
                print(f"exporter: reconcile failed: {err!r}")
            self._stop.wait(0.3)

    def reconcile(self) -> None:
        """One pass: create/delete own pods, serve the Ready pods of every pool."""
        with self._lock:
            declared = {k: dict(v) for k, v in self._declared.items()}
        wanted: dict[tuple[str, str], tuple[dict[str, str], str]] = {}
        own_wanted: set[tuple[str, str]] = set()
        listed: dict[str, list[Any]] = {}
        for (ns, name, role), pods in declared.items():
            if not pods:
                continue
            existed = self._namespace_existed(ns)
            if ns not in listed:
                listed[ns] = self._core.list_namespaced_pod(ns, _request_timeout=10).items
            if existed:  # the pool's own pods (made by an operator or the test)
                for pod in listed[ns]:
                    lab = pod.metadata.labels or {}
                    ip = _ready_ip(pod)
                    if (
                        ip
                        and EXPORTER_LABEL not in lab
                        and lab.get(LABEL_NAME) == name
                        and lab.get(LABEL_ROLE) == role
                    ):
                        key = (ns, pod.metadata.name)
                        wanted[key] = (self._pod_labels(ns, key[1], name, role), ip)
                continue
            by_name = {p.metadata.name: p for p in listed[ns]}
            for pod_name in pods:
                key = (ns, pod_name)
                own_wanted.add(key)
                found = by_name.get(pod_name)
                if found is None and key not in self._own:
                    self._core.create_namespaced_pod(
                        ns,
                        self._manifest(pod_name, name, role),  # type: ignore[arg-type]
                    )
                    self._own[key] = (name, role)
                elif found is not None:
                    self._own[key] = (name, role)
                    ip = _ready_ip(found)
                    if ip:
                        wanted[key] = (self._pod_labels(ns, pod_name, name, role), ip)
                elif key in self._own and found is None:
                    self._own.pop(key)  # gone (deleted by someone): create it again
        with self._lock:
            for key in [k for k in self._own if k not in own_wanted]:
                self._delete_pod(*key)
            for key, p in list(self._pods.items()):
                want = wanted.get(key)
                if want is None or want != (p.labels, p.ip):
                    self._unserve(key)
            for key, (labels, ip) in wanted.items():
                if key not in self._pods:
                    self._serve(key, labels, ip)
            for ns, name, role in declared:
                self._reconcile_pool_loads(ns, name, role)

    def _serve(self, key: tuple[str, str], labels: dict[str, str], ip: str) -> None:
        exporter = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server dispatches on this name)
                text = exporter._serve_metrics(key) if self.path.startswith("/metrics") else None
                body = (text or "not found\n").encode()
                status = 200 if text is not None else 404
                self.reply(status, body, "text/plain; version=0.0.4; charset=utf-8")

        try:
            server = http.server.ThreadingHTTPServer((ip, ENGINE_PORT), Handler)
        except OSError as err:  # another server holds the pod IP: retried next pass
            print(f"exporter: cannot serve {key} at {ip}:{ENGINE_PORT}: {err}")
            return
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
        self._pods[key] = _Pod(labels, PodLoad(), time.time(), ip=ip, server=server)

    def _unserve(self, key: tuple[str, str]) -> None:
        p = self._pods.pop(key)
        if p.server is not None:
            p.server.shutdown()
            p.server.server_close()
