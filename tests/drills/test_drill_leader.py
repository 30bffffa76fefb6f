"""Drill D3, leader election: two operators (``pdscaler run --leader-elect``) against the
shared lab, started at once; the leader is SIGSTOPped for 25 s (the drill text says 90 s:
shortened, still past the 15 s leaseDuration, so the follower takes over while the old
leader is stopped), then SIGCONTed.

Invariants, sampled every ~0.3 s for the whole drill:

* exactly one writes at any time: in no sampling interval did both processes' write
  counters (``pdscaler_api_writes_total``, every Deployment / status / Event write)
  grow, at most one reports ``pdscaler_leader 1``, and the continued old leader writes
  nothing at all after SIGCONT (its fence closed 10 s after its last renewal);
* every pdscaler Event names its writer (``reportingInstance`` = op-a / op-b), the old
  leader's all before the SIGSTOP, and no Event is posted twice;
* 0 direction flips: the load only rises, and no pool's replica count ever moves down
  (the new leader restores its memory from the status instead of deciding afresh).

Signals go only to the two operator processes this test started. Timings are the
defaults (15/10/2 s); the drill takes about 60-80 s.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import Role
from support.background import Sampling
from support.exporter import EngineExporter
from support.labkit import Kube, free_port, wait_for
from support.opkit import create_pdd, pdd_manifest, ready_count, total

NAME = "ha"
LEASE = "pdscaler-leader"
STOP_SECONDS = 25.0
IDS = ("op-a", "op-b")
WRITES = re.compile(r"^pdscaler_writes_sent_total ([0-9.e+]+)$", re.M)
LEADER = re.compile(r"^pdscaler_leader ([0-9.]+)$", re.M)


def serve(exp: EngineExporter, namespace: str, rate: float, waiting: float) -> None:
    """Decode-bound load (200-token prompts, 500-token outputs) through one pod per pool."""
    exp.set_deployment(
        namespace, NAME, [f"{NAME}-p0"], [f"{NAME}-d0"], rate=rate, prompt_tokens=200,
        output_tokens=500, ttft=0.3, tpot=0.02 if waiting == 0 else 0.08,
        decode_waiting=waiting,
    )  # fmt: skip


@dataclass
class Operator:
    identity: str
    port: int
    proc: subprocess.Popen[bytes]
    log: str

    def scrape(self) -> tuple[float, float] | None:
        """(writes so far, leader gauge), None when it does not answer (stopped)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=0.3) as r:
                text = r.read().decode()
        except OSError:
            return None
        leader = LEADER.search(text)
        writes = WRITES.search(text)
        # an answer without the counter would read as "no write" and pass the drill
        assert writes is not None, "no pdscaler_writes_sent_total on /metrics"
        return float(writes.group(1)), float(leader.group(1) if leader else 0)


def start(identity: str, namespace: str, lab: Lab, logdir: str) -> Operator:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig)}
    argv = [sys.executable, "-m", "pdscaler", "run", "-n", namespace, "--leader-elect"]
    argv += ["--lease-namespace", namespace, "--identity", identity]
    argv += ["--metrics-port", str(port), "--log-format", "plain"]
    log = os.path.join(logdir, f"{identity}.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Operator(identity, port, proc, log)


@dataclass
class Sampler(Sampling):
    """Both operators' write counters and leader gauges, and the pools' replicas; a
    failed read is counted and kept (``Sampling``), never a sample."""

    kube: Kube
    namespace: str
    ops: list[Operator]
    rows: list[tuple[float, dict[str, tuple[float, float] | None]]] = field(default_factory=list)
    replicas: dict[Role, list[int]] = field(default_factory=lambda: collections.defaultdict(list))

    def sample(self) -> None:
        row = {op.identity: op.scrape() for op in self.ops}
        counts = {role: total(self.kube, self.namespace, NAME, role) for role in Role}
        self.rows.append((time.monotonic(), row))
        for role, n in counts.items():
            self.replicas[role].append(n)

    def writes_after(self, identity: str, since: float) -> float:
        """Writes sent between the first and the last answer at or after ``since``."""
        seen = [v[0] for t, r in self.rows if t >= since and (v := r[identity]) is not None]
        return seen[-1] - seen[0] if seen else 0.0

    def both_wrote(self) -> list[float]:
        """Sampling intervals in which both counters grew. A counter's growth counts
        only between two consecutive answers (a stopped process answers nothing: what
        it sent before the stop shows at its first answer after SIGCONT, which says
        nothing about when)."""
        bad: list[float] = []
        for (_, prev), (t, row) in zip(self.rows, self.rows[1:], strict=False):
            grew = {
                ident
                for ident, val in row.items()
                if val is not None and (p := prev[ident]) is not None and val[0] > p[0]
            }
            if len(grew) > 1:
                bad.append(t)
        return bad

    def two_leaders(self) -> list[float]:
        return [t for t, row in self.rows if sum(1 for v in row.values() if v and v[1] == 1.0) > 1]


def flips(series: list[int]) -> int:
    """Direction changes: 1,2,2,3 -> 0; 1,2,1 -> 1."""
    moves = [b - a for a, b in itertools.pairwise(series) if b != a]
    return sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))


def _tail(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-3000:]


def changes(series: list[int]) -> list[int]:
    """The series without repeats: 1,1,2,2,3 -> 1,2,3."""
    return [v for i, v in enumerate(series) if i == 0 or series[i - 1] != v]


def holder(kube: Kube, namespace: str) -> str:
    lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(LEASE, namespace)
    return str(lease.spec.holder_identity or "") if lease.spec is not None else ""


def test_drill_leader_stop_and_continue(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    drill.describe(
        "D3",
        fault=f"two operators started at once; SIGSTOP the Lease holder {STOP_SECONDS:g} s "
        "while the load rises, then SIGCONT",
        invariant="exactly one writes at any time; the stopped one never writes after SIGCONT; "
        "0 direction flips; no duplicate Events",
        shortened=f"SIGSTOP {STOP_SECONDS:g} s instead of 90 s",
    )
    serve(exporter, namespace, rate=1.0, waiting=0)
    ops = [start(i, namespace, lab, str(tmp_path)) for i in IDS]  # both at once
    by_id = {op.identity: op for op in ops}
    stopped: Operator | None = None
    try:
        with Sampler(kube, namespace, ops, period=0.3) as s:
            wait_for(lambda: all(op.scrape() for op in ops), 30, "both operators serving")
            create_pdd(kube, namespace, pdd_manifest(NAME, lab.prometheus_url))
            first = wait_for(lambda: holder(kube, namespace) or None, 30, "a Lease holder")
            wait_for(
                lambda: ready_count(kube, namespace, NAME, Role.DECODE) >= 1,
                45,
                "the cell up (decode Ready)",
            )
            serve(exporter, namespace, rate=4.0, waiting=200)  # decode must grow
            wait_for(lambda: total(kube, namespace, NAME, Role.DECODE) > 1, 45, "decode up")
            decode_before = total(kube, namespace, NAME, Role.DECODE)

            stopped = by_id[first]
            other = next(i for i in IDS if i != first)
            os.kill(stopped.proc.pid, signal.SIGSTOP)
            t_stop = time.monotonic()
            serve(exporter, namespace, rate=8.0, waiting=400)  # the next leader must act
            wait_for(lambda: holder(kube, namespace) == other, 22, f"{other} took the Lease")
            t_takeover = time.monotonic()
            time.sleep(max(0.0, STOP_SECONDS - (time.monotonic() - t_stop)))
            os.kill(stopped.proc.pid, signal.SIGCONT)
            t_cont = time.monotonic()
            wait_for(
                lambda: total(kube, namespace, NAME, Role.DECODE) > decode_before,
                30,
                f"{other} scaled decode further",
            )
            time.sleep(max(0.0, 8.0 - (time.monotonic() - t_cont)))
            assert holder(kube, namespace) == other  # the continued one did not take back
            after_cont = stopped.scrape()
            s.still_sampling()
        s.check(at_least=20)
        events = client.CoreV1Api(kube.api).list_namespaced_event(namespace).items
    finally:
        for op in ops:
            if op.proc.poll() is None:
                os.kill(op.proc.pid, signal.SIGCONT)
                op.proc.send_signal(signal.SIGTERM)
        for op in ops:
            try:
                op.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                op.proc.kill()
                op.proc.wait()
    logs = {op.identity: _tail(op.log) for op in ops}
    assert stopped is not None
    wall_stop = time.time() - (time.monotonic() - t_stop)
    report = tmp_path / "drill.json"
    report.write_text(
        json.dumps(
            {
                "stopped": stopped.identity,
                "t_stop": t_stop,
                "t_takeover": t_takeover,
                "t_cont": t_cont,
                "rows": s.rows,
                "replicas": {r.value: v for r, v in s.replicas.items()},
                "events": [
                    (str(e.first_timestamp), e.reporting_instance, e.reason, e.message)
                    for e in events
                ],
                "logs": logs,
            },
            default=str,
        )
    )
    where = f"see {report}"
    drill.sampled(
        len(s.rows),
        len(s.both_wrote()) + len(s.two_leaders()) + sum(flips(s.replicas[role]) for role in Role),
    )
    drill.recovered("the other replica took the Lease after SIGSTOP", t_takeover - t_stop)

    # exactly one writes at any time
    assert s.both_wrote() == [], where
    assert s.two_leaders() == [], where
    assert s.writes_after(stopped.identity, t_cont) == 0.0, where
    assert after_cont is not None
    assert after_cont[1] == 0.0
    assert s.writes_after(other, t_takeover) > 0, where
    assert t_takeover - t_stop < 15.0 + 2.0 + 3.0  # leaseDuration + retryPeriod + slack

    # Events: who wrote each one, and none twice
    ours = [e for e in events if (e.reporting_component or "") == "pdscaler"]
    assert ours, "no Events from the operators"
    assert {e.reporting_instance for e in ours} <= set(IDS), [e.reporting_instance for e in ours]
    keys = [(e.reason, e.message) for e in ours]
    dupes = [k for k, n in collections.Counter(keys).items() if n > 1]
    assert dupes == [], (dupes, where)
    for e in ours:  # the stopped leader's Events all come from before its stop
        if e.reporting_instance == stopped.identity:
            assert e.first_timestamp is not None, (e.message, where)
            assert e.first_timestamp.timestamp() <= wall_stop + 1.0, (e.message, where)
    assert any(e.reporting_instance == other for e in ours)

    # 0 direction flips, per pool
    for role in Role:
        assert flips(s.replicas[role]) == 0, (role, changes(s.replicas[role]), where)
    for op in ops:
        assert op.proc.returncode == 0, logs[op.identity]
