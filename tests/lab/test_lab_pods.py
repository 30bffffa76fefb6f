"""GPU pods on the fake nodes: scheduled, Running at once, Ready after the start-up delay;
over-asking leaves pods Pending with the scheduler's reason until GPUs are freed.

Timing is read from the API server's own timestamps (one-second resolution), so the
checks hold however slowly the test process polls: with a delay D, Ready's
lastTransitionTime minus the pod's startTime (both written by kwok) is at least D-1 (the
delay is honoured) and, for the annotated 6 s, under 2D (kwok, late on a loaded machine,
adds its lag to D: the bound leaves it 6 s where D+2 left 2, and a delay applied twice,
12 s, still fails it); the lab default's 2 s keeps [D-1, D+2] (2D would be the same).
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from pdlab.cluster.kubeclient import pod_condition, pod_ready
from pdlab.cluster.kwok import GPU_RESOURCE
from pdlab.cluster.lab import Lab
from support.labkit import (
    Kube,
    gpu_deployment,
    list_pods,
    private_gpu_nodes,
    ready_pods,
    seconds_between,
    wait_for,
)


def _create(kube: Kube, namespace: str, body: dict[str, Any]) -> None:
    kube.apps.create_namespaced_deployment(namespace, body)  # type: ignore[arg-type]


def _startup_seconds(pod: client.V1Pod) -> float:
    """Ready.lastTransitionTime - status.startTime for a Ready pod."""
    ready = pod_condition(pod, "Ready")
    assert ready is not None
    assert ready.last_transition_time is not None
    assert pod.status is not None
    assert pod.status.start_time is not None
    return seconds_between(pod.status.start_time, ready.last_transition_time)


def test_gpu_pods_land_on_fake_nodes_running_then_ready_after_annotated_delay(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    delay_s = 6
    _create(kube, namespace, gpu_deployment("slow", replicas=2, startup_delay=f"{delay_s}s"))
    # Running but not yet Ready: observed while the delay runs.
    running = wait_for(
        lambda: [
            p
            for p in list_pods(kube, namespace, "app=slow")
            if p.status is not None and p.status.phase == "Running"
        ],
        30,
        "a Running pod of slow",
    )
    assert not pod_ready(running[0]), "Ready before the start-up delay elapsed"

    pods = wait_for(lambda: ready_pods(kube, namespace, "app=slow", 2), 30, "2 Ready pods of slow")
    lab_nodes = {f"gpu-node-{i}" for i in range(lab.config.nodes)}
    for pod in pods:
        assert pod.spec is not None
        assert pod.spec.node_name in lab_nodes
        took = _startup_seconds(pod)
        assert delay_s - 1 <= took < 2 * delay_s, f"{pod.spec.node_name}: Ready after {took}s"


def test_pods_without_annotation_use_the_lab_default_delay(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    _create(kube, namespace, gpu_deployment("quick", replicas=1))
    pods = wait_for(lambda: ready_pods(kube, namespace, "app=quick", 1), 30, "quick Ready")
    default_s = lab.config.startup_delay_seconds
    took = _startup_seconds(pods[0])
    assert default_s - 1 <= took <= default_s + 2, f"Ready after {took}s, default {default_s}s"


def _pending_reasons(kube: Kube, namespace: str, selector: str) -> list[str]:
    """Messages of PodScheduled=False conditions of the matching pods."""
    out = []
    for pod in list_pods(kube, namespace, selector):
        cond = pod_condition(pod, "PodScheduled")
        if cond is not None and cond.status == "False":
            out.append(cond.message or "")
    return out


def test_over_asking_gpus_leaves_pods_pending_until_gpus_are_freed(
    kube: Kube, namespace: str
) -> None:
    # Two private nodes of 2 GPUs: 4 GPUs in all, used by this test only.
    with private_gpu_nodes(kube, namespace, count=2, gpus=2) as placement:
        _create(kube, namespace, gpu_deployment("hog", replicas=2, **placement))
        wait_for(lambda: ready_pods(kube, namespace, "app=hog", 2), 30, "2 Ready pods of hog")
        _create(kube, namespace, gpu_deployment("big", replicas=4, **placement))
        reasons = wait_for(
            lambda: _pending_reasons(kube, namespace, "app=big"), 30, "unschedulable big pods"
        )
        wait_for(lambda: ready_pods(kube, namespace, "app=big", 2), 30, "2 Ready pods of big")
        reasons = _pending_reasons(kube, namespace, "app=big")
        assert len(reasons) == 2, reasons
        assert all(f"Insufficient {GPU_RESOURCE}" in r for r in reasons), reasons

        # Freeing the hog's 2 GPUs lets the 2 pending pods schedule and become Ready.
        kube.apps.delete_namespaced_deployment("hog", namespace)
        wait_for(lambda: ready_pods(kube, namespace, "app=big", 4), 60, "4 Ready pods of big")
        assert _pending_reasons(kube, namespace, "app=big") == []
