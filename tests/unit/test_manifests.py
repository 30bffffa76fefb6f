"""The cell builders (manifests.py, router.py): names, labels, owner references, the
engine image set by the operator, GPUs requested, the router of each cell discovering only
its own cell's pods, the front Service selecting routers, and a spec-hash that ignores
replicas but sees every other managed field."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest

from pdscaler import invariants, manifests, naming, router
from pdscaler.manifests import CellTarget
from pdscaler.objects import SPEC_HASH_ANNOTATION, Meta, digest
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

META = Meta(name="chat", namespace="serving", uid="uid-1")


def spec(**over: Any) -> PDDeploymentSpec:
    base: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
        "prefill": {
            "tokensPerSecond": 3000,
            "gpusPerReplica": 2,
            "template": {
                "metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}},
                "spec": {
                    "containers": [
                        {"name": "sidecar", "image": "busybox"},
                        {
                            "name": "engine",
                            "image": "evil/override:latest",
                            "ports": [{"containerPort": 9000}],
                            "env": [{"name": "PDSCALER_DECODE_ENDPOINT", "value": "stale"}],
                        },
                    ]
                },
            },
        },
        "decode": {"tokensPerSecond": 800},
    }
    base.update(over)
    return PDDeploymentSpec.model_validate(base)


CELL = CellTarget(image="vllm/vllm-openai", version="v0.11.0", prefill=3, decode=4)


def engine(dep: dict[str, Any]) -> dict[str, Any]:
    for c in dep["spec"]["template"]["spec"]["containers"]:
        if c["name"] == "engine":
            return dict(c)
    raise AssertionError("no engine container")


def test_pool_deployment_names_labels_owner_and_replicas() -> None:
    """chat + v0.11.0 -> chat-v0-11-0-2152f-prefill with 3 replicas, controller ref."""
    dep = manifests.pool_deployment(META, spec(), CELL, Role.PREFILL)
    assert dep["metadata"]["name"] == "chat-v0-11-0-2152f-prefill"
    assert dep["spec"]["replicas"] == 3
    labels = dep["metadata"]["labels"]
    assert labels[naming.LABEL_NAME] == "chat"
    assert labels[naming.LABEL_ROLE] == "prefill"
    assert labels[naming.LABEL_VERSION] == "v0.11.0"
    (ref,) = dep["metadata"]["ownerReferences"]
    assert ref["uid"] == "uid-1"
    assert ref["controller"] is True
    assert ref["kind"] == "PDDeployment"
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["team"] == "a"  # template labels pass through
    assert all(pod_labels[k] == v for k, v in dep["spec"]["selector"]["matchLabels"].items())
    assert dep["spec"]["template"]["metadata"]["annotations"]["x"] == "y"


def test_engine_image_comes_from_spec_not_template() -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.PREFILL)
    assert engine(dep)["image"] == "vllm/vllm-openai:v0.11.0"
    sidecar = dep["spec"]["template"]["spec"]["containers"][0]
    assert sidecar["image"] == "busybox"  # only the engine container is rewritten


def test_pods_request_gpus_per_replica_and_tolerate_taint() -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.PREFILL)
    res = engine(dep)["resources"]
    assert res["limits"][manifests.GPU_RESOURCE] == "2"
    assert res["requests"][manifests.GPU_RESOURCE] == "2"
    decode = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    assert engine(decode)["resources"]["limits"][manifests.GPU_RESOURCE] == "1"
    tol = decode["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tol


def test_the_engine_template_passes_through_and_no_endpoint_is_wired() -> None:
    """Pairing is the router's job now: the operator adds no endpoint variable, and the
    template's own env passes through untouched."""
    dep = manifests.pool_deployment(META, spec(), CELL, Role.PREFILL)
    assert engine(dep)["env"] == [{"name": "PDSCALER_DECODE_ENDPOINT", "value": "stale"}]
    decode = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    assert "env" not in engine(decode)


def test_the_router_discovers_only_its_own_cells_pods() -> None:
    """chat's v0.11.0 cell runs vllm-router in P/D mode whose prefill and decode
    selectors name this cell's revision (and nothing else selects wider)."""
    cell = CellTarget(CELL.image, CELL.version, prefill=3, decode=4, router=2)
    dep = router.router_deployment(META, spec(), cell.rev, cell.version, cell.router, 8000)
    assert dep["metadata"]["name"] == f"chat-{cell.rev}-router"
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]
    assert pod["metadata"]["labels"][naming.LABEL_ROLE] == "router"
    assert pod["spec"]["serviceAccountName"] == "chat-router"
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["vllm-router"]
    args = container["args"]
    assert "--vllm-pd-disaggregation" in args
    pre = args[args.index("--prefill-selector") + 1 : args.index("--decode-selector")]
    dec = args[args.index("--decode-selector") + 1 : args.index("--host")]
    assert pre == [
        "pdscaler.io/name=chat",
        "pdscaler.io/role=prefill",
        f"pdscaler.io/revision={cell.rev}",
    ]
    assert dec == [
        "pdscaler.io/name=chat",
        "pdscaler.io/role=decode",
        f"pdscaler.io/revision={cell.rev}",
    ]
    assert args[args.index("--service-discovery-namespace") + 1] == "serving"
    assert invariants.discovered_revisions(pod) == {cell.rev}
    assert "nvidia.com/gpu" not in str(container["resources"])


def test_the_routers_identity_may_only_read_pods_in_its_namespace() -> None:
    account, role, binding = router.router_identity(META)
    assert (account["kind"], role["kind"], binding["kind"]) == (
        "ServiceAccount",
        "Role",
        "RoleBinding",
    )
    assert role["metadata"]["namespace"] == "serving"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "chat-router", "namespace": "serving"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_sglang_preset_runs_sglang_router_and_external_deploys_no_router() -> None:
    sg = spec(metrics={"preset": "sglang"})
    objs = manifests.desired_objects(META, sg, [CELL])
    (dep,) = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-router")
    ]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["command"][-1] == "sglang_router.launch_router"
    assert "--pd-disaggregation" in container["args"]
    ext = spec(router={"type": "external"})
    names = [o["metadata"]["name"] for o in manifests.desired_objects(META, ext, [CELL])]
    assert names == [f"chat-{CELL.rev}-decode", f"chat-{CELL.rev}-prefill"]


def _router_image(s: PDDeploymentSpec) -> str:
    (dep,) = [
        o
        for o in manifests.desired_objects(META, s, [CELL])
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-router")
    ]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return str(container["image"])


def test_the_router_image_follows_the_router_type_unless_set() -> None:
    """The sglang preset's router command never runs in the vLLM router's image."""
    assert _router_image(spec()) == "vllm-router:0.1.17"
    assert _router_image(spec(metrics={"preset": "sglang"})) == "sglang-router:0.3.2"
    assert _router_image(spec(router={"type": "sglang-router"})) == "sglang-router:0.3.2"
    own = spec(metrics={"preset": "sglang"}, router={"image": "reg/my-router:1"})
    assert _router_image(own) == "reg/my-router:1"
    assert spec(router={"type": "external"}).router_image == ""


def test_front_service_selects_the_routers_of_every_cell() -> None:
    svc = manifests.front_service(META, 9000)
    assert svc["metadata"]["name"] == "chat"
    assert svc["spec"]["selector"] == {naming.LABEL_NAME: "chat", naming.LABEL_ROLE: "router"}
    assert svc["spec"]["ports"][0]["port"] == 9000


def test_router_replicas_follow_ready_prefill_and_need_both_pools() -> None:
    """prefillPerRouter 2: 5 ready prefill -> 3 routers; none while a pool has no Ready
    pod or the rollout plans a pool at 0; within router.replicas."""
    s = spec()
    assert router.replicas(s, (6, 4), (5, 4)) == 3
    assert router.replicas(s, (6, 4), (5, 0)) == 0
    assert router.replicas(s, (0, 4), (5, 4)) == 0
    assert router.replicas(s, (40, 4), (40, 4)) == 8
    assert router.replicas(spec(router={"prefillPerRouter": 1}), (2, 1), (2, 1)) == 2
    assert router.keep_front(0, 2, 0) == 2  # the last Ready routers stay
    assert router.keep_front(0, 2, 1) == 0
    assert router.hold_prefill(0, 4, 1) == 4
    assert router.hold_prefill(0, 4, 0) == 0


def test_engine_port_from_template_else_default() -> None:
    s = spec()
    assert manifests.engine_port(s.prefill) == 9000
    assert manifests.engine_port(s.decode) == manifests.DEFAULT_PORT


def test_spec_hash_ignores_replicas_but_sees_template_and_version() -> None:
    a = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    more = CellTarget(CELL.image, CELL.version, prefill=3, decode=9)
    b = manifests.pool_deployment(META, spec(), more, Role.DECODE)
    assert (
        a["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        == (b["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    )
    s2 = spec(decode={"tokensPerSecond": 800, "gpusPerReplica": 2})
    c = manifests.pool_deployment(META, s2, CELL, Role.DECODE)
    assert (
        c["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        != (a["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    )


def test_builders_are_deterministic_and_do_not_mutate_the_spec() -> None:
    s = spec()
    before = s.model_dump()
    one = manifests.desired_objects(META, s, [CELL])
    two = manifests.desired_objects(META, s, [CELL])
    assert one == two
    assert s.model_dump() == before


def test_desired_objects_order_decode_prefill_router_then_front() -> None:
    other = CellTarget("vllm/vllm-openai", "v0.12.0", prefill=1, decode=1)
    objs = manifests.desired_objects(META, spec(), [CELL, other])
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    rev2 = other.rev
    assert names == [
        ("Deployment", f"chat-{CELL.rev}-decode"),
        ("Deployment", f"chat-{CELL.rev}-prefill"),
        ("Deployment", f"chat-{CELL.rev}-router"),
        ("Deployment", f"chat-{rev2}-decode"),
        ("Deployment", f"chat-{rev2}-prefill"),
        ("Deployment", f"chat-{rev2}-router"),
        ("ServiceAccount", "chat-router"),
        ("Role", "chat-router"),
        ("RoleBinding", "chat-router"),
        ("Service", "chat"),
    ]


@pytest.mark.parametrize("role", list(Role))
def test_strategy_never_surges_gpus(role: Role) -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, role)
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0


def test_template_without_containers_gets_an_engine_container() -> None:
    s = spec(decode={"tokensPerSecond": 800, "template": {}})
    dep = manifests.pool_deployment(META, s, CELL, Role.DECODE)
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["name"] == "engine"
    assert c["image"] == "vllm/vllm-openai:v0.11.0"
    assert c["ports"] == [{"name": "http", "containerPort": 8000}]


def test_frozen_pool_keeps_template_and_hash_changes_only_replicas() -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    live = {
        **dep,
        "metadata": {
            **dep["metadata"],
            "uid": "u",
            "resourceVersion": "9",
            "managedFields": [{}],
            "annotations": {
                **dep["metadata"]["annotations"],
                "deployment.kubernetes.io/revision": "3",
            },
        },
        "status": {"replicas": 4},
    }
    out = manifests.frozen_pool(live, 7)
    assert out["spec"]["replicas"] == 7
    assert out["spec"]["template"] == dep["spec"]["template"]
    assert out["metadata"]["annotations"] == dep["metadata"]["annotations"]
    assert set(out["metadata"]) == {"name", "namespace", "labels", "annotations", "ownerReferences"}
    assert "status" not in out


# ----------------------------------------------------------- drift and pod ownership


def test_drifted_sees_a_changed_engine_image_or_args_not_replicas() -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    assert not manifests.drifted(dep)
    scaled = {**dep, "spec": {**dep["spec"], "replicas": 9}}
    assert not manifests.drifted(scaled)
    for key, value in (("image", "vllm/vllm-openai:v9"), ("args", ["--x"])):
        changed = copy.deepcopy(dep)
        changed["spec"]["template"]["spec"]["containers"][0][key] = value
        assert manifests.drifted(changed), key


def test_a_frozen_pool_gets_its_rendered_image_back() -> None:
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    changed = copy.deepcopy(dep)
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v9"
    frozen = manifests.frozen_pool(changed, 2)
    assert engine(frozen)["image"] == "vllm/vllm-openai:v0.11.0"
    assert not manifests.drifted(frozen)


def test_pods_count_only_under_their_own_deployment() -> None:
    """A pod with a cell's labels whose controller is a ReplicaSet of another
    Deployment is not counted; one of the pool's own ReplicaSet is."""
    from pdscaler import observe
    from pdscaler.plan import Observed

    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    dep["metadata"]["uid"] = "d-1"
    labels = dep["spec"]["template"]["metadata"]["labels"]
    name = dep["metadata"]["name"]

    def pod(owner: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": f"p-{owner}",
                "labels": {**labels, "pod-template-hash": owner.rsplit("-", 1)[-1]},
                "ownerReferences": [{"kind": "ReplicaSet", "name": owner, "controller": True}],
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        }

    seen = observe.cells(
        Observed(deployments=(dep,), pods=(pod(f"{name}-7d9f"), pod("squatter-5c4b"))), "uid-1"
    )
    assert seen[CELL.rev].decode.ready == 1


@pytest.mark.parametrize(("ttft", "drain"), [(2.0, 9), (15.0, 35), (0.3, 6), (100.0, 120)])
def test_drain_is_twice_the_ttft_objective_plus_5_s_at_most_120(ttft: float, drain: int) -> None:
    assert manifests.drain_seconds(spec(slo={"ttftSeconds": ttft})) == drain


@pytest.mark.parametrize("role", list(Role))
def test_a_deleted_pool_pod_keeps_serving_through_a_prestop_sleep(role: Role) -> None:
    """No hook in the template: a preStop sleep of drain_seconds (TTFT 2 s -> 9 s) on the
    engine container, added to Kubernetes' default grace of 30 s; the sidecar gets none."""
    dep = manifests.pool_deployment(META, spec(), CELL, role)
    assert engine(dep)["lifecycle"] == {"preStop": {"sleep": {"seconds": 9}}}
    pod = dep["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 39
    assert all("lifecycle" not in c for c in pod["containers"] if c["name"] != "engine")


def test_the_drain_adds_to_the_templates_grace_and_a_templates_hook_wins() -> None:
    s = spec()
    s.decode.template["spec"] = {"terminationGracePeriodSeconds": 120}
    dep = manifests.pool_deployment(META, s, CELL, Role.DECODE)
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 129
    own = {"preStop": {"exec": {"command": ["/drain.sh"]}}}
    s.decode.template["spec"] = {
        "terminationGracePeriodSeconds": 60,
        "containers": [{"name": "engine", "lifecycle": own}],
    }
    dep = manifests.pool_deployment(META, s, CELL, Role.DECODE)
    assert engine(dep)["lifecycle"] == own
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_the_drain_does_not_make_a_new_cell() -> None:
    """The hook is not KV configuration: the same revision with any TTFT objective."""
    assert manifests.spec_revision(spec()) == manifests.spec_revision(
        spec(slo={"ttftSeconds": 15.0})
    )


def _engine_of(dep: dict[str, Any]) -> dict[str, Any]:
    for c in dep["spec"]["template"]["spec"]["containers"]:
        if c["name"] == "engine":
            return cast(dict[str, Any], c)
    raise AssertionError("no engine container")


def _set_cpu(engine: dict[str, Any]) -> None:  # kubectl set resources --limits=cpu=4
    engine["resources"]["limits"]["cpu"] = "4"


def _set_gpus(engine: dict[str, Any]) -> None:
    engine["resources"]["limits"][manifests.GPU_RESOURCE] = "4"
    engine["resources"]["requests"][manifests.GPU_RESOURCE] = "4"


def _add_env_from(engine: dict[str, Any]) -> None:
    engine["envFrom"] = [{"configMapRef": {"name": "other-engine-flags"}}]


def _change_value_from(engine: dict[str, Any]) -> None:
    engine["env"][1]["valueFrom"] = {"configMapKeyRef": {"name": "other", "key": "k"}}


KV_EDITS = {
    "resources": _set_cpu,
    "gpus": _set_gpus,
    "envFrom": _add_env_from,
    "valueFrom": _change_value_from,
}


def _with_value_from() -> PDDeploymentSpec:
    s = spec()
    env = s.prefill.template["spec"]["containers"][1]["env"]
    env.append({"name": "FLAGS", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "k"}}})
    s.prefill.template["spec"]["containers"][1]["resources"] = {"limits": {"cpu": 0.5}}
    return s


@pytest.mark.parametrize("edit", sorted(KV_EDITS))
def test_drifted_sees_every_kv_relevant_edit(edit: str) -> None:
    """What the revision hashes (resources, gpusPerReplica, envFrom, env valueFrom) is
    what drift detection watches: ``kubectl set resources``, a GPU-count, envFrom or
    valueFrom edit on a cell's Deployment is drift."""
    dep = manifests.pool_deployment(META, _with_value_from(), CELL, Role.PREFILL)
    assert not manifests.drifted(dep)
    KV_EDITS[edit](_engine_of(dep))
    assert manifests.drifted(dep), edit


def test_what_the_api_server_fills_in_is_not_drift() -> None:
    """The API server returns quantities in canonical form (0.5 CPU -> "500m", "2048Mi"
    -> "2Gi"), fills in a fieldRef's apiVersion and drops empty strings: none of that
    is drift."""
    s = _with_value_from()
    engine_spec = s.prefill.template["spec"]["containers"][1]
    engine_spec["resources"]["requests"] = {"memory": "2048Mi"}
    engine_spec["env"].append({"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "x"}}})
    engine_spec["env"].append({"name": "EMPTY", "value": ""})
    dep = manifests.pool_deployment(META, s, CELL, Role.PREFILL)
    served = copy.deepcopy(dep)
    eng = _engine_of(served)
    eng["resources"]["limits"]["cpu"] = "500m"
    eng["resources"]["requests"]["memory"] = "2Gi"
    eng["env"][2]["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
    del eng["env"][3]["value"]
    eng["terminationMessagePath"] = "/dev/termination-log"
    assert not manifests.drifted(served)


def test_a_deployment_rendered_by_the_previous_operator_is_not_drifted() -> None:
    """A pool Deployment whose engine-hash was written by an operator that hashed only
    image, command, args and env values is judged by that hash (no false DriftReverted
    or DriftDetected after an upgrade), and still drifts on those fields."""
    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    eng = _engine_of(dep)
    legacy = [eng.get("image"), eng.get("command"), eng.get("args")]
    legacy.append([(e.get("name"), e.get("value")) for e in eng.get("env") or []])
    dep["metadata"]["annotations"][naming.ANNOTATION_ENGINE] = digest(legacy)
    assert not manifests.drifted(dep)
    eng["image"] = "vllm/vllm-openai:v9"
    assert manifests.drifted(dep)


def test_the_revision_and_drift_detection_share_one_kv_definition() -> None:
    """Scheme 2's ``kv_config_v2`` is unchanged for existing specs (it finds their cells
    on an operator upgrade: ``adopt``), scheme 3's is its own (``"3."``), and both are
    built from the same engine fields ``engine_hash`` watches."""
    assert manifests.kv_config_v2(spec()) == "231040116a"
    assert manifests.kv_config(spec()) == "3.cb554c446b"
    assert set(manifests.KV_FIELDS) == {"command", "args", "env", "envFrom", "resources"}


def _ready_pod(
    labels: dict[str, str], refs: list[dict[str, Any]] | None, name: str = "p"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {
        "metadata": meta,
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def _rs_ref(name: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name, "controller": True}


def test_a_bare_pod_with_a_cells_labels_is_not_capacity() -> None:
    """A pod made by hand with the pool's labels and no owner, one owned by a
    ReplicaSet of another Deployment whose name starts with the pool's, and one whose
    ReplicaSet is not the one its pod-template-hash names count for nothing; the pod
    of the pool's own ReplicaSet (``<deployment>-<pod-template-hash>``) counts."""
    from pdscaler import observe
    from pdscaler.plan import Observed

    dep = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    name = dep["metadata"]["name"]
    labels = {**dep["spec"]["template"]["metadata"]["labels"], "pod-template-hash": "7d9f"}
    pods = (
        _ready_pod(labels, None, "bare"),
        _ready_pod(labels, [], "no-refs"),
        _ready_pod(labels, [_rs_ref(f"{name}-evil-7d9f")], "prefix"),
        _ready_pod(labels, [_rs_ref(f"{name}-5c4b")], "other-hash"),
        _ready_pod(labels, [{**_rs_ref(f"{name}-7d9f"), "controller": False}], "not-ctrl"),
        _ready_pod(labels, [_rs_ref(f"{name}-7d9f")], "own"),
    )
    seen = observe.cells(Observed(deployments=(dep,), pods=pods), "uid-1")
    assert seen[CELL.rev].decode.ready == 1
