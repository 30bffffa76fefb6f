"""Measurement 3: one operator process (``python -m pdscaler run``, standalone, one
namespace) handling N PDDeployments (200) at a 15 s interval, in a private lab.

Owns: the scenario. Steps: the private lab up (``bench.overhead.private_lab``); N copies
of the chat example (Auto, 1 prefill + 1 decode replica, 1 GPU each) created; the
operator started as a subprocess with its metrics port on; wait until every PDDeployment
is reconciled (``status.observedGeneration`` = generation), or until no more get
reconciled for ``STALL_S`` (then the window measures the process as it is, and the
report says how many of N it handles); wait until the operator has written nothing for
one interval (pods Ready, status steady); then the sampling window: its CPU
(``/proc/<pid>/stat``) and RSS (``/proc/<pid>/status``) every few seconds, and
before/after scrapes of the operator's ``/metrics``, the API server's ``/metrics`` and
Prometheus' own ``/metrics``. Then the operator is stopped, the API server's request
rate is measured once more without it (the other clients' share), and the private lab is
stopped and purged (namespace, objects and all). The figures are
``bench.overhead.figures``'; the process's CPU and memory are read by
``bench.overhead.process``.

Must not: touch the shared lab, or leave the operator or the private lab running.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.overhead.cluster import (
    LAB_ERRORS,
    BenchError,
    create_pdd,
    list_pdds,
    pdd_manifest,
    ready_pods,
    reconciled,
)
from bench.overhead.figures import Window, breakdown, figures, numbers
from bench.overhead.private_lab import cpu_nodes_for, private_lab
from bench.overhead.process import ProcSampler, cpu_seconds
from bench.overhead.report import Section
from bench.overhead.stats import Exposition
from pdlab.cluster.kubeapi import KubeAPI
from pdlab.cluster.kubeclient import Kube, apply_crd, ensure_namespace
from pdlab.cluster.lab import Lab
from pdlab.cluster.processes import Child
from pdlab.demo.run import operator_argv
from pdscaler.spec import parse_duration

TITLE = "3. One operator process handling many PDDeployments"
NAMESPACE = "bench-overhead"
RECONCILE_TIMEOUT_S = 300.0  # only binds while first ticks keep coming, slowly
RECONCILE_S_PER_PDD = 0.6  # 1,000 PDDeployments: 600 s (7 objects each at 50 QPS: 140 s)
STALL_S = 45.0
SETTLE_TIMEOUT_S = 120.0
SETTLE_S_PER_PDD = 0.3
BASELINE_S = 20.0
SAMPLE_EVERY_S = 5.0
POLL_S = 2.0


@dataclass(frozen=True)
class Plan:
    """What to run: ``pdds`` PDDeployments ticking every ``interval``; the window."""

    pdds: int = 200
    interval: str = "15s"
    sample_seconds: float = 120.0

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_text(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read()).decode("utf-8", errors="replace")


@dataclass
class Run:
    """One measurement in a live private lab; ``window`` holds what it recorded."""

    plan: Plan
    lab: Lab
    kube: Kube
    api: KubeAPI
    log: Path
    child: Child
    metrics_url: str
    exporter: Child
    facts: dict[str, str] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    window: Window | None = None

    def apiserver(self) -> Exposition:
        status, text = self.api.request("GET", "/metrics", timeout=30.0)
        if status != 200 or not isinstance(text, str):
            raise BenchError(f"GET /metrics on the API server answered {status}")
        return Exposition.parse(text)

    def operator(self) -> Exposition:
        return Exposition.parse(http_text(self.metrics_url))

    def create(self) -> None:
        apply_crd(self.kube)
        ensure_namespace(self.kube, NAMESPACE)
        for k in range(self.plan.pdds):
            manifest = pdd_manifest(
                f"chat-{k:03d}", NAMESPACE, self.lab.prometheus_url, interval=self.plan.interval
            )
            create_pdd(self.kube, manifest)

    def _alive(self) -> None:
        if not self.child.alive():
            raise BenchError(f"the operator exited; log {self.log}:\n{self.child.tail(5)}")

    def wait_reconciled(self, started: float) -> int:
        """How many PDDeployments got their first tick: all, or as many as before a
        ``STALL_S`` pause in progress (or the timeout). 0 is an error."""
        best, since = -1, time.monotonic()
        while True:
            self._alive()
            done = sum(1 for p in list_pdds(self.kube, NAMESPACE) if reconciled(p))
            now = time.monotonic()
            if done > best:
                best, since = done, now
            if done >= self.plan.pdds:
                self.facts["all reconciled"] = f"{now - started:.0f} s after the operator started"
                return done
            limit = max(RECONCILE_TIMEOUT_S, RECONCILE_S_PER_PDD * self.plan.pdds)
            if now - since >= STALL_S or now - started >= limit:
                if done == 0:
                    raise BenchError(f"no PDDeployment reconciled {now - started:.0f}s after start")
                self.facts["NOT all reconciled"] = (
                    f"{done} of {self.plan.pdds}; none more in the last {now - since:.0f} s "
                    f"({now - started:.0f} s after the operator started; log {self.log})"
                )
                return done
            time.sleep(POLL_S)

    def settle(self, reconciled_count: int) -> None:
        """Until every engine pod of the reconciled PDDeployments is Ready (2 each: their
        routers, never Ready without a pod runner, are not waited for) and the operator
        wrote nothing for one interval; after ``SETTLE_TIMEOUT_S`` the window starts
        anyway and the report says how far from steady it was (its writes/s show it)."""
        started = time.monotonic()
        last, quiet_since = -1.0, started
        while True:
            self._alive()
            writes = self.operator().total("pdscaler_api_writes_total")
            ready, pods = ready_pods(self.kube, NAMESPACE)
            now = time.monotonic()
            if writes != last or ready < pods or pods < 2 * reconciled_count:
                last, quiet_since = writes, now
            elif now - quiet_since >= self.plan.interval_seconds:
                self.facts["steady"] = (
                    f"{ready} of {pods} engine pods Ready and no write for one interval, "
                    f"{now - started:.0f} s after the last first tick"
                )
                return
            limit = max(SETTLE_TIMEOUT_S, SETTLE_S_PER_PDD * self.plan.pdds)
            if now - started >= limit:
                self.facts["NOT steady at the window's start"] = (
                    f"{ready} of {pods} engine pods Ready (want {2 * reconciled_count}), "
                    f"writes still going {limit:.0f} s after the last first tick"
                )
                return
            time.sleep(POLL_S)

    def sample(self, reconciled_count: int) -> Window:
        assert self.child.pid is not None
        w = Window(
            self.plan.pdds,
            reconciled_count,
            self.plan.interval_seconds,
            ProcSampler(self.child.pid),
            sample_every_s=SAMPLE_EVERY_S,
        )
        prom_url = f"{self.lab.prometheus_url}/metrics"
        sc = w.scrapes
        sc.operator.append(self.operator())
        sc.prometheus.append(Exposition.parse(http_text(prom_url)))
        sc.apiserver.append(self.apiserver())
        load_start = os.getloadavg()[0]
        exporter_cpu = self._exporter_cpu()
        start = w.sampler.sample().wall
        w.loads.append(load_start)
        end = start + self.plan.sample_seconds
        while w.sampler.samples[-1].wall < end:
            time.sleep(max(0.0, min(SAMPLE_EVERY_S, end - time.monotonic())))
            self._alive()
            w.sampler.sample()
            w.loads.append(os.getloadavg()[0])
        sc.apiserver.append(self.apiserver())
        sc.operator.append(self.operator())
        sc.prometheus.append(Exposition.parse(http_text(prom_url)))
        w.window_s = w.sampler.seconds
        if exporter_cpu is not None and (after := self._exporter_cpu()) is not None:
            self.facts["the metrics stand-in's CPU (bench.overhead.exporter)"] = (
                f"{100 * (after - exporter_cpu) / w.window_s:.1f}% of one core in the window"
            )
        self.facts["last decisions at the window's end"] = self.decisions()
        self.facts["MetricsAvailable True at the window's end"] = (
            f"{self.metrics_available()} of {self.plan.pdds} PDDeployments"
        )
        self.facts["machine load (1-min average) at the window's start / end"] = (
            f"{load_start:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        )
        return w

    def _exporter_cpu(self) -> float | None:
        pid = self.exporter.pid
        return cpu_seconds(pid) if pid is not None and self.exporter.alive() else None

    def metrics_available(self) -> int:
        """PDDeployments whose ``MetricsAvailable`` condition is True (their queries
        answered)."""
        return sum(
            1
            for p in list_pdds(self.kube, NAMESPACE)
            for c in (p.get("status") or {}).get("conditions") or []
            if c.get("type") == "MetricsAvailable" and c.get("status") == "True"
        )

    def decisions(self) -> str:
        """``status.lastDecision.action`` over the PDDeployments: "HoldMetricsUnavailable 200"."""
        actions = Counter(
            ((p.get("status") or {}).get("lastDecision") or {}).get("action") or "none"
            for p in list_pdds(self.kube, NAMESPACE)
        )
        return ", ".join(f"{a} {n}" for a, n in actions.most_common())

    def baseline(self, w: Window) -> None:
        """The API server's request rate without the operator (the other clients)."""
        t0 = time.monotonic()
        w.scrapes.apiserver.append(self.apiserver())
        time.sleep(BASELINE_S)
        w.scrapes.apiserver.append(self.apiserver())
        w.baseline_s = time.monotonic() - t0


def _measure_running(r: Run) -> Window:
    """With the operator started: reconciled, steady, the window; then the operator
    stopped and the baseline without it."""
    try:
        done = r.wait_reconciled(time.monotonic())
        r.settle(done)
        w = r.sample(done)
    finally:
        r.child.stop()
        r.exporter.stop()
    profile_facts(r, w)
    late = handlers_after_stop(r.log.read_text(errors="replace"))
    if late:
        r.facts["create handlers that ran after SIGTERM"] = (
            f"{late} (the stopping daemons freed their threads; the 'operator stopped' "
            "figures hold the cluster's reaction to the objects they created)"
        )
    r.baseline(w)
    return w


def handlers_after_stop(log: str) -> int:
    """kopf's "Handler 'on_create' succeeded." lines after its SIGTERM line."""
    _, _, after = log.partition("Signal SIGTERM is received")
    return after.count("Handler 'on_create' succeeded")


def run_scenario(plan: Plan) -> Run:
    """Everything, in the private lab; what was recorded comes back in ``Run``."""
    t0 = time.monotonic()
    # 2 engine pods (1 GPU each) on GPU nodes, 2 router pods on CPU nodes per PDDeployment
    with private_lab(pods=2 * plan.pdds, gpus=2 * plan.pdds, routers=2 * plan.pdds) as lab:
        port = free_port()
        log = lab.dir / "operator.log"
        r = Run(
            plan,
            lab,
            Kube.from_kubeconfig(lab.kubeconfig),
            KubeAPI(lab.apiserver_url, lab.pki_dir),
            log,
            Child("operator", sampled_argv(lab.dir / PROFILE, port), log),
            f"http://127.0.0.1:{port}/metrics",
            Child("exporter", exporter_argv(lab.kubeconfig), lab.dir / "exporter.log"),
        )
        r.facts["private lab"] = (
            f"{lab.config.nodes} fake GPU nodes x {lab.config.gpus_per_node} GPUs and "
            f"{cpu_nodes_for(2 * plan.pdds)} CPU nodes (110 pods each), "
            f"API server {lab.apiserver_url}, up in {time.monotonic() - t0:.0f} s"
        )
        try:
            _run_in_lab(r, t0)
        except BenchError as err:
            raise BenchError(str(err), {**r.facts, **err.facts}) from None
        except LAB_ERRORS as err:
            r.facts["lab logs (kept)"] = str(lab.dir / "logs")
            raise BenchError(f"lost the lab: {err}", r.facts) from err
    r.facts["whole measurement"] = f"{time.monotonic() - t0:.0f} s"
    return r


def _run_in_lab(r: Run, t0: float) -> None:
    r.create()
    r.facts["PDDeployments created"] = f"{time.monotonic() - t0:.0f} s after the start"
    env = {
        **os.environ,
        "KUBECONFIG": str(r.lab.kubeconfig),
        "PDSCALER_PROMETHEUS_URL": r.lab.prometheus_url,
    }
    r.log.unlink(missing_ok=True)
    (r.lab.dir / PROFILE).unlink(missing_ok=True)  # never read a previous run's
    r.exporter.start(env)
    r.child.start(env)
    r.window = _measure_running(r)


PROFILE = "operator-profile.json"


def sampled_argv(profile: Path, port: int) -> list[str]:
    """The operator (``pdlab.demo.run.operator_argv``) under ``bench.overhead.sampled``'s
    stack sampler, its profile written to ``profile`` when it stops."""
    return [
        sys.executable, "-m", "bench.overhead.sampled", str(profile), "--",
        *operator_argv(NAMESPACE, port)[3:],
    ]  # fmt: skip


def profile_facts(r: Run, w: Window) -> None:
    """Where the operator's CPU went (``bench.overhead.sampled``: by package, by function,
    by the pdscaler code that led there) and what the sampler itself cost, into the
    facts and ``r.profile``."""
    path = r.lab.dir / PROFILE
    if not path.exists():
        r.facts["profile"] = "not written (the operator did not exit cleanly)"
        return
    prof = json.loads(path.read_text())
    r.profile = prof

    def top(key: str, n: int = 8) -> str:
        return ", ".join(f"{k} {100 * v:.0f}%" for k, v in list(prof[key].items())[:n])

    total_cpu = w.sampler.samples[-1].cpu
    r.facts["where the CPU goes (thread CPU charged to its stack at 10 Hz, whole run)"] = (
        f"by package: {top('cpu_by_package')}; by innermost function: "
        f"{top('cpu_by_function')}; by the pdscaler code that led there: "
        f"{top('cpu_by_pdscaler_caller')}; {prof['charged_cpu_s']:.0f} CPU-s charged; the "
        f"sampler's own CPU {prof['sampler_cpu_s']:.1f} s of the process's "
        f"{total_cpu:.0f} s (included in the CPU above)"
    )


def exporter_argv(kubeconfig: Path) -> list[str]:
    """The engines' stand-in (``bench.overhead.exporter``) serving the namespace's pods."""
    return [
        sys.executable, "-m", "bench.overhead.exporter", "--kubeconfig", str(kubeconfig),
        "--namespace", NAMESPACE,
    ]  # fmt: skip


def diagnosis(reconciled_count: int) -> str:
    """Why PDDeployments were left without a first tick (the tick loop, handlers.py)."""
    return (
        f"cause: {reconciled_count} had their first tick; a new PDDeployment is due at once "
        "but waits, with every due tick, for one of the operator's 8 tick threads "
        "(handlers.TICK_WORKERS): when ticks take longer than 8 / (PDDeployments / "
        "interval) seconds the queue only grows (the tick lateness above)"
    )


def no_home(text: str) -> str:
    """A machine path written from ``~``: results name no user's home."""
    return text.replace(str(Path.home()), "~")


def title_of(p: Plan, number: int = 3) -> str:
    """ "3. One operator process handling many PDDeployments: 200 at a 15s interval"."""
    return f"{number}{TITLE[1:]}: {p.pdds} at a {p.interval} interval"


def measure(plan: Plan | None = None, scenario: Callable[[Plan], Run] = run_scenario) -> Section:
    return measure_with_numbers(plan, scenario)[0]


def measure_with_numbers(
    plan: Plan | None = None,
    scenario: Callable[[Plan], Run] = run_scenario,
    number: int = 3,
) -> tuple[Section, dict[str, Any] | None]:
    """The section (``number``: its place in the report) and, when measured, its
    figures as numbers with the run's notes (``figures.numbers``: overhead.json)."""
    p = plan or Plan()
    title = title_of(p, number)
    try:
        r = scenario(p)
    except BenchError as err:
        notes = [no_home(f"{k}: {v}") for k, v in err.facts.items()]
        return Section(title, "", not_measured=no_home(str(err)), notes=notes), None
    w = r.window
    if w is None or len(w.sampler.samples) < 2:
        return Section.skipped(title, "the window held too few samples"), None
    notes = [no_home(f"{k}: {v}") for k, v in r.facts.items()]
    notes.append(breakdown(w))
    if w.reconciled < w.pdds:
        notes.append(diagnosis(w.reconciled))
    notes += [
        "each PDDeployment: the chat example (Auto, 1 prefill + 1 decode replica, 1 GPU "
        "each, pods Ready 2 s after creation in kwok); every engine and router pod answers "
        "/metrics at its pod IP through bench.overhead.exporter (the engine simulator's "
        "vLLM exposition of a steady load, 0.5 requests/s per PDDeployment, inside the "
        "SLO; vllm-router's processed-requests counter on the routers), scraped every "
        "15 s by the lab's Prometheus through Kubernetes discovery, so the operator's "
        "queries answer with real series (MetricsAvailable and the decisions above); the "
        "window is the steady state of a converged fleet",
        f"operator: `python -m pdscaler run --standalone --namespace {NAMESPACE} "
        "--metrics-port <free port>`",
    ]
    section = Section(
        title,
        f"{p.pdds} PDDeployments in one namespace of a private lab (own directory and "
        f"ports, stopped and purged afterwards), interval {p.interval}, one operator "
        "process; the window starts once they are reconciled and the operator has written "
        "nothing for one interval.",
        ["quantity", "value", "how"],
        figures(w),
        notes=notes,
    )
    return section, {**numbers(w), "profile": r.profile, "notes": notes}
