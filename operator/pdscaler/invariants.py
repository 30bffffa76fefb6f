"""The rollout invariants of docs/design.md §4, checked on a snapshot of a PDDeployment's pods.

Owns: saying, for one instant, whether the pods of a PDDeployment break any of

1. every version with a Ready prefill pod has a Ready decode pod of the same version;
2. no router pod discovers workers of another revision than its own (its
   ``--prefill-selector`` / ``--decode-selector`` name its own cell);
3. serving capacity is not below the minimums (Ready prefill >= prefill.replicas.min,
   Ready decode >= decode.replicas.min; only once the PDDeployment has served), and
   the GPUs held by pods bound to nodes (each pool's ``gpuResource``) do not exceed
   ``maxGPUs + maxSurgeGPUs``.

Used by the lab's rollout checker (sampling every ~200 ms) and by the demo. Must not:
fetch anything or read the clock. Purely computational.

>>> violations([], spec_example(), "chat", check_capacity=False)
[]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pdscaler import naming
from pdscaler.observe import is_ready, labels, terminating
from pdscaler.spec import DEFAULT_GPU_RESOURCE, PDDeploymentSpec
from pdscaler.types import Role

Obj = Mapping[str, Any]


def spec_example() -> PDDeploymentSpec:
    """A minimal spec for examples: min 1/1, maxGPUs 64, surge 8."""
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000},
            "decode": {"tokensPerSecond": 800},
        }
    )


def _containers(pod: Obj) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def discovered_revisions(pod: Obj) -> set[str]:
    """The revisions a router pod's worker discovery selects (``pdscaler.io/revision=``
    values among its arguments); empty for any other pod."""
    out: set[str] = set()
    prefix = f"{naming.LABEL_REVISION}="
    for c in _containers(pod):
        for arg in c.get("args") or []:
            if isinstance(arg, str) and arg.startswith(prefix):
                out.add(arg[len(prefix) :])
    return out


def pod_gpus(pod: Obj, resource: str = DEFAULT_GPU_RESOURCE) -> int:
    """GPUs a pod holds: the sum of its containers' ``resource`` limits (the pool's
    ``gpuResource``: ``amd.com/gpu`` counts nothing of a pod asking ``nvidia.com/gpu``)."""
    total = 0
    for c in _containers(pod):
        limits = (c.get("resources") or {}).get("limits") or {}
        try:
            total += int(limits.get(resource, 0))
        except (TypeError, ValueError):
            continue
    return total


def _gpu_resource(spec: PDDeploymentSpec, role: str) -> str:
    """The GPU resource a pod of ``role`` asks for: its pool's (``gpu_resource_of``),
    else the spec's (a router asks for none, so any name counts 0 there)."""
    if role in (Role.PREFILL.value, Role.DECODE.value):
        return spec.gpu_resource_of(Role(role))
    return spec.gpu_resource or DEFAULT_GPU_RESOURCE


def _holds_gpus(pod: Obj) -> bool:
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
    return bound and not finished


def violations(
    pods: Iterable[Obj], spec: PDDeploymentSpec, name: str, *, check_capacity: bool
) -> list[str]:
    """Every broken invariant in this snapshot, as sentences (empty: all hold).

    A Ready prefill pod of v2 with no Ready decode pod of v2 ->
    ``["version v2 has 1 ready prefill pod(s) and no ready decode pod"]``.
    """
    out: list[str] = []
    ready: dict[tuple[str, str], int] = {}
    gpus = 0
    for pod in pods:
        lab = labels(pod)
        role, rev = lab.get(naming.LABEL_ROLE, ""), lab.get(naming.LABEL_REVISION, "")
        version = lab.get(naming.LABEL_VERSION, "")
        if _holds_gpus(pod):
            gpus += pod_gpus(pod, _gpu_resource(spec, role))
        if is_ready(pod):
            ready[(role, version)] = ready.get((role, version), 0) + 1
        if role == naming.ROLE_ROUTER and not terminating(pod):
            found = discovered_revisions(pod)
            if found != {rev}:
                pod_name = (pod.get("metadata") or {}).get("name")
                out.append(f"router pod {pod_name} (rev {rev}) discovers revisions {sorted(found)}")
    for (role, version), count in sorted(ready.items()):
        if role == Role.PREFILL.value and ready.get((Role.DECODE.value, version), 0) == 0:
            out.append(
                f"version {version} has {count} ready prefill pod(s) and no ready decode pod"
            )
    if check_capacity:
        for role, pool in ((Role.PREFILL, spec.prefill), (Role.DECODE, spec.decode)):
            have = sum(n for (r, _), n in ready.items() if r == role.value)
            if have < pool.replicas.min:
                out.append(f"{role.value} ready {have} < min {pool.replicas.min}")
        limit = spec.scaling.max_gpus + spec.rollout.max_surge_gpus
        if gpus > limit:
            out.append(f"{gpus} GPUs held > maxGPUs + maxSurgeGPUs = {limit}")
    return out
