"""The chart's ValidatingAdmissionPolicy (charts/pdscaler/templates/admission-policy.yaml)
on the lab's kube-apiserver: a PDDeployment is admitted only if its author may create
Deployments in its namespace and get every Secret its ``metrics.prometheus.auth`` names.

The template is rendered without Helm (its ``{{ if }}`` lines dropped, the names made
unique) and its binding limited to the test's namespace (a namespace selector), so no
other namespace of the lab is affected; both are deleted afterwards. The authors are
ServiceAccounts with Roles made for each case; requests are dry runs.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.lab import Lab
from pdscaler.spec import GROUP, PLURAL, VERSION
from support.labkit import Kube, service_account_kube, wait_for
from support.opkit import pdd_manifest

TEMPLATE = (
    Path(__file__).resolve().parents[2]
    / "charts"
    / "pdscaler"
    / "templates"
    / "admission-policy.yaml"
)
ACTION_LINE = re.compile(r"^\s*\{\{-?.*-?\}\}\s*$")
INLINE = re.compile(r"\{\{-?.*?-?\}\}")


def rendered(name: str, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(policy, binding) named ``name``, the binding limited to ``namespace``."""
    lines = [
        INLINE.sub(name, line)
        for line in TEMPLATE.read_text().splitlines()
        if not ACTION_LINE.match(line)
    ]
    policy, binding = (d for d in yaml.safe_load_all("\n".join(lines)) if d)
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    return policy, binding


@contextlib.contextmanager
def installed_policy(kube: Kube, namespace: str) -> Iterator[None]:
    api = client.AdmissionregistrationV1Api(kube.api)
    name = f"pdscaler-vap-{secrets.token_hex(3)}"
    policy, binding = rendered(name, namespace)
    api.create_validating_admission_policy(cast(Any, policy))
    try:
        api.create_validating_admission_policy_binding(cast(Any, binding))
        yield
    finally:
        with contextlib.suppress(ApiException):
            api.delete_validating_admission_policy_binding(name)
        with contextlib.suppress(ApiException):
            api.delete_validating_admission_policy(name)


def author(kube: Kube, namespace: str, name: str, rules: list[dict[str, Any]]) -> Kube:
    """A ServiceAccount holding exactly ``rules`` in ``namespace``."""
    kube.rbac.create_namespaced_role(
        namespace, cast(Any, {"metadata": {"name": name}, "rules": rules})
    )
    kube.rbac.create_namespaced_role_binding(
        namespace,
        cast(
            Any,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        ),
    )
    return service_account_kube(kube, namespace, name)


PDD_RULE = {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["create"]}
DEPLOY_RULE = {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}


def secret_rule(*names: str) -> dict[str, Any]:
    return {
        "apiGroups": [""],
        "resources": ["secrets"],
        "verbs": ["get"],
        "resourceNames": list(names),
    }


def manifest(name: str, secret: str | None) -> dict[str, Any]:
    out: dict[str, Any] = pdd_manifest(name, "https://prometheus.monitoring:9090")
    if secret is not None:
        out["spec"]["metrics"]["prometheus"]["auth"] = {
            "username": {"name": "prom-creds", "key": "username"},
            "password": {"name": "prom-creds", "key": "password"},
            "customHeaders": [{"header": "X-Scope-OrgID", "name": secret, "key": "org"}],
        }
    return out


def refusal(who: Kube, namespace: str, body: dict[str, Any]) -> str | None:
    """None when the dry-run create is admitted, else the API server's message."""
    try:
        who.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All"
        )
    except ApiException as err:
        return str(err.body)
    return None


def test_the_policy_checks_the_authors_own_permissions(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    full = author(
        kube, namespace, "full", [PDD_RULE, DEPLOY_RULE, secret_rule("prom-creds", "prom-tenant")]
    )
    partial = author(kube, namespace, "partial", [PDD_RULE, DEPLOY_RULE, secret_rule("prom-creds")])
    no_deploy = author(kube, namespace, "nodeploy", [PDD_RULE])
    with installed_policy(kube, namespace):
        # the policy takes a moment to be enforced
        wait_for(
            lambda: refusal(no_deploy, namespace, manifest("a", None)) is not None,
            30,
            "the admission policy enforced",
        )
        # may create Deployments and get both Secrets: admitted
        assert refusal(full, namespace, manifest("b", "prom-tenant")) is None
        # may not get prom-tenant: refused, naming it
        why = refusal(partial, namespace, manifest("c", "prom-tenant"))
        assert why is not None
        assert "may not get every Secret that metrics.prometheus.auth names" in why, why
        assert "(prom-creds, prom-creds, prom-tenant)" in why
        # no Secret named: only the Deployments check applies
        assert refusal(partial, namespace, manifest("d", None)) is None
        # may not create Deployments: refused even without auth
        why = refusal(no_deploy, namespace, manifest("e", None))
        assert why is not None
        assert "may not create deployments" in why
