"""Owner references are garbage-collected by the lab's controller-manager: deleting an
owner deletes the Deployment it owns, and through its ReplicaSet, the pods."""

from __future__ import annotations

from typing import Any

from support.labkit import Kube, gpu_deployment, list_pods, not_found, ready_pods, wait_for


def test_deleting_the_owner_deletes_owned_deployment_and_pods(kube: Kube, namespace: str) -> None:
    owner_body: Any = {
        "metadata": {"name": "owner"},
        "data": {"role": "stands in for a PDDeployment"},
    }
    owner = kube.core.create_namespaced_config_map(namespace, owner_body)
    assert owner.metadata is not None
    body = gpu_deployment("owned", replicas=2)
    body["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "owner",
            "uid": owner.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    kube.apps.create_namespaced_deployment(namespace, body)  # type: ignore[arg-type]
    wait_for(lambda: ready_pods(kube, namespace, "app=owned", 2), 30, "2 Ready owned pods")

    kube.core.delete_namespaced_config_map("owner", namespace, propagation_policy="Foreground")
    wait_for(
        lambda: not_found(lambda: kube.apps.read_namespaced_deployment("owned", namespace)),
        60,
        "the owned Deployment to be garbage-collected",
    )
    wait_for(
        lambda: not kube.core.list_namespaced_pod(namespace, label_selector="app=owned").items,
        60,
        "the owned pods to be deleted",
    )
    assert not kube.apps.list_namespaced_replica_set(namespace, label_selector="app=owned").items
    assert list_pods(kube, namespace, "app=owned") == []
