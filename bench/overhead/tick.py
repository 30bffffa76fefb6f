"""Measurement 2: one reconcile tick against the lab, with the operator's real
``reconcile_once`` and its real Kubernetes and Prometheus clients.

Owns: the scenario. In a namespace of its own on the shared lab, one PDDeployment (the
chat example, Auto, 1 prefill + 1 decode replica): ticks until converged, then

* converged ticks: ``reconcile.overhead`` (back-to-back ticks; each reads the
  PDDeployment and what it owns, runs the Prometheus snapshot queries, decides, plans,
  and writes nothing; the API requests they sent are counted, ``reads_per_tick``);
* scaling ticks: before each, the decode pool's bounds are patched to min = max = 2,
  then back to 1, so every timed tick changes the pool (server-side apply of the
  Deployment, the status patch and the decision Event).

The namespace is deleted afterwards. Must not: start a second lab, or stop the shared
one (it is started if it is not up, and left running).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from bench.overhead.cluster import (
    LAB_ERRORS,
    BenchError,
    create_pdd,
    patch_pdd_spec,
    pdd_manifest,
    unique_namespace,
)
from bench.overhead.report import Section
from bench.overhead.stats import fmt_seconds, summarize
from pdlab.cluster.kubeclient import Kube as LabKube
from pdlab.cluster.kubeclient import apply_crd, delete_namespace, ensure_namespace, wait_until
from pdlab.cluster.lab import Lab, LabError
from pdscaler.kube import Kube, load_api_client
from pdscaler.metricsql import build_queries
from pdscaler.reconcile import overhead, reconcile_once
from pdscaler.runtime import Runtime, TickReport
from pdscaler.spec import PDDeploymentSpec

TITLE = "2. One reconcile tick against the lab (`reconcile_once`, real clients)"
NAME = "tick"
CONVERGE_TIMEOUT_S = 90.0
SCALE_GAP_S = 1.0

Sample = tuple[float, int]


def _converge(rt: Runtime, namespace: str, timeout: float = CONVERGE_TIMEOUT_S) -> TickReport:
    """Tick until two ticks in a row write nothing and every pod the Deployments ask
    for is Ready (the status then stops changing)."""
    quiet = 0

    def step() -> TickReport | None:
        nonlocal quiet
        with rt.lock(namespace, NAME):
            rep = reconcile_once(rt, namespace, NAME)
        d = rep.decision
        done = d is not None and rep.writes == 0
        quiet = quiet + 1 if done else 0
        return rep if quiet >= 2 else None

    return wait_until(
        step, timeout, f"{namespace}/{NAME} to converge", interval=1.0, error=BenchError
    )


def reads_per_tick(
    before: dict[tuple[str, str], int], after: dict[tuple[str, str], int], ticks: int
) -> str:
    """The requests sent between two ``RequestCounts`` snapshots, per tick, by (verb,
    resource), most first: {get pddeployments: 0} -> {20}, {list pods: 40} over 20
    ticks -> ``3.0 in all: get pddeployments 1.0, list pods 2.0``."""
    diff = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    diff = {k: v for k, v in diff.items() if v > 0}
    if ticks <= 0 or not diff:
        return "none counted"
    parts = sorted(diff.items(), key=lambda kv: (-kv[1], kv[0]))
    each = ", ".join(f"{verb} {res} {n / ticks:.1f}" for (verb, res), n in parts)
    return f"{sum(diff.values()) / ticks:.1f} in all: {each}"


def _scaling_ticks(rt: Runtime, lab_kube: LabKube, namespace: str, ticks: int) -> list[Sample]:
    out: list[Sample] = []
    for k in range(ticks):
        n = 2 if k % 2 == 0 else 1
        patch_pdd_spec(lab_kube, namespace, NAME, {"decode": {"replicas": {"min": n, "max": n}}})
        out += overhead(rt, namespace, NAME, ticks=1)
        rep = rt.last[(namespace, NAME)]
        if rep.decision is None or rep.decision.decode != n or not rep.applied:
            raise BenchError(f"scaling tick {k} did not scale decode to {n}: {rep}")
        time.sleep(SCALE_GAP_S)
    return out


def _row(label: str, samples: Sequence[Sample]) -> list[str]:
    s = summarize([sec for sec, _ in samples])
    writes = sum(w for _, w in samples) / len(samples)
    return [
        label,
        str(s.n),
        fmt_seconds(s.p50),
        fmt_seconds(s.p99),
        fmt_seconds(s.mean),
        fmt_seconds(s.max),
        f"{writes:.1f}",
    ]


def measure(ticks: int = 20) -> Section:
    """The section; "not measured" with the reason if the lab cannot be used."""
    lab = Lab()
    missing = lab.missing_binaries()
    if missing:
        return Section.skipped(TITLE, f"lab binaries {missing} not built (make lab-build)")
    was_up = lab.is_up()
    try:
        lab.ensure_up(timeout=300)
    except LabError as err:
        return Section.skipped(TITLE, f"the lab did not come up: {str(err).splitlines()[0]}")
    lab_kube = LabKube.from_kubeconfig(lab.kubeconfig)
    namespace = unique_namespace()
    try:
        apply_crd(lab_kube)
        ensure_namespace(lab_kube, namespace)
    except LAB_ERRORS as err:
        return Section.skipped(TITLE, f"the lab did not answer: {err}")
    try:
        manifest = pdd_manifest(NAME, namespace, lab.prometheus_url)
        create_pdd(lab_kube, manifest)
        kube = Kube(load_api_client(str(lab.kubeconfig)))
        rt = Runtime(kube=kube, prometheus_url=lab.prometheus_url)
        _converge(rt, namespace)
        before = kube.request_counts.snapshot()
        converged = overhead(rt, namespace, NAME, ticks=ticks)
        reads = reads_per_tick(before, kube.request_counts.snapshot(), len(converged))
        held = rt.last[(namespace, NAME)].decision
        scaling = _scaling_ticks(rt, lab_kube, namespace, ticks)
    except BenchError as err:
        return Section.skipped(TITLE, str(err))
    except LAB_ERRORS as err:
        return Section.skipped(TITLE, f"lost the lab: {err}")
    finally:
        with contextlib.suppress(Exception):
            delete_namespace(lab_kube, namespace)
    spec = PDDeploymentSpec.model_validate(manifest["spec"])
    queries = len(build_queries(spec, namespace, NAME))
    wrote = sum(1 for _, w in converged if w)
    notes = [
        f"converged ticks that wrote anything: {wrote} of {len(converged)}; with {ticks} "
        "samples the p99 lies between the two slowest ticks",
        f"API requests per converged tick (counted by the client, `Kube.request_counts`; "
        f"watch caches off, as `reconcile_once` runs here): {reads}; and "
        f"{queries} Prometheus instant queries (run concurrently); the lab's Prometheus had"
        " no vLLM series for this PDDeployment, so its answers were empty; the policy's"
        f" answer on the converged ticks: {held.action if held else 'none'}; the scaling"
        " ticks were forced by the replica bounds",
        f"lab {'already up' if was_up else 'started by this run (left up)'}: "
        f"API server {lab.apiserver_url}, Prometheus {lab.prometheus_url}",
    ]
    return Section(
        TITLE,
        f"One PDDeployment (deploy/examples/chat.yaml, 1 prefill + 1 decode replica) in a "
        f"fresh namespace of the shared lab; {ticks} ticks of each kind, one at a time, "
        "timed inside `reconcile_once` (`TickReport.seconds`); writes counted by "
        "`Kube.audit`.",
        ["tick", "n", "p50", "p99", "mean", "max", "writes/tick"],
        [_row("converged (no change)", converged), _row("scaling (decode 1<->2)", scaling)],
        notes=notes,
    )
