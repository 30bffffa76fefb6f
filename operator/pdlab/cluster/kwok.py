"""Fake GPU nodes and kwok's stages: what the nodes and pods of the lab look like.

Owns: rendering `deploy/local/kwok-stages.yaml` with the default start-up delay, building
the Node manifests from `deploy/local/gpu-node.yaml`, kwok's command line, and
registering the nodes. Pure builders (`render_stages`, `gpu_node`) do no I/O beyond
reading the templates. Must not start or stop processes (lab.py does).

Pod life on a fake node: scheduled -> Running, not Ready (at once) -> Ready after the
annotation `pdscaler.io/startup-delay` (a Go duration, e.g. "30s") or the lab default.
Pod IPs come from the loopback range `POD_CIDR` (127.64.0.0/16): a pod 127.64.0.5 with a
container port 8000 is served by whatever binds 127.64.0.5:8000 on the lab host.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster.config import DEFAULT_POD_CIDR, TEMPLATES_DIR, LabConfig, go_duration_ms
from pdlab.cluster.kubeapi import KubeAPI

STARTUP_DELAY_ANNOTATION = "pdscaler.io/startup-delay"
NODE_SELECTOR_LABEL = "pdlab.pdscaler.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
NODE_IP = "127.0.0.1"
GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}


def render_stages(default_delay: str) -> str:
    """The stages file with the default delay filled in: "2s" -> durationMilliseconds: 2000."""
    text = (TEMPLATES_DIR / "kwok-stages.yaml").read_text()
    return text.replace("@DEFAULT_DELAY_MS@", str(go_duration_ms(default_delay)))


def node_name(index: int) -> str:
    """gpu-node-0, gpu-node-1, ..."""
    return f"gpu-node-{index}"


def gpu_node(index: int, gpus: int, product: str) -> dict[str, Any]:
    """One fake GPU node: gpu_node(1, 8, "NVIDIA-H100-80GB-HBM3") has 8 allocatable GPUs."""
    node: dict[str, Any] = copy.deepcopy(
        yaml.safe_load((TEMPLATES_DIR / "gpu-node.yaml").read_text())
    )
    name = node_name(index)
    node["metadata"]["name"] = name
    labels = node["metadata"]["labels"]
    labels["kubernetes.io/hostname"] = name
    labels["nvidia.com/gpu.product"] = product
    labels["nvidia.com/gpu.count"] = str(gpus)
    for key in ("allocatable", "capacity"):
        node["status"][key][GPU_RESOURCE] = str(gpus)
    return node


def kwok_argv(
    binary: Path, kubeconfig: Path, stages: Path, port: int, pod_cidr: str = DEFAULT_POD_CIDR
) -> list[str]:
    """kwok managing only the annotated fake nodes, with node leases (heartbeats).

    Pods get addresses in `pod_cidr` (loopback, 127.64.0.0/16 by default) and nodes the
    address 127.0.0.1: on the lab host every pod IP is a local address the engine
    simulator and the pod runner can bind, so `http://<podIP>:8000` reaches the pod.
    """
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--node-lease-duration-seconds=40",
        f"--server-address=127.0.0.1:{port}",
        f"--cidr={pod_cidr}",
        f"--node-ip={NODE_IP}",
    ]


CPU_NODE = "cpu-node-0"


def cpu_node() -> dict[str, Any]:
    """The lab's one CPU node (no GPU, no taint), where pods that need no GPU run, such
    as the cells' P/D routers: as on a real cluster, they do not land on GPU nodes."""
    node = gpu_node(0, 0, "none")
    node["metadata"]["name"] = CPU_NODE
    labels = node["metadata"]["labels"]
    labels["kubernetes.io/hostname"] = CPU_NODE
    labels[NODE_SELECTOR_LABEL] = "cpu"
    for key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count"):
        labels.pop(key, None)
    node["spec"].pop("taints", None)
    for key in ("allocatable", "capacity"):
        node["status"][key].pop(GPU_RESOURCE, None)
    return node


def register_nodes(api: KubeAPI, cfg: LabConfig) -> list[str]:
    """Create the missing fake nodes (``cfg.nodes`` GPU nodes and one CPU node) and
    delete other lab nodes; the names wanted."""
    wanted = [node_name(i) for i in range(cfg.nodes)]
    status, listing = api.request("GET", f"/api/v1/nodes?labelSelector={NODE_SELECTOR_LABEL}")
    if status != 200:
        raise RuntimeError(f"listing nodes failed: {status} {listing}")
    existing = {n["metadata"]["name"]: n for n in listing["items"]}
    for i, name in enumerate(wanted):
        node = existing.get(name)
        if node is not None:
            labels = node["metadata"].get("labels", {})
            alloc = node.get("status", {}).get("allocatable", {})
            if labels.get("nvidia.com/gpu.product") == cfg.gpu_product and alloc.get(
                GPU_RESOURCE
            ) == str(cfg.gpus_per_node):
                continue
            api.request("DELETE", f"/api/v1/nodes/{name}")
        body = gpu_node(i, cfg.gpus_per_node, cfg.gpu_product)
        status, resp = api.request("POST", "/api/v1/nodes", body)
        if status not in (200, 201):
            raise RuntimeError(f"creating node {name} failed: {status} {resp}")
    if CPU_NODE not in existing:
        status, resp = api.request("POST", "/api/v1/nodes", cpu_node())
        if status not in (200, 201):
            raise RuntimeError(f"creating node {CPU_NODE} failed: {status} {resp}")
    wanted.append(CPU_NODE)
    for name in existing:
        if name not in wanted:
            api.request("DELETE", f"/api/v1/nodes/{name}")
    return wanted


WARMUP_POD = "pdlab-ip-warmup"


def warm_ip_pool(api: KubeAPI, timeout: float = 120.0) -> None:
    """Give one pod an address and delete it, before any test's pods exist.

    kwok 0.8.0 creates its pod IP pool lazily, and two pods placed at the same moment on
    a fresh kwok can each create one: both get the range's first address (seen: a
    prefill and a decode pod both at 127.70.0.1, and the router refusing the second).
    One pod alone creates the pool; every later pod draws from it. (A fresh kwok may take
    ~30 s to start placing pods.)"""
    path = "/api/v1/namespaces/default/pods"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": WARMUP_POD, "annotations": {STARTUP_DELAY_ANNOTATION: "0s"}},
        "spec": {
            "nodeSelector": {NODE_SELECTOR_LABEL: "cpu"},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "warmup", "image": "pdlab.invalid/none"}],
        },
    }
    status, _ = api.request("POST", path, body)
    if status not in (200, 201, 409):
        raise RuntimeError(f"creating the IP warm-up pod failed: {status}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, pod = api.request("GET", f"{path}/{WARMUP_POD}")
        if status == 200 and (pod.get("status") or {}).get("podIP"):
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"kwok gave the warm-up pod no IP within {timeout:.0f}s")
    api.request("DELETE", f"{path}/{WARMUP_POD}?gracePeriodSeconds=0")
