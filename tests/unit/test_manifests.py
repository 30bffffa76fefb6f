"""The cell builders (manifests.py): names, labels, owner references, the engine image
set by the operator, GPUs requested, prefill wired to its own cell's decode Service, and
a spec-hash that ignores replicas but sees every other managed field."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import manifests, naming
from pdscaler.manifests import CellTarget, Meta
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
                            "env": [{"name": naming.DECODE_ENDPOINT_ENV, "value": "wrong"}],
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


def test_prefill_wired_to_own_cells_decode_service_only() -> None:
    """The template's stale endpoint is replaced by this cell's decode Service."""
    dep = manifests.pool_deployment(META, spec(), CELL, Role.PREFILL)
    env = [e for e in engine(dep)["env"] if e["name"] == naming.DECODE_ENDPOINT_ENV]
    assert env == [
        {
            "name": naming.DECODE_ENDPOINT_ENV,
            "value": "chat-v0-11-0-2152f-decode.serving.svc:8000",
        }
    ]
    decode = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    assert "env" not in engine(decode)


def test_decode_service_selects_only_its_cell() -> None:
    svc = manifests.decode_service(META, 8000, CELL.rev, CELL.version)
    assert svc["metadata"]["name"] == "chat-v0-11-0-2152f-decode"
    assert svc["spec"]["selector"] == {
        naming.LABEL_NAME: "chat",
        naming.LABEL_ROLE: "decode",
        naming.LABEL_REVISION: CELL.rev,
    }


def test_front_service_selects_prefill_of_every_cell() -> None:
    svc = manifests.front_service(META, 9000)
    assert svc["metadata"]["name"] == "chat"
    assert svc["spec"]["selector"] == {naming.LABEL_NAME: "chat", naming.LABEL_ROLE: "prefill"}
    assert svc["spec"]["ports"][0]["port"] == 9000


def test_engine_port_from_template_else_default() -> None:
    s = spec()
    assert manifests.engine_port(s.prefill) == 9000
    assert manifests.engine_port(s.decode) == manifests.DEFAULT_PORT


def test_spec_hash_ignores_replicas_but_sees_template_and_version() -> None:
    a = manifests.pool_deployment(META, spec(), CELL, Role.DECODE)
    more = CellTarget(CELL.image, CELL.version, prefill=3, decode=9)
    b = manifests.pool_deployment(META, spec(), more, Role.DECODE)
    assert (
        a["metadata"]["annotations"][manifests.SPEC_HASH_ANNOTATION]
        == (b["metadata"]["annotations"][manifests.SPEC_HASH_ANNOTATION])
    )
    s2 = spec(decode={"tokensPerSecond": 800, "gpusPerReplica": 2})
    c = manifests.pool_deployment(META, s2, CELL, Role.DECODE)
    assert (
        c["metadata"]["annotations"][manifests.SPEC_HASH_ANNOTATION]
        != (a["metadata"]["annotations"][manifests.SPEC_HASH_ANNOTATION])
    )


def test_builders_are_deterministic_and_do_not_mutate_the_spec() -> None:
    s = spec()
    before = s.model_dump()
    one = manifests.desired_objects(META, s, [CELL])
    two = manifests.desired_objects(META, s, [CELL])
    assert one == two
    assert s.model_dump() == before


def test_desired_objects_order_decode_before_prefill_front_last() -> None:
    other = CellTarget("vllm/vllm-openai", "v0.12.0", prefill=1, decode=1)
    objs = manifests.desired_objects(META, spec(), [CELL, other])
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    rev2 = other.rev
    assert names == [
        ("Service", f"chat-{CELL.rev}-decode"),
        ("Deployment", f"chat-{CELL.rev}-decode"),
        ("Deployment", f"chat-{CELL.rev}-prefill"),
        ("Service", f"chat-{rev2}-decode"),
        ("Deployment", f"chat-{rev2}-decode"),
        ("Deployment", f"chat-{rev2}-prefill"),
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
