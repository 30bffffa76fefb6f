"""The operator as a real process for drills: ``pdscaler run`` against the lab, killed
with SIGKILL and restarted; plus samplers of the cluster a drill checks its invariant with.

Owns: starting/killing the operator process this test started (never any other), the
opening most drills share (``start_on_new_pdd``: their PDDeployment created, the
operator started) and reading what the drills sample (Ready pods per role and version,
the rollout cells). Must not inject faults (``faults``) or assert (the drills do).

    op = OperatorProcess(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    start_on_new_pdd(op, kube, lab.prometheus_url, "d2", interval=2.0, progress_deadline="20s")
    wait_ready(kube, namespace, "d2", 1, 1, 60)   # 1 + 1 Ready v1 pods
    op.kill(); op.start()                          # SIGKILL, then a new process
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pdscaler import invariants, naming
from pdscaler.observe import is_ready, labels
from pdscaler.spec import PDDeploymentSpec
from support.background import Sampling
from support.labkit import Kube, wait_for
from support.opkit import create_pdd, deployments, pdd_manifest, pod_dicts


@dataclass
class OperatorProcess:
    """``python -m pdscaler run --namespace NS`` with the lab's kubeconfig; its log in
    ``log``. ``kill()`` sends SIGKILL to this process only."""

    namespace: str
    kubeconfig: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    #: the operator's Prometheus allow-list (None: the environment's)
    allowed: str | None = None

    def run_args(self) -> list[str]:
        """``pdscaler run``'s arguments after ``--namespace NS`` (a subclass's to change)."""
        return ["--metrics-port", "0", "--log-format", "plain"]

    def extra_env(self) -> dict[str, str]:
        """Environment set after ``KUBECONFIG`` (a subclass's to add to)."""
        return {}

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, **self.extra_env()}
        if self.allowed is not None:
            env["PDSCALER_PROMETHEUS_ALLOWED_URLS"] = self.allowed
        argv = [sys.executable, "-m", "pdscaler", "run", "--namespace", self.namespace]
        argv += self.run_args()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.started_at = time.time()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


def start_on_new_pdd(
    op: OperatorProcess,
    kube: Kube,
    prometheus_url: str,
    name: str,
    *,
    interval: float,
    progress_deadline: str,
    **manifest: Any,
) -> None:
    """Create the PDDeployment ``name`` in ``op``'s namespace (``pdd_manifest``: every
    ``interval`` s, surge 2, ``progress_deadline``, and any other ``manifest`` field), then
    start ``op``: the opening of the drills that run one PDDeployment."""
    body = pdd_manifest(
        name,
        prometheus_url,
        interval=f"{interval:g}s",
        surge=2,
        progress_deadline=progress_deadline,
        **manifest,
    )
    create_pdd(kube, op.namespace, body)
    op.start()


def ready_by_version(pods: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """Ready engine pods per (role, version label) (the cells' router pods hold no GPU
    and serve no model: not counted)."""
    out: dict[tuple[str, str], int] = {}
    for p in pods:
        if is_ready(p) and labels(p).get(naming.LABEL_ROLE) != naming.ROLE_ROUTER:
            key = (labels(p).get(naming.LABEL_ROLE, ""), labels(p).get(naming.LABEL_VERSION, ""))
            out[key] = out.get(key, 0) + 1
    return out


def wait_ready(
    kube: Kube, namespace: str, name: str, prefill: int, decode: int, timeout: float
) -> None:
    """Until exactly ``prefill`` + ``decode`` engine pods of version v1 are Ready (and
    no pod of another version): the starting point of most drills."""
    want = {("prefill", "v1"): prefill, ("decode", "v1"): decode}
    wait_for(
        lambda: ready_by_version(pod_dicts(kube, namespace, name)) == want,
        timeout,
        f"{prefill} + {decode} Ready v1 pods",
    )


def settled_two_by_two(sizes: tuple[int, int]) -> tuple[int, int]:
    """``sizes`` (prefill, decode), checked against what the drills' 2 req/s load
    (``opkit.serve_two_by_two``) settles at: 2 + 2 at the steady rate (N_P 1.9 -> 2, N_D
    1.8 -> 2), up to 4 + 4 when a tick sized while the window filled, since the forecast
    extrapolates a rising rate to at most twice it (N at 4 req/s: 3.8 / 3.6) and the
    pools then hold for the stabilization window. D1 settled at 3 + 2 in a fresh-clone
    run at 6a91b2e (asserting exactly 2 + 2, as D7 did too); D13 had met it first."""
    assert all(2 <= n <= 4 for n in sizes), sizes
    return sizes


def serving(pods: list[dict[str, Any]]) -> tuple[int, int]:
    """Ready prefill in versions with a Ready decode pod, and Ready decode."""
    ready = ready_by_version(pods)
    decode = {v: n for (r, v), n in ready.items() if r == "decode"}
    prefill = sum(n for (r, v), n in ready.items() if r == "prefill" and decode.get(v, 0) > 0)
    return prefill, sum(decode.values())


def snapshot(pods: list[dict[str, Any]]) -> str:
    """The pods in one line, for a failed drill's message: ``name role/version state``
    per pod, state ``R`` (Ready), ``-`` (not Ready) and ``T`` (terminating) appended."""
    out = []
    for p in pods:
        lab = labels(p)
        state = "R" if is_ready(p) else "-"
        if (p.get("metadata") or {}).get("deletionTimestamp"):
            state += "T"
        out.append(
            f"{p['metadata']['name']} {lab.get(naming.LABEL_ROLE)}/{lab.get(naming.LABEL_VERSION)} "
            f"{state}"
        )
    return "; ".join(sorted(out))


def cells(kube: Kube, namespace: str, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Pool Deployments by (version label, role)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for d in deployments(kube, namespace, name):
        lab = d["metadata"]["labels"]
        if lab.get(naming.LABEL_ROLE) in ("prefill", "decode"):
            out[(lab.get(naming.LABEL_VERSION, ""), lab[naming.LABEL_ROLE])] = d
    return out


@dataclass
class Sampler(Sampling):
    """Samples the PDDeployment's pods every ``period`` s (0.2 by default): mixed pairs
    (a Ready prefill without a Ready decode of its version, or routers discovering other
    cells: the ``invariants``) and the serving capacity below ``floor``. A failed read
    is counted in ``failed`` and kept in ``errors`` (``Sampling``), not a sample."""

    kube: Kube
    namespace: str
    name: str
    spec: PDDeploymentSpec
    floor: tuple[int, int]
    mixed: list[tuple[float, str]] = field(default_factory=list)
    #: the pods (``snapshot``) at each sample with a mixed pair, by the sample's time
    seen: dict[float, str] = field(default_factory=dict)
    below: list[tuple[float, tuple[int, int], dict[tuple[str, str], int]]] = field(
        default_factory=list
    )

    def sample(self) -> None:
        pods = pod_dicts(self.kube, self.namespace, self.name)
        now = time.time()
        for v in invariants.violations(pods, self.spec, self.name, check_capacity=False):
            self.mixed.append((now, v))
            self.seen[now] = snapshot(pods)
        have = serving(pods)
        if have[0] < self.floor[0] or have[1] < self.floor[1]:
            self.below.append((now, have, ready_by_version(pods)))


def handling(op: OperatorProcess, offset: int) -> bool:
    """True once the operator started after the log had ``offset`` bytes handles its
    PDDeployments (kopf logged a handler run; its tick loop ticks a noticed
    PDDeployment at once). A restart takes 5-35 s on the lab's loaded 2 cores."""
    text = op.log.read_bytes()[offset:] if op.log.exists() else b""
    return b"Handler 'on_event' succeeded" in text
