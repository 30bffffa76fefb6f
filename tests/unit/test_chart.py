"""The Helm chart (charts/pdscaler): its CRD is the one in crds/, values validate against
values.schema.json, RBAC is least privilege, the pod is hardened, and the operator
arguments it passes are options ``pdscaler run`` really has.

These checks need no Helm binary, so templates are read with a minimal reading:
template actions alone on a line are dropped (both branches of an ``if`` are kept, so
the optional leader-election rules are checked too) and inline ``{{ ... }}`` become
``X``. test_chart_render.py renders the chart with real Helm (the lab build's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from pdscaler.cli import build_app
from support.chartkit import grants, read_template, schema, values

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "pdscaler"


def test_chart_crd_is_the_source_crd() -> None:
    """charts/pdscaler/files/crds/ holds crds/'s file byte for byte (copy it when it
    changes); templates/crds.yaml renders it (so ``helm upgrade`` updates the CRD)."""
    source = REPO / "crds" / "pdscaler.io_pddeployments.yaml"
    assert (CHART / "files" / "crds" / source.name).read_bytes() == source.read_bytes()
    assert not (CHART / "crds").exists()  # Helm would install it and never upgrade it


def test_values_validate_against_schema() -> None:
    jsonschema.validate(values(), schema())


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("logFormat",), "xml"),
        (("metrics", "port"), 80),
        (("watchNamespaces",), ["Not_A_Namespace"]),
        (("replicaCount",), 0),
        (("unknownKey",), 1),
    ],
)
def test_schema_rejects_bad_values(path: tuple[str, ...], bad: Any) -> None:
    v = values()
    node = v
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(v, schema())


def rules_of(role_name_suffix: str) -> list[dict[str, Any]]:
    for doc in read_template("rbac.yaml"):
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"].endswith(role_name_suffix):
            return list(doc["rules"])
    raise AssertionError(f"no ClusterRole *{role_name_suffix}")


def test_workload_role_is_exactly_what_the_operator_uses() -> None:
    assert grants(rules_of("X")) == {
        ("pdscaler.io", "pddeployments"): {"get", "list", "watch", "patch"},
        ("pdscaler.io", "pddeployments/status"): {"get", "patch"},
        ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
        ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
        # podsPerReplica > 1: the pool's LeaderWorkerSet (kube.reads.observe, writes.apply)
        ("leaderworkerset.x-k8s.io", "leaderworkersets"): {
            "get",
            "list",
            "create",
            "patch",
            "delete",
        },
        ("", "pods"): {"get", "list", "watch", "patch"},
        ("", "events"): {"create"},
        # the ConfigMaps the pool templates read, by name (kube.reads.read_configmaps)
        ("", "configmaps"): {"get"},
        ("", "serviceaccounts"): {"get", "list", "watch", "create", "patch", "delete"},
        ("rbac.authorization.k8s.io", "roles"): {
            "get",
            "list",
            "watch",
            "create",
            "patch",
            "delete",
        },
        ("rbac.authorization.k8s.io", "rolebindings"): {
            "get",
            "list",
            "watch",
            "create",
            "patch",
            "delete",
        },
        # scaleTargets.kinds (each kind's /scale and reads, read here without helm as X;
        # rendered: test_chart_scale_targets) and the coexistence check's reads
        ("X", "X"): {"get", "list", "watch", "update", "patch"},
        ("autoscaling", "horizontalpodautoscalers"): {"get", "list", "watch"},
        ("keda.sh", "scaledobjects"): {"get", "list", "watch"},
    }


def test_leader_role_is_a_namespaced_role_for_the_lease_only() -> None:
    """Leader election needs get/update on its one Lease and create, in the release
    namespace: a Role (never a ClusterRole), bound by a RoleBinding there; no kopf
    peering rules are left anywhere."""
    docs = read_template("rbac.yaml")
    (role,) = [d for d in docs if d["kind"] == "Role"]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["kind"] == "Role"]
    assert role["metadata"]["name"].endswith("-leader")
    assert role["metadata"]["namespace"] == "X"  # {{ .Release.Namespace }}
    assert grants(role["rules"]) == {("coordination.k8s.io", "leases"): {"get", "update", "create"}}
    named = [r for r in role["rules"] if set(r["verbs"]) & {"get", "update"}]
    assert all(r.get("resourceNames") for r in named)
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    for doc in docs:
        for rule in doc.get("rules") or []:
            assert "kopf.dev" not in rule["apiGroups"]
            if doc["kind"] == "ClusterRole":
                assert "leases" not in rule["resources"]
    assert not (CHART / "templates" / "peering.yaml").exists()


def test_leader_election_is_required_for_more_than_one_replica() -> None:
    v = values()
    assert v["replicaCount"] == 1
    assert v["leaderElection"]["enabled"] is True
    v["replicaCount"] = 2
    jsonschema.validate(v, schema())
    v["leaderElection"]["enabled"] = False
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(v, schema())


def test_liveness_and_metrics_bind_are_explicit() -> None:
    """The chart binds /metrics on every pod interface explicitly (``pdscaler run``
    alone binds loopback) and probes the tick loop's /healthz."""
    (dep,) = read_template("deployment.yaml")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--metrics-address=X" in container["args"]
    assert values()["metrics"]["bindAddress"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    env = {e["name"] for e in container["env"]}
    assert {"POD_NAME", "POD_NAMESPACE"} <= env


def test_the_operator_cannot_escalate_through_the_roles_it_creates() -> None:
    """No bind or escalate verb: the API server lets the operator create a Role (and bind
    it) only with permissions it holds itself, and the routers' Role is pods read-only."""
    verbs = set().union(*grants(rules_of("X")).values())
    assert not verbs & {"bind", "escalate", "impersonate", "*"}


def test_discovery_role_is_read_only() -> None:
    g = grants(rules_of("-discovery"))
    assert g[("apiextensions.k8s.io", "customresourcedefinitions")] == {"list", "watch"}
    assert g[("", "namespaces")] == {"list", "watch"}
    writes = {"create", "update", "delete", "deletecollection"}
    assert all(not (verbs & writes) for verbs in g.values())


def test_no_wildcards_and_no_secrets() -> None:
    for doc in read_template("rbac.yaml"):
        for rule in doc.get("rules") or []:
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key]
            assert "secrets" not in rule["resources"]


def test_pod_is_hardened() -> None:
    v = values()
    pod, ctr = v["podSecurityContext"], v["securityContext"]
    assert pod["runAsNonRoot"] is True
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    assert ctr["allowPrivilegeEscalation"] is False
    assert ctr["readOnlyRootFilesystem"] is True
    assert ctr["capabilities"] == {"drop": ["ALL"]}
    (dep,) = read_template("deployment.yaml")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_operator_args_are_real_run_options() -> None:
    """Every ``--flag`` the Deployment passes is an option of ``pdscaler run``."""
    (dep,) = read_template("deployment.yaml")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["args"][0] == "run"
    flags = {a.split("=")[0] for a in container["args"][1:]}
    assert {"--all-namespaces", "--standalone", "--metrics-port", "--log-format"} <= flags
    help_text = CliRunner().invoke(build_app(), ["run", "--help"], terminal_width=200).output
    for flag in flags:
        assert flag in help_text, flag


def test_the_prometheus_allow_list_reaches_the_operator() -> None:
    """``prometheus.allowedURLs`` (default: the CRD's default URL) and
    ``prometheus.maxResponseBytes`` are the operator's environment."""
    from pdscaler.prometheus import DEFAULT_ALLOWED_URLS, DEFAULT_MAX_BODY_BYTES
    from pdscaler.runtime import PROMETHEUS_ALLOWED_URLS_ENV, PROMETHEUS_MAX_BODY_ENV

    v = values()
    assert tuple(v["prometheus"]["allowedURLs"]) == DEFAULT_ALLOWED_URLS
    assert v["prometheus"]["maxResponseBytes"] == DEFAULT_MAX_BODY_BYTES
    (dep,) = read_template("deployment.yaml")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    names = {e["name"] for e in container["env"]}
    assert {PROMETHEUS_ALLOWED_URLS_ENV, PROMETHEUS_MAX_BODY_ENV} <= names
    text = (CHART / "templates" / "deployment.yaml").read_text()
    assert 'join "," .Values.prometheus.allowedURLs' in text


@pytest.mark.parametrize(
    "bad",
    [
        [],
        ["prometheus.monitoring:9090"],
        ["http://user@prometheus:9090"],
        ["http://a:9090,http://b:9090"],
        ["http://a:9090/?x=1"],
    ],
)
def test_schema_rejects_bad_allowed_urls(bad: list[str]) -> None:
    v = values()
    v["prometheus"]["allowedURLs"] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(v, schema())
