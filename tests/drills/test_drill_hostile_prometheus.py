"""Drill D10, hostile Prometheus URLs: one operator process (``pdscaler run``) serves ten
PDDeployments in one namespace of the shared lab. Nine name hostile "Prometheus" servers
this test runs on loopback, three of each kind:

* drip: answers ``HTTP/1.1 200 OK`` and then one byte a second, for ever (each byte well
  inside any per-read timeout);
* huge: a 1 GiB answer, streamed from one 64 KiB buffer (never allocated whole);
* redirect: ``302`` to a server holding a secret.

The tenth is healthy (the lab's Prometheus, a light load). The hostile URLs are
allow-listed for this drill (``PDSCALER_PROMETHEUS_ALLOWED_URLS``) so the operator does
query them: the point is the transport's limits. An eleventh PDDeployment names a server
outside the allow-list.

Invariants, sampled every 0.2 s over a 40 s window:

* the healthy PDDeployment keeps its interval: the gaps between its ticks (its
  ``pdscaler_reconcile_duration_seconds_count`` on the operator's /metrics) have
  p99 <= 2 x ``scaling.interval`` (2 s);
* the operator's RSS stays under the chart's memory limit (512 MiB), and the process
  never restarts (same PID, never exited);
* no huge-server connection gave more than 64 MiB before the operator hung up;
* the secret holder is never contacted, and the secret appears in no status and no
  Event of the namespace;
* the URL outside the allow-list is never contacted; its PDDeployment says
  ``MetricsAvailable=False``, reason ``PrometheusNotAllowed``;
* health goes unhealthy only if the loop is wedged: the loop is not (the healthy
  PDDeployment ticks through the window), so every ``/healthz`` sample of the window
  answers 200 (a hostile server holding a tick thread must not fail liveness, which
  would get the operator restarted by the kubelet).

Shortened for the lab: interval 2 s (not 15 s), a 40 s window, the operator's 5 s query
deadline unchanged. The hostile and outside PDDeployments have min 0 replicas, so they
hold no GPUs of the shared lab. ``DRILL_OPERATOR_PYTHONPATH`` runs the operator from
another source tree (to replay the drill against an older build).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from support.exporter import EngineExporter
from support.httpkit import read_request
from support.labkit import Kube, free_port
from support.opkit import (
    condition,
    create_pdd,
    get_pdd,
    pdd_manifest,
    serve_light,
    strip_finalizers,
    wait_condition,
)

SECRET = f"drill-secret-{secrets.token_hex(8)}"
INTERVAL_S = 2.0
WINDOW_S = 40.0
RSS_LIMIT_BYTES = 512 * 2**20  # the chart's memory limit
RSS_KILL_BYTES = 1536 * 2**20  # a runaway operator is stopped before it hurts the machine
HUGE_BYTES = 2**30
CHUNK = b"x" * 65536
HEALTHY = "healthy"
OUTSIDE = "outside"
KINDS = ("drip", "huge", "redirect")


# ------------------------------------------------------------------ hostile servers


class RawServer:
    """A TCP server on 127.0.0.1 calling ``serve(conn)`` per connection after reading
    the request; counts connections."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.serve = serve
        self.connections = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(10)
            read_request(conn)
            self.serve(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()


def drip(conn: socket.socket) -> None:
    """200, then a byte a second until the client hangs up (at most 2 min)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    for _ in range(120):
        time.sleep(1.0)
        conn.sendall(b"x")


class Huge:
    """A 1 GiB answer with no Content-Length, streamed; the bytes each connection took."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def __call__(self, conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
        done = 0
        try:
            while done < HUGE_BYTES:
                conn.sendall(CHUNK)
                done += len(CHUNK)
        finally:
            self.sent.append(done)


def answer(conn: socket.socket, status: str, body: bytes, headers: str = "") -> None:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n"
    conn.sendall(head.encode() + body)


def redirect_to(target: str) -> Callable[[socket.socket], None]:
    def serve(conn: socket.socket) -> None:
        answer(conn, "302 Found", b"", f"Location: {target}/api/v1/query\r\n")

    return serve


def holder(conn: socket.socket) -> None:
    """The secret, as a body and in a Prometheus error document."""
    doc = {"status": "error", "errorType": "x", "error": SECRET, "data": SECRET}
    answer(conn, "200 OK", json.dumps(doc).encode())


# ------------------------------------------------------------------------ operator


class Operator:
    """``python -m pdscaler run`` for one namespace, started and stopped by this test
    only (by its PID); samples its RSS, the healthy PDDeployment's tick count and the
    ``/healthz`` status (0: no answer within 2 s)."""

    def __init__(self, namespace: str, kubeconfig: str, allowed: list[str], log: Path) -> None:
        self.namespace = namespace
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "PDSCALER_PROMETHEUS_URL"}
        env |= {"KUBECONFIG": kubeconfig, "PDSCALER_PROMETHEUS_ALLOWED_URLS": ",".join(allowed)}
        if os.environ.get("DRILL_OPERATOR_PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["DRILL_OPERATOR_PYTHONPATH"]
        argv = [sys.executable, "-m", "pdscaler", "run", "--namespace", namespace]
        argv += ["--standalone", "--metrics-port", str(self.port), "--log-format", "plain"]
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        self.rss: list[int] = []
        self.ticks: list[tuple[float, float]] = []  # (time, healthy tick count) on change
        self.health: list[tuple[float, int]] = []  # (time, /healthz status) every sample
        self.killed_for_rss = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _rss(self) -> int:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0

    def _healthy_ticks(self) -> float | None:
        series = (
            f'pdscaler_reconcile_duration_seconds_count{{name="{HEALTHY}",'
            f'namespace="{self.namespace}"}} '
        )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(series):
                return float(line.split()[-1])
        return None

    def _healthz(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def unhealthy(self, since: float, until: float) -> list[tuple[float, int]]:
        """The ``/healthz`` samples of [since, until] that did not answer 200."""
        return [(t - since, code) for t, code in self.health if since <= t <= until and code != 200]

    def health_samples(self, since: float, until: float) -> int:
        return sum(since <= t <= until for t, _ in self.health)

    def _sample(self) -> None:
        while not self._stop.is_set() and self.proc.poll() is None:
            rss = self._rss()
            self.rss.append(rss)
            if rss > RSS_KILL_BYTES:
                self.killed_for_rss = True
                os.kill(self.pid, signal.SIGKILL)
                return
            count = self._healthy_ticks()
            if count is not None and (not self.ticks or self.ticks[-1][1] != count):
                self.ticks.append((time.monotonic(), count))
            self.health.append((time.monotonic(), self._healthz()))
            self._stop.wait(0.2)

    def tick_gaps(self, since: float) -> list[float]:
        times = [t for t, _ in self.ticks if t >= since]
        return [b - a for a, b in itertools.pairwise(times)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------- drill


def hostile_manifest(name: str, url: str) -> dict[str, Any]:
    """A PDDeployment that holds no GPUs (min 0) reading ``url``."""
    doc = pdd_manifest(name, url, interval=f"{INTERVAL_S:g}s")
    for pool in ("prefill", "decode"):
        doc["spec"][pool]["replicas"]["min"] = 0
    return doc


def p99(values: list[float]) -> float:
    if len(values) < 2:
        return max(values, default=float("inf"))
    return statistics.quantiles(values, n=100, method="inclusive")[98]


@contextlib.contextmanager
def servers() -> Iterator[dict[str, Any]]:
    huge = Huge()
    made: dict[str, Any] = {
        "holder": RawServer(holder),
        "drip": RawServer(drip),
        "huge": RawServer(huge),
        "outside": RawServer(lambda conn: answer(conn, "200 OK", b"{}")),
        "huge_sent": huge.sent,
    }
    made["redirect"] = RawServer(redirect_to(made["holder"].url))
    try:
        yield made
    finally:
        for server in made.values():
            if isinstance(server, RawServer):
                server.close()


def test_hostile_prometheus_urls_cannot_stop_the_fleet(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    drill.describe(
        "D10",
        fault="hostile Prometheus URLs: byte drip, a 1 GiB body, a redirect to a local server "
        "holding a secret (3 objects each), one outside the allow-list, beside 1 healthy",
        invariant="the healthy object keeps its interval (p99 gap <= 2x); RSS bounded, no "
        "restart; the secret in no status or Event; /healthz 200 throughout (the loop "
        "is not wedged)",
        shortened=f"{WINDOW_S:g} s observation window",
    )
    serve_light(exporter, namespace, HEALTHY)
    with servers() as srv:
        hostile = {f"{kind}-{i}": f"{srv[kind].url}/t{i}" for kind in KINDS for i in range(3)}
        allowed = [lab.prometheus_url, *hostile.values()]
        names = [HEALTHY, OUTSIDE, *hostile]
        create_pdd(
            kube, namespace, pdd_manifest(HEALTHY, lab.prometheus_url, interval=f"{INTERVAL_S:g}s")
        )
        create_pdd(kube, namespace, hostile_manifest(OUTSIDE, srv["outside"].url))
        for name, url in hostile.items():
            create_pdd(kube, namespace, hostile_manifest(name, url))
        op = Operator(namespace, str(lab.kubeconfig), allowed, tmp_path / "operator.log")
        try:
            wait_condition(kube, namespace, HEALTHY, "MetricsAvailable", "True", timeout=40)
            for name in hostile:
                wait_condition(kube, namespace, name, "MetricsAvailable", "False", timeout=20)
            start = time.monotonic()
            while time.monotonic() - start < WINDOW_S:
                assert op.proc.poll() is None, f"operator exited: see {op.log}"
                time.sleep(1.0)
            end = time.monotonic()
            gaps = op.tick_gaps(since=start)
            unhealthy = op.unhealthy(start, end)
            health_samples = op.health_samples(start, end)
            rss_max = max(op.rss, default=0)
            alive = op.proc.poll() is None
            pdds = {name: get_pdd(kube, namespace, name) for name in names}
            events = kube.core.list_namespaced_event(namespace).items
        finally:
            op.stop()
            for name in names:
                strip_finalizers(kube, namespace, name)

        print(
            f"D10: healthy tick gaps p50 {statistics.median(gaps or [0]):.2f}s p99 {p99(gaps):.2f}s"
            f" max {max(gaps, default=0):.2f}s ({len(gaps)}); operator RSS max"
            f" {rss_max / 2**20:.0f} MiB; huge bytes read max {max(srv['huge_sent'], default=0)}"
        )
        shown = json.dumps([pdd.get("status") for pdd in pdds.values()])
        shown += json.dumps(
            [kube.api.sanitize_for_serialization(e) for e in events]  # type: ignore[no-untyped-call]
        )
        drill.sampled(
            len(op.rss),
            sum(r >= RSS_LIMIT_BYTES for r in op.rss)
            + int(p99(gaps) > 2 * INTERVAL_S)
            + int(SECRET in shown)
            + len(unhealthy),
        )
        drill.recovered("healthy object's tick gap, p99", p99(gaps))
        # the operator: never restarted, memory bounded
        assert not op.killed_for_rss, f"RSS passed {RSS_KILL_BYTES} bytes: killed"
        assert alive, f"operator exited: see {op.log}"
        assert rss_max < RSS_LIMIT_BYTES, f"RSS {rss_max / 2**20:.0f} MiB; gaps {sorted(gaps)}"
        # the healthy PDDeployment kept its interval
        assert len(gaps) >= WINDOW_S / (INTERVAL_S * 2), gaps
        assert p99(gaps) <= 2 * INTERVAL_S, sorted(gaps)[-5:]
        # ... so its loop is not wedged, and liveness says so all along: a hostile server
        # holding tick threads must not make /healthz fail (the kubelet would restart it)
        # not vacuous: a sample every 0.2 s plus two reads of at most 2 s each
        assert health_samples >= WINDOW_S / 5, health_samples
        assert unhealthy == [], f"/healthz not 200 at (s into the window, code): {unhealthy}"
        # each hostile kind failed by the transport's limits, within the deadline
        messages = {
            kind: {
                (condition(pdds[f"{kind}-{i}"], "MetricsAvailable") or {}).get("message", "")
                for i in range(3)
            }
            for kind in KINDS
        }
        assert all("no answer within 5s" in m for m in messages["drip"]), messages
        assert all("answer larger than" in m for m in messages["huge"]), messages
        assert all("redirects are not followed" in m for m in messages["redirect"]), messages
        assert srv["huge_sent"], "the huge servers were never read"
        assert max(srv["huge_sent"]) < 64 * 2**20, max(srv["huge_sent"])
        # the secret: never fetched, never shown
        assert srv["holder"].connections == 0
        assert SECRET not in shown
        # outside the allow-list: never contacted, and said so
        assert srv["outside"].connections == 0
        outside = condition(pdds[OUTSIDE], "MetricsAvailable") or {}
        assert (outside.get("status"), outside.get("reason")) == ("False", "PrometheusNotAllowed")
