"""Measurement 3: one operator process (``python -m pdscaler run``, standalone, one
namespace) handling N PDDeployments (200) at a 15 s interval, in a private lab.

Owns: the scenario and its figures. Steps: the private lab up (``overhead_lab``); N
copies of the chat example (Auto, 1 prefill + 1 decode replica, 1 GPU each) created;
the operator started as a subprocess with its metrics port on; wait until every
PDDeployment is reconciled (``status.observedGeneration`` = generation) and the
operator has written nothing for one interval (pods Ready, status steady); then a
sampling window: its CPU (``/proc/<pid>/stat``) and RSS (``/proc/<pid>/status``) every
few seconds, and before/after scrapes of the operator's ``/metrics`` (reconcile
durations, writes), the API server's ``/metrics`` (``apiserver_request_total``) and
Prometheus' own ``/metrics`` (queries answered). Then the operator is stopped and the
API server's request rate is measured once more without it (the other clients' share),
and the private lab is stopped and purged (namespace, objects and all).

Must not: touch the shared lab, leave the operator running, or report a figure of a
run where not every PDDeployment was reconciled (that is "not measured" with the count).
"""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.overhead_cluster import BenchError, Clients, pdd_manifest, reconciled, wait_until
from bench.overhead_lab import private_lab
from bench.overhead_proc import ProcSampler
from bench.overhead_report import Section
from bench.overhead_stats import Exposition, fmt_seconds, histogram_quantile, percentile, rate
from pdlab import demo
from pdlab.kubeapi import KubeAPI
from pdlab.lab import Lab
from pdscaler.spec import parse_duration

TITLE = "3. One operator process handling many PDDeployments"
NAMESPACE = "bench-overhead"
RECONCILE_TIMEOUT_S = 150.0
SETTLE_TIMEOUT_S = 90.0
BASELINE_S = 30.0
SAMPLE_EVERY_S = 5.0
NOT_COUNTED_VERBS = frozenset({"WATCH", "CONNECT"})


@dataclass(frozen=True)
class Plan:
    """What to run: ``pdds`` PDDeployments ticking every ``interval``; the window."""

    pdds: int = 200
    interval: str = "15s"
    sample_seconds: float = 150.0

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)


@dataclass
class Scrapes:
    """Expositions at the window's start and end (and around the baseline)."""

    operator: list[Exposition] = field(default_factory=list)
    apiserver: list[Exposition] = field(default_factory=list)
    prometheus: list[Exposition] = field(default_factory=list)
    apiserver_times: list[float] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read()).decode("utf-8", errors="replace")


def operator_argv(namespace: str, metrics_port: int) -> list[str]:
    return [
        sys.executable, "-m", "pdscaler", "run", "--standalone", "--namespace", namespace,
        "--metrics-port", str(metrics_port), "--log-format", "plain",
    ]  # fmt: skip


def api_requests(e: Exposition) -> float:
    """Requests the API server answered, watches and exec/proxy connections excluded."""
    by_verb = e.by_label("apiserver_request_total", "verb")
    return sum(v for verb, v in by_verb.items() if verb not in NOT_COUNTED_VERBS)


def count_reconciled(clients: Clients, namespace: str) -> tuple[int, int]:
    items = clients.list_pdds(namespace)
    return sum(1 for p in items if reconciled(p)), len(items)


@dataclass
class Run:
    """One measurement in a live private lab; ``figures`` what ``section`` renders."""

    plan: Plan
    lab: Lab
    clients: Clients
    api: KubeAPI
    log: Path
    facts: dict[str, str] = field(default_factory=dict)
    scrapes: Scrapes = field(default_factory=Scrapes)
    sampler: ProcSampler | None = None
    window_s: float = 0.0
    baseline_s: float = 0.0

    def apiserver(self) -> Exposition:
        status, text = self.api.request("GET", "/metrics", timeout=30.0)
        if status != 200 or not isinstance(text, str):
            raise BenchError(f"GET /metrics on the API server answered {status}")
        self.scrapes.apiserver_times.append(time.monotonic())
        return Exposition.parse(text)

    def create(self) -> None:
        demo.install_crd(demo.Kube.connect(self.lab.kubeconfig))
        self.clients.create_namespace(NAMESPACE)
        for k in range(self.plan.pdds):
            self.clients.create_pdd(
                pdd_manifest(
                    f"chat-{k:03d}",
                    NAMESPACE,
                    self.lab.prometheus_url,
                    interval=self.plan.interval,
                )
            )

    def wait_reconciled(self, child: demo.Child, started: float) -> None:
        def check() -> bool:
            if not child.alive():
                raise BenchError(f"the operator exited: {child.tail(5)}")
            done, total = count_reconciled(self.clients, NAMESPACE)
            return done == total == self.plan.pdds

        try:
            wait_until(check, RECONCILE_TIMEOUT_S, "every PDDeployment reconciled", 2.0)
        except BenchError:
            done, total = count_reconciled(self.clients, NAMESPACE)
            raise BenchError(
                f"only {done} of {total} PDDeployments were reconciled "
                f"{RECONCILE_TIMEOUT_S:.0f}s after the operator started (log {self.log})"
            ) from None
        self.facts["all reconciled after start"] = f"{time.monotonic() - started:.0f} s"

    def settle(self, metrics_url: str) -> None:
        """Until every pod is Ready and the operator wrote nothing for one interval."""
        last = -1.0
        quiet_since = time.monotonic()
        deadline = quiet_since + SETTLE_TIMEOUT_S
        while time.monotonic() < deadline:
            writes = Exposition.parse(http_text(metrics_url)).total("pdscaler_api_writes_total")
            ready, pods = self.clients.ready_pods(NAMESPACE)
            if writes != last or ready < pods or pods < 2 * self.plan.pdds:
                last, quiet_since = writes, time.monotonic()
            elif time.monotonic() - quiet_since >= self.plan.interval_seconds:
                self.facts["pods Ready"] = f"{ready} of {pods}"
                return
            time.sleep(2.0)
        ready, pods = self.clients.ready_pods(NAMESPACE)
        raise BenchError(
            f"not steady {SETTLE_TIMEOUT_S:.0f}s after reconciling: {ready} of {pods} pods "
            "Ready or the operator still writing"
        )

    def window(self, child: demo.Child, metrics_url: str) -> None:
        assert child.pid is not None
        sampler = ProcSampler(child.pid)
        self.sampler = sampler
        prom_url = f"{self.lab.prometheus_url}/metrics"
        self.scrapes.operator.append(Exposition.parse(http_text(metrics_url)))
        self.scrapes.prometheus.append(Exposition.parse(http_text(prom_url)))
        self.scrapes.apiserver.append(self.apiserver())
        start = sampler.sample().wall
        while sampler.samples[-1].wall - start < self.plan.sample_seconds:
            time.sleep(min(SAMPLE_EVERY_S, start + self.plan.sample_seconds - time.monotonic()))
            if not child.alive():
                raise BenchError(f"the operator exited during the window: {child.tail(5)}")
            sampler.sample()
        self.scrapes.apiserver.append(self.apiserver())
        self.scrapes.operator.append(Exposition.parse(http_text(metrics_url)))
        self.scrapes.prometheus.append(Exposition.parse(http_text(prom_url)))
        self.window_s = sampler.seconds

    def baseline(self) -> None:
        """The API server's request rate without the operator (other clients' share)."""
        self.scrapes.apiserver.append(self.apiserver())
        time.sleep(BASELINE_S)
        self.scrapes.apiserver.append(self.apiserver())
        t = self.scrapes.apiserver_times
        self.baseline_s = t[-1] - t[-2]


def run_scenario(plan: Plan) -> Run:
    """Everything, in the private lab; the figures come back in ``Run``."""
    pods = 2 * plan.pdds
    with private_lab(pods=pods, gpus=pods) as lab:
        t_up = time.monotonic()
        clients = Clients.connect(lab.kubeconfig)
        api = KubeAPI(lab.apiserver_url, lab.pki_dir)
        r = Run(plan, lab, clients, api, lab.dir / "operator.log")
        r.facts["private lab"] = (
            f"{lab.config.nodes} fake nodes x {lab.config.gpus_per_node} GPUs, "
            f"API server {lab.apiserver_url}"
        )
        r.create()
        port = free_port()
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        child = demo.Child("operator", operator_argv(NAMESPACE, port), r.log)
        env = {
            **os.environ,
            "KUBECONFIG": str(lab.kubeconfig),
            "PDSCALER_PROMETHEUS_URL": lab.prometheus_url,
        }
        r.log.unlink(missing_ok=True)
        child.start(env)
        try:
            started = time.monotonic()
            r.facts["lab up + objects created"] = f"{started - t_up:.0f} s of setup"
            r.wait_reconciled(child, started)
            r.settle(metrics_url)
            r.window(child, metrics_url)
        finally:
            child.stop()
        r.baseline()
        return r


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def figures(
    plan: Plan, sc: Scrapes, sampler: ProcSampler, window_s: float, baseline_s: float
) -> list[list[str]]:
    """The measured rows, [quantity, value, how], from the window's scrapes (operator,
    Prometheus: start and end; API server: window start, end, baseline start, end)."""
    op = sc.operator[1].minus(sc.operator[0])
    ticks = op.total("pdscaler_reconcile_duration_seconds_count")
    buckets = op.buckets("pdscaler_reconcile_duration_seconds")
    p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
    tick_sum = op.total("pdscaler_reconcile_duration_seconds_sum")
    writes = op.total("pdscaler_api_writes_total")
    with_op = api_requests(sc.apiserver[1]) - api_requests(sc.apiserver[0])
    without = api_requests(sc.apiserver[3]) - api_requests(sc.apiserver[2])
    rate_with = rate(with_op, window_s)
    rate_without = rate(without, baseline_s)
    prom = sc.prometheus[1].minus(sc.prometheus[0])
    queries = prom.total("prometheus_http_requests_total", handler="/api/v1/query")
    steps = sampler.cpu_percent_steps()
    expected = plan.pdds * window_s / plan.interval_seconds
    every = f"sampled every {SAMPLE_EVERY_S:.0f} s"
    return [
        ["sampling window", f"{window_s:.0f} s", f"{len(sampler.samples)} samples"],
        ["reconcile ticks", f"{ticks:.0f} ({rate(ticks, window_s):.1f}/s)",
         f"expected {expected:.0f} ({plan.pdds} x window / interval); operator histogram"],
        ["CPU, mean", f"{sampler.cpu_percent():.1f}% of one core",
         "/proc/PID/stat utime+stime over the window"],
        [f"CPU, {SAMPLE_EVERY_S:.0f}-s steps p50 / max",
         f"{percentile(steps, 50):.1f}% / {max(steps):.1f}%", every],
        ["RSS, peak in window", _mib(sampler.peak_rss_kib()), f"/proc/PID/status VmRSS, {every}"],
        ["RSS, peak since start", _mib(sampler.hwm_kib()), "VmHWM (includes the start-up burst)"],
        ["threads", str(max(s.threads for s in sampler.samples)), "/proc/PID/status Threads"],
        ["reconcile duration p50 / p99",
         f"{fmt_seconds(p50)} / {fmt_seconds(p99)}",
         "estimated from the operator's histogram buckets (as PromQL histogram_quantile)"],
        ["reconcile duration mean", fmt_seconds(tick_sum / ticks if ticks else None),
         "histogram sum / count"],
        ["operator API writes", f"{rate(writes, window_s):.2f}/s",
         "pdscaler_api_writes_total (steady state: should be 0)"],
        ["API server requests, operator running", f"{rate_with:.1f}/s",
         "apiserver_request_total, all clients, watches excluded"],
        ["API server requests, operator stopped", f"{rate_without:.1f}/s",
         f"same, {baseline_s:.0f} s right after the window (the other clients)"],
        ["API server requests due to the operator", f"{rate_with - rate_without:.1f}/s",
         f"difference; {(rate_with - rate_without) / max(rate(ticks, window_s), 1e-9):.1f}"
         " per tick"],
        ["Prometheus queries", f"{rate(queries, window_s):.1f}/s",
         "prometheus_http_requests_total{handler=\"/api/v1/query\"}"],
    ]  # fmt: skip


def measure(plan: Plan | None = None, scenario: Callable[[Plan], Run] = run_scenario) -> Section:
    p = plan or Plan()
    title = f"{TITLE}: {p.pdds} at a {p.interval} interval"
    try:
        r = scenario(p)
    except BenchError as err:
        return Section.skipped(title, str(err))
    notes = [f"{k}: {v}" for k, v in r.facts.items()]
    notes += [
        "each PDDeployment: the chat example (Auto, 1 prefill + 1 decode replica, 1 GPU "
        "each, pods Ready 2 s after creation in kwok); no engine exported vLLM series, so "
        "every tick's Prometheus queries returned empty answers and the policy held "
        "(HoldMetricsUnavailable): the window is the steady state of a converged fleet",
        f"operator: `python -m pdscaler run --standalone --namespace {NAMESPACE} "
        "--metrics-port <free port>`, log in the private lab dir",
    ]
    if r.sampler is None or len(r.sampler.samples) < 2:
        return Section.skipped(title, "the window held too few samples")
    return Section(
        title,
        f"{p.pdds} PDDeployments in one namespace of a private lab (own directory and "
        f"ports, stopped and purged afterwards), interval {p.interval}, one operator "
        "process; the window starts once all are reconciled and the operator has written "
        "nothing for one interval.",
        ["quantity", "value", "how"],
        figures(r.plan, r.scrapes, r.sampler, r.window_s, r.baseline_s),
        notes=notes,
    )
