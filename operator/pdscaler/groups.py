"""Replicas bigger than one node: a pool replica as a group of pods (a LeaderWorkerSet).

Owns the pure parts of ``spec.<pool>.podsPerReplica`` > 1 (docs/design.md §4.4, "group
replicas"): the shape of a group (``GroupShape``: pods, GPUs of the whole group, the GPU
resource name), the GPUs each pod asks for, rendering a cell's pool as a
``leaderworkerset.x-k8s.io/v1`` LeaderWorkerSet from the pool Deployment
``manifests.pool_deployment`` renders (``leader_worker_set``), group accounting from pods
(``count_groups``: a group is Ready only when all its pods are), what the GPU budget
allows in groups (``groups_within``), the router's leader-only selector
(``leader_selector``) and whether two pools may trade replicas in a role flip
(``same_shape``). No Kubernetes client, no clock, no I/O.

Worked numbers: a DeepSeek-V3 decode group of 2 nodes x 8 H100 is
``GroupShape(pods=2, gpus=16)``: each pod asks for 8 ``nvidia.com/gpu``; a GPU budget of
64 allows ``groups_within(64, shape) == 4`` groups; 3 groups are 6 pods and 48 GPUs.

>>> shape = GroupShape(pods=2, gpus=16)
>>> shape.gpus_per_pod, groups_within(64, shape), shape.gpus_for(3)
(8, 4, 48)
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pdscaler.objects import SPEC_HASH_ANNOTATION, Manifest, stamp
from pdscaler.spec import DEFAULT_GPU_RESOURCE as DEFAULT_GPU_RESOURCE
from pdscaler.spec import GPU_RESOURCE_PATTERN as GPU_RESOURCE_PATTERN
from pdscaler.spec import MAX_PODS_PER_REPLICA as MAX_PODS_PER_REPLICA
from pdscaler.spec import MSG_FLIP_SHAPE as MSG_FLIP_SHAPE
from pdscaler.spec import MSG_GPU_RESOURCE as MSG_GPU_RESOURCE
from pdscaler.spec import MSG_GROUP_GPUS as MSG_GROUP_GPUS
from pdscaler.spec import PDDeploymentSpec, valid_gpu_resource

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
LWS_PLURAL = "leaderworkersets"
#: Labels LWS puts on a group's pods (sigs.k8s.io/lws api/leaderworkerset/v1).
LWS_SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: pdscaler's own label on a group's pods: ``leader`` (the pod that serves the engine's
#: HTTP API, the one a router pairs) or ``worker``; set in the LWS's templates, so it is
#: on a pod from its creation (LWS's own worker-index comes from its pod webhook).
LABEL_GROUP_ROLE = "pdscaler.io/group-role"
LEADER, WORKER = "leader", "worker"
_RESOURCE_CEL = f"matches('{GPU_RESOURCE_PATTERN}')"


def _effective(pool: str) -> str:
    """CEL: a pool's GPU resource, its own, else the spec's, else nvidia.com/gpu."""
    return (
        f"(has(self.{pool}.gpuResource) ? self.{pool}.gpuResource :"
        f" (has(self.gpuResource) ? self.gpuResource : '{DEFAULT_GPU_RESOURCE}'))"
    )


#: The CRD's additions for group replicas, as data: the pool's properties and rules
#: (``spec.prefill``/``spec.decode``), the spec's. Each rule has its twin here
#: (``GroupShape``, ``flip_problem``) raising the same message; tests/lab/test_lab_lws.py
#: has a real API server apply them (a throwaway CRD) and refuse what the twins refuse.
POOL_PROPERTIES: dict[str, Any] = {
    "podsPerReplica": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_PODS_PER_REPLICA,
        "default": 1,
        "description": (
            "Pods of one replica (a leader and podsPerReplica-1 workers). Above 1 the"
            " cell's pool is a LeaderWorkerSet: one replica is one group, Ready when all"
            " its pods are; gpusPerReplica counts the whole group."
        ),
    },
    "gpuResource": {
        "type": "string",
        "maxLength": 253,
        "description": "The GPU resource this pool's pods ask for (default spec.gpuResource).",
    },
}
POOL_RULES: list[dict[str, str]] = [
    {
        "rule": "self.gpusPerReplica % self.podsPerReplica == 0",
        "message": MSG_GROUP_GPUS,
        "fieldPath": ".gpusPerReplica",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"!has(self.gpuResource) || self.gpuResource.{_RESOURCE_CEL}",
        "message": MSG_GPU_RESOURCE,
        "fieldPath": ".gpuResource",
        "reason": "FieldValueInvalid",
    },
]
SPEC_PROPERTIES: dict[str, Any] = {
    "gpuResource": {
        "type": "string",
        "maxLength": 253,
        "description": (
            "The GPU resource pods ask for and the budget counts: nvidia.com/gpu when"
            " unset; amd.com/gpu and others. A pool's gpuResource overrides it."
        ),
    },
}
SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": f"!has(self.gpuResource) || self.gpuResource.{_RESOURCE_CEL}",
        "message": MSG_GPU_RESOURCE,
        "fieldPath": ".gpuResource",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": (
            "!self.scaling.roleFlips.enabled ||"
            " (self.prefill.podsPerReplica == self.decode.podsPerReplica &&"
            f" {_effective('prefill')} == {_effective('decode')})"
        ),
        "message": MSG_FLIP_SHAPE,
        "fieldPath": ".scaling.roleFlips.enabled",
        "reason": "FieldValueInvalid",
    },
]


@dataclass(frozen=True)
class GroupShape:
    """One replica: ``pods`` pods (a leader and ``pods - 1`` workers) holding ``gpus``
    GPUs of ``resource`` in all. ``pods == 1`` is a plain one-pod replica."""

    pods: int = 1
    gpus: int = 1
    resource: str = DEFAULT_GPU_RESOURCE

    def __post_init__(self) -> None:
        if self.pods < 1 or self.gpus < 1:
            raise ValueError(f"a group has at least 1 pod and 1 GPU: {self}")
        if self.gpus % self.pods:
            raise ValueError(MSG_GROUP_GPUS)
        if not valid_gpu_resource(self.resource):
            raise ValueError(MSG_GPU_RESOURCE)

    @property
    def grouped(self) -> bool:
        """True when a replica is more than one pod (rendered as a LeaderWorkerSet)."""
        return self.pods > 1

    @property
    def gpus_per_pod(self) -> int:
        """What each pod asks for: GroupShape(2, 16).gpus_per_pod == 8."""
        return self.gpus // self.pods

    def gpus_for(self, groups: int) -> int:
        """GPUs ``groups`` groups hold: GroupShape(2, 16).gpus_for(3) == 48."""
        return groups * self.gpus

    def pods_for(self, groups: int) -> int:
        """Pods ``groups`` groups run: GroupShape(2, 16).pods_for(3) == 6."""
        return groups * self.pods


def shape_of(spec: PDDeploymentSpec, role: str) -> GroupShape:
    """A pool's replica shape from its spec: decode ``podsPerReplica: 2``,
    ``gpusPerReplica: 16`` is GroupShape(2, 16, "nvidia.com/gpu")."""
    pool = spec.prefill if role == "prefill" else spec.decode
    resource = pool.gpu_resource or spec.gpu_resource or DEFAULT_GPU_RESOURCE
    return GroupShape(pool.pods_per_replica, pool.gpus_per_replica, resource)


def groups_within(budget_gpus: int, shape: GroupShape) -> int:
    """Whole groups a GPU budget holds (a part of a group is no replica):
    groups_within(60, GroupShape(2, 16)) == 3."""
    return max(0, budget_gpus) // shape.gpus


def gpu_resource(spec_value: str | None, pool_value: str | None) -> str:
    """A pool's GPU resource: its own, else the spec's, else nvidia.com/gpu:
    gpu_resource("amd.com/gpu", None) == "amd.com/gpu"."""
    return pool_value or spec_value or DEFAULT_GPU_RESOURCE


def flip_problem(prefill: GroupShape, decode: GroupShape) -> str | None:
    """The twin of the CRD's rule on role flips: None when a replica can change pool as
    it is (the same pods and GPU resource; equal gpusPerReplica is the CRD's older rule),
    else the rule's message."""
    same = (prefill.pods, prefill.resource) == (decode.pods, decode.resource)
    return None if same else MSG_FLIP_SHAPE


def same_shape(a: GroupShape, b: GroupShape) -> bool:
    """Whether a replica of one pool can become a replica of the other (a role flip):
    the same pods, GPUs and resource. One-pod pools of equal GPUs always can."""
    return a == b


@dataclass(frozen=True)
class GroupCount:
    """Groups of one pool as its pods show them.

    ``ready``: groups with all ``shape.pods`` pods Ready; ``forming``: groups with some
    pod missing or not Ready (starting, or broken: LWS recreates a group whose pod
    failed); ``pods_ready``: Ready pods in all. GPUs are counted by group: a forming
    group holds its GPUs but serves nothing."""

    ready: int
    forming: int
    pods_ready: int

    @property
    def groups(self) -> int:
        return self.ready + self.forming


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (pod.get("metadata") or {}).get("labels") or {}
    return labels


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """Ready=True and not being deleted."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def count_groups(pods: Iterable[Mapping[str, Any]], shape: GroupShape) -> GroupCount:
    """Group accounting from a pool's pods (dicts as the API returns them). Pods are
    grouped by LWS's group-index label; with ``shape.pods == 1`` every pod is a group.

    3 groups of 2 where one worker is not Ready yet: GroupCount(ready=2, forming=1,
    pods_ready=5)."""
    members: dict[str, list[bool]] = {}
    for i, pod in enumerate(pods):
        key = _labels(pod).get(LWS_GROUP_INDEX_LABEL) if shape.grouped else None
        members.setdefault(key if key is not None else f"pod-{i}", []).append(pod_ready(pod))
    ready = sum(1 for flags in members.values() if len(flags) >= shape.pods and all(flags))
    pods_ready = sum(sum(flags) for flags in members.values())
    return GroupCount(ready=ready, forming=len(members) - ready, pods_ready=pods_ready)


def ready_leaders(pods: Iterable[Mapping[str, Any]], shape: GroupShape) -> list[str]:
    """Names of the leaders of Ready groups: the pods a router may pair (sorted)."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        group = _labels(pod).get(LWS_GROUP_INDEX_LABEL)
        if group is not None:
            by_group.setdefault(group, []).append(pod)
    out = []
    for members in by_group.values():
        if len(members) >= shape.pods and all(pod_ready(p) for p in members):
            out += [
                p["metadata"]["name"] for p in members if _labels(p).get(LABEL_GROUP_ROLE) == LEADER
            ]
    return sorted(out)


def leader_selector(selector: Mapping[str, str], shape: GroupShape) -> dict[str, str]:
    """The router's pod selector for a pool: a grouped pool's leaders only (a worker
    serves no HTTP API): {"pdscaler.io/role": "decode"} -> + {"pdscaler.io/group-role":
    "leader"}; a one-pod pool's selector unchanged."""
    out = dict(selector)
    if shape.grouped:
        out[LABEL_GROUP_ROLE] = LEADER
    return out


def set_gpus(template: dict[str, Any], shape: GroupShape, engine: str = "engine") -> None:
    """Every GPU the template asks for, on the engine container, as ``shape.gpus_per_pod``
    of ``shape.resource`` (limits = requests), the default resource's entries and node
    taint toleration replaced by the configured resource's."""
    pod = template.setdefault("spec", {})
    for container in pod.get("containers") or []:
        if container.get("name") != engine:
            continue
        res = container.setdefault("resources", {})
        for part in ("limits", "requests"):
            values = res.setdefault(part, {})
            values.pop(DEFAULT_GPU_RESOURCE, None)
            values[shape.resource] = str(shape.gpus_per_pod)
    tolerations = [t for t in pod.get("tolerations") or [] if t.get("key") != DEFAULT_GPU_RESOURCE]
    if not any(t.get("key") == shape.resource for t in tolerations):
        tolerations.append({"key": shape.resource, "operator": "Exists", "effect": "NoSchedule"})
    pod["tolerations"] = tolerations


def _role_template(template: Mapping[str, Any], role: str) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    meta = out.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), LABEL_GROUP_ROLE: role}
    return out


def leader_worker_set(deployment: Manifest, shape: GroupShape, engine: str = "engine") -> Manifest:
    """A cell's pool as a LeaderWorkerSet, from the pool Deployment ``manifests`` renders:
    the same name, labels, annotations and owner; ``spec.replicas`` groups of
    ``shape.pods`` pods; leader and workers from the Deployment's pod template, each pod
    asking for ``shape.gpus_per_pod`` GPUs, labelled ``pdscaler.io/group-role`` leader or
    worker. A group restarts as one (RecreateGroupOnPodRestart); the rolling update
    replaces one group at a time and surges none (maxSurge 0: as the Deployments, a
    same-version template change asks for no GPU beyond the pool's size); workers start
    once the leader is created (LeaderCreated); the group's pods share one headless
    subdomain (Shared), so workers reach the leader at LWS_LEADER_ADDRESS."""
    dep = copy.deepcopy(deployment)
    meta = dep["metadata"]
    meta["annotations"] = {
        k: v for k, v in (meta.get("annotations") or {}).items() if k != SPEC_HASH_ANNOTATION
    }
    template = dep["spec"]["template"]
    set_gpus(template, shape, engine)
    obj: Manifest = {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": meta,
        "spec": {
            "replicas": dep["spec"].get("replicas", 1),
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "networkConfig": {"subdomainPolicy": "Shared"},
            "leaderWorkerTemplate": {
                "size": shape.pods,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _role_template(template, LEADER),
                "workerTemplate": _role_template(template, WORKER),
            },
        },
    }
    return stamp(obj)


def pool_template(pool: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pool object's pod template: a Deployment's ``spec.template``, a
    LeaderWorkerSet's leader template (the pod that runs the engine's HTTP API)."""
    spec = pool.get("spec") or {}
    if pool.get("kind") == LWS_KIND:
        lwt = spec.get("leaderWorkerTemplate") or {}
        found: Mapping[str, Any] = lwt.get("leaderTemplate") or lwt.get("workerTemplate") or {}
        return found
    template: Mapping[str, Any] = spec.get("template") or {}
    return template


def group_size(pool: Mapping[str, Any] | None) -> int:
    """Pods of one replica of a pool object: a LeaderWorkerSet's
    ``leaderWorkerTemplate.size``, 1 for a Deployment (or none)."""
    if pool is None or pool.get("kind") != LWS_KIND:
        return 1
    size = ((pool.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size")
    return 1 if size is None else int(size)


def lws_ready_groups(lws: Mapping[str, Any]) -> int:
    """The controller's own count of Ready groups (``status.readyReplicas``: a group
    whose leader and every worker are Ready), 0 before it wrote status."""
    return int((lws.get("status") or {}).get("readyReplicas") or 0)
