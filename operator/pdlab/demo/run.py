"""`python -m pdlab demo` (`make demo`): the lab, the operator, the engine simulator and
real requests from a third-party client, with the two pools rebalancing live.

Owns: the demo's sequence: the lab up (started only if it was not running), the CRD
installed, the namespace, the engine simulator (``pdlab.demo.engine``: the pods served
at their IPs, the router pods run) and the operator started as child processes (logs in
the output directory), the demo PDDeployment applied (``deploy/demo/demo.yaml``, its
Prometheus URL set to the lab's), the front Service's proxy (``pdlab.cluster.svcproxy``) on a
local port, and, once one request went through it, aiperf replaying the scenario's
trace (``pdlab.engine.scenarios``' demo-http, Poisson arrivals per phase) through it; then one
observation per second (the engines' queues, aiperf's and the engines' request records,
the PDDeployment's status and Events, the Ready pods) shown live and recorded until
aiperf is done; the summary, ``summary.json``, ``timeline.csv``, ``requests.jsonl`` and
``demo.png``; and the clean-up: aiperf stopped, PDDeployment deleted (while the operator
still runs, so a finalizer can be honoured), proxy, operator and simulator stopped by
PID, the namespace deleted if the demo created it, the lab stopped if the demo started
it and nobody else uses it. Must not: stop processes it did not start, or touch other
namespaces.

The scenario: a warm-up ramp, chat (P:D about 1:1), long documents (prefill-heavy), a
burst, a cool-down; 300 s, or ``--duration``/``--speed`` for a shorter run (the test
uses 135 s), which also quickens the operator's window, interval and stabilization
(``cluster_io.quicken``). Scenario time 0 is the first request's arrival at an engine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from pdlab.cluster import loadclient
from pdlab.cluster.config import REPO_DIR
from pdlab.cluster.kubeclient import (
    Kube,
    apply_crd,
    delete_namespace,
    ensure_namespace,
    if_found,
    wait_until,
)
from pdlab.cluster.lab import Lab, LabError
from pdlab.cluster.processes import Child
from pdlab.cluster.svcproxy import SvcProxy
from pdlab.demo import report as demo_report
from pdlab.demo import traffic as demo_traffic
from pdlab.demo import view as demo_view
from pdlab.demo.cluster_io import (
    EventLog,
    apply_pdd,
    engine_doc,
    engine_status,
    load_manifest,
    read_pdd,
    ready_pods,
)
from pdlab.engine import scenarios
from pdscaler.spec import GROUP, PLURAL, VERSION

DEFAULT_MANIFEST = REPO_DIR / "deploy" / "demo" / "demo.yaml"
#: The scenario aiperf replays (``pdlab.engine.scenarios``): the demo's phases at HTTP scale.
SCENARIO = "demo-http"
FULL_DEMO_S = scenarios.get(SCENARIO).duration_s
#: From the PDDeployment applied to a first request through the front Service.
POOLS_UP_TIMEOUT_S = 120.0
#: aiperf's start-up (its services and workers) before the first request goes out.
AIPERF_START_S = 90.0
#: How long aiperf may run past the scenario's end (its last requests finish).
AIPERF_FINISH_S = 90.0
CLEANUP_TIMEOUT_S = 60.0
#: Why the client's and the operator's latencies differ (summary.json says it too).
LATENCY_SOURCES = (
    "client: aiperf's per-request TTFT and inter-token latency ((request latency - TTFT) / "
    "(output tokens - 1), the output tokens counted by its tokenizer in the streamed text, "
    "one per engine token: 'tokens' says both counts), p95 over the requests finished in "
    "the last 15 s; the TTFT includes the front Service, the router's two legs (prefill, "
    "then decode) and the KV hand-off. operator: the PDDeployment status' TTFT and TPOT, "
    "from Prometheus: p95 of per-pod vLLM histograms (prefill and decode pods each "
    "observing their own part; TPOT per request, decode time / (output tokens - 1)) over "
    "the metrics window, as the operator reads them. A phase's tpot_agrees: the two TPOTs "
    "differ by at most the width of the histogram bucket holding the operator's figure."
)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the front Service's local address)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and where the log is."""


# ------------------------------------------------------------------------ the children


def operator_argv(namespace: str, metrics_port: int = 0) -> list[str]:
    """The operator, watching only ``namespace``, standalone (no peering), its metrics
    on ``metrics_port`` (0, the demo's: off, as the lab may run other operators)."""
    return [
        sys.executable, "-m", "pdscaler", "run", "--standalone", "--namespace", namespace,
        "--metrics-port", str(metrics_port), "--log-format", "plain",
    ]  # fmt: skip


def engine_sim_argv(args: argparse.Namespace, name: str) -> list[str]:
    """The demo's engine simulator (``pdlab.demo.engine``): real requests only, the
    router pods run, its control port ``args.port``."""
    return [
        sys.executable, "-m", "pdlab.demo.engine", "--namespace", args.namespace,
        "--name", name, "--port", str(args.port),
    ]  # fmt: skip


# ------------------------------------------------------------------------ Kubernetes


def _demo_error(message: str) -> DemoError:
    return DemoError(f"demo: {message}")


# ------------------------------------------------------------------------ the demo


@dataclass
class Observation:
    wall: float
    snapshot: demo_view.Snapshot


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        speed = args.speed if args.speed and args.speed > 0 else 1.0
        self.duration = (args.duration or FULL_DEMO_S) / (1.0 if args.duration else speed)
        self.scenario = scenarios.scaled(scenarios.get(SCENARIO), self.duration)
        self.trace_rows = loadclient.trace_rows(scenarios.generate(self.scenario, args.seed))
        self.out: Path = args.out
        self.lab = Lab()
        self.started_lab = False
        self.created_ns = False
        self.kube: Kube | None = None
        self.name = "demo"
        self.children: list[Child] = []
        self.observations: list[Observation] = []
        self.events = EventLog()
        self.slo = (2.0, 0.05)
        self.started_wall: float | None = None
        self.front = 0
        self.proxy: SvcProxy | None = None
        self.client: loadclient.AiPerf | None = None
        self.aiperf: Child | None = None
        self.client_log = demo_traffic.ClientLog(self.out / "aiperf" / "artifacts")
        self.engine_log = demo_traffic.EngineLog(args.port)
        self.result: loadclient.Result | None = None

    # ------------------------------------------------------------- set-up
    def setup(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.lab.register_user()
        if not self.lab.is_up():
            self._say("starting the lab (etcd, kube-apiserver, controller-manager, scheduler, "
                      "kwok, Prometheus)...")  # fmt: skip
            self.started_lab = not self.lab.running_components()
            took = self.lab.ensure_up(timeout=600)
            self._say(f"lab up in {took:.0f}s")
        self.kube = Kube.from_kubeconfig(self.lab.kubeconfig)
        apply_crd(self.kube)
        ns = self.args.namespace
        self.created_ns = ensure_namespace(self.kube, ns)
        manifest = load_manifest(
            self.args.manifest or DEFAULT_MANIFEST,
            ns,
            self.lab.prometheus_url,
            self.duration / FULL_DEMO_S,
        )
        self.name = manifest["metadata"]["name"]
        slo = manifest["spec"].get("slo", {})
        self.slo = (float(slo.get("ttftSeconds", 2.0)), float(slo.get("tpotSeconds", 0.05)))
        env = {
            **os.environ,
            "KUBECONFIG": str(self.lab.kubeconfig),
            "PDLAB_PROMETHEUS_URL": self.lab.prometheus_url,
            "PDSCALER_PROMETHEUS_ALLOWED_URLS": self.lab.prometheus_url,
            "PYTHONUNBUFFERED": "1",
        }
        sim = Child("engine-sim", engine_sim_argv(self.args, self.name),
                    self.out / "engine-sim.log")  # fmt: skip
        op = Child("operator", operator_argv(ns), self.out / "operator.log")
        for child in (sim, op):
            child.start(env)
            self.children.append(child)
            self._say(f"started {child.name} (pid {child.pid}, log {child.log})")
        apply_pdd(self.kube, manifest)  # its pods take seconds: overlaps the children's start
        self.front = free_port()
        proxy_log = (self.out / "svcproxy.log").open("a")

        def say(line: str) -> None:
            proxy_log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
            proxy_log.flush()

        self.proxy = SvcProxy(self.lab.kubeconfig, ns, self.name, self.front, say=say).start()
        self._say(f"applied PDDeployment {ns}/{self.name}; its front Service {self.name} on "
                  f"http://127.0.0.1:{self.front}; aiperf starts when a request goes through "
                  f"(router -> prefill -> decode)")  # fmt: skip
        self.client = loadclient.AiPerf.ensure()
        wait_until(self._engine_sim_up, 60, "the engine simulator", error=_demo_error)

    # ------------------------------------------------------------- traffic
    def _start_client(self) -> None:
        assert self.client is not None
        self.engine_log.poll()  # the probes' records stay out of the scenario's
        self.engine_log.prefill.clear()
        self.engine_log.decode.clear()
        workdir = self.out / "aiperf"
        proc = self.client.start(f"http://127.0.0.1:{self.front}", self.trace_rows, workdir)
        self.aiperf = Child("aiperf", ["aiperf", "profile"], workdir / "aiperf.log", proc)
        rate = len(self.trace_rows) / self.duration
        self._say(f"aiperf (pid {proc.pid}) replays {len(self.trace_rows)} requests over "
                  f"{self.duration:.0f}s ({rate:.1f} req/s on average); log "
                  f"{workdir / 'aiperf.log'}")  # fmt: skip

    def _scenario_time(self, now: float) -> float | None:
        if self.started_wall is None:
            first = self.engine_log.first_arrival()
            if first is None:
                return None
            self.started_wall = first - (self.trace_rows[0].at if self.trace_rows else 0.0)
        return now - self.started_wall

    # ------------------------------------------------------------- the loop
    def observe(self) -> demo_view.Snapshot:
        assert self.kube is not None
        ns = self.args.namespace
        pdd = read_pdd(self.kube, ns, self.name)
        status = (pdd or {}).get("status") or {}
        pods = ready_pods(self.kube, ns, self.name)
        self.events.poll(self.kube, ns, self.name, pdd)
        sim = engine_doc(self.args.port) or {}
        now = time.time()
        if self.aiperf is not None:
            self.engine_log.poll()
            self.client_log.poll()
        t = self._scenario_time(now) if self.aiperf is not None else None
        queues = sim.get("queues") or {}
        return demo_view.Snapshot(
            phase=None if t is None else (self.scenario.phase_at(t) or "done"),
            scenario_time_s=t,
            duration_s=self.duration,
            request_rate=self.engine_log.served_rate(now) if t is not None else None,
            prefill_ready=pods["prefill"],
            decode_ready=pods["decode"],
            prefill_desired=(status.get("prefill") or {}).get("desiredReplicas"),
            decode_desired=(status.get("decode") or {}).get("desiredReplicas"),
            prefill_queue=queues.get("prefill"),
            decode_queue=queues.get("decode"),
            ttft_p95_s=self.client_log.p95("ttft_s", now),
            tpot_p95_s=self.client_log.p95("itl_s", now),
            operator_ttft=status.get("ttft"),
            operator_tpot=status.get("tpot"),
            operator_ratio=status.get("ratio"),
            decisions=[(when, text) for _, when, text in self.events.entries],
            slo=self.slo,
            client=self._client_line(),
        )

    def _client_line(self) -> str:
        if self.aiperf is None:
            return "aiperf: waiting for the front Service to answer"
        done = len(self.client_log.records)
        if not done and self.started_wall is None:
            return "aiperf: starting (its workers take 10-20 s)"
        return (
            f"aiperf: {done}/{len(self.trace_rows)} requests done, "
            f"{self.client_log.errors()} failed; engines: "
            f"{len(self.engine_log.decode)} served, {self.engine_log.pairing_errors} "
            "pairing errors"
        )

    def _engine_sim_up(self) -> bool:
        self._check_children()
        return engine_status(self.args.port) is not None

    def _check_children(self) -> None:
        for child in self.children:
            if not child.alive():
                raise DemoError(
                    f"demo: {child.name} exited (code {child.proc.poll() if child.proc else '?'})"
                    f"; log {child.log}:\n{child.tail()}"
                )

    def play(self) -> None:
        """Observe once a second until aiperf has replayed the scenario; show it live."""
        live_ok = not self.args.no_live and sys.stdout.isatty()
        deadline_start = time.monotonic() + POOLS_UP_TIMEOUT_S
        title = f"pdscaler demo · {self.args.namespace}/{self.name}"
        last_line = 0.0
        live_cm: Any = contextlib.nullcontext()
        if live_ok:
            from rich.live import Live

            live_cm = Live(auto_refresh=False, redirect_stdout=False, transient=False)
        with live_cm as live:
            while True:
                tick = time.monotonic()
                self._check_children()
                if self.aiperf is None:
                    assert self.kube is not None
                    up = ready_pods(self.kube, self.args.namespace, self.name)
                    if up["prefill"] and up["decode"] and demo_traffic.probe_completion(self.front):
                        self._start_client()
                    elif tick > deadline_start:
                        op = self.children[-1]
                        raise DemoError(
                            "demo: no request went through the front Service within "
                            f"{POOLS_UP_TIMEOUT_S:.0f}s; operator log {op.log}:\n{op.tail()}"
                        )
                snap = self.observe()
                self.observations.append(Observation(time.time(), snap))
                if live is not None:
                    live.update(demo_view.render(snap, title), refresh=True)
                elif tick - last_line >= 5.0:
                    print(demo_view.line(snap), flush=True)
                    last_line = tick
                if self.aiperf is not None and not self.aiperf.alive():
                    break
                t = snap.scenario_time_s
                if t is None and self.aiperf is not None and tick > deadline_start + AIPERF_START_S:
                    raise DemoError(f"demo: aiperf sent nothing; log {self.aiperf.log}:\n"
                                    f"{self.aiperf.tail()}")  # fmt: skip
                if t is not None and t > self.duration + AIPERF_FINISH_S:
                    raise DemoError(
                        f"demo: aiperf still runs {AIPERF_FINISH_S:.0f}s after the scenario's "
                        f"end; log {self.aiperf.log if self.aiperf else '-'}"
                    )
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        assert self.aiperf is not None
        assert self.aiperf.proc is not None
        self.engine_log.poll()
        self.client_log.poll()
        code = self.aiperf.proc.poll()
        try:
            self.result = loadclient.AiPerf.result(self.out / "aiperf")
        except FileNotFoundError as err:
            raise DemoError(f"demo: aiperf exited with code {code}: {err}") from None
        if not live_ok:
            for _, when, text in self.events.entries:
                print(f"  {when} {text}")

    # ------------------------------------------------------------- report
    def rows(self) -> list[demo_report.Row]:
        t0 = self.started_wall or (self.observations[0].wall if self.observations else 0.0)
        return [
            demo_report.Row(
                t=o.wall - t0,
                phase=o.snapshot.phase,
                prefill_ready=o.snapshot.prefill_ready,
                decode_ready=o.snapshot.decode_ready,
                prefill_desired=o.snapshot.prefill_desired,
                decode_desired=o.snapshot.decode_desired,
                request_rate=o.snapshot.request_rate,
                ttft_p95_s=o.snapshot.ttft_p95_s,
                tpot_p95_s=o.snapshot.tpot_p95_s,
                prefill_queue=o.snapshot.prefill_queue,
                decode_queue=o.snapshot.decode_queue,
                operator_ttft_s=demo_traffic.seconds(o.snapshot.operator_ttft),
                operator_tpot_s=demo_traffic.seconds(o.snapshot.operator_tpot),
            )
            for o in self.observations
        ]

    def report(self, wall_s: float) -> list[demo_report.PhaseSummary]:
        rows = self.rows()
        phases = self.scenario.boundaries()
        summaries = demo_report.summarize(phases, rows)
        t0 = self.started_wall or 0.0
        decisions = [(wall - t0, text) for wall, _, text in self.events.entries]
        demo_report.write_timeline(self.out / "timeline.csv", rows)
        result = self.result
        demo_report.write_summary(
            self.out / "summary.json",
            {
                "namespace": self.args.namespace,
                "name": self.name,
                "scenario": SCENARIO,
                "scenario_duration_s": self.duration,
                "wall_seconds": wall_s,
                "decisions": [{"t": t, "text": text} for t, text in decisions],
                "processes": {c.name: c.pid for c in [*self.children, self.aiperf] if c},
                "slo": {"ttft_s": self.slo[0], "tpot_s": self.slo[1]},
                "sent": len(self.trace_rows),
                "aiperf": None
                if result is None
                else {
                    "requests": result.requests,
                    "errors": result.errors,
                    "ttft_ms": result.ttft_ms,
                    "itl_ms": result.itl_ms,
                    "latency_ms": result.latency_ms,
                    "tokens": demo_report.token_counts(result.raw),
                },
                "requests": self.engine_log.path_check(),
                "latency_sources": LATENCY_SOURCES,
            },
            summaries,
        )
        if rows:
            demo_report.plot(self.out / "demo.png", rows, phases, self.slo, decisions)
        self._print_summary(summaries, len(decisions), wall_s)
        return summaries

    def _print_summary(
        self, summaries: list[demo_report.PhaseSummary], decisions: int, wall_s: float
    ) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"demo summary: {decisions} decisions, {wall_s:.0f}s wall clock")
        table.add_column("phase", no_wrap=True)
        for col in ("time s", "P", "D", "P:D", "P share", "GPUs", "TTFT p95 aiperf / operator",
                    "TPOT p95 aiperf / operator"):  # fmt: skip
            table.add_column(col, justify="right", no_wrap=True)

        def pair(client: float | None, operator: float | None, scale: float, unit: str) -> str:
            digits = 2 if unit == "s" else 0
            texts = [
                "-" if v is None else f"{v * scale:.{digits}f}{unit}" for v in (client, operator)
            ]
            return " / ".join(texts)

        for s in summaries:
            table.add_row(
                s.name,
                f"{s.start_s:.0f}-{s.end_s:.0f}",
                f"{s.prefill_mean:.1f}",
                f"{s.decode_mean:.1f}",
                "-" if s.ratio is None else f"{s.ratio:.2f}",
                "-" if s.prefill_share is None else f"{s.prefill_share:.2f}",
                str(s.max_gpus),
                pair(s.ttft_p95_s, s.operator_ttft_s, 1.0, "s"),
                pair(s.tpot_p95_s, s.operator_tpot_s, 1000.0, "ms"),
            )
        console = Console(width=None if sys.stdout.isatty() else 140)
        console.print(table)
        if self.result is not None:
            r = self.result
            console.print(
                f"aiperf: {r.requests} requests, {r.errors} failed; TTFT p50 "
                f"{r.ttft_ms.get('p50', float('nan')):.0f} ms p99 "
                f"{r.ttft_ms.get('p99', float('nan')):.0f} ms; ITL p50 "
                f"{r.itl_ms.get('p50', float('nan')):.0f} ms p99 "
                f"{r.itl_ms.get('p99', float('nan')):.0f} ms"
            )
            counts = demo_report.token_counts(r.raw)
            console.print(
                f"output tokens: aiperf's tokenizer counted {counts['client'] or 0:.0f}, the "
                f"engines produced {counts['server'] or 0:.0f} (osl mismatch "
                f"{counts['osl_mismatch_pct'] or 0:.1f}%)"
            )
        agree = ", ".join(
            f"{s.name} {'-' if s.tpot_agrees is None else 'yes' if s.tpot_agrees else 'NO'}"
            for s in summaries
        )
        console.print(f"TPOT aiperf and operator within one histogram bucket: {agree}")
        check = self.engine_log.path_check()
        with (self.out / "requests.jsonl").open("w") as fh:
            for rec in self.engine_log.prefill + self.engine_log.decode:
                fh.write(json.dumps(rec) + "\n")
        console.print(
            f"engines: {check['decode_records']} requests served, cells {check['cells']}, "
            f"{check['mixed']} across cells, {check['without_kv_transfer']} without the KV "
            f"hand-off, {check['pairing_errors']} pairing errors"
        )
        console.print(
            "P, D: mean ready replicas over each phase's second half; GPUs: the most in use; "
            "TTFT/TPOT aiperf: the client's p95 over 15 s of finished requests (router legs "
            "and KV hand-off included; TPOT per request, (latency - TTFT) / (output tokens - "
            "1)), operator: the p95 its status showed (Prometheus, the engines' per-pod "
            "histograms over its window); each the median over the phase's second half. "
            f"Results in {self.out}"
        )

    # ------------------------------------------------------------- clean-up
    def cleanup(self) -> list[str]:
        """Undo everything the demo did; the problems met (empty when all went well)."""
        problems: list[str] = []
        ns = self.args.namespace
        if self.aiperf is not None:
            self.aiperf.stop()
        if self.kube is not None:
            try:
                with contextlib.suppress(ApiException):
                    self.kube.custom.delete_namespaced_custom_object(
                        GROUP, VERSION, ns, PLURAL, self.name
                    )
                kube = self.kube
                wait_until(
                    lambda: read_pdd(kube, ns, self.name) is None,
                    CLEANUP_TIMEOUT_S,
                    f"PDDeployment {ns}/{self.name} to be deleted",
                    error=_demo_error,
                )
            except (DemoError, ApiException, OSError) as err:
                problems.append(str(err))
        if self.proxy is not None:
            self.proxy.stop()
        for child in reversed(self.children):
            child.stop()
        if self.kube is not None and self.created_ns:
            try:
                delete_namespace(self.kube, ns)
                core = self.kube.core
                wait_until(  # gone before the lab stops, or the next run meets it Terminating
                    lambda: if_found(lambda: core.read_namespace(ns)) is None,
                    CLEANUP_TIMEOUT_S,
                    f"namespace {ns} to be deleted",
                    error=_demo_error,
                )
            except ApiException as err:
                problems.append(f"deleting namespace {ns}: {err.reason}")
            except DemoError as err:
                problems.append(str(err))
        self.lab.unregister_user()
        if self.started_lab and not self.lab.other_users():
            self._say("stopping the lab the demo started")
            self.lab.down()
        return problems

    @staticmethod
    def _say(text: str) -> None:
        print(f"demo: {text}", flush=True)


def main(args: argparse.Namespace) -> int:
    """0: the demo ran and cleaned up; 1: it failed (message printed); 2: bad flags."""
    if args.duration is not None and not args.duration > 0:
        print("demo: --duration must be > 0 seconds", file=sys.stderr)
        return 2
    if not args.speed > 0:
        print("demo: --speed must be > 0", file=sys.stderr)
        return 2
    demo = Demo(args)
    t0 = time.monotonic()
    code = 0
    try:
        demo.setup()
        demo.play()
    except KeyboardInterrupt:
        print("demo: interrupted; cleaning up", file=sys.stderr)
        code = 130
    except (DemoError, LabError, ApiException, OSError, ValueError) as err:
        print(str(err), file=sys.stderr)
        code = 1
    finally:
        wall = time.monotonic() - t0
        problems = demo.cleanup()
        for p in problems:
            print(f"demo: clean-up: {p}", file=sys.stderr)
        demo._say(f"cleaned up in {time.monotonic() - t0 - wall:.0f}s")
    if demo.observations:
        demo.report(wall)
    return code or (1 if problems else 0)
