"""`python -m pdlab engine-sim`: the live engine simulator of the lab.

Owns: serving every Ready prefill and decode pod at its pod IP and port
(``pdlab.engine.serve``: the OpenAI-compatible API, the vLLM P/D hand-off, the pod's
``/metrics``, the record of every request), the pod poll of the API server (every
second), and, optionally, synthetic load: one serving model (``pdscaler.sim.engine.Engine``)
per PDDeployment advanced in wall-clock time, its replicas the Ready pods, replaying a
scenario (``pdlab.engine.scenarios``) or a real trace; a pod's ``/metrics`` then shows the sum
of its real requests' series and its share of the synthetic load; and each Ready frontend
pod of a stack (``pdscaler.io/role=frontend``, Dynamo's) shows its PDDeployment's
synthetic load in Dynamo's frontend names (``pdlab.engine.frontend``). Must not: change
anything in the cluster, or decide anything about scaling (the operator does, from
Prometheus only). Prometheus finds the pods itself (Kubernetes service discovery).

Control endpoints (``--port``, 127.0.0.1):

* ``/requests?since=N``: the request records numbered above N (``serve``), the
  next number to ask from, and the pairing-error count.
* ``/metrics``: every pod's series with its labels (namespace, pod, pdscaler_io_name,
  pdscaler_io_role), for humans.
* ``/status``: per PDDeployment, the scenario phase and clock, ready pods, queues,
  request rate, and client-side TTFT/TPOT percentiles over the last 15 s; the pods
  served and the pairing errors.

Router pods: unless ``--no-routers``, the simulator also runs the Ready router pods of
its namespace (``pdlab.cluster.podrunner``), so one process stands in for the kubelets.

Timing: a PDDeployment's scenario starts when it has at least one Ready prefill pod AND
one Ready decode pod (its requests have somewhere to go); its engine clock is wall
seconds since the simulator first saw one of its pods. The model is stepped every
``--step`` seconds (0.5); pods are polled every ``--poll`` seconds (1). A pod that turns
Ready becomes a replica serving at once (its start-up happened in Kubernetes); a pod
that stops being Ready or disappears drains (takes no new work, finishes what it holds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import sys
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pdlab.engine import scenarios
from pdlab.engine.dialect import DYNAMO_FRONTEND
from pdlab.engine.expo import render_pod, render_pods
from pdlab.engine.frontend import FrontendServers
from pdlab.engine.pods import FrontendSource, PodInfo, PodSource
from pdlab.engine.serve import PodServers
from pdscaler.metricsql import PROM_NAME, PROM_NAMESPACE, PROM_POD, PROM_ROLE
from pdscaler.sim.engine import (
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    Engine,
    EngineParams,
    PodStats,
    Sample,
)
from pdscaler.sim.prom import histogram_quantile
from pdscaler.sim.traces import Trace, scale_rate
from pdscaler.types import Role

if TYPE_CHECKING:
    from pdlab.cluster.lab import Lab

STATUS_WINDOW_S = 15.0
RATE_WINDOW_S = 10.0
#: A PDDeployment without any pod for this long is forgotten (its engine dropped).
FORGET_AFTER_S = 10.0


Workload = Callable[[], tuple[Trace, scenarios.Scenario]]
Labelled = list[tuple[PodStats, dict[str, str]]]


def target_labels(pod: PodInfo) -> dict[str, str]:
    """The labels the Kubernetes pod scrape gives (deploy/prometheus/kubernetes-sd.yaml)."""
    return {
        PROM_NAMESPACE: pod.namespace,
        PROM_POD: pod.name,
        PROM_NAME: pod.deployment,
        PROM_ROLE: pod.role.value,
    }


def _quantile_delta(
    q: float,
    new: Sequence[float] | npt.NDArray[np.float64],
    old: Sequence[float] | npt.NDArray[np.float64],
    bounds: Sequence[float],
) -> float | None:
    """``histogram_quantile`` of the observations between two cumulative snapshots."""
    delta = [float(a - b) for a, b in zip(new, old, strict=True)]
    return histogram_quantile(q, delta, bounds)


class DeploymentSim:
    """The serving model of one PDDeployment and the mapping pod -> replica."""

    def __init__(
        self,
        namespace: str,
        name: str,
        trace: Trace,
        scenario: scenarios.Scenario,
        params: EngineParams,
        seed: int,
        created: float,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.trace = trace
        self.scenario = scenario
        self.created = created  # monotonic seconds at engine time 0
        self.engine = Engine([], [], [], params, startup_s=0.0, initial=(0, 0), seed=seed)
        self.started_at: float | None = None  # engine time the scenario started
        self.started_wall: float | None = None
        self.replica_of: dict[str, str] = {}  # pod name -> replica name
        self.pods: dict[str, PodInfo] = {}  # pods with a replica
        self.samples: deque[Sample] = deque()
        self.log: list[str] = []
        self.empty_since: float | None = None  # monotonic time its last pod went

    def clock(self, mono: float) -> float:
        return mono - self.created

    def sync(self, pods: Sequence[PodInfo], mono: float) -> None:
        """Make the replicas the Ready pods: drain those whose pod is not Ready any more,
        add one per newly Ready pod; start the scenario once both pools serve."""
        now = self.clock(mono)
        ready = {p.name: p for p in pods if p.ready}
        for pod in [p for p in self.replica_of if p not in ready]:
            self.engine.remove_replica(self.replica_of.pop(pod), now)
            info = self.pods.pop(pod)
            self.log.append(f"{info.role.value} pod {pod} left: draining")
        taken = {r.name for r in self.engine.replicas}
        for pod, info in ready.items():
            if pod in self.replica_of:
                continue
            name, k = pod, 1
            while name in taken:
                k += 1
                name = f"{pod}#{k}"
            self.engine.add_replica(info.role, now, name=name, ready_at=now)
            self.replica_of[pod] = name
            self.pods[pod] = info
            self.log.append(f"{info.role.value} pod {pod} Ready: serving")
        if self.started_at is None and {p.role for p in self.pods.values()} == set(Role):
            self.started_at = now
            self.started_wall = time.time()
            self.engine.add_requests(self.trace.arrival + now, self.trace.prompt, self.trace.output)
            self.log.append(f"scenario {self.scenario.name} started ({len(self.trace)} requests)")

    def step(self, mono: float) -> dict[tuple[str, str], PodStats]:
        """Run the model to now; the synthetic series of the pods that serve."""
        now = self.clock(mono)
        sample = self.engine.sample(now)
        self.samples.append(sample)
        while self.samples and self.samples[0].time < now - STATUS_WINDOW_S:
            self.samples.popleft()
        stats = {rep.name: rep.stats for role in Role for rep in self.engine.pool(role)}
        out: dict[tuple[str, str], PodStats] = {}
        for pod, rep_name in self.replica_of.items():
            st = stats.get(rep_name)
            if st is not None:
                out[(self.namespace, pod)] = st
        return out

    def frontend_stats(self) -> PodStats | None:
        """The deployment's series as a frontend in front of it counts them (Dynamo's,
        ``pdlab.engine.frontend``), from the last scrape of the model (None before
        one): requests answered with their prompt and output token sums (decode's
        finished requests), TTFT arrival -> first token, and decode's inter-token
        latencies. Counters over every pod the pools ever had, so they never go back
        when a pod leaves."""
        if not self.samples:
            return None
        s = self.samples[-1]
        d = s.decode
        return PodStats(
            request_success=d.request_success,
            request_prompt_tokens_sum=d.request_prompt_tokens_sum,
            request_generation_tokens_sum=d.request_generation_tokens_sum,
            ttft_counts=[float(c) for c in s.client_ttft_hist],
            ttft_sum=s.client_ttft_sum,
            itl_counts=list(d.itl_counts),
            itl_sum=d.itl_sum,
        )

    def combined(self) -> Labelled:
        """(stats, labels) of every serving pod, for the human-readable /metrics."""
        stats = {rep.name: rep.stats for role in Role for rep in self.engine.pool(role)}
        return [
            (stats[rep], target_labels(self.pods[pod]))
            for pod, rep in self.replica_of.items()
            if rep in stats
        ]

    def phase(self) -> tuple[str | None, float | None]:
        """(phase name, scenario seconds) now; (None, None) before the start."""
        if self.started_at is None:
            return None, None
        t = self.engine.now - self.started_at
        return self.scenario.phase_at(t) or "done", t

    def status(self) -> dict[str, Any]:
        """The JSON status of this PDDeployment (see the module docstring)."""
        phase, t = self.phase()
        out: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "scenario": self.scenario.name,
            "phases": self.scenario.boundaries(),
            "phase": phase,
            "scenario_time_s": t,
            "scenario_duration_s": self.scenario.duration_s,
            "started_wall": self.started_wall,
            "pods": {
                role.value: sorted(p for p, i in self.pods.items() if i.role is role)
                for role in Role
            },
            "requests_total": len(self.trace),
        }
        if not self.samples:
            return out
        new, old = self.samples[-1], self.samples[0]
        recent = next(
            (s for s in self.samples if s.time >= new.time - RATE_WINDOW_S), self.samples[0]
        )
        dt = new.time - recent.time
        out.update(
            prefill_queue=new.prefill.waiting,
            decode_queue=new.decode.waiting,
            prefill_running=new.prefill.running,
            decode_running=new.decode.running,
            kv_usage=new.kv_usage,
            arrived=new.requests_arrived,
            finished=new.decode.request_success,
            request_rate=(new.requests_arrived - recent.requests_arrived) / dt if dt > 0 else None,
            ttft_p50_s=_quantile_delta(
                0.5, new.client_ttft_hist, old.client_ttft_hist, TTFT_BUCKETS
            ),
            ttft_p95_s=_quantile_delta(
                0.95, new.client_ttft_hist, old.client_ttft_hist, TTFT_BUCKETS
            ),
            tpot_p50_s=_quantile_delta(
                0.5, new.decode.itl_counts, old.decode.itl_counts, TPOT_BUCKETS
            ),
            tpot_p95_s=_quantile_delta(
                0.95, new.decode.itl_counts, old.decode.itl_counts, TPOT_BUCKETS
            ),
        )
        return out


@dataclass
class Pages:
    """What the control server serves; replaced as a whole after each step."""

    synthetic: dict[tuple[str, str], PodStats] = field(default_factory=dict)
    combined: Labelled = field(default_factory=list)
    status: bytes = b"{}"
    #: (namespace, PDDeployment) -> its frontend's series (``frontend_stats``)
    frontend: dict[tuple[str, str], PodStats] = field(default_factory=dict)


class EngineSim:
    """The whole simulator: the pod servers, the pod poll, the synthetic load.

    ``make_workload`` None: no synthetic load, the pods serve only real requests.
    ``serve`` False: no pod servers (the synthetic model alone, e.g. in unit tests).
    ``frontends``: where a stack's frontend pods are listed (``pdscaler.io/role=
    frontend``); each Ready one is served its PDDeployment's ``dynamo_frontend_*``
    series (``pdlab.engine.frontend``).
    """

    def __init__(
        self,
        lister: PodSource,
        make_workload: Workload | None,
        params: EngineParams,
        *,
        port: int,
        seed: int = 0,
        step_s: float = 0.5,
        poll_s: float = 1.0,
        serve: bool = True,
        frontends: FrontendSource | None = None,
    ) -> None:
        self.lister = lister
        self.frontends = frontends
        self.make_workload = make_workload
        self.params = params
        self.port = port
        self.seed = seed
        self.step_s = step_s
        self.poll_s = poll_s
        self.deployments: dict[tuple[str, str], DeploymentSim] = {}
        self.pages = Pages()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.servers: PodServers | None = (
            PodServers(params, extra=self._synthetic, say=self._say) if serve else None
        )
        self.frontend_servers: FrontendServers | None = (
            FrontendServers(self.frontend_page) if serve and frontends is not None else None
        )

    def frontend_page(self, namespace: str, name: str) -> str:
        """The ``dynamo_frontend_*`` page of ``namespace/name``'s frontend ("" while its
        PDDeployment has no model or no scrape yet)."""
        stats = self.pages.frontend.get((namespace, name))
        return "" if stats is None else render_pod(stats, dialect=DYNAMO_FRONTEND.name)

    def _synthetic(self, pod: PodInfo) -> PodStats | None:
        return self.pages.synthetic.get((pod.namespace, pod.name))

    # ---------------------------------------------------------------- loop
    def poll(self, mono: float) -> None:
        """One API call; creates a DeploymentSim per new PDDeployment, syncs replicas."""
        pods = self.lister.list()
        by_dep: dict[tuple[str, str], list[PodInfo]] = {}
        for p in pods:
            by_dep.setdefault((p.namespace, p.deployment), []).append(p)
        if self.servers is not None:
            for line in self.servers.sync(pods):
                self._say(line)
        if self.frontends is not None and self.frontend_servers is not None:
            for line in self.frontend_servers.sync(self.frontends.list()):
                self._say(line)
        for key in by_dep:
            if self.make_workload is not None and key not in self.deployments:
                trace, scenario = self.make_workload()
                self.deployments[key] = DeploymentSim(
                    key[0], key[1], trace, scenario, self.params, self.seed, mono
                )
                self._say(f"{key[0]}/{key[1]}: new PDDeployment, scenario {scenario.name}")
        for key, dep in list(self.deployments.items()):
            dep.sync(by_dep.get(key, []), mono)
            if key in by_dep or dep.replica_of:
                dep.empty_since = None
            elif dep.empty_since is None:
                dep.empty_since = mono
            elif mono - dep.empty_since >= FORGET_AFTER_S:
                del self.deployments[key]  # recreated later, it starts its scenario afresh
                self._say(f"{key[0]}/{key[1]}: no pods for {FORGET_AFTER_S:.0f}s, forgotten")

    def step(self, mono: float) -> None:
        synthetic: dict[tuple[str, str], PodStats] = {}
        combined: Labelled = []
        frontend: dict[tuple[str, str], PodStats] = {}
        status = []
        for dep in self.deployments.values():
            synthetic.update(dep.step(mono))
            seen = dep.frontend_stats()
            if seen is not None:
                frontend[(dep.namespace, dep.name)] = seen
            combined.extend(dep.combined())
            status.append(dep.status())
            for line in dep.log:
                self._say(f"{dep.namespace}/{dep.name}: {line}")
            dep.log.clear()
        doc: dict[str, Any] = {"port": self.port, "time": time.time(), "deployments": status}
        if self.servers is not None:
            combined = self._live(synthetic)
            doc["pods"] = sorted(
                f"{s.pod.namespace}/{s.pod.name} {s.pod.address}"
                for s in self.servers.servers.values()
            )
            doc["pairing_errors"] = self.servers.records.pairing_errors
        self.pages = Pages(
            synthetic, combined, json.dumps(doc, default=_json_default).encode(), frontend
        )

    def _live(self, synthetic: dict[tuple[str, str], PodStats]) -> Labelled:
        """(stats, labels) of every served pod: its real requests plus its synthetic load."""
        assert self.servers is not None
        out: Labelled = []
        for key, server in list(self.servers.servers.items()):
            out.append((server.stats.plus(synthetic.get(key)), target_labels(server.pod)))
        return out

    def close(self) -> None:
        """Stop the pod and frontend servers."""
        if self.servers is not None:
            self.servers.close()
        if self.frontend_servers is not None:
            self.frontend_servers.close()

    def run(self, duration_s: float | None = None) -> None:
        """Poll and step until ``stop`` is set (or ``duration_s`` elapsed)."""
        t0 = time.monotonic()
        next_poll = t0
        while not self.stop.is_set():
            mono = time.monotonic()
            if duration_s is not None and mono - t0 >= duration_s:
                break
            if mono >= next_poll:
                try:
                    with self.lock:
                        self.poll(mono)
                except Exception as err:  # the API server may be restarting
                    self._say(f"pod poll failed: {err!r}")
                next_poll = mono + self.poll_s
            with self.lock:
                self.step(mono)
            self.stop.wait(max(0.0, self.step_s - (time.monotonic() - mono)))

    @staticmethod
    def _say(line: str) -> None:
        print(f"engine-sim {time.strftime('%H:%M:%S')} {line}", flush=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def make_handler(sim: EngineSim) -> type[BaseHTTPRequestHandler]:
    """The control server's request handler: ``sim.pages`` (read-only, lock-free: the
    page set is replaced as a whole) and the request records."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            pages = sim.pages
            path, _, query = self.path.partition("?")
            if path == "/metrics":
                self._send(200, render_pods(pages.combined), "text/plain; version=0.0.4")
            elif path == "/requests" and sim.servers is not None:
                since = urllib.parse.parse_qs(query).get("since", ["0"])[0]
                try:
                    page = sim.servers.records.page(int(since))
                except ValueError:
                    self._send(400, f"since must be an integer: {since!r}\n", "text/plain")
                    return
                self._send(200, json.dumps(page), "application/json")
            elif path == "/status":
                self._send(200, pages.status.decode(), "application/json")
            elif path == "/healthz":
                self._send(200, "ok\n", "text/plain")
            else:
                self._send(404, f"no such page: {path}\n", "text/plain")

        def _send(self, code: int, body: str, ctype: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return  # scrapes every 2 s per pod: keep the log for events

    return Handler


# -------------------------------------------------------------------- command line


def workload(args: argparse.Namespace) -> tuple[Trace, scenarios.Scenario] | None:
    """The trace to replay and the scenario describing it, from the flags (None: no
    synthetic load)."""
    if args.trace is not None:
        return scenarios.from_trace(
            args.trace, args.rate_scale, args.trace_start, args.duration, args.seed
        )
    if args.scenario is None:
        return None
    scenario = scenarios.get(args.scenario)
    if args.duration is not None:
        scenario = scenarios.scaled(scenario, args.duration)
    trace = scenarios.generate(scenario, args.seed)
    if args.rate_scale != 1.0:
        trace = scale_rate(trace, args.rate_scale, args.seed)
    return trace, scenario


def main(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT (or ``--run-for``); 0 on a clean stop, 2 on bad flags."""
    from pdlab.cluster.lab import Lab
    from pdlab.engine.pods import FrontendLister, LingeringPods, PodLister

    if not (args.rate_scale > 0 and math.isfinite(args.rate_scale)):
        print(f"engine-sim: --rate-scale must be > 0, got {args.rate_scale}", file=sys.stderr)
        return 2
    try:
        load = workload(args)
    except (OSError, ValueError) as err:
        print(f"engine-sim: {err}", file=sys.stderr)
        return 2
    lab = Lab()
    if not lab.kubeconfig.exists():
        print(f"engine-sim: no lab kubeconfig at {lab.kubeconfig}: run `python -m pdlab up`",
              file=sys.stderr)  # fmt: skip
        return 2
    sim = EngineSim(
        LingeringPods(PodLister(lab.kubeconfig, args.namespace, args.name)),
        None if load is None else (lambda: load),
        EngineParams() if not args.prefill_tps else EngineParams(prefill_tps=args.prefill_tps),
        port=args.port,
        seed=args.seed,
        step_s=args.step,
        poll_s=args.poll,
        frontends=FrontendLister(lab.kubeconfig, args.namespace, args.name),
    )
    what = "no synthetic load"
    if load is not None:
        trace, scenario = load
        what = f"scenario {scenario.name}: {len(trace)} requests over {scenario.duration_s:.0f}s"
    serve(
        sim,
        lab,
        args.namespace,
        f"control http://127.0.0.1:{args.port}/status; pods at their IPs; {what}",
        routers=not args.no_routers,
        run_for=args.run_for,
    )
    return 0


def serve(
    sim: EngineSim,
    lab: Lab,
    namespace: str | None,
    banner: str,
    routers: bool = True,
    run_for: float | None = None,
) -> None:
    """Run ``sim`` with its control port on 127.0.0.1 and (``routers``) a pod runner
    for the router pods of ``namespace`` (None: every namespace) until SIGTERM/SIGINT
    (or ``run_for`` seconds); everything it started is stopped on the way out."""
    from pdlab.cluster.podrunner import PodRunner

    runner: PodRunner | None = None
    if routers:
        runner = PodRunner(
            lab.kubeconfig,
            lab.dir / "logs" / "pods",
            [namespace] if namespace else None,
            say=EngineSim._say,
        ).start()
    server = ThreadingHTTPServer(("127.0.0.1", sim.port), make_handler(sim))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sim.stop.set())
    EngineSim._say(banner)
    try:
        sim.run(run_for)
    finally:
        with contextlib.suppress(Exception):
            sim.close()
        if runner is not None:
            runner.stop()
        server.shutdown()
        server.server_close()
        EngineSim._say("stopped")
