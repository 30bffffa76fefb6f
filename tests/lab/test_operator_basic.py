"""The operator under the real kopf runner against the lab: a PDDeployment becomes a
cell whose pods are Ready on the fake GPU nodes, with status and ``kubectl get pdd``
columns filled; once converged (the stabilization window covered) a tick writes nothing
at all; deleting the PDDeployment removes the cell through owner references.

Load: 1 req/s of 2000 prompt / 500 output tokens, so the ratio model wants
N_P = 2000/2100 = 0.95 -> 1 and N_D = 500/560 = 0.89 -> 1 replica (the minimums).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

from pdlab.cluster.lab import Lab
from pdscaler import manifests, naming
from pdscaler.types import Role
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    as_dict,
    create_pdd,
    delete_pdd_and_wait,
    deployments,
    get_pdd,
    kopf_operator,
    operator_runtime,
    pdd_manifest,
    ready_count,
    replicas,
    serve_light,
    spec_of,
    strip_finalizers,
)

NAME = "chat"
REV = manifests.spec_revision(spec_of(pdd_manifest(NAME, "http://unused")))


def status_changes(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What differs between two statuses, for a failure message: each changed field as
    (before, after), the conditions by type."""
    out: dict[str, Any] = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if key == "conditions":
            by_type = {c["type"]: c for c in old or []}
            changed = [
                (by_type.get(c["type"]), c) for c in new or [] if by_type.get(c["type"]) != c
            ]
            if changed:
                out[key] = changed
        elif old != new:
            out[key] = (old, new)
    return out


def resource_versions(kube: Kube, namespace: str) -> dict[str, str]:
    """resourceVersion of the PDDeployment and every owned Deployment and Service."""
    sel = f"{naming.LABEL_NAME}={NAME}"
    out = {"pdd": str(get_pdd(kube, namespace, NAME)["metadata"]["resourceVersion"])}
    for d in deployments(kube, namespace, NAME):
        out[f"deploy/{d['metadata']['name']}"] = d["metadata"]["resourceVersion"]
    for s in kube.core.list_namespaced_service(namespace, label_selector=sel).items:
        svc = as_dict(kube, s)
        out[f"svc/{svc['metadata']['name']}"] = svc["metadata"]["resourceVersion"]
    return out


def test_pdd_creates_ready_cell_with_status_then_converges_with_zero_writes(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    serve_light(exporter, namespace, NAME)
    rt = operator_runtime(lab)
    with kopf_operator(namespace, rt):
        try:
            create_pdd(kube, namespace, pdd_manifest(NAME, lab.prometheus_url))
            wait_for(
                lambda: (
                    ready_count(kube, namespace, NAME, Role.PREFILL) >= 1
                    and ready_count(kube, namespace, NAME, Role.DECODE) >= 1
                ),
                60,
                "one Ready prefill and one Ready decode pod",
            )
            assert replicas(kube, namespace, NAME, Role.PREFILL) == {REV: 1}
            assert replicas(kube, namespace, NAME, Role.DECODE) == {REV: 1}
            svc = as_dict(kube, kube.core.read_namespaced_service(NAME, namespace))
            assert svc["spec"]["selector"] == {
                naming.LABEL_NAME: NAME,
                naming.LABEL_ROLE: "router",
            }
            router_dep = kube.apps.read_namespaced_deployment(f"{NAME}-{REV}-router", namespace)
            router_pod = router_dep.spec.template.spec
            assert router_pod is not None
            args = router_pod.containers[0].args
            assert args is not None
            assert f"pdscaler.io/revision={REV}" in args
            role = kube.rbac.read_namespaced_role(f"{NAME}-router", namespace)
            assert role.rules is not None
            assert [(r.resources, r.verbs) for r in role.rules] == [
                (["pods"], ["get", "list", "watch"])
            ]

            def filled() -> dict[str, object] | None:
                st = get_pdd(kube, namespace, NAME).get("status") or {}
                ok = (st.get("prefill") or {}).get("summary") == "1/1" and (
                    st.get("decode") or {}
                ).get("summary") == "1/1"
                metrics_ok = any(
                    c["type"] == "MetricsAvailable" and c["status"] == "True"
                    for c in st.get("conditions") or []
                )
                return st if ok and metrics_ok and st.get("lastDecision") else None

            st = wait_for(filled, 60, "status: both pools 1/1, metrics available, a decision")
            assert st["activeVersion"] == "v1"
            assert st["observedGeneration"] == 1
            conds = {c["type"]: c["status"] for c in st["conditions"]}  # type: ignore[attr-defined]
            assert conds["Ready"] == "True"
            assert conds["MetricsAvailable"] == "True"

            table = subprocess.run(
                ["kubectl", "get", "pdd", NAME, "-n", namespace, "--no-headers"],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "KUBECONFIG": str(lab.kubeconfig)},
                timeout=30,
            ).stdout.split()
            assert table[:5] == [NAME, "True", "v1", "1/1", "1/1"], table

            # Converged: several daemon ticks (interval 2 s), no write by anyone, once the
            # stabilization window (20 s) is covered: from then on the window's anchor
            # moves every tick, and a status that persisted its date was written every
            # tick (CI saw it; the unit test test_memory_stable_once_the_window_is_covered).
            covered = float(st["memory"]["recommendations"][0][0]) + 20 + 2  # type: ignore[index]
            wait_for(
                lambda: (
                    time.time() > covered
                    and rt.last.get((namespace, NAME)) is not None
                    and rt.last[(namespace, NAME)].writes == 0
                ),
                60,
                "a tick with zero writes, the stabilization window covered",
            )
            before_writes = rt.kube.audit.count
            before_versions = resource_versions(kube, namespace)
            before_status = get_pdd(kube, namespace, NAME).get("status") or {}
            ticks = rt.ticks
            wait_for(lambda: rt.ticks >= ticks + 3, 30, "3 more ticks")
            written = rt.kube.audit.since(before_writes)
            after_status = get_pdd(kube, namespace, NAME).get("status") or {}
            assert written == [], (written, status_changes(before_status, after_status))
            assert resource_versions(kube, namespace) == before_versions

            delete_pdd_and_wait(kube, namespace, NAME)
            sel = f"{naming.LABEL_NAME}={NAME}"
            wait_for(
                lambda: (
                    not kube.apps.list_namespaced_deployment(namespace, label_selector=sel).items
                ),
                60,
                "owned Deployments garbage-collected",
            )
        finally:
            strip_finalizers(kube, namespace, NAME)
