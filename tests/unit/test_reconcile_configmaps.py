"""The kube edge of configuration identity (issue 30, item 7): ``reconcile_once`` reads
the ConfigMaps the pool templates name, by ``get`` (never a list), and hands their
digests to the tick, so an edited ConfigMap makes the next tick create a new cell; a
PDDeployment whose templates read none costs no ConfigMap request. Whole ticks on the
in-memory API server (``support.reconcile_world``)."""

from __future__ import annotations

from typing import Any

from pdscaler import naming
from support.reconcile_world import NS, PDD_PATH, World, manifest

CM_PATH = f"/api/v1/namespaces/{NS}/configmaps/flags"


def _reading_world(data: dict[str, str] | None) -> World:
    world = World()
    doc = manifest()
    doc["spec"]["decode"]["template"] = {
        "spec": {
            "containers": [{"name": "engine", "envFrom": [{"configMapRef": {"name": "flags"}}]}]
        }
    }
    world.kube.put(PDD_PATH, doc)
    if data is not None:
        world.kube.put(CM_PATH, {"kind": "ConfigMap", "metadata": {"name": "flags"}, "data": data})
    return world


def _cells(world: World) -> set[str]:
    deps: list[dict[str, Any]] = world.kube.objects("deployments")
    return {d["metadata"]["labels"][naming.LABEL_REVISION] for d in deps}


def _configmap_requests(world: World) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in world.kube.requests if "/configmaps" in p]


def test_an_edited_configmap_makes_the_next_tick_create_a_new_cell() -> None:
    world = _reading_world({"MAX_MODEL_LEN": "8192"})
    world.tick()
    first = _cells(world)
    assert len(first) == 1
    assert _configmap_requests(world)
    assert {m for m, _ in _configmap_requests(world)} == {"GET"}
    assert {p for _, p in _configmap_requests(world)} == {CM_PATH}  # by name, no list
    world.tick()
    assert _cells(world) == first  # unchanged contents: the same cell
    world.kube.put(CM_PATH, {"kind": "ConfigMap", "metadata": {"name": "flags"}, "data": {}})
    world.tick()
    assert len(_cells(world)) == 2  # the new cell beside the old one: a rollout
    assert first < _cells(world)


def test_a_missing_configmap_is_read_as_absent_and_its_creation_is_a_new_cell() -> None:
    world = _reading_world(None)
    world.tick()
    first = _cells(world)
    assert len(first) == 1
    world.kube.put(CM_PATH, {"kind": "ConfigMap", "metadata": {"name": "flags"}, "data": {}})
    world.tick()
    assert len(_cells(world)) == 2


def test_templates_that_read_no_configmap_cost_no_request() -> None:
    world = World()
    world.tick()
    world.converge()
    assert _configmap_requests(world) == []
