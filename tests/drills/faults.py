"""Control-plane faults for drills, and what the control-plane drills sample.

Owns: signalling ONE recorded component of the lab the test runs against (its PID from
the lab's state file, checked against the recorded start time, so a reused PID is never
signalled): ``paused`` (SIGSTOP, SIGCONT in ``finally``) and ``killed`` (SIGKILL,
started again in ``finally`` with its recorded arguments: ``Lab.restart``);
``DrillOperator``, the operator process of ``operator_process`` with ``/metrics`` and
``/healthz`` on a free port (its successful ticks counted from
``pdscaler_reconcile_duration_seconds_count``; ``hold``: a fault held for seconds and
ticks); ``ClusterSampler`` (every owned
Deployment's uid and ``spec.replicas``, the PDDeployments' rollout phase, their
CapacityLimited condition, a cell gone while its pods serve) and ``TickSampler``. Must
not signal any process it did not look up in the lab's state file, or leave a component
stopped.

    with paused(lab, "apiserver"):
        time.sleep(15)            # the API server answers nothing; connections hang
    with killed(lab, "apiserver"):
        time.sleep(15)            # connections refused; restarted on exit
"""

from __future__ import annotations

import contextlib
import http.server
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Self

from drills.operator_process import OperatorProcess
from pdlab.cluster import processes
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.spec import GROUP, PLURAL, VERSION
from pdscaler.types import ConditionType
from support.background import Sampling
from support.labkit import Kube, free_port, wait_for


def component_pid(lab: Lab, component: str) -> int:
    """The PID of ``component`` ("apiserver", "etcd", "controller_manager", "scheduler")
    of THIS lab, as recorded when pdlab started it; LookupError if it does not run."""
    rec = processes.State(lab.dir / "state.json").procs.get(component)
    if rec is None or not processes.is_alive(rec):
        raise LookupError(f"{component} of the lab in {lab.dir} does not run")
    return rec.pid


@contextlib.contextmanager
def paused(lab: Lab, component: str) -> Iterator[int]:
    """SIGSTOP the component for the block; SIGCONT on exit, whatever happens."""
    pid = component_pid(lab, component)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def killed(lab: Lab, component: str, restart_timeout: float = 90.0) -> Iterator[int]:
    """SIGKILL the component (waits until it is gone) for the block; on exit it is
    started again with its recorded arguments (``Lab.restart``) and waited for until
    its health probe answers."""
    pid = component_pid(lab, component)
    os.kill(pid, signal.SIGKILL)
    try:
        deadline = time.monotonic() + 10
        with contextlib.suppress(LookupError):
            while time.monotonic() < deadline and component_pid(lab, component) == pid:
                time.sleep(0.05)
        yield pid
    finally:
        lab.restart(component, timeout=restart_timeout)


TICKS = re.compile(r"^pdscaler_reconcile_duration_seconds_count\{([^}]*)\} ([0-9.e+]+)$", re.M)
CONDITION = re.compile(r"^pdscaler_condition\{([^}]*)\} ([0-9.e+]+)$", re.M)


def scraped(text: str) -> tuple[dict[str, float], set[tuple[str, str, str]]]:
    """From one /metrics text: the successful ticks per PDDeployment name, and the
    (name, type, status) of each condition reported (``pdscaler_condition`` 1), so a
    condition is seen with the count of the ticks that had run when it was set:
    ``..._count{namespace="n",name="a"} 7.0`` and ``pdscaler_condition{namespace="n",
    name="a",type="MetricsAvailable",status="False"} 1.0`` -> ({"a": 7.0},
    {("a", "MetricsAvailable", "False")})."""
    ticks: dict[str, float] = {}
    for labels, value in TICKS.findall(text):
        name = re.search(r'(?:^|,)name="([^"]*)"', labels)
        if name:
            ticks[name.group(1)] = float(value)
    conditions = set()
    for labels, value in CONDITION.findall(text):
        got = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if float(value) == 1.0:
            conditions.add((got.get("name", ""), got.get("type", ""), got.get("status", "")))
    return ticks, conditions


@dataclass
class DrillOperator(OperatorProcess):
    """``OperatorProcess`` with ``/metrics`` and ``/healthz`` on ``port`` and, with
    ``leader_elect``, a Lease in its namespace (as the chart's HA setting runs it)."""

    port: int = field(default_factory=free_port)
    leader_elect: bool = False

    def run_args(self) -> list[str]:
        argv = ["--metrics-port", str(self.port), "--log-format", "full"]
        if self.leader_elect:
            argv += ["--leader-elect", "--lease-namespace", self.namespace]
            argv += ["--identity", "drill-op"]
        return argv

    def extra_env(self) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1"}

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _get(self, path: str) -> tuple[int, str]:
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=2) as r:
                return int(r.status), r.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), ""
        except OSError:
            return 0, ""

    def healthy(self) -> bool:
        """``/healthz`` answers 200."""
        return self._get("/healthz")[0] == 200

    def ticks(self) -> dict[str, float]:
        """Successful ticks so far per PDDeployment name ({} when /metrics is silent)."""
        return self.ticks_and_conditions()[0]

    def ticks_and_conditions(self) -> tuple[dict[str, float], set[tuple[str, str, str]]]:
        """``scraped`` of ONE /metrics scrape (({}, set()) when /metrics is silent)."""
        code, text = self._get("/metrics")
        return scraped(text) if code == 200 else ({}, set())

    def hold(self, name: str, seconds: float, ticks: int) -> None:
        """Let ``seconds`` pass AND ``name`` be ticked ``ticks`` more times (successful
        ticks, from /metrics; 60 s more at most): a fault held this way is seen by as
        many ticks on a loaded machine as on an idle one. Interval 2 s: 20 s -> 8 ticks."""
        start = wait_for(lambda: self.ticks().get(name), 30, f"a first tick of {name}")
        time.sleep(seconds)
        wait_for(
            lambda: self.ticks().get(name, 0.0) >= start + ticks or None,
            60,
            f"{ticks} more ticks of {name} (from {start:g})",
        )

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"


@dataclass
class ClusterSampler(Sampling):
    """Every ``period`` s (0.2 by default; reads with a 2 s timeout: an API server that
    answers nothing costs a sample, not the drill): each owned Deployment's uid by name
    (a name seen with a second uid was recreated) and ``spec.replicas``; each
    PDDeployment's rollout phase and whether its CapacityLimited condition is True. A
    sample whose reads fail is counted in ``failed`` and kept in ``errors``
    (``Sampling``): a drill that stops the API server bounds them with ``check``."""

    kube: Kube
    namespace: str
    uids: dict[str, set[str]] = field(default_factory=dict)
    replicas: dict[str, list[int]] = field(default_factory=dict)
    phases: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    capacity_limited: list[tuple[float, str, str]] = field(default_factory=list)
    #: (time, Deployment, spec.replicas) at every change
    timeline: list[tuple[float, str, int]] = field(default_factory=list)
    _seen_versions: set[str] = field(default_factory=set)
    #: (time, version, Ready engine pods of it) when that version's cell was gone or
    #: being deleted while its pods still served
    deleted_serving: list[tuple[float, str, int]] = field(default_factory=list)

    def sample(self) -> None:
        deps = self.kube.apps.list_namespaced_deployment(
            self.namespace, label_selector=naming.LABEL_NAME, _request_timeout=2
        ).items
        pdds: Any = self.kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, _request_timeout=2
        )
        pods = self.kube.core.list_namespaced_pod(
            self.namespace, label_selector=naming.LABEL_NAME, _request_timeout=2
        ).items
        now = time.time()
        self._cells(deps, pods, now)
        for d in deps:
            assert d.metadata is not None  # listed objects have theirs
            name = str(d.metadata.name)
            self.uids.setdefault(name, set()).add(str(d.metadata.uid))
            series = self.replicas.setdefault(name, [])
            if not series or series[-1] != int(d.spec.replicas or 0):
                series.append(int(d.spec.replicas or 0))
                self.timeline.append((now, name, int(d.spec.replicas or 0)))
        for p in pdds.get("items", []):
            name = p["metadata"]["name"]
            st = p.get("status") or {}
            phase = str((st.get("rollout") or {}).get("phase") or "")
            seen = self.phases.setdefault(name, [])
            if not seen or seen[-1][1] != phase:
                seen.append((now, phase))
            for c in st.get("conditions") or []:
                limited = c.get("type") == ConditionType.CAPACITY_LIMITED
                if limited and c.get("status") == "True":
                    self.capacity_limited.append((now, name, str(c.get("message", ""))))

    def _cells(self, deps: list[Any], pods: list[Any], now: float) -> None:
        live: set[str] = set()
        for d in deps:
            version = (d.metadata.labels or {}).get(naming.LABEL_VERSION, "")
            self._seen_versions.add(version)
            if d.metadata.deletion_timestamp is None:
                live.add(version)
        ready: dict[str, int] = {}
        for p in pods:
            lab = p.metadata.labels or {}
            if lab.get(naming.LABEL_ROLE) == naming.ROLE_ROUTER:
                continue
            conds = (p.status.conditions or []) if p.status else []
            if any(c.type == "Ready" and c.status == "True" for c in conds):
                v = lab.get(naming.LABEL_VERSION, "")
                ready[v] = ready.get(v, 0) + 1
        for version in self._seen_versions - live:
            if ready.get(version, 0) > 0:
                self.deleted_serving.append((now, version, ready[version]))

    def recreated(self) -> dict[str, set[str]]:
        """Deployment names seen with more than one uid."""
        return {n: u for n, u in self.uids.items() if len(u) > 1}


@dataclass
class TickSampler(Sampling):
    """The operator's successful ticks per PDDeployment, scraped every ``period`` s (0.5
    by default): ``rows`` of (monotonic time, {name: ticks so far}). A scrape that
    /metrics does not answer (or answers with no tick yet) is not a row: it is counted
    in ``failed`` and kept in ``errors`` (``Sampling``), and a drill bounds them with
    ``check``."""

    op: DrillOperator
    period: float = field(default=0.5, kw_only=True)
    rows: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self) -> None:
        counts = self.op.ticks()
        if not counts:
            raise LookupError("/metrics did not answer, or counted no tick yet")
        self.rows.append((time.monotonic(), counts))

    def first_tick_after(self, since: float) -> dict[str, float]:
        """Per PDDeployment: seconds from ``since`` to the first row after ``since`` in
        which its count rose above its last count at or before ``since``."""
        before = {}
        for t, counts in self.rows:
            if t <= since:
                before = counts
        out: dict[str, float] = {}
        for t, counts in self.rows:
            if t <= since:
                continue
            for name, n in counts.items():
                if name not in out and n > before.get(name, 0.0):
                    out[name] = t - since
        return out


# ------------------------------------------------------------ fault proxies (D16-D19)


def full_windows() -> bool:
    """``make drill`` (``$PDSCALER_DRILL_OUT`` set) runs the issue's full windows;
    ``make test`` the shortened ones."""
    return bool(os.environ.get("PDSCALER_DRILL_OUT"))


class LoopbackServer:
    """A threaded HTTP server of ``handler`` on a free loopback port (``url``), serving
    while used as a context manager: the base of the fault servers below and of D17's."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class SlowProxy(LoopbackServer):
    """An HTTP proxy on a free loopback port that answers every request ``delay`` s
    late (then forwards it to ``upstream`` and relays the answer): a browned-out
    Prometheus. ``delay`` may be changed while it runs; ``requests`` counts what it
    relayed. Use as a context manager (``url`` while open)."""

    def __init__(self, upstream: str, delay: float) -> None:
        self.upstream = upstream.rstrip("/")
        self.delay = delay
        self.requests = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _relay(self) -> None:
                time.sleep(proxy.delay)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("content-type", "accept", "authorization")
                }
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        code, data, ctype = r.status, r.read(), r.headers.get("Content-Type")
                except urllib.error.HTTPError as err:
                    code, data, ctype = err.code, err.read(), err.headers.get("Content-Type")
                proxy.requests += 1
                self.send_response(code)
                self.send_header("Content-Type", ctype or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._relay()

            def do_POST(self) -> None:
                self._relay()

            def log_message(self, format: str, *args: object) -> None:
                return

        super().__init__(Handler)


#: ``python -m drills.frozen_ticks run ...``: the operator with a switch that freezes
#: every tick that starts from then on (SIGUSR1): ticks that truly stop.
FROZEN_TICKS_MODULE = "drills.frozen_ticks"
