"""A tiny cluster for the rollout tests (no tests here): cells whose pods become Ready
when the test says so, pods removed by a scale-down linger one tick as terminating
(holding their GPUs), the invariants of docs/design.md §4 checked on it, and the chat
service mid-rollout (``rolling``, ``until_done``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdscaler import manifests, naming, rollout
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import PoolObservation

IMAGE = "vllm/vllm-openai"


def spec_for(version: str, **overrides: Any) -> PDDeploymentSpec:
    """The chat service at ``version`` (1 GPU per replica, [1, 32] per pool, maxGPUs 64,
    maxSurgeGPUs 8, progressDeadline 10m); ``overrides`` merge one level deep."""
    doc: dict[str, Any] = {
        "engine": {"image": IMAGE, "version": version},
        "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 32}},
        "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 32}},
        "scaling": {"maxGPUs": 64},
        "rollout": {"maxSurgeGPUs": 8, "progressDeadline": "10m"},
    }
    for key, value in overrides.items():
        doc[key] = {**doc[key], **value} if isinstance(doc.get(key), dict) else value
    return PDDeploymentSpec.model_validate(doc)


def rev(version: str, spec: PDDeploymentSpec | None = None) -> str:
    """The revision of ``version`` run with ``spec``'s engine configuration (the
    chat service's by default)."""
    return naming.revision(IMAGE, version, manifests.kv_config(spec or spec_for(version)))


@dataclass
class Pool:
    replicas: int = 0
    ready: int = 0
    terminating: int = 0


@dataclass
class Cell:
    rev: str
    version: str
    image: str
    created: float
    prefill: Pool = field(default_factory=Pool)
    decode: Pool = field(default_factory=Pool)
    config: str = ""


@dataclass(frozen=True)
class View:
    """What the operator would observe of a cell (``rollout.CellView``)."""

    rev: str
    version: str
    image: str
    created: float | None
    prefill: PoolObservation
    decode: PoolObservation
    config: str = ""


@dataclass
class Cluster:
    """Cells by revision; ``broken`` versions never get a Ready pod."""

    spec: PDDeploymentSpec
    cells: dict[str, Cell] = field(default_factory=dict)
    state: rollout.RolloutState = field(default_factory=rollout.RolloutState)
    now: float = 1000.0
    broken: set[str] = field(default_factory=set)
    served: bool = False
    steps: list[rollout.RolloutStep] = field(default_factory=list)

    @staticmethod
    def serving(spec: PDDeploymentSpec, version: str, prefill: int, decode: int) -> Cluster:
        """A cluster already serving ``version`` at prefill/decode, all Ready."""
        config = manifests.kv_config(spec)
        cell = Cell(
            rev(version, spec), version, IMAGE, 0.0, Pool(prefill, prefill), Pool(decode, decode)
        )
        cell.config = config
        return Cluster(spec=spec, cells={cell.rev: cell}, served=True)

    def views(self) -> dict[str, View]:
        def obs(p: Pool) -> PoolObservation:
            return PoolObservation(p.replicas, p.ready, terminating=p.terminating)

        return {
            c.rev: View(
                c.rev, c.version, c.image, c.created, obs(c.prefill), obs(c.decode), c.config
            )
            for c in self.cells.values()
        }

    def tick(self, required: tuple[int, int], seconds: float = 60.0) -> rollout.RolloutStep:
        """One rollout step: decide, check the plan, apply it (pods removed become
        terminating; the previous tick's terminating pods are gone)."""
        for c in self.cells.values():
            c.prefill.terminating = c.decode.terminating = 0
        views = self.views()
        step = rollout.step(self.spec, views, required, self.now, self.state)
        check_plan(self, step, views)
        for plan in step.cells:
            cell = self.cells.get(plan.rev)
            if cell is None:
                assert plan.image is not None
                cell = self.cells[plan.rev] = Cell(plan.rev, plan.version, plan.image, self.now)
                cell.config = plan.config
            _scale(cell.prefill, plan.replicas.prefill)
            _scale(cell.decode, plan.replicas.decode)
        for gone in step.delete:
            assert self.cells[gone].prefill.replicas + self.cells[gone].decode.replicas == 0
            del self.cells[gone]
        self.state = step.state
        self.steps.append(step)
        self.now += seconds
        check_cluster(self)
        return step

    def ripen(self, amount: Callable[[int], int] | None = None) -> None:
        """Pods of working versions become Ready: ``amount(pending)`` of each pool's
        pending pods (all of them by default)."""
        for c in self.cells.values():
            if c.version in self.broken:
                continue
            for pool in (c.prefill, c.decode):
                pending = pool.replicas - pool.ready
                pool.ready += pending if amount is None else min(max(amount(pending), 0), pending)
        check_cluster(self)

    def gpus(self) -> int:
        s = self.spec
        return sum(
            (c.prefill.replicas + c.prefill.terminating) * s.prefill.gpus_per_replica
            + (c.decode.replicas + c.decode.terminating) * s.decode.gpus_per_replica
            for c in self.cells.values()
        )

    def serving_capacity(self) -> tuple[int, int]:
        """Ready prefill in cells with a Ready decode pod; Ready decode."""
        p = sum(c.prefill.ready for c in self.cells.values() if c.decode.ready >= 1)
        d = sum(c.decode.ready for c in self.cells.values())
        return p, d

    def run(self, required: tuple[int, int], ticks: int) -> None:
        """``ticks`` steps at ``required``, every pending pod Ready after each."""
        for _ in range(ticks):
            self.tick(required)
            self.ripen()

    def sizes(self) -> dict[str, tuple[int, int]]:
        return {c.version: (c.prefill.replicas, c.decode.replicas) for c in self.cells.values()}


def _scale(pool: Pool, want: int) -> None:
    """A ReplicaSet going to ``want``: unready pods go first, removed Ready pods linger
    one tick as terminating."""
    if want < pool.replicas:
        drop = pool.replicas - want
        removed_ready = max(drop - (pool.replicas - pool.ready), 0)
        pool.ready -= removed_ready
        pool.terminating += removed_ready
    pool.replicas = want


def check_plan(cluster: Cluster, step: rollout.RolloutStep, views: dict[str, View]) -> None:
    """Every cell is kept or deleted; prefill only where decode has a Ready pod."""
    kept = {c.rev for c in step.cells}
    assert kept | set(step.delete) >= set(views), "a cell was forgotten"
    for plan in step.cells:
        seen = views.get(plan.rev)
        decode_ready = seen.decode.ready if seen is not None else 0
        if plan.replicas.prefill > 0:
            assert decode_ready >= 1, (
                f"{plan.version}: prefill {plan.replicas.prefill} without ready decode"
            )
            assert plan.replicas.decode >= 1


def check_cluster(cluster: Cluster) -> None:
    """docs/design.md §4 invariants on the cluster right now."""
    s = cluster.spec
    for c in cluster.cells.values():
        if c.prefill.ready > 0:
            assert c.decode.ready >= 1, f"{c.version}: ready prefill without ready decode"
    limit = s.scaling.max_gpus + s.rollout.max_surge_gpus
    assert cluster.gpus() <= limit, f"{cluster.gpus()} GPUs > {limit}"
    p, d = cluster.serving_capacity()
    if cluster.served:
        assert p >= s.prefill.replicas.min, f"serving prefill {p} < min"
        assert d >= s.decode.replicas.min, f"serving decode {d} < min"
    elif p >= s.prefill.replicas.min and d >= s.decode.replicas.min and p + d > 0:
        cluster.served = True


CHAT = (20, 18)


def rolling(to: str = "v2", **overrides: object) -> Cluster:
    """v1 serving the chat sizes 20 / 18, the spec now at ``to``."""
    return Cluster.serving(spec_for(to, **overrides), "v1", *CHAT)


def until_done(c: Cluster, required: tuple[int, int] = CHAT, limit: int = 60) -> int:
    """Ticks (all pods Ready after each) until a rollout phase ends; returns the count."""
    for n in range(1, limit + 1):
        step = c.tick(required)
        c.ripen()
        if not step.phase.moving:
            return n
    raise AssertionError(f"not done after {limit} ticks: {c.steps[-1].message}")
