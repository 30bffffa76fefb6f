"""The chart's auth and dashboard templates under the real ``helm`` (the lab's pinned
build): the admission policy and its binding render by default; the Secrets role
(get only) only with ``prometheus.readSecrets=true``, bound cluster-wide or per watched
namespace; the dashboard ConfigMap only with ``grafana.dashboards.enabled=true``,
labelled for Grafana's sidecar and holding deploy/grafana/pdscaler.json byte for byte."""

from __future__ import annotations

import json
from typing import Any

import yaml

from pdlab.cluster.config import REPO_DIR
from support.chartkit import CHART, KUBE, lab_helm


def rendered(*values: str) -> list[dict[str, Any]]:
    out = lab_helm("template", "pds", str(CHART), "--kube-version", KUBE, *values)
    return [d for d in yaml.safe_load_all(out) if d]


def named(docs: list[dict[str, Any]], kind: str) -> list[str]:
    return sorted(d["metadata"]["name"] for d in docs if d["kind"] == kind)


def test_defaults_render_the_policy_and_no_secret_access() -> None:
    docs = rendered()
    policies = [
        f"pds-pdscaler-{p}" for p in ("operator-writes", "pddeployments", "router-identity")
    ]
    assert named(docs, "ValidatingAdmissionPolicy") == policies
    assert named(docs, "ValidatingAdmissionPolicyBinding") == policies
    for doc in docs:
        for rule in doc.get("rules") or []:
            assert "secrets" not in rule["resources"]
    assert not [d for d in docs if d["kind"] == "ConfigMap"]


def test_read_secrets_grants_get_only_bound_like_the_workload_role() -> None:
    docs = rendered("--set", "prometheus.readSecrets=true")
    (role,) = [d for d in docs if d["metadata"]["name"] == "pds-pdscaler-secrets"
               and d["kind"] == "ClusterRole"]  # fmt: skip
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    # by default the release namespace only (helm template's is "default")
    assert "pds-pdscaler-secrets" not in named(docs, "ClusterRoleBinding")
    (bind,) = [d for d in docs if d["kind"] == "RoleBinding"
               and d["metadata"]["name"] == "pds-pdscaler-secrets"]  # fmt: skip
    assert bind["metadata"]["namespace"] == "default"
    wide = rendered("--set", "prometheus.readSecrets=true", "--set", "clusterWide=true")
    assert "pds-pdscaler-secrets" in named(wide, "ClusterRoleBinding")
    docs = rendered(
        "--set", "prometheus.readSecrets=true", "--set", "watchNamespaces={a,b}",
        "--set", "leaderElection.enabled=false",
    )  # fmt: skip
    binds = [
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "pds-pdscaler-secrets"
    ]
    assert sorted(binds) == ["a", "b"]
    assert "pds-pdscaler-secrets" not in named(docs, "ClusterRoleBinding")


def test_the_dashboard_configmap() -> None:
    docs = rendered(
        "--set", "grafana.dashboards.enabled=true",
        "--set", "grafana.dashboards.annotations.grafana_folder=pdscaler",
    )  # fmt: skip
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "pdscaler"}
    shipped = cm["data"]["pdscaler.json"]
    source = (REPO_DIR / "deploy" / "grafana" / "pdscaler.json").read_text()
    assert json.loads(shipped) == json.loads(source)
    assert shipped == source.rstrip("\n")
