"""Group replicas (groups.py): the group's shape and per-pod GPUs, a cell's pool rendered
as a LeaderWorkerSet from the Deployment manifests.py renders, group accounting from pods
(a group is Ready only when all its pods are), the GPU budget in whole groups, the
router's leader-only selector and the role-flip shape check."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import groups, manifests, naming, observe
from pdscaler.groups import GroupShape
from pdscaler.manifests import CellTarget
from pdscaler.objects import SPEC_HASH_ANNOTATION, Meta, spec_hash
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role
from support.crd_schema import normalise_rule, openapi_schema

META = Meta(name="moe", namespace="serving", uid="uid-1")
CELL = CellTarget(image="vllm/vllm-openai", version="v0.11.0", prefill=1, decode=3)


def spec() -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
            "prefill": {"tokensPerSecond": 9000, "gpusPerReplica": 8},
            "decode": {
                "tokensPerSecond": 4000,
                "gpusPerReplica": 16,
                "template": {
                    "metadata": {"annotations": {"pdscaler.io/startup-delay": "5s"}},
                    "spec": {
                        "containers": [
                            {"name": "sidecar", "image": "busybox"},
                            {"name": "engine", "args": ["--data-parallel-size", "16"]},
                        ]
                    },
                },
            },
        }
    )


def decode_lws(shape: GroupShape) -> dict[str, Any]:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    return groups.leader_worker_set(dep, shape)


def containers(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in template["spec"]["containers"]}


# ----- shape --------------------------------------------------------------------------------
def test_shape_counts_the_whole_group() -> None:
    """2 nodes x 8 GPUs: 8 per pod; 3 groups = 6 pods, 48 GPUs; a budget of 60 holds 3."""
    shape = GroupShape(pods=2, gpus=16)
    assert (shape.gpus_per_pod, shape.pods_for(3), shape.gpus_for(3)) == (8, 6, 48)
    assert groups.groups_within(60, shape) == 3
    assert groups.groups_within(64, shape) == 4
    assert groups.groups_within(15, shape) == 0
    assert shape.grouped
    assert not GroupShape(pods=1, gpus=8).grouped


@pytest.mark.parametrize(
    ("pods", "gpus", "resource", "message"),
    [
        (2, 15, "nvidia.com/gpu", groups.MSG_GROUP_GPUS),
        (3, 16, "nvidia.com/gpu", groups.MSG_GROUP_GPUS),
        (2, 16, "gpu", groups.MSG_GPU_RESOURCE),
        (2, 16, "AMD.com/gpu", groups.MSG_GPU_RESOURCE),
        (0, 16, "nvidia.com/gpu", "at least 1 pod"),
    ],
)
def test_shape_refuses_a_group_it_cannot_split(
    pods: int, gpus: int, resource: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message[:30]):
        GroupShape(pods=pods, gpus=gpus, resource=resource)


def test_role_flips_need_the_same_group_shape() -> None:
    assert groups.same_shape(GroupShape(2, 16), GroupShape(2, 16))
    assert not groups.same_shape(GroupShape(2, 16), GroupShape(1, 8))
    assert not groups.same_shape(GroupShape(2, 16), GroupShape(4, 16))
    assert not groups.same_shape(GroupShape(2, 16), GroupShape(2, 16, "amd.com/gpu"))
    assert groups.same_shape(GroupShape(1, 8), GroupShape(1, 8))


# ----- rendering ----------------------------------------------------------------------------
def test_pool_renders_as_a_leader_worker_set_of_groups() -> None:
    """decode: 3 replicas of 2 pods x 8 GPUs -> LWS replicas 3, size 2, 8 GPUs a pod."""
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    lws = groups.leader_worker_set(dep, GroupShape(pods=2, gpus=16))
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert (
        lws["metadata"]["name"]
        == dep["metadata"]["name"]
        == naming.pool_name("moe", CELL.rev, Role.DECODE)
    )
    assert lws["metadata"]["ownerReferences"] == dep["metadata"]["ownerReferences"]
    assert lws["metadata"]["labels"] == dep["metadata"]["labels"]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    assert lws["spec"]["replicas"] == 3
    assert lwt["size"] == 2
    assert lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"] == 0
    for role, tpl in (("leader", lwt["leaderTemplate"]), ("worker", lwt["workerTemplate"])):
        labels = tpl["metadata"]["labels"]
        assert labels[groups.LABEL_GROUP_ROLE] == role
        # the cell's labels stay on every pod: the rollout and drain find them as before
        for key in (naming.LABEL_NAME, naming.LABEL_ROLE, naming.LABEL_REVISION):
            assert labels[key] == dep["spec"]["template"]["metadata"]["labels"][key]
        engine = containers(tpl)["engine"]
        assert engine["resources"]["limits"] == {"nvidia.com/gpu": "8"}
        assert engine["resources"]["requests"] == {"nvidia.com/gpu": "8"}
        assert engine["image"] == "vllm/vllm-openai:v0.11.0"
        assert engine["args"] == ["--data-parallel-size", "16"]
        assert "resources" not in containers(tpl)["sidecar"]
        assert tpl["metadata"]["annotations"]["pdscaler.io/startup-delay"] == "5s"
    # a stamp of its own: the Deployment's spec-hash does not describe the LWS
    ann = lws["metadata"]["annotations"]
    assert ann[naming.ANNOTATION_IMAGE] == "vllm/vllm-openai"
    assert ann[SPEC_HASH_ANNOTATION] == spec_hash(lws)
    assert ann[SPEC_HASH_ANNOTATION] != dep["metadata"]["annotations"][SPEC_HASH_ANNOTATION]


def test_gpu_resource_name_is_configurable() -> None:
    """amd.com/gpu: the pods ask for it, tolerate its taint, and nvidia.com/gpu is gone."""
    lws = decode_lws(GroupShape(pods=4, gpus=16, resource="amd.com/gpu"))
    tpl = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    engine = containers(tpl)["engine"]
    assert engine["resources"]["limits"] == {"amd.com/gpu": "4"}
    assert engine["resources"]["requests"] == {"amd.com/gpu": "4"}
    keys = [t["key"] for t in tpl["spec"]["tolerations"]]
    assert keys == ["amd.com/gpu"]


def test_rendering_is_stable_and_sees_the_shape() -> None:
    a = decode_lws(GroupShape(2, 16))
    assert a == decode_lws(GroupShape(2, 16))
    b = decode_lws(GroupShape(4, 16))
    assert spec_hash(a) != spec_hash(b)


# ----- accounting ---------------------------------------------------------------------------
def pod(group: str, worker: int, ready: bool, deleting: bool = False) -> dict[str, Any]:
    role = groups.LEADER if worker == 0 else groups.WORKER
    meta: dict[str, Any] = {
        "name": f"moe-{group}" + (f"-{worker}" if worker else ""),
        "labels": {
            groups.LWS_GROUP_INDEX_LABEL: group,
            groups.LWS_WORKER_INDEX_LABEL: str(worker),
            groups.LABEL_GROUP_ROLE: role,
        },
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T17:00:00Z"
    status = "True" if ready else "False"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": status}]}}


def test_a_group_is_ready_only_when_all_its_pods_are() -> None:
    """3 groups of 2: group 2's worker not Ready -> 2 Ready groups, 1 forming, 5 pods."""
    shape = GroupShape(2, 16)
    pods = [pod("0", 0, True), pod("0", 1, True), pod("1", 0, True), pod("1", 1, True)]
    pods += [pod("2", 0, True), pod("2", 1, False)]
    count = groups.count_groups(pods, shape)
    assert count == groups.GroupCount(ready=2, forming=1, pods_ready=5)
    assert count.groups == 3
    assert shape.gpus_for(count.groups) == 48  # a forming group holds its GPUs
    assert groups.ready_leaders(pods, shape) == ["moe-0", "moe-1"]


def test_a_group_missing_a_pod_or_losing_one_is_not_ready() -> None:
    shape = GroupShape(2, 16)
    alone = [pod("0", 0, True)]  # the worker not created yet
    assert groups.count_groups(alone, shape) == groups.GroupCount(0, 1, 1)
    going = [pod("0", 0, True), pod("0", 1, True, deleting=True)]
    assert groups.count_groups(going, shape).ready == 0
    assert groups.ready_leaders(going, shape) == []


def test_one_pod_replicas_count_pods() -> None:
    shape = GroupShape(1, 8)
    pods = [
        {
            "metadata": {"name": f"p{i}"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(3)
    ]
    pods.append({"metadata": {"name": "p3"}, "status": {}})
    assert groups.count_groups(pods, shape) == groups.GroupCount(ready=3, forming=1, pods_ready=3)


def test_the_router_discovers_leaders_only() -> None:
    sel = {naming.LABEL_NAME: "moe", naming.LABEL_ROLE: "decode"}
    assert groups.leader_selector(sel, GroupShape(2, 16)) == {
        **sel,
        groups.LABEL_GROUP_ROLE: "leader",
    }
    assert groups.leader_selector(sel, GroupShape(1, 8)) == sel


def test_status_ready_groups_from_the_controller() -> None:
    assert groups.lws_ready_groups({"status": {"readyReplicas": 2, "replicas": 3}}) == 2
    assert groups.lws_ready_groups({}) == 0


def test_gpu_resource_pool_then_spec_then_nvidia() -> None:
    assert groups.gpu_resource(None, None) == "nvidia.com/gpu"
    assert groups.gpu_resource("amd.com/gpu", None) == "amd.com/gpu"
    assert groups.gpu_resource("amd.com/gpu", "nvidia.com/gpu") == "nvidia.com/gpu"


def test_flip_problem_is_the_crd_rules_twin() -> None:
    """The same message as the CRD's rule (tests/lab/test_lab_lws.py checks the rule)."""
    assert groups.flip_problem(GroupShape(2, 16), GroupShape(2, 16)) is None
    assert groups.flip_problem(GroupShape(1, 16), GroupShape(2, 16)) == groups.MSG_FLIP_SHAPE
    amd = GroupShape(2, 16, "amd.com/gpu")
    assert groups.flip_problem(GroupShape(2, 16), amd) == groups.MSG_FLIP_SHAPE
    rules = [r["message"] for r in groups.SPEC_RULES + groups.POOL_RULES]
    assert groups.MSG_FLIP_SHAPE in rules
    assert groups.MSG_GROUP_GPUS in rules
    assert groups.MSG_GPU_RESOURCE in rules


def timed(group: str, worker: int, created: str, ready_at: str | None, **status: Any) -> Any:
    """A group pod created at ``created`` (seconds past 17:00), Ready at ``ready_at``."""
    p = pod(group, worker, ready_at is not None)
    p["metadata"]["creationTimestamp"] = f"2026-12-05T17:00:{created}Z"
    if ready_at is not None:
        p["status"]["conditions"][0]["lastTransitionTime"] = f"2026-12-05T17:00:{ready_at}Z"
    p["status"].update(status)
    return p


def test_group_observation_counts_groups() -> None:
    """Group 0: created :00 and :02, Ready :30 and :40 -> one sample of 40 s; group 1: a
    worker Pending Unschedulable -> unschedulable 1, not Ready; group 2 a pod being
    deleted -> terminating 1. Four groups wanted."""
    unsched = {"phase": "Pending"}
    pods = [timed("0", 0, "00", "30"), timed("0", 1, "02", "40")]
    pods += [timed("1", 0, "05", "35"), timed("1", 1, "05", None, **unsched)]
    pods[-1]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    ]
    going = timed("2", 1, "01", "20")
    going["metadata"]["deletionTimestamp"] = "2026-12-05T17:00:50Z"
    pods += [timed("2", 0, "01", "20"), going]
    obs = observe.group_observation(4, pods, 2)
    assert (obs.replicas, obs.ready, obs.unschedulable, obs.terminating) == (4, 1, 1, 1)
    assert obs.startup_samples == (40.0,)


def test_group_observation_samples_oldest_first() -> None:
    pods = [timed("1", 0, "10", "15"), timed("1", 1, "10", "16")]
    pods += [timed("0", 0, "00", "20"), timed("0", 1, "00", "21")]
    obs = observe.group_observation(2, pods, 2)
    assert obs.startup_samples == (21.0, 6.0)


def test_the_crd_holds_the_group_fields_and_rules_as_groups_py_does() -> None:
    """crds/ (hand-written) carries exactly groups.py's data: the pool's podsPerReplica
    and gpuResource, the spec's gpuResource, and every rule (whitespace aside)."""
    spec_schema = openapi_schema()["properties"]["spec"]

    def rules(node: dict[str, Any]) -> list[dict[str, str]]:
        return [{**r, "rule": normalise_rule(r["rule"])} for r in node["x-kubernetes-validations"]]

    for role in ("prefill", "decode"):
        pool = spec_schema["properties"][role]
        for name, prop in groups.POOL_PROPERTIES.items():
            assert pool["properties"][name] == prop, (role, name)
        for rule in groups.POOL_RULES:
            assert {**rule, "rule": normalise_rule(rule["rule"])} in rules(pool), rule
    assert spec_schema["properties"]["gpuResource"] == groups.SPEC_PROPERTIES["gpuResource"]
    for rule in groups.SPEC_RULES:
        assert {**rule, "rule": normalise_rule(rule["rule"])} in rules(spec_schema), rule


def test_the_spec_model_reads_the_group_fields() -> None:
    """PDDeploymentSpec carries podsPerReplica and gpuResource; shape_of reads a pool's
    group shape from it (decode 2 pods x 8 GPUs of amd.com/gpu, prefill one pod)."""
    raw = spec().model_dump(by_alias=True, exclude_none=True)
    raw["gpuResource"] = "amd.com/gpu"
    raw["decode"]["podsPerReplica"] = 2
    parsed = PDDeploymentSpec.model_validate(raw)
    assert groups.shape_of(parsed, "decode") == GroupShape(2, 16, "amd.com/gpu")
    assert groups.shape_of(parsed, "prefill") == GroupShape(1, 8, "amd.com/gpu")
    assert parsed.gpu_resource_of(Role.PREFILL) == "amd.com/gpu"
    raw["prefill"]["gpuResource"] = "nvidia.com/gpu"
    assert PDDeploymentSpec.model_validate(raw).gpu_resource_of(Role.PREFILL) == "nvidia.com/gpu"
    assert groups.shape_of(spec(), "decode") == GroupShape(1, 16)
    for bad, message in (
        ({"decode": {**raw["decode"], "gpusPerReplica": 15}}, groups.MSG_GROUP_GPUS),
        ({"gpuResource": "gpu"}, groups.MSG_GPU_RESOURCE),
        ({"gpuResource": "amd.com/gpu\n"}, groups.MSG_GPU_RESOURCE),
    ):
        with pytest.raises(ValueError, match=message.split(":")[0]):
            PDDeploymentSpec.model_validate({**raw, **bad})
