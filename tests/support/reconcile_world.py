"""A PDDeployment in an in-memory API server (fakekube.FakeKube), a metrics source the
test sets and a clock (no tests here): ``World`` runs ``reconcile_once`` on them, the
whole tick (the kube package's requests included) without a cluster.

Worked numbers: prefill 3000 tok/s, decode 800 tok/s, u = 0.7, min 1 / max 8 each.
At R = 1 req/s, L_p = 2000, L_d = 500 the ratio model wants one replica each.

    world = World(); world.tick(); world.converge()
    world.condition("Ready")["status"]  # -> "True"
"""

from __future__ import annotations

import copy
from typing import Any

from pdscaler import manifests
from pdscaler.prometheus import MetricsUnavailableError
from pdscaler.reconcile import reconcile_once
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, Role
from support import builders
from support.fakekube import FakeKube

NS, NAME = "serving", "chat"
PDD_PATH = f"/apis/pdscaler.io/v1alpha1/namespaces/{NS}/pddeployments/{NAME}"


def manifest(mode: str = "Auto") -> dict[str, Any]:
    return {
        "apiVersion": "pdscaler.io/v1alpha1",
        "kind": "PDDeployment",
        "metadata": {"name": NAME, "namespace": NS, "generation": 1},
        "spec": {
            "engine": {"image": "img", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
            "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 8}},
            "scaling": {"mode": mode, "interval": "5s", "maxGPUs": 16},
        },
    }


def rev_of(version: str) -> str:
    """The cell revision of ``version`` with the test manifest's engine configuration."""
    doc = manifest()["spec"]
    doc["engine"]["version"] = version
    return manifests.spec_revision(PDDeploymentSpec.model_validate(doc))


REV = rev_of("v1")


def snapshot(rate: float = 1.0) -> MetricsSnapshot:
    """``rate`` req/s of the chat mix, TTFT 0.3 s, TPOT 20 ms, nothing queued or running."""
    return builders.snapshot(rate, ttft=0.3, tpot=0.02, running=0.0)


class World:
    """A fake cluster, a settable metrics source and a clock."""

    def __init__(self, mode: str = "Auto") -> None:
        self.kube = FakeKube()
        self.kube.put(PDD_PATH, manifest(mode))
        self.metrics: MetricsSnapshot | None = snapshot()
        self.now = 1_000_000.0
        self.rt = Runtime(kube=self.kube, clock=lambda: self.now, metrics_source=self.source)

    def source(self, spec: PDDeploymentSpec, ns: str, name: str, now: float) -> MetricsSnapshot:
        if self.metrics is None:
            raise MetricsUnavailableError("PrometheusUnreachable", "connection refused")
        return self.metrics

    def tick(self, advance: float = 5.0) -> Any:
        self.now += advance
        return reconcile_once(self.rt, NS, NAME)

    def pdd(self) -> dict[str, Any]:
        return copy.deepcopy(self.kube.store[PDD_PATH])

    def deployment(self, role: Role) -> dict[str, Any]:
        path = f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-{REV}-{role.value}"
        return self.kube.store[path]

    def run_pods(self) -> None:
        """What the Deployment controller + kwok would do: Ready pods up to replicas."""
        for role in Role:
            dep = self.deployment(role)
            labels = dep["spec"]["template"]["metadata"]["labels"]
            for i in range(dep["spec"]["replicas"]):
                self.kube.add_pod(
                    NS,
                    f"{NAME}-{role.value}-{i}",
                    labels,
                    ready=True,
                    deployment=dep["metadata"]["name"],
                )

    def converge(self) -> None:
        """Tick and run pods until a tick plans nothing (decode comes up first, then
        prefill: a new cell takes two rounds)."""
        for _ in range(5):
            self.run_pods()
            rep = self.tick()
            if rep.plan is not None and rep.plan.empty:
                return
        raise AssertionError("did not converge in 5 ticks")

    def condition(self, type_: str) -> dict[str, Any]:
        (c,) = [c for c in self.pdd()["status"]["conditions"] if c["type"] == type_]
        return dict(c)
