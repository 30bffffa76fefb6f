"""A whole tick replayed as data: the spec, metrics and facts of the worked example of
``tests/unit/test_tick.py`` (prefill 3000 tok/s, decode 800 tok/s, min 1 / max 8 each,
16 GPUs; R = 1 req/s of 2000 prompt / 500 output tokens wants 1 + 1 replicas) and
``run``, which replays ticks on the simulated cluster, restarts included."""

from __future__ import annotations

from typing import Any

from pdscaler import tick
from pdscaler.objects import Meta
from pdscaler.plan import Observed
from pdscaler.rollout import RolloutState
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import HolderReading, MetricsSnapshot, PolicyMemory, PoolMetrics

OWNER = Meta(name="chat", namespace="serving", uid="u-1")
INTERVAL = 5.0


def spec(version: str = "v1", mode: str = "Auto") -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": version},
            "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
            "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 8}},
            "scaling": {"mode": mode, "interval": "5s", "maxGPUs": 16},
            "rollout": {"maxSurgeGPUs": 2, "progressDeadline": "10m"},
        }
    )


def snapshot(now: float, rate: float = 1.0, holder: HolderReading | None = None) -> MetricsSnapshot:
    """The chat load at ``rate`` req/s, both pools within their SLOs; ``holder``: the
    holding proxy's reading (scale to zero), None when it is not asked."""
    return MetricsSnapshot(
        time=now,
        request_rate=rate,
        prompt_tokens=2000.0,
        output_tokens=500.0,
        prefill=PoolMetrics(queue_depth=0.0, latency_seconds=0.3, running=0.0),
        decode=PoolMetrics(queue_depth=0.0, latency_seconds=0.02, running=0.0),
        holder=holder,
    )


def facts(
    now: float,
    observed: Observed,
    the_spec: PDDeploymentSpec | None = None,
    raw_status: dict[str, Any] | None = None,
    memory: PolicyMemory | None = None,
    rollout: RolloutState | None = None,
    rate: float = 1.0,
    holder: HolderReading | None = None,
) -> tick.TickFacts:
    return tick.TickFacts(
        now=now,
        owner=OWNER,
        generation=1,
        spec=the_spec or spec(),
        observed=observed,
        metrics=snapshot(now, rate, holder),
        raw_status=raw_status,
        memory=memory,
        rollout=rollout,
    )


def run(
    cluster: SimCluster,
    the_spec: PDDeploymentSpec,
    start: float,
    ticks: int,
    state: dict[str, Any],
    rate: float = 1.0,
    restart_every: int = 0,
    holder: HolderReading | None = None,
) -> list[tick.TickEffects]:
    """Replay ``ticks`` ticks: compute, apply the writes to the simulated cluster, let
    pods start; ``restart_every`` > 0 drops the process memory every that many ticks
    (a restarted operator: only the status and the cluster survive)."""
    out = []
    for i in range(ticks):
        now = start + i * INTERVAL
        cluster.advance(now)
        if restart_every and i % restart_every == 0:
            state["memory"], state["rollout"] = None, None
        fx = tick.compute(
            facts(
                now,
                cluster.observed(),
                the_spec,
                raw_status=state.get("status"),
                memory=state.get("memory"),
                rollout=state.get("rollout"),
                rate=rate,
                holder=holder,
            )
        )
        cluster.apply(fx.writes, now)
        state["memory"] = fx.memory
        if fx.rollout is not None:
            state["rollout"] = fx.rollout
        if fx.status_changed:
            state["status"] = fx.status.to_k8s()
        out.append(fx)
    return out
