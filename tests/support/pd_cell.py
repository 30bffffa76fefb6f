"""A revision cell made by hand in the lab, labelled as the operator renders one
(``<name>-<rev>-prefill|decode|router``; labels pdscaler.io/name, role, revision,
version), for the request-path tests (tests/lab/test_request_path.py with vllm-router,
tests/lab/test_sglang_router_path.py with sglang-router).

Owns: the pool and router Deployment manifests of a cell, the front Service, the
routers' identity created from ``pdscaler.router.router_identity``, a Ready pod of a
pool, and small JSON HTTP helpers. Must not start anything (``labkit.request_path``
runs the simulator, the pod runner and the front proxy) or assert.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any, cast

from pdscaler import router
from pdscaler.objects import Meta
from support.labkit import Kube, gpu_deployment

NAME = "chat"
ROUTER_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def cell_labels(rev: str, role: str, name: str = NAME) -> dict[str, str]:
    return {
        "pdscaler.io/name": name,
        "pdscaler.io/role": role,
        "pdscaler.io/revision": rev,
        "pdscaler.io/version": f"v-{rev}",
    }


def labelled(dep: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """``dep`` with ``labels`` on itself, its selector and its pods."""
    dep["metadata"]["labels"] = dict(labels)
    dep["spec"]["selector"] = {"matchLabels": dict(labels)}
    dep["spec"]["template"]["metadata"]["labels"] = dict(labels)
    return dep


def engine_deployment(
    rev: str, role: str, port: int = 8000, engine: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``chat-<rev>-<role>``: one GPU pod whose engine container serves ``port``
    (named ``http``); ``engine`` adds fields to the engine container (an SGLang
    ``command``/``args``)."""
    dep = gpu_deployment(f"{NAME}-{rev}-{role}", 1, startup_delay="1s")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "http", "containerPort": port}]
    container.update(engine or {})
    return labelled(dep, cell_labels(rev, role))


def router_pod_deployment(rev: str, container: dict[str, Any]) -> dict[str, Any]:
    """``chat-<rev>-router``: one router pod running ``container`` (the pod runner runs
    its command) as the routers' ServiceAccount, tolerating the fake GPU nodes."""
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{NAME}-{rev}-router"},
        "spec": {
            "replicas": 1,
            "template": {
                "metadata": {"annotations": {"pdscaler.io/startup-delay": "1s"}},
                "spec": {
                    "serviceAccountName": router.account_name(NAME),
                    "containers": [container],
                    "tolerations": [ROUTER_TOLERATION],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }
    return labelled(dep, cell_labels(rev, "router"))


def front_service() -> dict[str, Any]:
    """``chat``: the routers of every serving cell."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME},
        "spec": {
            "selector": {"pdscaler.io/name": NAME, "pdscaler.io/role": "router"},
            "ports": [{"name": "http", "port": 8000, "targetPort": "http"}],
        },
    }


def create_router_identity(kube: Kube, namespace: str) -> None:
    """The routers' ServiceAccount, Role and RoleBinding, as the operator renders them
    (no PDDeployment here: nothing owns them)."""
    for obj in router.router_identity(Meta(NAME, namespace, "no-owner")):
        obj["metadata"].pop("ownerReferences")
        if obj["kind"] == "ServiceAccount":
            kube.core.create_namespaced_service_account(namespace, cast(Any, obj))
        elif obj["kind"] == "Role":
            kube.rbac.create_namespaced_role(namespace, cast(Any, obj))
        else:
            kube.rbac.create_namespaced_role_binding(namespace, cast(Any, obj))


def post(url: str, body: dict[str, Any], timeout: float = 20.0) -> tuple[int, str]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def pod_of(kube: Kube, namespace: str, rev: str, role: str) -> Any:
    """A Ready pod of the cell's pool with an IP, else None."""
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector=f"pdscaler.io/revision={rev},pdscaler.io/role={role}"
    ).items
    ready = [
        p
        for p in pods
        if p.status is not None
        and p.status.pod_ip
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    return ready[0] if ready else None


def sse_chunks(text: str) -> list[dict[str, Any]]:
    """The JSON chunks of a server-sent-events answer (``[DONE]`` left out)."""
    return [
        json.loads(line[6:])
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
