"""The lab runs the real LeaderWorkerSet controller (sigs.k8s.io/lws, built from source by
operator/pdlab/cluster/build-lws.sh; pdlab.cluster.lws runs it with its webhooks served
over the lab's PKI).

A LeaderWorkerSet of size 2 (a leader and a worker, 2 GPUs each) on the fake GPU nodes
comes up as one group, both pods Ready (kwok's Ready timer: engine pods have no process
on the lab host), and scales 1 -> 3 groups through its /scale subresource, as any
scale-subresource client (pdscaler, an HPA) would size it.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from pdlab.cluster.kubeclient import Kube
from pdlab.cluster.kwok import (
    GPU_RESOURCE,
    GPU_TAINT,
    NODE_SELECTOR_LABEL,
    STARTUP_DELAY_ANNOTATION,
)
from pdlab.cluster.lab import Lab
from pdlab.cluster.lws import (
    GROUP_INDEX_LABEL,
    RACK_LABEL,
    SET_NAME_LABEL,
    WORKER_INDEX_LABEL,
    ensure_lws,
)
from pdscaler import groups
from support.labkit import list_pods, wait_for

GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
SHAPE = groups.GroupShape(pods=2, gpus=4)


def lws_body(name: str, size: int, gpus: int, replicas: int) -> dict[str, Any]:
    """A LeaderWorkerSet whose every pod asks for ``gpus`` GPUs on the fake GPU nodes."""
    template = {
        "metadata": {"annotations": {STARTUP_DELAY_ANNOTATION: "1s"}},
        "spec": {
            "nodeSelector": {NODE_SELECTOR_LABEL: "gpu"},
            "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists"}],
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "engine",
                    "image": "pdlab.invalid/engine:v1",
                    "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": template},
        },
    }


def pod_dicts(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The set's pods as the API returns them (dicts)."""
    pods = list_pods(kube, namespace, f"{SET_NAME_LABEL}={name}")
    out: list[dict[str, Any]] = kube.api.sanitize_for_serialization(pods)  # type: ignore[no-untyped-call]
    return out


def ready_groups(kube: Kube, namespace: str, name: str, want: int) -> list[dict[str, Any]]:
    """The pods if exactly ``want`` groups of 2 are Ready and none is forming, else []."""
    pods = pod_dicts(kube, namespace, name)
    count = groups.count_groups(pods, SHAPE)
    return pods if (count.ready, count.forming) == (want, 0) else []


def labels(pod: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = pod["metadata"]["labels"]
    return out


def test_lws_group_of_two_comes_up_and_scales_one_to_three(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    t0 = time.monotonic()
    info = ensure_lws(lab)
    started = time.monotonic() - t0
    node: Any = kube.core.read_node("gpu-node-3")
    assert node.metadata.labels[RACK_LABEL] == "rack-1"

    kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, lws_body("moe", size=2, gpus=2, replicas=1)
    )
    pods = wait_for(lambda: ready_groups(kube, namespace, "moe", 1), 60, "one Ready group of 2")
    assert sorted(labels(p)[WORKER_INDEX_LABEL] for p in pods) == ["0", "1"]
    leader = next(p for p in pods if labels(p)[WORKER_INDEX_LABEL] == "0")
    worker = next(p for p in pods if labels(p)[WORKER_INDEX_LABEL] == "1")
    # the pod webhook ran (served by the manager over the lab's PKI): the worker knows
    # its leader's address and the group's size
    env = {e["name"]: e.get("value") for e in worker["spec"]["containers"][0].get("env", [])}
    assert env["LWS_LEADER_ADDRESS"].startswith(f"{leader['metadata']['name']}.moe.{namespace}")
    assert env["LWS_GROUP_SIZE"] == "2"

    t1 = time.monotonic()
    kube.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, "moe", {"spec": {"replicas": 3}}
    )
    pods = wait_for(lambda: ready_groups(kube, namespace, "moe", 3), 90, "3 Ready groups of 2")
    scaled = time.monotonic() - t1
    assert sorted({labels(p)[GROUP_INDEX_LABEL] for p in pods}) == ["0", "1", "2"]
    assert sum(labels(p)[WORKER_INDEX_LABEL] == "0" for p in pods) == 3  # one leader each
    gpus = Counter(p["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] for p in pods)
    assert gpus == Counter({"2": 6})  # 3 groups x 2 pods x 2 GPUs
    for pod in pods:
        node = kube.core.read_node(pod["spec"]["nodeName"])
        assert node.metadata.labels[RACK_LABEL].startswith("rack-")

    def status() -> dict[str, Any]:
        obj: Any = kube.custom.get_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, "moe"
        )
        return obj if groups.lws_ready_groups(obj) == 3 else {}

    assert wait_for(status, 30, "status.readyReplicas 3")["status"]["replicas"] == 3
    scale: Any = kube.custom.get_namespaced_custom_object_scale(
        GROUP, VERSION, namespace, PLURAL, "moe"
    )
    assert scale["status"]["replicas"] == 3
    assert f"{SET_NAME_LABEL}=moe" in scale["status"]["selector"]
    print(
        f"lws manager pid {info.pid} ready in {started:.1f}s; 1 -> 3 groups Ready in {scaled:.1f}s"
    )
