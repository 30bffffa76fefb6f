"""A settable vLLM-like exporter for lab tests: pods that do not exist as processes serve
vLLM-named metrics to the lab's REAL Prometheus, with the values a test chooses.

Owns: one HTTP server on 127.0.0.1 with one scrape path per fake pod
(``/metrics/<namespace>/<pod>``), registered with the lab's Prometheus as one file_sd
target group per pod (``Lab.add_scrape_targets``) whose target labels are the pod labels
``namespace``, ``pod``, ``pdscaler_io_name``, ``pdscaler_io_role`` (what the production
scrape config's relabelling gives, see ``pdscaler.metricsql``), so ``up`` carries them
too; the series carry the same labels. Counters and histograms are integrated over wall
time from the piecewise-constant load a test sets, so ``rate()`` and
``histogram_quantile()`` in Prometheus give back what was set. Must not start or stop
Prometheus or the lab, nor touch Kubernetes (pods here need not exist in the cluster).

What each pod serves (vLLM's names, see the sources cited in ``pdscaler.metricsql``):

* counters ``vllm:request_success_total`` (rate), ``vllm:prompt_tokens_total``
  (rate x prompt_tokens), ``vllm:generation_tokens_total`` (rate x output_tokens);
* histograms ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` (one
  observation per request), ``vllm:time_to_first_token_seconds`` (one per request, at
  ``ttft``), ``vllm:inter_token_latency_seconds`` (one per output token, at ``tpot``);
  with ``legacy_names=True`` the TPOT histogram is ``vllm:time_per_output_token_seconds``
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
        exp.wait_scraped()           # every pod scraped twice since the call
        # Prometheus now has sum(rate(vllm:request_success_total{...prefill}[10s])) ~ 4
"""

from __future__ import annotations

import dataclasses
import http.server
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pdlab.lab import Lab
from support.httpkit import QuietHandler, start_server, stop_server

PREFILL, DECODE = "prefill", "decode"
_BUCKET_LOWER = 0.99  # lower bound of a value's own bucket, as a fraction of the value


@dataclass(frozen=True)
class PodLoad:
    """What one engine pod reports, constant until changed.

    ``rate``: requests finishing per second; ``prompt_tokens`` / ``output_tokens``: per
    request; ``ttft`` (seconds, one observation per request) and ``tpot`` (seconds per
    output token, one observation per output token): None = nothing observed (the
    quantile is NaN in Prometheus); gauges ``waiting``, ``running``, ``kv_usage`` (0..1)
    may be NaN to test how NaN answers are read.
    """

    rate: float = 0.0
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    ttft: float | None = None
    tpot: float | None = None
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0


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
    requests: float = 0.0
    prompt_total: float = 0.0
    generation_total: float = 0.0
    scrapes: int = 0
    hist: dict[str, _Histogram] = field(
        default_factory=lambda: {k: _Histogram() for k in ("prompt", "generation", "ttft", "tpot")}
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


class EngineExporter:
    """Fake vLLM pods served to the lab's Prometheus (module docstring).

    ``start()`` (or ``with``) binds a free port; pods are registered as scrape targets
    as they are set and unregistered by ``remove_pod``/``stop()``. Thread-safe.
    """

    def __init__(self, lab: Lab, *, legacy_names: bool = False, model_name: str = "lab") -> None:
        self.lab = lab
        self.legacy_names = legacy_names
        self.model_name = model_name
        self._pods: dict[tuple[str, str], _Pod] = {}
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._target = ""

    # ----- lifecycle -------------------------------------------------------------------
    @property
    def host_port(self) -> str:
        """``127.0.0.1:<port>`` once started."""
        if self._server is None:
            raise RuntimeError("EngineExporter is not started")
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def target_name(self) -> str:
        """The name of its file_sd target file in the lab (``exporter-<port>``)."""
        return self._target

    def start(self) -> EngineExporter:
        exporter = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server dispatches on this name)
                text = exporter._serve(self.path)
                body = (text or "not found\n").encode()
                status = 200 if text is not None else 404
                self.reply(status, body, "text/plain; version=0.0.4; charset=utf-8")

        # every pod is scraped at the same moment: a deep listen backlog
        self._server = start_server(Handler, queue_size=128, poll_seconds=0.1)
        self._target = f"exporter-{self._server.server_address[1]}"
        return self

    def stop(self) -> None:
        """Unregister the scrape targets and close the server (series go stale)."""
        self.lab.remove_scrape_target(self._target)
        if self._server is not None:
            stop_server(self._server)
            self._server = None

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
        now = time.time()
        with self._lock:
            p = self._pods.get((namespace, pod))
            labels = self._pod_labels(namespace, pod, name, role)
            if p is None or p.labels != labels:
                p = _Pod(labels, load or PodLoad(), now)
                self._pods[(namespace, pod)] = p
                changed_targets = True
            else:
                p.advance(now)
                changed_targets = False
            p.load = dataclasses.replace(load or p.load, **changes)  # type: ignore[arg-type]
        if changed_targets:
            self._register()

    def remove_pod(self, namespace: str, pod: str) -> None:
        """Stop serving a pod (Prometheus marks its series stale at the next scrape)."""
        with self._lock:
            found = self._pods.pop((namespace, pod), None)
        if found is not None:
            self._register()

    def set_pool(
        self, namespace: str, name: str, role: str, pods: Sequence[str], load: PodLoad
    ) -> None:
        """Make pool ``role`` of ``name`` exactly ``pods`` (others of that pool removed),
        sharing the pool's ``load`` evenly (``split``)."""
        with self._lock:
            stale = [
                key
                for key, p in self._pods.items()
                if key[0] == namespace
                and p.labels["pdscaler_io_name"] == name
                and p.labels["pdscaler_io_role"] == role
                and key[1] not in pods
            ]
        for key in stale:
            self.remove_pod(*key)
        share = split(load, len(pods))
        for pod in pods:
            self.set_pod(namespace, pod, name=name, role=role, load=share)

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
        """How many times each pod's path was fetched (by Prometheus)."""
        with self._lock:
            return {key: p.scrapes for key, p in self._pods.items()}

    def wait_scraped(self, times: int = 2, timeout: float = 30.0) -> None:
        """Block until every pod was scraped ``times`` more times (new targets are
        picked up within ~2 s, then scraped every 2 s). Raises TimeoutError naming the
        pods still waiting."""
        start = self.scrapes()
        deadline = time.monotonic() + timeout
        while True:
            now = self.scrapes()
            missing = [k for k, n in now.items() if n < start.get(k, 0) + times]
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

    def _serve(self, path: str) -> str | None:
        parts = path.split("?", 1)[0].strip("/").split("/")
        if len(parts) != 3 or parts[0] != "metrics":
            return None
        text = self.text(parts[1], parts[2])
        if text is not None:
            with self._lock:
                self._pods[(parts[1], parts[2])].scrapes += 1
        return text

    def _pod_labels(self, namespace: str, pod: str, name: str, role: str) -> dict[str, str]:
        return {
            "namespace": namespace,
            "pod": pod,
            "pdscaler_io_name": name,
            "pdscaler_io_role": role,
        }

    def _lines(self, p: _Pod) -> Iterator[str]:
        base = {**p.labels, "model_name": self.model_name, "engine": "0"}
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
        for metric, key in histograms:
            yield f"# TYPE {metric} histogram"
            yield from p.hist[key].lines(metric, base)

    def _register(self) -> None:
        """(Re)write this exporter's file_sd target groups: one per pod."""
        with self._lock:
            groups = [
                {
                    "targets": [self.host_port],
                    "labels": {"__metrics_path__": f"/metrics/{ns}/{pod}", **p.labels},
                }
                for (ns, pod), p in sorted(self._pods.items())
            ]
        self.lab.add_scrape_targets(self._target, groups)
