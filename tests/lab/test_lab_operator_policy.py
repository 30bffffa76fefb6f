"""The chart's policies on the operator's own writes and on the router identity
(charts/pdscaler/templates/admission-policy-operator.yaml, issue 30 item 6) on the lab's
kube-apiserver, with real tokens:

* the operator's ServiceAccount (holding the chart's workload ClusterRole in the test's
  namespace) may set a pdscaler pod's deletion cost and role label, and nothing else:
  not a foreign pod's image, not a pdscaler pod's image, not a foreign pod's labels;
* it may write the router identity (Role ``<name>-router`` with pods get/list/watch,
  bound to the ServiceAccount ``<name>-router``) and may not bind its own ClusterRole,
  or a Role with more rights, to anyone;
* an author who may create Deployments and pods but not list pods cannot run one as a
  ``*-router`` ServiceAccount (the router identity that lists pods); one who may list
  pods can.

The chart is rendered by the lab's helm with the test's namespace as the release
namespace; the policies' bindings are limited to that namespace (a namespace selector)
and every cluster-scoped object is deleted afterwards.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from typing import Any, cast

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.lab import Lab
from support.chartkit import CHART, KUBE, lab_helm
from support.labkit import Kube, service_account_kube, wait_for

OPERATOR_SA = "pdscaler-op"
POLICY_FILE = "admission-policy-operator.yaml"


def chart(release: str, namespace: str) -> list[dict[str, Any]]:
    out = lab_helm(
        "template", release, str(CHART), "-n", namespace, "--kube-version", KUBE,
        "--set", f"serviceAccount.name={OPERATOR_SA}", "--set", f"watchNamespaces={{{namespace}}}",
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


@contextlib.contextmanager
def installed(kube: Kube, namespace: str) -> Iterator[str]:
    """The chart's workload ClusterRole bound to the operator's ServiceAccount in
    ``namespace`` and the two policies bound there; yields the ClusterRole's name."""
    release = f"pol{secrets.token_hex(3)}"
    docs = chart(release, namespace)
    role = next(
        d for d in docs
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == f"{release}-pdscaler"
    )  # fmt: skip
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    policies = [d for d in policies if d["metadata"]["name"].endswith(("-writes", "-identity"))]
    assert len(policies) == 4, [d["metadata"]["name"] for d in policies]
    for doc in policies:
        if doc["kind"].endswith("Binding"):
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    admission = client.AdmissionregistrationV1Api(kube.api)
    kube.rbac.create_cluster_role(cast(Any, role))
    try:
        binding = {
            "metadata": {"name": "operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_SA, "namespace": namespace}],
        }  # fmt: skip
        kube.rbac.create_namespaced_role_binding(namespace, cast(Any, binding))
        for doc in sorted(policies, key=lambda d: d["kind"].endswith("Binding")):
            if doc["kind"].endswith("Binding"):
                admission.create_validating_admission_policy_binding(cast(Any, doc))
            else:
                admission.create_validating_admission_policy(cast(Any, doc))
        yield str(role["metadata"]["name"])
    finally:
        for doc in policies:
            with contextlib.suppress(ApiException):
                if doc["kind"].endswith("Binding"):
                    admission.delete_validating_admission_policy_binding(doc["metadata"]["name"])
                else:
                    admission.delete_validating_admission_policy(doc["metadata"]["name"])
        with contextlib.suppress(ApiException):
            kube.rbac.delete_cluster_role(role["metadata"]["name"])


def pod(name: str, labels: dict[str, str], account: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox:1"}]}
    if account is not None:
        spec["serviceAccountName"] = account
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def refused(call: Any) -> str | None:
    """None when ``call()`` is admitted, else the API server's message."""
    try:
        call()
    except ApiException as err:
        return str(err.body)
    return None


def test_the_operators_token_writes_only_what_pdscaler_does(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    kube.core.create_namespaced_pod(namespace, cast(Any, pod("foreign", {"app": "db"})))
    mine = pod("chat-prefill-x", {"pdscaler.io/name": "chat", "pdscaler.io/role": "prefill"})
    kube.core.create_namespaced_pod(namespace, cast(Any, mine))
    kube.core.create_namespaced_service_account(namespace, cast(Any, {"metadata": {"name": "x"}}))
    with installed(kube, namespace) as cluster_role:
        op = service_account_kube(kube, namespace, OPERATOR_SA)

        def patch(name: str, body: dict[str, Any]) -> str | None:
            return refused(lambda: op.core.patch_namespaced_pod(name, namespace, body))

        image = {"spec": {"containers": [{"name": "c", "image": "evil:1"}]}}
        wait_for(lambda: patch("foreign", image) is not None, 30, "the policy enforced")
        why = patch("foreign", image)
        assert why is not None
        assert "may change only the pdscaler.io/role label" in why, why
        assert patch("chat-prefill-x", image) is not None
        assert patch("foreign", {"metadata": {"labels": {"pdscaler.io/role": "decode"}}})
        assert patch("chat-prefill-x", {"metadata": {"labels": {"app": "x"}}}) is not None
        cost = {"controller.kubernetes.io/pod-deletion-cost": "1000000"}
        assert patch("chat-prefill-x", {"metadata": {"annotations": cost}}) is None
        flip = {"metadata": {"labels": {"pdscaler.io/role": "decode"}}}
        assert patch("chat-prefill-x", flip) is None
        got: Any = kube.core.read_namespaced_pod("chat-prefill-x", namespace)
        assert got.metadata.labels["pdscaler.io/role"] == "decode"
        assert got.spec.containers[0].image == "busybox:1"

        def role(name: str, rules: list[dict[str, Any]]) -> str | None:
            body: Any = {"metadata": {"name": name}, "rules": rules}
            return refused(lambda: op.rbac.create_namespaced_role(namespace, body))

        pods_read = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
        assert role("chat-router", pods_read) is None
        more = [*pods_read, {"apiGroups": ["apps"], "resources": ["deployments"],
                             "verbs": ["create", "patch"]}]  # fmt: skip
        why = role("evil-router", more)
        assert why is not None
        assert "may write only Roles named *-router" in why, why

        def bind(name: str, ref: tuple[str, str], subject: str) -> str | None:
            body: Any = {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": ref[0],
                            "name": ref[1]},
                "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": namespace}],
            }  # fmt: skip
            return refused(lambda: op.rbac.create_namespaced_role_binding(namespace, body))

        why = bind("x-router", ("ClusterRole", cluster_role), "x")
        assert why is not None
        assert "may bind only a Role named *-router" in why, why
        assert bind("chat-router", ("Role", "chat-router"), "x") is not None
        assert bind("chat-router", ("Role", "chat-router"), "chat-router") is None


def test_running_as_a_router_identity_needs_the_right_to_list_pods(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    create = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
    ]
    lister = [*create, {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    for name, rules in (("author", create), ("reader", lister)):
        kube.rbac.create_namespaced_role(namespace, cast(Any, {"metadata": {"name": name},
                                                                "rules": rules}))  # fmt: skip
        binding = {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        kube.rbac.create_namespaced_role_binding(namespace, cast(Any, binding))
    account: Any = {"metadata": {"name": "chat-router"}}  # the router identity, as made
    kube.core.create_namespaced_service_account(namespace, account)
    author = service_account_kube(kube, namespace, "author")
    reader = service_account_kube(kube, namespace, "reader")

    def deployment(who: Kube, account: str) -> str | None:
        template = {**pod("p", {}, account), "metadata": {"labels": {"app": "d"}}}
        body: Any = {
            "metadata": {"name": f"d-{secrets.token_hex(3)}"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "d"}},
                "template": template,
            },
        }
        return refused(
            lambda: who.apps.create_namespaced_deployment(namespace, body, dry_run="All")
        )

    with installed(kube, namespace):
        wait_for(lambda: deployment(author, "chat-router") is not None, 30, "policy enforced")
        why = deployment(author, "chat-router")
        assert why is not None
        assert "may not run a pod as the ServiceAccount chat-router" in why, why
        direct: Any = pod("p", {}, "chat-router")
        why = refused(lambda: author.core.create_namespaced_pod(namespace, direct, dry_run="All"))
        assert why is not None
        assert "may not list pods" in why, why
        assert deployment(author, "default") is None
        assert deployment(reader, "chat-router") is None
