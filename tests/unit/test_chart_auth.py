"""The chart's side of ``metrics.prometheus.auth``: the operator may only ``get``
Secrets (a role of its own, bound as the workload role is, only with
``prometheus.readSecrets: true``, off by default), and the ValidatingAdmissionPolicy
admits a PDDeployment only if its author may create Deployments in its namespace and
get every Secret it names.
Read with test_chart's minimal template reading (Helm is not installed here); the policy's
CEL is checked for what it asks the authorizer, field by field of the spec."""

from __future__ import annotations

from typing import Any

from pdscaler.spec import MAX_CUSTOM_HEADERS, PrometheusAuth
from support.chartkit import grants, read_template, values


def secrets_docs() -> list[dict[str, Any]]:
    return read_template("secrets-rbac.yaml")


def test_the_secrets_role_is_get_only() -> None:
    (role,) = [d for d in secrets_docs() if d["kind"] == "ClusterRole"]
    assert role["metadata"]["name"].endswith("-secrets")
    assert grants(role["rules"]) == {("", "secrets"): {"get"}}


def test_the_secrets_role_is_bound_like_the_workload_role() -> None:
    """Cluster-wide with clusterWide, else one RoleBinding per watched namespace (the
    release namespace by default; both branches are kept by the minimal reading,
    test_chart_scope renders each)."""
    kinds = sorted(d["kind"] for d in secrets_docs())
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "RoleBinding"]
    for doc in secrets_docs():
        if doc["kind"].endswith("Binding"):
            assert doc["roleRef"] == {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "X-secrets",
            }
    text = (read_template.__globals__["CHART"] / "templates" / "secrets-rbac.yaml").read_text()
    assert text.startswith("{{- if .Values.prometheus.readSecrets }}")
    assert values()["prometheus"]["readSecrets"] is False  # opt-in


def policy() -> dict[str, Any]:
    (doc,) = [d for d in read_template("admission-policy.yaml") if d["kind"].endswith("Policy")]
    return doc


def test_the_policy_checks_deployments_and_every_named_secret() -> None:
    spec = policy()["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["pdscaler.io"], ["pddeployments"])
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    deploy, secret = (v["expression"] for v in spec["validations"])
    assert "resource('deployments')" in deploy
    assert ".check('create').allowed()" in deploy
    checks = {v["name"]: v["expression"] for v in spec["variables"] if v["name"].startswith("get_")}
    assert secret == " && ".join(f"variables.{name}" for name in checks)
    for expression in checks.values():  # one authorizer check each (the cost limit)
        assert expression.count("authorizer.") == 1
        assert "resource('secrets')" in expression
        assert ".check('get').allowed()" in expression


def test_the_policy_checks_every_secret_reference_of_the_spec() -> None:
    """Each Secret reference field of ``PrometheusAuth``, and each of the (at most 8)
    custom headers, has its check: a field added to the spec without the policy would
    let its Secret through unchecked."""
    checks = {
        v["name"]: v["expression"]
        for v in policy()["spec"]["variables"]
        if v["name"].startswith("get_")
    }
    auth = "object.spec.metrics.prometheus.auth"
    for field in PrometheusAuth.model_fields.values():
        alias = field.alias
        assert alias is not None
        if alias == "customHeaders":
            assert field.metadata[0].max_length == MAX_CUSTOM_HEADERS == 8
            for i in range(MAX_CUSTOM_HEADERS):
                assert f".name({auth}.customHeaders[{i}].name)" in checks[f"get_header{i}"]
        else:
            assert f".name({auth}.{alias}.name)" in checks[f"get_{alias}"]


def test_the_policy_is_bound_with_deny_and_on_by_default() -> None:
    (binding,) = [
        d for d in read_template("admission-policy.yaml") if d["kind"].endswith("Binding")
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert values()["admissionPolicy"]["enabled"] is True
