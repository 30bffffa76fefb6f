"""`python -m pdlab demo` (`make demo`): the lab, the operator, the engine simulator and a
shifting request mix, with the two pools rebalancing live.

Owns: the demo's sequence: the lab up (started only if it was not running), the CRD
installed, the namespace, the engine simulator and the operator started as child
processes (logs in the output directory), the demo PDDeployment applied
(``deploy/demo/demo.yaml``, its Prometheus URL set to the lab's), one observation per
second (engine simulator ``/status``, the PDDeployment's status and Events, the Ready
pods) shown live and recorded, then the summary, ``summary.json``, ``timeline.csv``
and ``demo.png``, and the clean-up: PDDeployment deleted (while the operator still runs,
so a finalizer can be honoured), operator and simulator stopped by PID, the namespace
deleted if the demo created it, the lab stopped if the demo started it and nobody else
uses it. Must not: stop processes it did not start, or touch other namespaces.

The scenario (``pdlab.scenarios``' demo): a warm-up ramp, chat (P:D about 1:1), long
documents (the prefill pool must grow about tenfold relative to decode), a burst, a
cool-down; 300 s, or ``--duration``/``--speed`` for a shorter run (the test uses 150 s),
which also quickens the operator's window, interval and stabilization (``quicken``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes.client.exceptions import ApiException

from pdlab import demo_report, demo_view, scenarios
from pdlab.config import REPO_DIR
from pdlab.kubeclient import (
    Kube,
    apply_crd,
    delete_namespace,
    ensure_namespace,
    if_found,
    pod_ready,
    wait_until,
)
from pdlab.lab import Lab, LabError
from pdlab.processes import Child
from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from pdscaler.spec import GROUP, PLURAL, VERSION, PDDeployment, parse_duration

DEFAULT_MANIFEST = REPO_DIR / "deploy" / "demo" / "demo.yaml"
FULL_DEMO_S = scenarios.get("demo").duration_s
POOLS_UP_TIMEOUT_S = 120.0
CLEANUP_TIMEOUT_S = 60.0


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


def engine_sim_argv(args: argparse.Namespace, name: str, duration_s: float) -> list[str]:
    return [
        sys.executable, "-m", "pdlab", "engine-sim", "--namespace", args.namespace,
        "--name", name, "--scenario", "demo", "--duration", f"{duration_s:g}",
        "--port", str(args.port), "--seed", str(args.seed),
    ]  # fmt: skip


# ------------------------------------------------------------------------ Kubernetes


def _demo_error(message: str) -> DemoError:
    return DemoError(f"demo: {message}")


def ready_pods(kube: Kube, namespace: str, name: str) -> dict[str, int]:
    """Ready, not terminating pods per role: {"prefill": 4, "decode": 4}."""
    pods: list[Any] = kube.core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_NAME}={name},{LABEL_ROLE}", _request_timeout=10
    ).items
    out = {"prefill": 0, "decode": 0}
    for pod in pods:
        role = (pod.metadata.labels or {}).get(LABEL_ROLE)
        if pod_ready(pod) and pod.metadata.deletion_timestamp is None and role in out:
            out[role] += 1
    return out


def read_pdd(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The PDDeployment as the API's JSON; None if there is none."""
    obj = if_found(
        lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )
    return cast(dict[str, Any] | None, obj)


def apply_pdd(kube: Kube, manifest: dict[str, Any]) -> None:
    ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    current = read_pdd(kube, ns, name)
    if current is None:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)
        return
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, manifest)


def quicken(doc: dict[str, Any], factor: float) -> None:
    """Shorten the operator's clocks for a shortened scenario (``factor`` < 1): the rate
    window and the scale-down stabilization to ``factor`` x theirs (at least 10 s, five
    2 s scrapes), the interval likewise (at least 2 s). The demo's 30 s / 5 s / 30 s at
    factor 0.4 (a 120 s run) become 12 s / 2 s / 12 s. The pods' start-up is kept."""
    if factor >= 1.0:
        return
    spec = doc["spec"]
    metrics, scaling = spec.setdefault("metrics", {}), spec.setdefault("scaling", {})
    for where, key, floor in (
        (metrics, "window", 10.0),
        (scaling, "interval", 2.0),
        (scaling, "scaleDownStabilization", 10.0),
    ):
        seconds = parse_duration(str(where.get(key, "30s")))
        where[key] = f"{max(floor, round(seconds * factor)):.0f}s"


def load_manifest(
    path: Path, namespace: str, prometheus_url: str, factor: float = 1.0
) -> dict[str, Any]:
    """The demo PDDeployment, validated, in ``namespace``, reading the lab's Prometheus,
    its clocks quickened by ``factor`` (see ``quicken``)."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"].setdefault("metrics", {}).setdefault("prometheus", {})["url"] = prometheus_url
    quicken(doc, factor)
    PDDeployment.model_validate(doc)
    return doc


@dataclass
class EventLog:
    """Decisions as they appear: the PDDeployment's Events (reason: message), or its
    ``status.lastDecision`` when the operator has emitted no Event yet."""

    seen: set[tuple[str, int]] = field(default_factory=set)
    last_decision: str | None = None
    entries: list[tuple[float, str, str]] = field(default_factory=list)  # wall, hh:mm:ss, text

    def poll(self, kube: Kube, namespace: str, name: str, pdd: dict[str, Any] | None) -> None:
        events: list[Any] = kube.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _request_timeout=10
        ).items
        events.sort(key=_event_time)
        for ev in events:
            if ev.involved_object.kind != "PDDeployment":
                continue
            key = (str(ev.metadata.uid), int(ev.count or 1))
            if key not in self.seen:
                self.seen.add(key)
                self._add(f"{ev.reason}: {ev.message}")
        decision = ((pdd or {}).get("status") or {}).get("lastDecision") or {}
        text = decision.get("message") or decision.get("reason")
        stamp = f"{decision.get('time')}|{text}"
        if text and stamp != self.last_decision:
            self.last_decision = stamp
            if not self.seen:  # no Events at all: fall back on the status
                self._add(f"{decision.get('action', '')}: {text}")

    def _add(self, text: str) -> None:
        now = time.time()
        self.entries.append((now, time.strftime("%H:%M:%S", time.localtime(now)), text))


def _event_time(ev: Any) -> float:
    stamp = ev.last_timestamp or ev.event_time or ev.metadata.creation_timestamp
    return float(stamp.timestamp()) if stamp is not None else 0.0


def engine_status(port: int) -> dict[str, Any] | None:
    """The engine simulator's /status for the demo's PDDeployment (None if unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2.0) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    deps = doc.get("deployments") or []
    return deps[0] if deps else {}


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
        self.scenario = scenarios.scaled(scenarios.get("demo"), self.duration)
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
        sim = Child("engine-sim", engine_sim_argv(self.args, self.name, self.duration),
                    self.out / "engine-sim.log")  # fmt: skip
        op = Child("operator", operator_argv(ns), self.out / "operator.log")
        for child in (sim, op):
            child.start(env)
            self.children.append(child)
            self._say(f"started {child.name} (pid {child.pid}, log {child.log})")
        apply_pdd(self.kube, manifest)  # its pods take seconds: overlaps the children's start
        self._say(f"applied PDDeployment {ns}/{self.name}; the scenario starts when both pools "
                  "have a Ready pod")  # fmt: skip
        wait_until(self._engine_sim_up, 60, "the engine simulator", error=_demo_error)

    # ------------------------------------------------------------- the loop
    def observe(self) -> demo_view.Snapshot:
        assert self.kube is not None
        ns = self.args.namespace
        pdd = read_pdd(self.kube, ns, self.name)
        status = (pdd or {}).get("status") or {}
        pods = ready_pods(self.kube, ns, self.name)
        self.events.poll(self.kube, ns, self.name, pdd)
        sim = engine_status(self.args.port) or {}
        if sim.get("started_wall") and self.started_wall is None:
            self.started_wall = float(sim["started_wall"])
        return demo_view.Snapshot(
            phase=sim.get("phase"),
            scenario_time_s=sim.get("scenario_time_s"),
            duration_s=self.duration,
            request_rate=sim.get("request_rate"),
            prefill_ready=pods["prefill"],
            decode_ready=pods["decode"],
            prefill_desired=(status.get("prefill") or {}).get("desiredReplicas"),
            decode_desired=(status.get("decode") or {}).get("desiredReplicas"),
            prefill_queue=sim.get("prefill_queue"),
            decode_queue=sim.get("decode_queue"),
            ttft_p95_s=sim.get("ttft_p95_s"),
            tpot_p95_s=sim.get("tpot_p95_s"),
            operator_ttft=status.get("ttft"),
            operator_tpot=status.get("tpot"),
            operator_ratio=status.get("ratio"),
            decisions=[(when, text) for _, when, text in self.events.entries],
            slo=self.slo,
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
        """Observe once a second until the scenario is over; show it live."""
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
                snap = self.observe()
                self.observations.append(Observation(time.time(), snap))
                if live is not None:
                    live.update(demo_view.render(snap, title), refresh=True)
                elif tick - last_line >= 5.0:
                    print(demo_view.line(snap), flush=True)
                    last_line = tick
                if snap.scenario_time_s is None and tick > deadline_start:
                    op = self.children[-1]
                    raise DemoError(
                        "demo: the pools did not get a Ready prefill and decode pod within "
                        f"{POOLS_UP_TIMEOUT_S:.0f}s; operator log {op.log}:\n{op.tail()}"
                    )
                if snap.scenario_time_s is not None and snap.scenario_time_s >= self.duration:
                    break
                time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
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
        demo_report.write_summary(
            self.out / "summary.json",
            {
                "namespace": self.args.namespace,
                "name": self.name,
                "scenario_duration_s": self.duration,
                "wall_seconds": wall_s,
                "decisions": [{"t": t, "text": text} for t, text in decisions],
                "processes": {c.name: c.pid for c in self.children},
                "slo": {"ttft_s": self.slo[0], "tpot_s": self.slo[1]},
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
        for col in ("time s", "P", "D", "P:D", "P share", "GPUs", "TTFT p95", "TPOT p95"):
            table.add_column(col, justify="right", no_wrap=True)
        for s in summaries:
            table.add_row(
                s.name,
                f"{s.start_s:.0f}-{s.end_s:.0f}",
                f"{s.prefill_mean:.1f}",
                f"{s.decode_mean:.1f}",
                "-" if s.ratio is None else f"{s.ratio:.2f}",
                "-" if s.prefill_share is None else f"{s.prefill_share:.2f}",
                str(s.max_gpus),
                "-" if s.ttft_p95_s is None else f"{s.ttft_p95_s:.2f}s",
                "-" if s.tpot_p95_s is None else f"{s.tpot_p95_s * 1000:.0f}ms",
            )
        console = Console(width=None if sys.stdout.isatty() else 120)
        console.print(table)
        console.print(
            "P, D: mean ready replicas over each phase's second half; GPUs: the most in use; "
            f"TTFT/TPOT: client-side p95. Results in {self.out}"
        )

    # ------------------------------------------------------------- clean-up
    def cleanup(self) -> list[str]:
        """Undo everything the demo did; the problems met (empty when all went well)."""
        problems: list[str] = []
        ns = self.args.namespace
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
        for child in reversed(self.children):
            child.stop()
        if self.kube is not None and self.created_ns:
            try:
                delete_namespace(self.kube, ns)
            except ApiException as err:
                problems.append(f"deleting namespace {ns}: {err.reason}")
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
