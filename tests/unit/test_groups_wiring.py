"""Group replicas wired into the operator (issue 29 item 2): the desired objects render a
pool of podsPerReplica > 1 as a LeaderWorkerSet (and another gpuResource on a one-pod
pool), the router discovers that pool's leaders only, observation counts its groups from
the pods its StatefulSets made, and the planner scales, keeps and retires it by kind."""

from __future__ import annotations

import copy
from typing import Any

from pdscaler import groups, manifests, naming, observe
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta
from pdscaler.plan import Observed, Verb, plan
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

META = Meta(name="moe", namespace="serving", uid="uid-1")


def spec(**decode: Any) -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
            "prefill": {"tokensPerSecond": 9000, "gpusPerReplica": 8},
            "decode": {"tokensPerSecond": 4000, "gpusPerReplica": 16, **decode},
            "scaling": {"maxGPUs": 128},
        }
    )


def desired(s: PDDeploymentSpec, decode: int = 3) -> dict[tuple[str, str], dict[str, Any]]:
    cell = manifests.spec_cell(s, prefill=1, decode=decode)
    objs = manifests.desired_objects(META, s, [cell])
    return {
        (o["kind"], o["metadata"].get("labels", {}).get(naming.LABEL_ROLE, "")): o for o in objs
    }


def test_a_grouped_pool_renders_as_a_leader_worker_set_the_router_pairs_by_leader() -> None:
    objs = desired(spec(podsPerReplica=2))
    lws = objs[("LeaderWorkerSet", "decode")]
    assert ("Deployment", "prefill") in objs
    assert ("Deployment", "decode") not in objs
    assert lws["spec"]["replicas"] == 3
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    engine = groups.pool_template(lws)["spec"]["containers"][0]
    assert engine["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert not manifests.drifted(lws)  # its engine-hash is the leader's engine container
    args = objs[("Deployment", "router")]["spec"]["template"]["spec"]["containers"][0]["args"]
    decode = args[args.index("--decode-selector") + 1 : args.index("--host")]
    prefill = args[args.index("--prefill-selector") + 1 : args.index("--decode-selector")]
    assert "pdscaler.io/group-role=leader" in decode
    assert "pdscaler.io/group-role=leader" not in prefill
    # one-pod pools render exactly as before: no group-role in their selectors
    plain = desired(spec())
    router = plain[("Deployment", "router")]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any("group-role" in a for a in router)
    assert plain[("Deployment", "decode")] == manifests.pool_deployment(
        META, spec(), manifests.spec_cell(spec(), prefill=1, decode=3), Role.DECODE
    )


def test_a_one_pod_pool_of_another_gpu_resource_asks_for_it() -> None:
    objs = desired(spec(gpuResource="amd.com/gpu"))
    dep = objs[("Deployment", "decode")]
    pod = dep["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits == {"amd.com/gpu": "16"}
    assert {t["key"] for t in pod["tolerations"]} == {"amd.com/gpu"}
    assert not manifests.drifted(dep)
    prefill = objs[("Deployment", "prefill")]["spec"]["template"]["spec"]["containers"][0]
    assert prefill["resources"]["limits"] == {"nvidia.com/gpu": "8"}


def lws_pod(lws: dict[str, Any], group: int, worker: int, ready: bool) -> dict[str, Any]:
    """A pod LWS made for group ``group`` (worker 0: the leader, by the leaders'
    StatefulSet ``<lws>``; else by the group's ``<lws>-<group>``)."""
    name = lws["metadata"]["name"]
    template = groups.pool_template(lws)
    owner = name if worker == 0 else f"{name}-{group}"
    return {
        "metadata": {
            "name": f"{name}-{group}" + (f"-{worker}" if worker else ""),
            "labels": {
                **template["metadata"]["labels"],
                groups.LWS_SET_NAME_LABEL: name,
                groups.LWS_GROUP_INDEX_LABEL: str(group),
            },
            "ownerReferences": [{"kind": "StatefulSet", "name": owner, "controller": True}],
            "creationTimestamp": "2026-12-05T17:00:00Z",
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-12-05T17:00:30Z",
                }
            ]
        },
    }


def test_observation_counts_groups_of_the_pods_its_stateful_sets_made() -> None:
    """3 groups asked; groups 0 and 1 Ready, group 2's worker not yet: decode 3 replicas,
    2 Ready, one start-up sample (30 s) per Ready group. A pod made by hand with the
    pool's labels (no StatefulSet owner) is no capacity."""
    objs = desired(spec(podsPerReplica=2))
    lws = objs[("LeaderWorkerSet", "decode")]
    pods = [lws_pod(lws, g, w, ready=(g, w) != (2, 1)) for g in range(3) for w in range(2)]
    forged = copy.deepcopy(pods[0])
    forged["metadata"]["name"] = "forged"
    forged["metadata"]["ownerReferences"] = []
    observed = Observed(deployments=(lws, objs[("Deployment", "prefill")]), pods=(*pods, forged))
    (cell,) = observe.cells(observed, META.uid).values()
    assert (cell.decode.replicas, cell.decode.ready) == (3, 2)
    assert cell.decode.startup_samples == (30.0, 30.0)
    assert cell.has_decode


def test_the_planner_scales_and_retires_a_leader_worker_set_by_kind() -> None:
    s = spec(podsPerReplica=2)
    have = desired(s, decode=3)[("LeaderWorkerSet", "decode")]
    want = desired(s, decode=1)
    pods = tuple(lws_pod(have, g, w, True) for g in range(3) for w in range(2))
    observed = Observed(deployments=(have,), pods=pods)
    actions = plan(META.uid, list(want.values()), observed).actions
    scale = [a for a in actions if a.verb is Verb.SCALE]
    assert [(a.kind, a.replicas) for a in scale] == [("LeaderWorkerSet", 1)]
    assert not [a for a in actions if a.verb is Verb.ANNOTATE_POD]  # LWS drops its top groups
    assert not [a for a in actions if a.kind == "LeaderWorkerSet" and a.verb is Verb.CREATE]
    # a converged set plans nothing for it
    same = plan(META.uid, [desired(s, decode=3)[("LeaderWorkerSet", "decode")]], observed)
    assert [a for a in same.actions if a.kind == "LeaderWorkerSet"] == []
    # an old cell's set is retired by its kind
    other = CellTarget(image="vllm/vllm-openai", version="v0.12.0", prefill=1, decode=1)
    newer = manifests.desired_objects(META, s, [other])
    gone = plan(META.uid, newer, observed).actions
    assert [(a.verb, a.kind) for a in gone if a.name == have["metadata"]["name"]] == [
        (Verb.DELETE, "LeaderWorkerSet")
    ]
