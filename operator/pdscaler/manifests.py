"""Pure builders of the Kubernetes objects a PDDeployment owns (docs/design.md §4).

Owns: the desired manifests of one *cell* (``<name>-<rev>-prefill`` and
``<name>-<rev>-decode`` Deployments, plus the cell's router from ``router``) and the
front Service ``<name>`` that selects the Ready routers of every serving cell. Every
object carries the ``pdscaler.io/*`` labels, the controller owner reference and the
spec-hash stamp (``objects``).

Rules the builders enforce, whatever the user's template says:

* the engine image is ``spec.engine.image:spec.engine.version`` on the engine
  container (the one named ``engine``, else the first); a template's image is ignored;
* every pod asks for ``gpusPerReplica`` ``nvidia.com/gpu`` (limits = requests) and
  tolerates the usual ``nvidia.com/gpu`` node taint;
* template labels/annotations pass through (``pdscaler.io/startup-delay`` for the lab).

Purely computational: no Kubernetes client, no clock, no I/O.

>>> m = Meta(name="chat", namespace="serving", uid="u-1")
>>> front_service(m, 8000)["spec"]["selector"]
{'pdscaler.io/name': 'chat', 'pdscaler.io/role': 'router'}
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from pdscaler import naming, router
from pdscaler.objects import SPEC_HASH_ANNOTATION as SPEC_HASH_ANNOTATION
from pdscaler.objects import Manifest as Manifest
from pdscaler.objects import Meta as Meta
from pdscaler.objects import owner_reference, stamp
from pdscaler.objects import spec_hash as spec_hash
from pdscaler.spec import PDDeploymentSpec, PoolSpec
from pdscaler.types import Role

GPU_RESOURCE = "nvidia.com/gpu"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
ENGINE_CONTAINER = "engine"
DEFAULT_PORT = 8000
PORT_NAME = "http"


@dataclass(frozen=True)
class CellTarget:
    """One cell the operator wants to exist: its engine version and pool sizes.

    ``rev`` is ``naming.revision(image, version)``; ``prefill``/``decode`` are the
    Deployments' desired replicas (0 keeps the Deployment but runs no pods).
    """

    image: str
    version: str
    prefill: int
    decode: int
    router: int = 0

    @property
    def rev(self) -> str:
        return naming.revision(self.image, self.version)


def pool_labels(name: str, role: Role, rev: str, version: str) -> dict[str, str]:
    """Labels of a pool's Deployment and pods; the selector is name+role+revision."""
    return {
        naming.LABEL_NAME: name,
        naming.LABEL_ROLE: role.value,
        naming.LABEL_VERSION: naming.version_label(version),
        naming.LABEL_REVISION: rev,
    }


def engine_port(pool: PoolSpec) -> int:
    """The engine container's first containerPort, else 8000."""
    containers = pool.template.get("spec", {}).get("containers") or []
    engine = _engine_index(containers)
    if engine is not None:
        ports = containers[engine].get("ports") or []
        if ports and isinstance(ports[0].get("containerPort"), int):
            return int(ports[0]["containerPort"])
    return DEFAULT_PORT


def _engine_index(containers: list[dict[str, Any]]) -> int | None:
    for i, c in enumerate(containers):
        if c.get("name") == ENGINE_CONTAINER:
            return i
    return 0 if containers else None


def _pod_template(
    meta: Meta, spec: PDDeploymentSpec, cell: CellTarget, role: Role
) -> dict[str, Any]:
    pool = spec.prefill if role is Role.PREFILL else spec.decode
    tpl = copy.deepcopy(pool.template)
    tpl_meta = tpl.setdefault("metadata", {})
    labels = dict(tpl_meta.get("labels") or {})
    labels.update(pool_labels(meta.name, role, cell.rev, cell.version))
    tpl_meta["labels"] = labels
    annotations = dict(tpl_meta.get("annotations") or {})
    annotations[naming.ANNOTATION_VERSION] = cell.version
    tpl_meta["annotations"] = annotations
    pod = tpl.setdefault("spec", {})
    containers: list[dict[str, Any]] = pod.setdefault("containers", [])
    idx = _engine_index(containers)
    if idx is None:
        containers.append({"name": ENGINE_CONTAINER})
        idx = 0
    engine = containers[idx]
    engine["image"] = f"{cell.image}:{cell.version}"
    if not engine.get("ports"):
        engine["ports"] = [{"name": PORT_NAME, "containerPort": DEFAULT_PORT}]
    resources = engine.setdefault("resources", {})
    gpus = str(pool.gpus_per_replica)
    resources.setdefault("limits", {})[GPU_RESOURCE] = gpus
    resources.setdefault("requests", {})[GPU_RESOURCE] = gpus
    tolerations = pod.setdefault("tolerations", [])
    if not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tpl


def pool_deployment(meta: Meta, spec: PDDeploymentSpec, cell: CellTarget, role: Role) -> Manifest:
    """The Deployment of one pool of one cell, e.g. ``chat-v1-abcde-prefill``.

    Strategy maxSurge=0/maxUnavailable=1: a same-version template change never asks
    the cluster for GPUs beyond the pool's size (the budget is the hard limit).
    """
    replicas = cell.prefill if role is Role.PREFILL else cell.decode
    labels = pool_labels(meta.name, role, cell.rev, cell.version)
    obj: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": naming.pool_name(meta.name, cell.rev, role),
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": {naming.ANNOTATION_VERSION: cell.version},
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": naming.pool_selector(meta.name, role, cell.rev)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "revisionHistoryLimit": 2,
            "template": _pod_template(meta, spec, cell, role),
        },
    }
    return stamp(obj)


def _service(
    meta: Meta, name: str, labels: dict[str, str], selector: dict[str, str], port: int
) -> Manifest:
    obj: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return stamp(obj)


def front_service(meta: Meta, port: int) -> Manifest:
    """``<name>``: the entry point, selecting the routers of every cell. A Service
    routes only to Ready pods, and a cell runs routers in proportion to its Ready
    prefill (``router.replicas``), so traffic follows the cells' ready capacity."""
    selector = {naming.LABEL_NAME: meta.name, naming.LABEL_ROLE: naming.ROLE_ROUTER}
    return _service(meta, meta.name, {naming.LABEL_NAME: meta.name}, selector, port)


def desired_objects(meta: Meta, spec: PDDeploymentSpec, cells: list[CellTarget]) -> list[Manifest]:
    """Everything that should exist: per cell the decode, prefill and router Deployments
    (in that order), then the routers' identity and the front Service. With
    ``router.type: external`` the stack brings its own request path: pools only."""
    out: list[Manifest] = []
    routed = router.enabled(spec)
    for cell in cells:
        out.append(pool_deployment(meta, spec, cell, Role.DECODE))
        out.append(pool_deployment(meta, spec, cell, Role.PREFILL))
        if routed:
            port = engine_port(spec.decode)
            out.append(
                router.router_deployment(meta, spec, cell.rev, cell.version, cell.router, port)
            )
    if routed:
        out.extend(router.router_identity(meta))
        out.append(front_service(meta, spec.router.port))
    return out


_KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences")


def frozen_pool(observed: Manifest, replicas: int) -> Manifest:
    """A pool Deployment of a cell that is not the spec's version, kept as it was
    rendered (its template, image and spec-hash) with only ``replicas`` changed.

    During a rollout (and after a rollback) the spec's template belongs to the spec's
    version: re-rendering an old cell from it would restart that cell's pods with the
    new template (a new start-up delay, new flags) while it is the one still serving.
    Server-set fields (uid, resourceVersion, status, managedFields, ...) are dropped.
    """
    meta = observed.get("metadata") or {}
    body: Manifest = {
        "apiVersion": observed.get("apiVersion", "apps/v1"),
        "kind": observed.get("kind", "Deployment"),
        "metadata": {k: copy.deepcopy(meta[k]) for k in _KEPT_METADATA if k in meta},
        "spec": copy.deepcopy(observed.get("spec") or {}),
    }
    annotations = body["metadata"].get("annotations") or {}
    body["metadata"]["annotations"] = {
        k: v for k, v in annotations.items() if not k.startswith("deployment.kubernetes.io/")
    }
    body["spec"]["replicas"] = replicas
    return body
