"""The lab runs the real LeaderWorkerSet controller (sigs.k8s.io/lws, built from source by
operator/pdlab/cluster/build-lws.sh; pdlab.cluster.lws runs it with its webhooks served
over the lab's PKI).

A LeaderWorkerSet of size 2 (a leader and a worker, 2 GPUs each) on the fake GPU nodes
comes up as one group, both pods Ready (kwok's Ready timer: engine pods have no process
on the lab host), and scales 1 -> 3 groups through its /scale subresource, as any
scale-subresource client (pdscaler, an HPA) would size it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections import Counter
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from pdlab.cluster.kubeclient import Kube, crd_established
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
from pdscaler import groups, manifests, naming
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role
from support.exporter import EngineExporter
from support.labkit import list_pods, not_found, wait_for
from support.opkit import (
    create_pdd,
    deployments,
    get_pdd,
    operator_runtime,
    patch_spec,
    pdd_manifest,
    serve_light,
    ticking,
)
from support.opkit import pod_dicts as opkit_pods
from support.served_chat import NAME as SERVED
from support.served_chat import completion, records, scaled_chat, serving
from support.throwaway_crd import namespaced_crd

GROUP, VERSION, PLURAL = "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
SHAPE = groups.GroupShape(pods=2, gpus=4)
SHAPE_1GPU = groups.GroupShape(pods=2, gpus=2)


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


# ----- the CRD rules of group replicas, in a real API server --------------------------------
CHECK_GROUP, CHECK_PLURAL = "groups.pdlab.pdscaler.io", "groupchecks"


def check_crd() -> dict[str, Any]:
    """A throwaway CRD with exactly the group fields and rules groups.py holds for the
    PDDeployment CRD (pools with gpusPerReplica as the CRD has it, roleFlips.enabled)."""
    pool = {
        "type": "object",
        "properties": {
            "gpusPerReplica": {"type": "integer", "minimum": 1, "default": 1},
            **groups.POOL_PROPERTIES,
        },
        "x-kubernetes-validations": groups.POOL_RULES,
    }
    flips = {
        "type": "object",
        "default": {},
        "properties": {"enabled": {"type": "boolean", "default": False}},
    }
    spec = {
        "type": "object",
        "required": ["prefill", "decode"],
        "properties": {
            **groups.SPEC_PROPERTIES,
            "prefill": pool,
            "decode": pool,
            "scaling": {"type": "object", "default": {}, "properties": {"roleFlips": flips}},
        },
        "x-kubernetes-validations": groups.SPEC_RULES,
    }
    root = {"type": "object", "properties": {"spec": spec}}
    return namespaced_crd(CHECK_GROUP, CHECK_PLURAL, "GroupCheck", root)


def twin(spec: dict[str, Any]) -> str | None:
    """What groups.py's twins say of ``spec``: None (valid) or the message."""
    shapes = {}
    for role in ("prefill", "decode"):
        pool = spec[role]
        resource = groups.gpu_resource(spec.get("gpuResource"), pool.get("gpuResource"))
        try:
            shapes[role] = groups.GroupShape(
                pool.get("podsPerReplica", 1), pool.get("gpusPerReplica", 1), resource
            )
        except ValueError as err:
            return str(err)
    if spec.get("scaling", {}).get("roleFlips", {}).get("enabled"):
        return groups.flip_problem(shapes["prefill"], shapes["decode"])
    return None


CASES: list[tuple[dict[str, Any], str | None, str | None]] = [
    # (spec, the field the API server names, the message) -- None, None: accepted
    (
        {"prefill": {"gpusPerReplica": 8}, "decode": {"podsPerReplica": 2, "gpusPerReplica": 16}},
        None,
        None,
    ),
    (
        {
            "gpuResource": "amd.com/gpu",
            "prefill": {},
            "decode": {"podsPerReplica": 4, "gpusPerReplica": 32},
        },
        None,
        None,
    ),
    (
        {"prefill": {}, "decode": {"podsPerReplica": 2, "gpusPerReplica": 15}},
        "spec.decode.gpusPerReplica",
        groups.MSG_GROUP_GPUS,
    ),
    (
        {"gpuResource": "gpu", "prefill": {}, "decode": {}},
        "spec.gpuResource",
        groups.MSG_GPU_RESOURCE,
    ),
    (
        {"prefill": {"gpuResource": "AMD.com/gpu"}, "decode": {}},
        "spec.prefill.gpuResource",
        groups.MSG_GPU_RESOURCE,
    ),
    (
        {
            "prefill": {"gpusPerReplica": 16},
            "decode": {"podsPerReplica": 2, "gpusPerReplica": 16},
            "scaling": {"roleFlips": {"enabled": True}},
        },
        "spec.scaling.roleFlips.enabled",
        groups.MSG_FLIP_SHAPE,
    ),
    (
        {
            "prefill": {"podsPerReplica": 2, "gpusPerReplica": 16},
            "decode": {"podsPerReplica": 2, "gpusPerReplica": 16, "gpuResource": "amd.com/gpu"},
            "scaling": {"roleFlips": {"enabled": True}},
        },
        "spec.scaling.roleFlips.enabled",
        groups.MSG_FLIP_SHAPE,
    ),
    (
        {
            "gpuResource": "amd.com/gpu",
            "prefill": {"podsPerReplica": 2, "gpusPerReplica": 16},
            "decode": {"podsPerReplica": 2, "gpusPerReplica": 16, "gpuResource": "amd.com/gpu"},
            "scaling": {"roleFlips": {"enabled": True}},
        },
        None,
        None,
    ),
]


def test_group_fields_rules_in_a_real_api_server(kube: Kube, namespace: str) -> None:
    """The rules groups.py holds for the CRD, applied by the lab's API server: each
    invalid spec refused naming its field and the rule's message, each valid one accepted,
    and the Python twins saying the same of every case."""
    body = check_crd()
    name = body["metadata"]["name"]
    with contextlib.suppress(ApiException):
        kube.apiext.delete_custom_resource_definition(name)
    wait_for(
        lambda: not_found(lambda: kube.apiext.read_custom_resource_definition(name)),
        30,
        "old CRD gone",
    )
    kube.apiext.create_custom_resource_definition(cast(Any, body))
    try:
        wait_for(lambda: crd_established(kube, name), 30, f"{name} Established")
        for i, (spec, field, message) in enumerate(CASES):
            obj = {
                "apiVersion": f"{CHECK_GROUP}/v1",
                "kind": "GroupCheck",
                "metadata": {"name": f"c{i}"},
                "spec": spec,
            }

            def create(obj: dict[str, Any] = obj) -> Any:
                return kube.custom.create_namespaced_custom_object(
                    CHECK_GROUP, "v1", namespace, CHECK_PLURAL, obj, dry_run="All"
                )

            # the CRD's schema may take a moment to be served after Established
            refused = None
            try:
                wait_for(create, 10, "the check CRD served") if i == 0 else create()
            except ApiException as err:
                refused = err
            assert twin(spec) == message, spec
            if field is None:
                assert refused is None, (spec, refused and refused.body)
                continue
            assert refused is not None, spec
            assert refused.status == 422
            text = str(json.loads(refused.body or "{}")["message"])
            assert f"{field}: Invalid value" in text, text
            assert str(message) in text, text
    finally:
        kube.apiext.delete_custom_resource_definition(name)


# ----- a cell's pool rendered as a LeaderWorkerSet, on the real controller ------------------
def rendered_decode_lws(namespace: str, shape: groups.GroupShape, decode: int) -> dict[str, Any]:
    """The decode pool of PDDeployment ``moe`` (v1) as groups.leader_worker_set renders it
    from manifests.pool_deployment, without its owner reference (no PDDeployment exists
    here: the garbage collector would delete the set)."""
    spec = PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "vllm/vllm-openai", "version": "v1"},
            "prefill": {"tokensPerSecond": 9000, "gpusPerReplica": 2},
            "decode": {
                "tokensPerSecond": 4000,
                "gpusPerReplica": shape.gpus,
                "template": {"metadata": {"annotations": {STARTUP_DELAY_ANNOTATION: "1s"}}},
            },
        }
    )
    meta = Meta(name="moe", namespace=namespace, uid="none")
    cell = manifests.spec_cell(spec, prefill=1, decode=decode)
    dep = manifests.pool_deployment(meta, spec, cell, Role.DECODE)
    lws = groups.leader_worker_set(dep, shape)
    del lws["metadata"]["ownerReferences"]
    return lws


def test_rendered_pool_runs_on_the_lws_controller(lab: Lab, kube: Kube, namespace: str) -> None:
    """What pdscaler renders for a 2-pods-per-replica decode pool passes LWS's webhooks
    and comes up as groups; the router's leader selector finds exactly the groups'
    leaders (LWS's worker-index 0); 1 -> 3 groups through /scale, 2 GPUs a pod."""
    ensure_lws(lab)
    shape = groups.GroupShape(pods=2, gpus=4)
    body = rendered_decode_lws(namespace, shape, decode=1)
    name = body["metadata"]["name"]
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    labels_of_pool = body["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    rev = labels_of_pool[naming.LABEL_REVISION]
    selector = groups.leader_selector(naming.pool_selector("moe", Role.DECODE, rev), shape)
    query = ",".join(f"{k}={v}" for k, v in selector.items())

    def ready(want: int) -> list[dict[str, Any]]:
        pods = pod_dicts(kube, namespace, name)
        count = groups.count_groups(pods, shape)
        return pods if (count.ready, count.forming) == (want, 0) else []

    for want in (1, 3):
        if want == 3:
            kube.custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"replicas": 3}}
            )
        pods = wait_for(functools.partial(ready, want), 90, f"{want} Ready groups of 2")
        leaders: list[Any] = list_pods(kube, namespace, query)
        leader_names = sorted(str(p.metadata.name) for p in leaders)
        assert leader_names == groups.ready_leaders(pods, shape)
        assert len(leader_names) == want
        by_lws = sorted(p["metadata"]["name"] for p in pods if labels(p)[WORKER_INDEX_LABEL] == "0")
        assert leader_names == by_lws
        limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in pods]
        assert limits == [{GPU_RESOURCE: "2"}] * shape.pods_for(want)
        assert sum(int(x[GPU_RESOURCE]) for x in limits) == shape.gpus_for(want)


# ----- the operator drives a 2-pods-per-replica decode pool (issue 29 done-when (b)) --------
def pool_objects(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The PDDeployment's LeaderWorkerSets (its grouped pools), live ones only."""
    found: Any = kube.custom.list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, label_selector=f"{naming.LABEL_NAME}={name}"
    )
    return [o for o in found["items"] if not o["metadata"].get("deletionTimestamp")]


def router_pairs(kube: Kube, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """Per router Deployment: (its revision, the revision its prefill selector names, the
    one its decode selector names); the decode selector must also ask for leaders."""
    out = []
    for dep in deployments(kube, namespace, name):
        lab = dep["metadata"]["labels"]
        if lab.get(naming.LABEL_ROLE) != naming.ROLE_ROUTER:
            continue
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        pre = args[args.index("--prefill-selector") + 1 : args.index("--decode-selector")]
        dec = args[args.index("--decode-selector") + 1 : args.index("--host")]
        assert f"{groups.LABEL_GROUP_ROLE}={groups.LEADER}" in dec, dec
        assert f"{groups.LABEL_GROUP_ROLE}={groups.LEADER}" not in pre, pre

        def rev(words: list[str]) -> str:
            key = f"{naming.LABEL_REVISION}="
            return next(w[len(key) :] for w in words if w.startswith(key))

        out.append((lab[naming.LABEL_REVISION], rev(pre), rev(dec)))
    return out


def decode_groups(kube: Kube, namespace: str, name: str) -> dict[str, tuple[int, int, int]]:
    """Per decode LeaderWorkerSet's version: (groups asked for, Ready groups counted from
    its pods, GPUs its pods hold); checks every pod's GPUs and the group accounting."""
    out: dict[str, tuple[int, int, int]] = {}
    pods = [
        p for p in opkit_pods(kube, namespace, name) if not p["metadata"].get("deletionTimestamp")
    ]
    for lws in pool_objects(kube, namespace, name):
        lab = lws["metadata"]["labels"]
        assert lab[naming.LABEL_ROLE] == "decode", lab
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
        mine = [p for p in pods if labels(p).get(SET_NAME_LABEL) == lws["metadata"]["name"]]
        count = groups.count_groups(mine, groups.GroupShape(2, 2))
        gpus = sum(
            int(c["resources"]["limits"].get(GPU_RESOURCE, 0))
            for p in mine
            for c in p["spec"]["containers"]
        )
        out[lab[naming.LABEL_VERSION]] = (int(lws["spec"]["replicas"]), count.ready, gpus)
    return out


def held_gpus(kube: Kube, namespace: str, name: str) -> int:
    """GPUs the PDDeployment's pods hold now, terminating ones included."""
    return sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0))
        for p in opkit_pods(kube, namespace, name)
        for c in p["spec"]["containers"]
    )


def groups_are(
    kube: Kube, namespace: str, name: str, version: str, want: tuple[int, int, int]
) -> bool:
    """The decode LeaderWorkerSet of ``version`` asks for, has Ready and holds ``want``
    (groups, Ready groups, GPUs)."""
    return decode_groups(kube, namespace, name).get(version) == want


def test_operator_scales_and_rolls_a_grouped_decode_pool(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    """decode podsPerReplica 2, gpusPerReplica 2 (a pod: 1 GPU): the operator renders
    the decode pool as a LeaderWorkerSet, the real LWS controller runs it; replicas.min
    1 -> 3 scales it 1 -> 3 groups (6 pods, 6 GPUs: accounting by group); v1 -> v2 rolls
    it to a v2 LeaderWorkerSet of 3 groups and removes v1's, while every router, sampled
    through the rollout, pairs prefill and decode leaders of its own revision only (0
    cross-version pairs, from the objects: the engine simulator does not serve these
    pods). Prefill stays a Deployment (one pod a replica)."""
    ensure_lws(lab)
    name = "moe"
    serve_light(exporter, namespace, name)
    manifest = pdd_manifest(name, lab.prometheus_url, surge=6)
    manifest["spec"]["decode"].update({"podsPerReplica": 2, "gpusPerReplica": 2})
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name, period=0.5):
        create_pdd(kube, namespace, manifest)
        wait_for(lambda: groups_are(kube, namespace, name, "v1", (1, 1, 2)), 60, "v1: 1 group")
        roles = {
            d["metadata"]["labels"].get(naming.LABEL_ROLE)
            for d in deployments(kube, namespace, name)
        }
        assert "prefill" in roles, roles
        assert "decode" not in roles, roles  # decode is the LeaderWorkerSet
        t0 = time.monotonic()
        patch_spec(kube, namespace, name, {"decode": {"replicas": {"min": 3, "max": 12}}})
        wait_for(lambda: groups_are(kube, namespace, name, "v1", (3, 3, 6)), 60, "v1: 3 groups")
        scaled = time.monotonic() - t0

        def status_ready() -> dict[str, Any] | None:
            st = get_pdd(kube, namespace, name).get("status") or {}
            dec = st.get("decode") or {}
            return st if (dec.get("replicas"), dec.get("readyReplicas")) == (3, 3) else None

        wait_for(status_ready, 30, "status: decode 3/3 (groups)")
        t1 = time.monotonic()
        patch_spec(kube, namespace, name, {"engine": {"version": "v2"}})
        crossed: list[tuple[str, str, str]] = []
        samples = peak = 0

        def rolled() -> bool:
            nonlocal samples, peak
            pairs = router_pairs(kube, namespace, name)
            crossed.extend(p for p in pairs if len(set(p)) != 1)
            samples += 1
            peak = max(peak, held_gpus(kube, namespace, name))
            g = decode_groups(kube, namespace, name)
            st = get_pdd(kube, namespace, name).get("status") or {}
            return g == {"v2": (3, 3, 6)} and st.get("activeVersion") == "v2"

        wait_for(rolled, 90, "v2: 3 Ready decode groups, v1's LeaderWorkerSet gone")
        rolled_in = time.monotonic() - t1
        # settled: the LeaderWorkerSet as the API server keeps it (webhook defaults and
        # all) is what the operator rendered: 4 more ticks apply nothing to it
        before, ticks = rt.kube.audit.count, rt.ticks
        wait_for(lambda: rt.ticks >= ticks + 4, 30, "4 more ticks")
        again = [w for w in rt.kube.audit.since(before) if w.kind == groups.LWS_KIND]
        assert again == [], again
    assert crossed == [], crossed[:5]
    assert samples >= 5
    # the rollout's GPUs counted by group: v1's 1 + 3 x 2 and at most one v2 level
    # beside it, 1 prefill + ceil(3 x 1 / 1) = 3 groups x 2 = 7 GPUs (maxSurgeGPUs 6 is
    # below a level, so rollout.levels.totals allows one level while maxGPUs has room)
    assert 7 <= peak <= 7 + 7, peak
    print(
        f"1 -> 3 groups in {scaled:.1f}s; v1 -> v2 in {rolled_in:.1f}s ({samples} samples,"
        f" peak {peak} GPUs held)"
    )


def test_a_completion_goes_through_a_group_leader(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    """Real HTTP: the scaled-down chat example with decode podsPerReplica 2 (1 GPU a
    pod), served by the engine simulator and the real vllm-router the operator deploys:
    a streamed completion goes router -> prefill -> decode, and the decode pod is the
    leader of a Ready group of the cell's LeaderWorkerSet, of the prefill's revision.
    (The router's leader-only selector itself is checked by the rollout test above: the
    router's pick here went to the leader with and without it.)"""
    ensure_lws(lab)
    doc = scaled_chat(namespace, lab.prometheus_url)
    doc["spec"]["decode"].update({"podsPerReplica": 2, "gpusPerReplica": 2})
    with serving(lab, kube, namespace, doc=doc) as (front, control, _):
        text = wait_for(lambda: completion(front), 120, "a streamed completion via the front")
        assert text.count("data: ") >= 8
        decoded = [r for r in records(control) if r["kind"] == "decode" and r["ok"]]
        assert decoded, records(control)
        pods = {p["metadata"]["name"]: p for p in opkit_pods(kube, namespace, SERVED)}
        for rec in decoded:
            pod = pods[rec["decode_pod"]]
            assert labels(pod)[groups.LABEL_GROUP_ROLE] == groups.LEADER
            assert labels(pod)[naming.LABEL_REVISION] == rec["prefill_revision"]
            assert rec["decode_pod"] in groups.ready_leaders(list(pods.values()), SHAPE_1GPU)
