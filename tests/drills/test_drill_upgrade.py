"""D15: an operator upgrade and downgrade change nothing in the cluster (issue 30, item 1).

Three PDDeployments converge under the "previous" operator; the drill then stops it and
starts this one (the upgrade), then stops this one and starts the previous one again
(the downgrade). After each switch: zero pod restarts (the same pool pods, by uid, with
the same restart counts), zero new revisions (the same pool Deployments) and no pod
template changed (their ``spec.template`` as the API server returns it), zero
``RolloutStarted`` Events. Sampled every second through both windows.

The previous operator is this tree's run with a different rendering, not the previous
release's code: the release before the identity scheme (0fd2242, the issue's) cannot run
against today's CRD: its spec model forbids unknown fields and reads the stored spec
strictly, and the API server fills in defaults that release does not know
(``scaling.roleFlips``, ``scaling.burstHeadroom``, ``router``), so it reconciles nothing.
What it differed in is reproduced instead: its cells are named by identity scheme 1
(image@version: ``manifests.spec_config`` patched to ``""``) and its pool templates
differ (a 3 s drain instead of 2 x TTFT + 5 = 9 s: ``manifests.drain_seconds`` patched),
what tests/unit/test_identity_golden.py checks against 0fd2242's own rendering.

Shortened: 2 s interval, 1 + 1 pods per PDDeployment, each window 6 intervals after the
switched operator handles its PDDeployments (the same in ``make test`` and ``make drill``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from drills.operator_process import OperatorProcess, handling
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.types import Role
from support.background import Sampling
from support.labkit import Kube, wait_for
from support.opkit import create_pdd, deployments, pdd_manifest, pod_dicts, ready_count

INTERVAL = 2.0
NAMES = ("u1", "u2", "u3")
WINDOW_TICKS = 6
OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
#: the previous operator: identity scheme 1 and another pool template (module docstring)
PREVIOUS = (
    "from pdscaler import manifests; "
    "manifests.spec_config = lambda spec: ''; "
    "manifests.drain_seconds = lambda spec: 3"
)


@dataclass
class Variant(OperatorProcess):
    """``pdscaler run`` with ``patch`` (Python) executed before it starts."""

    patch: str = ""

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, "PYTHONPATH": str(OPERATOR_DIR)}
        if self.allowed is not None:
            env["PDSCALER_PROMETHEUS_ALLOWED_URLS"] = self.allowed
        args = ["pdscaler", "run", "--namespace", self.namespace, *self.run_args()]
        code = f"{self.patch or 'pass'}; import runpy, sys; sys.argv = {args!r}; "
        code += "runpy.run_module('pdscaler', run_name='__main__')"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        self.started_at = time.time()


def pool_state(kube: Kube, namespace: str) -> dict[str, Any]:
    """What must not move: pool Deployments (name -> template) and pool pods (uid ->
    restart count), over the three PDDeployments."""
    templates: dict[str, Any] = {}
    pods: dict[str, int] = {}
    for name in NAMES:
        for d in deployments(kube, namespace, name):
            if d["metadata"]["labels"].get(naming.LABEL_ROLE) != naming.ROLE_ROUTER:
                templates[d["metadata"]["name"]] = d["spec"]["template"]
        for p in pod_dicts(kube, namespace, name):
            if p["metadata"]["labels"].get(naming.LABEL_ROLE) == naming.ROLE_ROUTER:
                continue
            statuses = (p.get("status") or {}).get("containerStatuses") or []
            pods[p["metadata"]["uid"]] = sum(int(s.get("restartCount") or 0) for s in statuses)
    return {"templates": templates, "pods": pods}


def rollouts_started(kube: Kube, namespace: str) -> int:
    events = kube.core.list_namespaced_event(namespace).items
    return sum(int(e.count or 1) for e in events if e.reason == "RolloutStarted")


@dataclass
class Unchanged(Sampling):
    """Samples ``pool_state`` every ``period`` s against ``baseline``; a sample that
    differs is a violation (kept with what differed)."""

    kube: Kube
    namespace: str
    baseline: dict[str, Any]
    diffs: list[str] = field(default_factory=list)

    def sample(self) -> None:
        now = pool_state(self.kube, self.namespace)
        if now["templates"].keys() != self.baseline["templates"].keys():
            self.diffs.append(f"deployments {sorted(now['templates'])}")
        elif now["templates"] != self.baseline["templates"]:
            self.diffs.append("a pool template changed")
        if now["pods"] != self.baseline["pods"]:
            self.diffs.append(f"pods {now['pods']} != {self.baseline['pods']}")


@contextmanager
def running(op: OperatorProcess) -> Iterator[OperatorProcess]:
    op.start()
    try:
        yield op
    finally:
        op.stop()


@pytest.mark.lab
@pytest.mark.timeout(420)
def test_an_upgrade_and_a_downgrade_restart_nothing(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path, drill: DrillRecord
) -> None:
    drill.describe(
        "D15",
        fault="operator switched previous -> this -> previous under 3 converged PDDeployments "
        "(previous: identity scheme 1 names, another pool template)",
        invariant="0 pod restarts, 0 new revisions, 0 pool template changes, 0 RolloutStarted",
        shortened=f"2 s interval, 1 + 1 pods each, {WINDOW_TICKS} ticks after each switch; "
        "the previous operator is this tree with the old rendering (0fd2242 cannot read "
        "today's CRD's defaults)",
    )
    for name in NAMES:
        create_pdd(kube, namespace, pdd_manifest(name, lab.prometheus_url, interval="2s"))
    log = tmp_path / "operator.log"
    previous = Variant(namespace, str(lab.kubeconfig), log, patch=PREVIOUS)
    current = Variant(namespace, str(lab.kubeconfig), log)
    with running(previous):
        wait_for(
            lambda: all(ready_count(kube, namespace, n, r) >= 1 for n in NAMES for r in Role),
            180,
            "1 + 1 Ready pods in each PDDeployment under the previous operator",
        )
        time.sleep(3 * INTERVAL)  # settled: routers up, status written
    baseline = pool_state(kube, namespace)
    assert len(baseline["templates"]) == 2 * len(NAMES)
    assert len(baseline["pods"]) == 2 * len(NAMES)
    revisions = {
        d["metadata"]["labels"][naming.LABEL_REVISION]
        for n in NAMES
        for d in deployments(kube, namespace, n)
    }
    started = rollouts_started(kube, namespace)
    with Unchanged(kube=kube, namespace=namespace, baseline=baseline, period=1.0) as watch:
        for op, what in ((current, "upgrade"), (previous, "downgrade")):
            offset = log.stat().st_size
            t0 = time.monotonic()
            with running(op):
                wait_for(
                    lambda: handling(op, offset),  # noqa: B023 (called here, in the loop)
                    90,
                    f"the {what}'s operator handles",
                )
                drill.recovered(f"{what}: operator handling", time.monotonic() - t0)
                time.sleep(WINDOW_TICKS * INTERVAL)
    drill.sampled(watch.samples, len(watch.diffs))
    assert not watch.diffs, watch.diffs[:3]
    assert watch.samples >= 2 * WINDOW_TICKS
    assert rollouts_started(kube, namespace) == started
    assert pool_state(kube, namespace) == baseline
    after = {
        d["metadata"]["labels"][naming.LABEL_REVISION]
        for n in NAMES
        for d in deployments(kube, namespace, n)
    }
    assert after == revisions
    # the previous operator named its cells by scheme 1: this one kept those names
    assert all(
        d["metadata"]["annotations"].get(naming.ANNOTATION_SCHEME) == "1"
        for n in NAMES
        for d in deployments(kube, namespace, n)
        if d["metadata"]["labels"].get(naming.LABEL_ROLE) != naming.ROLE_ROUTER
    )
