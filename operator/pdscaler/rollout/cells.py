"""The rollout's view of the revision cells: what it reads of each, in numbers.

Owns: the ``CellView`` protocol (what the rollout reads of one observed cell), the
per-cell record ``Cell`` with one ``Pods`` count per role, the image a cell is
re-rendered from, and the deterministic serving order of cells. Must not: decide
sizes or phases (``levels``, ``phases``), read clocks or talk to Kubernetes.

Worked example: a v1 cell with prefill 20 asked / 16 Ready / 2 terminating and decode
18 / 18 / 0 is ``Cell(rev, "v1", image, created, PerRole(prefill=Pods(20, 16, 2),
decode=Pods(18, 18, 0)))``: ``live`` (the pods that exist and stay, max(asked,
Ready)) is prefill 20 / decode 18, ``present`` (live plus terminating, what holds
GPUs) 22 / 18, 40 pods in all; it is not ``empty``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from pdscaler import manifests, naming
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import PerRole, PoolObservation


class CellView(Protocol):
    """What the rollout reads of one cell (``observe.CellObservation`` fits)."""

    @property
    def rev(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def created(self) -> float | None: ...
    @property
    def prefill(self) -> PoolObservation: ...
    @property
    def decode(self) -> PoolObservation: ...


#: Whether a pod of the role serves only next to a Ready decode pod of its own cell.
NEEDS_READY_DECODE = PerRole(prefill=True, decode=False)

Cells = Mapping[str, CellView] | Iterable[CellView]
"""Cells by revision, or just the cells (what the public functions accept)."""


def cell_list(cells: Cells) -> list[CellView]:
    """The cells of ``cells``, in the order given."""
    return list(cells.values() if isinstance(cells, Mapping) else cells)


def observed(cell: CellView) -> PerRole[PoolObservation]:
    """A cell view's pool observations, one per role."""
    return PerRole(prefill=cell.prefill, decode=cell.decode)


@dataclass(frozen=True)
class Pods:
    """One pool of one cell: replicas asked, Ready pods, pods being deleted (they still
    hold GPUs)."""

    replicas: int = 0
    ready: int = 0
    terminating: int = 0

    @property
    def live(self) -> int:
        """The pods that exist and stay: max(replicas, ready)."""
        return max(self.replicas, self.ready)

    @property
    def present(self) -> int:
        """The pods that hold GPUs: live plus terminating."""
        return self.live + self.terminating

    def holding(self, want: int) -> int:
        """The pods that hold GPUs once asked for ``want``: removed pods are still
        going, added ones are new (Pods(20, 16, 2).holding(16) -> 22; .holding(24) -> 26)."""
        return max(want, self.live) + self.terminating


def _no_pods() -> PerRole[Pods]:
    return PerRole.build(lambda _: Pods())


@dataclass(frozen=True)
class Cell:
    """One cell in numbers (the module docstring has a worked example)."""

    rev: str
    version: str
    image: str | None
    created: float
    pods: PerRole[Pods] = field(default_factory=_no_pods)
    config: str = ""

    @cached_property
    def replicas(self) -> PerRole[int]:
        return self.pods.map(lambda p: p.replicas)

    @cached_property
    def live(self) -> PerRole[int]:
        return self.pods.map(lambda p: p.live)

    @cached_property
    def present(self) -> PerRole[int]:
        return self.pods.map(lambda p: p.present)

    def holding(self, want: PerRole[int]) -> PerRole[int]:
        """The pods of each role that hold GPUs once the cell is asked for ``want``."""
        return PerRole.build(lambda role: self.pods.pool(role).holding(want.pool(role)))

    @cached_property
    def ready_pods(self) -> int:
        """Ready pods of every role."""
        return sum(p.ready for _, p in self.pods.items())

    @cached_property
    def present_pods(self) -> int:
        """Pods of every role that hold GPUs."""
        return sum(p.present for _, p in self.pods.items())

    @property
    def empty(self) -> bool:
        return self.present_pods == 0


def image_of(
    spec: PDDeploymentSpec, cell: CellView, images: tuple[tuple[str, str], ...]
) -> str | None:
    """The engine image of ``cell``: its own, the one remembered for its revision
    (``RolloutState.images``), or the spec's when that gives its revision."""
    image = getattr(cell, "image", None)
    if isinstance(image, str) and image:
        return image
    known = dict(images)
    if cell.rev in known:
        return known[cell.rev]
    if cell.rev in (
        naming.revision(spec.engine.image, cell.version, manifests.spec_config(spec)),
        naming.revision(spec.engine.image, cell.version),
    ):
        return spec.engine.image
    return None


def config_of(spec: PDDeploymentSpec, cell: CellView) -> str:
    """The engine-config fingerprint of ``cell``: its own (observed), the spec's when
    the cell's revision is its version with the spec's image and configuration, else
    empty (a cell rendered before fingerprints)."""
    config = getattr(cell, "config", None)
    if isinstance(config, str) and config:
        return config
    own = manifests.spec_config(spec)
    if cell.rev == naming.revision(spec.engine.image, cell.version, own):
        return own
    return ""


def views(
    spec: PDDeploymentSpec, cells: Cells, images: tuple[tuple[str, str], ...]
) -> dict[str, Cell]:
    """Every cell in numbers, by revision (negative terminating counts read as 0)."""
    out: dict[str, Cell] = {}
    for c in cell_list(cells):
        out[c.rev] = Cell(
            rev=c.rev,
            version=c.version,
            image=image_of(spec, c, images),
            created=c.created if c.created is not None else 0.0,
            pods=observed(c).map(lambda o: Pods(o.replicas, o.ready, max(o.terminating, 0))),
            config=config_of(spec, c),
        )
    return out


def by_serving(cells: Iterable[Cell]) -> list[Cell]:
    """Most ready prefill first, then most ready decode, oldest, revision: deterministic."""
    return sorted(
        cells,
        key=lambda c: (-c.pods.prefill.ready, -c.pods.decode.ready, c.created, c.rev),
    )
