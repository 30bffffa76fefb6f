"""Whole ticks on the simulated cluster with ``scaleToZero`` (issue 29, item 3): a cell
serving 1 + 1 behind its router goes to zero once the holder has been idle, routers and
prefill included (the holder fronts the cell, so no router is kept for the front
Service), and wakes from zero on a held request."""

from __future__ import annotations

from typing import Any

from pdscaler import tick
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Action, HolderReading
from support import tick_world as world
from support.tick_world import INTERVAL

ZERO = {"min": 0, "max": 8}


def zero_spec(scale_to_zero: bool = True) -> PDDeploymentSpec:
    doc: dict[str, Any] = {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000, "replicas": ZERO},
        "decode": {"tokensPerSecond": 800, "replicas": ZERO},
        "scaling": {"interval": "5s", "maxGPUs": 16, "scaleDownStabilization": "10s"},
        "scaleToZero": {"idleSeconds": 30},
    }
    if not scale_to_zero:
        del doc["scaleToZero"]
    return PDDeploymentSpec.model_validate(doc)


def replicas(cluster: SimCluster) -> dict[str, int]:
    out: dict[str, int] = {}
    for dep in cluster.deployments.values():
        role = dep["metadata"]["labels"]["pdscaler.io/role"]
        if role == "holder":  # always one: it holds the requests at zero
            continue
        out[role] = out.get(role, 0) + int(dep["spec"].get("replicas", 0))
    return out


def run(
    cluster: SimCluster,
    start: float,
    ticks: int,
    state: dict[str, Any],
    holder: HolderReading,
    rate: float,
    s2z: bool = True,
) -> list[tick.TickEffects]:
    """``ticks`` ticks of the zero spec with the holder's ``holder`` reading."""
    return world.run(cluster, zero_spec(s2z), start, ticks, state, rate=rate, holder=holder)


def test_idle_cell_goes_to_zero_routers_and_prefill_included_then_wakes() -> None:
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    # one request held at zero: both pools (and then a router) start
    held = HolderReading(held=1, held_prompt_tokens=500, held_output_tokens=100,
                         in_flight=0, idle_seconds=0)  # fmt: skip
    fx = run(cluster, 0.0, 1, state, held, rate=0.0)
    assert fx[0].decision.action == Action.SCALED_FROM_ZERO
    busy = HolderReading(held=0, held_prompt_tokens=0, held_output_tokens=0,
                         in_flight=1, idle_seconds=0)  # fmt: skip
    run(cluster, INTERVAL, 8, state, busy, rate=1.0)
    assert replicas(cluster) == {"prefill": 1, "decode": 1, "router": 1}
    # idle past idleSeconds: everything goes, the router first, then prefill
    idle = HolderReading(held=0, held_prompt_tokens=0, held_output_tokens=0,
                         in_flight=0, idle_seconds=45)  # fmt: skip
    fx = run(cluster, 9 * INTERVAL, 8, state, idle, rate=0.0)
    assert Action.SCALED_TO_ZERO in [f.decision.action for f in fx]
    assert replicas(cluster) == {"prefill": 0, "decode": 0, "router": 0}
    assert fx[-1].decision.action == Action.HOLD_AT_ZERO
    left = [p for p in cluster.pods.values() if "deletionTimestamp" not in p["metadata"]]
    assert [p["metadata"]["labels"]["pdscaler.io/role"] for p in left] == ["holder"]
    # a held request wakes it again, decode first (the cell's first level), and the
    # rate of 0 the engines report meanwhile does not stop it before it serves
    fx = run(cluster, 17 * INTERVAL, 4, state, held, rate=0.0)
    assert fx[0].decision.action == Action.SCALED_FROM_ZERO
    assert [(f.decision.prefill, f.decision.decode) for f in fx] == [(1, 1)] * 4
    assert replicas(cluster)["prefill"] == 1
    assert replicas(cluster)["decode"] == 1


def test_without_scale_to_zero_the_holder_objects_go() -> None:
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    busy = HolderReading(held=0, held_prompt_tokens=0, held_output_tokens=0,
                         in_flight=1, idle_seconds=0)  # fmt: skip
    run(cluster, 0.0, 4, state, busy, rate=1.0)
    assert "chat-holder" in cluster.deployments
    assert "chat-routers" in cluster.services
    assert cluster.services["chat"]["spec"]["selector"]["pdscaler.io/role"] == "holder"
    run(cluster, 4 * INTERVAL, 2, state, busy, rate=1.0, s2z=False)
    assert "chat-holder" not in cluster.deployments
    assert "chat-routers" not in cluster.services
    assert cluster.services["chat"]["spec"]["selector"]["pdscaler.io/role"] == "router"
