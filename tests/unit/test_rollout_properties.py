"""Properties of the rollout state machine on random sequences of steps: random specs
(GPUs per replica, minimums, budget, surge), version changes (some versions never get
a Ready pod), required totals moving within the spec, pods becoming Ready at random
and removed pods lingering as terminating. The support module checks the docs/design.md §4
invariants after every step:

* a prefill replica is asked for only in a cell whose decode has a Ready pod, and a
  Ready prefill pod always has a Ready decode pod of its own cell;
* GPUs held (terminating pods included) never exceed maxGPUs + maxSurgeGPUs;
* serving capacity never drops below the minimums once served.

Liveness: once the changes stop and pods become Ready, the rollout ends with one cell
at the required totals: the spec's version, or the version rolled back to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pdscaler import rollout
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import RolloutPhase, RolloutReason
from support.rollout_world import Cluster, spec_for

VERSIONS = ("v2", "v3", "v4")


@dataclass(frozen=True)
class Move:
    version: str | None  # the spec changes to this version before the step
    required: tuple[int, int]
    ready_fraction: float  # of each pool's pending pods, after the step
    seconds: float


@dataclass(frozen=True)
class Scenario:
    overrides: dict[str, Any]
    start: tuple[int, int]
    broken: frozenset[str]
    moves: tuple[Move, ...]


def _required(draw: st.DrawFn, doc: dict[str, Any]) -> tuple[int, int]:
    """Totals the policy could ask: within [min, max] per pool and within maxGPUs."""
    p_spec, d_spec = doc["prefill"], doc["decode"]
    gp, gd, budget = p_spec["gpusPerReplica"], d_spec["gpusPerReplica"], doc["scaling"]["maxGPUs"]
    p_min, p_max = p_spec["replicas"]["min"], p_spec["replicas"]["max"]
    d_min, d_max = d_spec["replicas"]["min"], d_spec["replicas"]["max"]
    p_top = min(p_max, (budget - d_min * gd) // gp)
    p = draw(st.integers(p_min, max(p_min, p_top)))
    d_top = min(d_max, (budget - p * gp) // gd)
    d = draw(st.integers(d_min, max(d_min, d_top)))
    return p, d


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    doc: dict[str, Any] = {}
    floor = 0
    for role in ("prefill", "decode"):
        gpus = draw(st.integers(1, 3))
        low = draw(st.integers(0, 2))
        high = draw(st.integers(max(low, 1), 16))
        floor += low * gpus
        doc[role] = {"gpusPerReplica": gpus, "replicas": {"min": low, "max": high}}
    # room for one replica of each pool beyond the minimums: a spec that cannot run a
    # prefill replica with its decode replica cannot serve at all
    serviceable = floor + doc["prefill"]["gpusPerReplica"] + doc["decode"]["gpusPerReplica"]
    doc["scaling"] = {"maxGPUs": draw(st.integers(serviceable, 60))}
    doc["rollout"] = {"maxSurgeGPUs": draw(st.integers(1, 12)), "progressDeadline": "10m"}
    moves = []
    for _ in range(draw(st.integers(1, 25))):
        moves.append(
            Move(
                version=draw(st.one_of(st.none(), st.none(), st.sampled_from(VERSIONS))),
                required=_required(draw, doc),
                ready_fraction=draw(st.sampled_from([0.0, 0.34, 0.5, 1.0, 1.0])),
                seconds=draw(st.sampled_from([15.0, 60.0, 240.0])),
            )
        )
    broken = frozenset(draw(st.sets(st.sampled_from(VERSIONS), max_size=2)))
    return Scenario(doc, _required(draw, doc), broken, tuple(moves))


def _swappable(spec: PDDeploymentSpec, totals: tuple[int, int]) -> bool:
    """One replica of either pool fits in the surge plus the budget left by ``totals``
    (else a version change must break the cap or the minimums)."""
    gp, gd = spec.prefill.gpus_per_replica, spec.decode.gpus_per_replica
    free = spec.scaling.max_gpus - totals[0] * gp - totals[1] * gd
    return spec.rollout.max_surge_gpus + free >= max(gp, gd)


def _spec(s: Scenario, version: str) -> PDDeploymentSpec:
    merged = {
        "prefill": {"tokensPerSecond": 3000, **s.overrides["prefill"]},
        "decode": {"tokensPerSecond": 800, **s.overrides["decode"]},
        "scaling": s.overrides["scaling"],
        "rollout": s.overrides["rollout"],
    }
    return spec_for(version, **merged)


def _start(s: Scenario) -> Cluster:
    spec = _spec(s, "v1")
    cluster = Cluster.serving(spec, "v1", *rollout.runnable(spec, s.start))
    cluster.broken = set(s.broken)
    return cluster


def _share(fraction: float) -> Callable[[int], int]:
    """How many of ``pending`` pods become Ready: ``int(pending * fraction)``."""
    return lambda pending: int(pending * fraction)


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_invariants_hold_and_every_rollout_ends(s: Scenario) -> None:
    cluster = _start(s)
    version = "v1"
    for move in s.moves:
        if move.version is not None:
            version = move.version
            cluster.spec = _spec(s, version)
        cluster.tick(move.required, move.seconds)
        cluster.ripen(_share(move.ready_fraction))
    # liveness: the changes stop, every working pod becomes Ready
    required = s.moves[-1].required
    target = rollout.runnable(cluster.spec, required)
    if target == (0, 0):
        # scaled to zero: nothing can prove a new version, but nothing runs either
        cluster.run(required, 3)
        assert set(cluster.sizes().values()) == {(0, 0)}
        assert cluster.gpus() == 0
        return
    for _ in range(200):
        step = cluster.tick(required)
        cluster.ripen()
        if not step.phase.moving and len(cluster.cells) == 1:
            break
    else:
        # only a spec where one replica cannot be swapped within maxGPUs + surge may stall
        assert not _swappable(cluster.spec, target), cluster.steps[-1].message
        assert cluster.steps[-1].reason == RolloutReason.STEP_DOES_NOT_FIT
        return
    step = cluster.tick(required)  # settled: sized at the required totals
    ((final, sizes),) = cluster.sizes().items()
    assert sizes == target
    if step.phase == RolloutPhase.COMPLETE:
        assert final == version
    if final != version:
        assert step.phase == RolloutPhase.ROLLED_BACK or version in s.broken
    assert final not in s.broken
