"""RBAC is enforced: a ServiceAccount (token from a TokenRequest) without rights gets 403
on Deployments; bound to a Role that allows them, the same calls succeed."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from support.labkit import Kube, gpu_deployment, service_account_kube, wait_for


def _role_for_deployments(namespace: str) -> tuple[Any, Any]:
    role = {
        "metadata": {"name": "deployments-editor", "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "verbs": ["get", "list", "watch", "create", "delete"],
            }
        ],
    }
    binding = {
        "metadata": {"name": "deployments-editor", "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "deployments-editor",
        },
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": namespace}],
    }
    return role, binding


def _can_list(robot: Kube, namespace: str) -> bool:
    try:
        robot.apps.list_namespaced_deployment(namespace)
    except ApiException as err:
        if err.status == 403:
            return False
        raise
    return True


def test_service_account_gets_403_without_rights_and_succeeds_with_a_role(
    kube: Kube, namespace: str
) -> None:
    robot = service_account_kube(kube, namespace, "robot")
    with pytest.raises(ApiException) as denied:
        robot.apps.list_namespaced_deployment(namespace)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{namespace}:robot" in str(denied.value.body)
    body: Any = gpu_deployment("by-robot", replicas=0)
    with pytest.raises(ApiException) as denied_create:
        robot.apps.create_namespaced_deployment(namespace, body)
    assert denied_create.value.status == 403

    role, binding = _role_for_deployments(namespace)
    kube.rbac.create_namespaced_role(namespace, role)
    kube.rbac.create_namespaced_role_binding(namespace, binding)
    wait_for(lambda: _can_list(robot, namespace), 15, "RBAC to allow listing deployments")
    robot.apps.create_namespaced_deployment(namespace, body)
    names = [
        d.metadata.name
        for d in robot.apps.list_namespaced_deployment(namespace).items
        if d.metadata
    ]
    assert names == ["by-robot"]
    # The Role grants nothing outside its namespace.
    with pytest.raises(ApiException) as elsewhere:
        robot.apps.list_namespaced_deployment("default")
    assert elsewhere.value.status == 403
