"""Reading pods and Deployments into observations (observe.py) and the rollout
invariants on a pod snapshot (invariants.py): pure functions over API-shaped dicts."""

from __future__ import annotations

import copy
from typing import Any

from pdscaler import invariants, manifests, naming, observe, router
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta
from pdscaler.plan import Observed
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import PoolObservation, Role

UID = "uid-1"
META = Meta("chat", "serving", UID)
SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
        "decode": {"tokensPerSecond": 800, "replicas": {"min": 2, "max": 8}},
        "scaling": {"maxGPUs": 6},
        "rollout": {"maxSurgeGPUs": 2},
    }
)
V1 = CellTarget("img", "v1", prefill=1, decode=2)
V2 = CellTarget("img", "v2", prefill=1, decode=2)

T0 = "2025-01-01T00:00:00Z"


def pod(
    cell: CellTarget,
    role: Role,
    i: int,
    *,
    ready: bool = True,
    ready_at: str = "2025-01-01T00:00:30Z",
    pending: bool = False,
    deleting: bool = False,
    of: PDDeploymentSpec = SPEC,
) -> dict[str, Any]:
    """A pod as the API returns it, built from the Deployment's own template (of
    ``of``) and controlled by its ReplicaSet."""
    dep = manifests.pool_object(META, of, cell, role)
    tpl = dep["spec"]["template"]
    meta: dict[str, Any] = {
        "name": f"{dep['metadata']['name']}-{i}",
        "labels": {**tpl["metadata"]["labels"], "pod-template-hash": "6b7c8d"},
        "creationTimestamp": T0,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"{dep['metadata']['name']}-6b7c8d",
                "controller": True,
            }
        ],
    }
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    spec = dict(tpl["spec"])
    status: dict[str, Any]
    if pending:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    else:
        spec["nodeName"] = "gpu-node-0"
        status = {
            "phase": "Running",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": ready_at,
                }
            ],
        }
    return {"metadata": meta, "spec": spec, "status": status}


def deployments(*cells: CellTarget) -> tuple[dict[str, Any], ...]:
    out = []
    for cell in cells:
        for role in Role:
            dep = manifests.pool_deployment(META, SPEC, cell, role)
            dep["metadata"]["creationTimestamp"] = T0
            out.append(dep)
    return tuple(out)


def test_startup_seconds_from_creation_to_ready() -> None:
    assert observe.startup_seconds(pod(V1, Role.DECODE, 0)) == 30.0
    assert observe.startup_seconds(pod(V1, Role.DECODE, 0, ready=False)) is None


def test_unschedulable_only_for_pending_unschedulable() -> None:
    assert observe.is_unschedulable(pod(V1, Role.DECODE, 0, pending=True))
    assert not observe.is_unschedulable(pod(V1, Role.DECODE, 0))
    assert not observe.is_unschedulable(pod(V1, Role.DECODE, 0, pending=True, deleting=True))


def test_terminating_pod_is_not_ready() -> None:
    assert not observe.is_ready(pod(V1, Role.DECODE, 0, deleting=True))


def test_pool_observation_counts() -> None:
    pods = [
        pod(V1, Role.DECODE, 0),
        pod(V1, Role.DECODE, 1, ready=False),
        pod(V1, Role.DECODE, 2, pending=True),
        pod(V1, Role.DECODE, 3, deleting=True),
    ]
    assert observe.pool_observation(3, pods) == PoolObservation(
        replicas=3, ready=1, unschedulable=1, startup_samples=(30.0,), terminating=1
    )


def test_cells_per_revision_and_totals() -> None:
    pods = (
        pod(V1, Role.PREFILL, 0),
        pod(V1, Role.DECODE, 0),
        pod(V1, Role.DECODE, 1),
        pod(V2, Role.DECODE, 0, ready=False),
    )
    cells = observe.cells(Observed(deployments(V1, V2), (), pods), UID)
    assert sorted(cells) == sorted([V1.rev, V2.rev])
    one, two = cells[V1.rev], cells[V2.rev]
    assert (one.version, one.prefill.ready, one.decode.ready, one.ready) == ("v1", 1, 2, True)
    assert (two.version, two.decode.replicas, two.decode.ready, two.ready) == ("v2", 2, 0, False)
    assert one.created == observe.parse_time(T0)
    decode = observe.total(cells.values(), Role.DECODE)
    assert (decode.replicas, decode.ready) == (4, 2)


def test_cells_ignore_deployments_not_ours() -> None:
    deps = deployments(V1)
    for d in deps:
        d["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}]
    assert observe.cells(Observed(deps, (), ()), UID) == {}


def test_missing_pool_deployment_counts_zero() -> None:
    only_decode = tuple(
        d for d in deployments(V1) if d["metadata"]["labels"][naming.LABEL_ROLE] == "decode"
    )
    cell = observe.cells(Observed(only_decode, (), ()), UID)[V1.rev]
    assert (cell.has_prefill, cell.has_decode, cell.prefill.replicas) == (False, True, 0)


# ------------------------------------------------------------------ invariants


def test_healthy_rollout_snapshot_has_no_violations() -> None:
    pods = [
        pod(V1, Role.PREFILL, 0),
        pod(V1, Role.DECODE, 0),
        pod(V1, Role.DECODE, 1),
        pod(V2, Role.DECODE, 0, ready=False),
    ]
    assert invariants.violations(pods, SPEC, "chat", check_capacity=True) == []


def test_ready_prefill_without_same_version_decode() -> None:
    pods = [pod(V1, Role.DECODE, 0), pod(V1, Role.DECODE, 1), pod(V2, Role.PREFILL, 0)]
    assert invariants.violations(pods, SPEC, "chat", check_capacity=False) == [
        "version v2 has 1 ready prefill pod(s) and no ready decode pod"
    ]


def test_a_router_discovering_another_revision_is_a_violation() -> None:
    """A v2 router whose prefill selector names v1 could pair v1 prefill with v2 decode."""
    meta = Meta(name="chat", namespace="serving", uid=UID)
    dep = router.router_deployment(meta, SPEC, V2.rev, V2.version, 1, 8000)
    bad = {"metadata": {**dep["spec"]["template"]["metadata"], "name": "r-0"}}
    bad["spec"] = copy.deepcopy(dep["spec"]["template"]["spec"])
    args = bad["spec"]["containers"][0]["args"]
    args[args.index(f"pdscaler.io/revision={V2.rev}")] = f"pdscaler.io/revision={V1.rev}"
    good = {"metadata": {**dep["spec"]["template"]["metadata"], "name": "r-1"}}
    good["spec"] = dep["spec"]["template"]["spec"]
    assert invariants.violations([good], SPEC, "chat", check_capacity=False) == []
    (msg,) = invariants.violations([bad, good], SPEC, "chat", check_capacity=False)
    assert msg.startswith("router pod r-0")
    assert V1.rev in msg


def test_capacity_below_min_and_gpus_over_budget() -> None:
    """min decode 2 with 1 ready; 9 bound GPU pods > maxGPUs 6 + surge 2."""
    pods = [pod(V1, Role.PREFILL, i) for i in range(8)] + [pod(V1, Role.DECODE, 0)]
    assert invariants.violations(pods, SPEC, "chat", check_capacity=True) == [
        "decode ready 1 < min 2",
        "9 GPUs held > maxGPUs + maxSurgeGPUs = 8",
    ]


def test_gpus_are_counted_in_each_pools_gpu_resource() -> None:
    """A fleet on ``amd.com/gpu``: its pods ask for amd.com/gpu, and the budget check
    counts them (it counted only nvidia.com/gpu, so 9 AMD pods over a budget of 8 broke
    nothing); a pod's GPUs under another resource name count 0."""
    amd = SPEC.model_copy(update={"gpu_resource": "amd.com/gpu"})
    pods = [pod(V1, Role.PREFILL, i, of=amd) for i in range(8)]
    pods.append(pod(V1, Role.DECODE, 0, of=amd))
    assert invariants.pod_gpus(pods[0], "amd.com/gpu") == 1
    assert invariants.pod_gpus(pods[0]) == 0
    assert "9 GPUs held > maxGPUs + maxSurgeGPUs = 8" in invariants.violations(
        pods, amd, "chat", check_capacity=True
    )


def test_pending_pods_hold_no_gpus() -> None:
    pods = [pod(V1, Role.DECODE, i, pending=True) for i in range(20)]
    assert invariants.pod_gpus(pods[0]) == 1
    msgs = invariants.violations(pods, SPEC, "chat", check_capacity=True)
    assert not any("GPUs held" in m for m in msgs)
