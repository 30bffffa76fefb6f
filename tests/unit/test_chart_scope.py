"""Which namespaces the chart lets the operator handle, rendered by real Helm: by
default only the release namespace (a RoleBinding there, ``--namespace=<release
namespace>``), ``watchNamespaces`` lists others, and cluster-wide (a ClusterRoleBinding,
``--all-namespaces``) only with ``clusterWide: true``. The RBAC and the operator's
arguments always agree, and so do the Secrets binding and the PodMonitor."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from pdlab.cluster.config import helm_path
from support.chartkit import CHART, KUBE, NAMESPACE, RELEASE, template, tool

WORKLOAD = f"{RELEASE}-pdscaler"


def bindings(docs: list[dict[str, Any]], role: str) -> list[tuple[str, str | None]]:
    """(kind, namespace) of every binding of the ClusterRole ``role``."""
    return sorted(
        (d["kind"], d["metadata"].get("namespace"))
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding") and d["roleRef"]["name"] == role
    )


def scope_args(docs: list[dict[str, Any]]) -> list[str]:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return [a for a in container["args"] if a.startswith(("--namespace", "--all-namespaces"))]


def test_by_default_only_the_release_namespace() -> None:
    docs = template("--set", "prometheus.readSecrets=true")
    assert bindings(docs, WORKLOAD) == [("RoleBinding", NAMESPACE)]
    assert bindings(docs, f"{WORKLOAD}-secrets") == [("RoleBinding", NAMESPACE)]
    assert scope_args(docs) == [f"--namespace={NAMESPACE}"]
    cluster = [d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert cluster == [f"{WORKLOAD}-discovery"]  # read-only: CRDs and namespaces


def test_watch_namespaces_lists_the_namespaces() -> None:
    docs = template("--set", "watchNamespaces={a,b}", "--set", "prometheus.readSecrets=true")
    assert bindings(docs, WORKLOAD) == [("RoleBinding", "a"), ("RoleBinding", "b")]
    assert bindings(docs, f"{WORKLOAD}-secrets") == [("RoleBinding", "a"), ("RoleBinding", "b")]
    assert scope_args(docs) == ["--namespace=a", "--namespace=b"]


def test_cluster_wide_only_when_asked() -> None:
    docs = template("--set", "clusterWide=true", "--set", "prometheus.readSecrets=true")
    assert bindings(docs, WORKLOAD) == [("ClusterRoleBinding", None)]
    assert bindings(docs, f"{WORKLOAD}-secrets") == [("ClusterRoleBinding", None)]
    assert scope_args(docs) == ["--all-namespaces"]


def test_cluster_wide_and_a_namespace_list_are_refused_together() -> None:
    done = subprocess.run(
        [str(tool(helm_path())), "template", RELEASE, str(CHART), "-n", NAMESPACE,
         "--kube-version", KUBE, "--set", "clusterWide=true", "--set", "watchNamespaces={a}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "clusterWide" in done.stderr


@pytest.mark.parametrize(
    ("args", "selector"),
    [
        ([], {"matchNames": [NAMESPACE]}),
        (["--set", "watchNamespaces={a,b}"], {"matchNames": ["a", "b"]}),
        (["--set", "clusterWide=true"], {"any": True}),
        (["--set", "monitoring.podMonitor.namespaces={c}"], {"matchNames": ["c"]}),
    ],
)
def test_the_pod_monitor_looks_where_the_operator_watches(
    args: list[str], selector: dict[str, Any]
) -> None:
    docs = template("--set", "monitoring.podMonitor.enabled=true", *args, monitoring=True)
    (pm,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert pm["spec"]["namespaceSelector"] == selector
