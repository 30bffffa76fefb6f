"""Who is dominated, counting every point that was measured: each policy under each
queue discipline, and every static size a sweep replayed.

Owns: ``Point`` (one measured (SLO attainment, GPU-hours) of one policy, under one
queue discipline; ``kind`` says whether it is a policy's row, a size a static sweep
tried, or a clairvoyant bound, which is never counted), ``dominates`` and ``verdict``
(the one definition of "dominated" and "Pareto" of a comparison). Must not: run
anything, read files or clocks.

A point dominates another when its attainment is >= and its GPU-hours <=, with one of
the two strictly better. A policy's row is dominated when a point of ANOTHER policy
dominates it (its own row under the other discipline is the same policy, not a
competitor). Rows are judged per discipline: FCFS and deadline-queue rows are reported
for every policy, each against every other policy's rows of both disciplines (the
queue is an engine setting any deployment can choose) and every static size swept.

Golden (``tests/unit/test_verdicts.py``, code-4x, start-up 90 s, seed 0 of the
committed bench): pdscaler FCFS at 84.30% / 28.26 GPU-h against a static 19P/2D the
sweep tried at 85.02% / 20.10 is dominated (the old verdict, over the policies' rows
alone, said Pareto); pdscaler under the deadline queue at 85.63% / 24.79 is not by
that static (less attainment; the sweep was not replayed under that queue).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

#: Queue disciplines (``EngineParams.queue_discipline``).
FCFS = "fcfs"
DEADLINE = "deadline"
#: The bench's ablation row that is pdscaler under the deadline queue.
DEADLINE_ABLATION = "pdscaler, deadline queue"


class Kind(StrEnum):
    """What a point is: a policy's row, a size a static sweep replayed (counted like
    any deployment), or a clairvoyant bound (the oracle: never a competitor)."""

    POLICY = "policy"
    SWEEP = "sweep"
    BOUND = "bound"


@dataclass(frozen=True)
class Point:
    """One measured (attainment 0-1, GPU-hours) of ``policy`` under ``discipline``."""

    policy: str
    slo_attainment: float
    gpu_hours: float
    discipline: str = FCFS
    kind: Kind = Kind.POLICY

    @property
    def label(self) -> str:
        """``static 19P/2D`` (FCFS is the default, unnamed); ``hpa-tuned (deadline)``."""
        return self.policy if self.discipline == FCFS else f"{self.policy} ({self.discipline})"


def static_point(
    prefill: int, decode: int, slo_attainment: float, gpu_hours: float, discipline: str = FCFS
) -> Point:
    """A size a static sweep replayed: ``static 19P/2D``."""
    return Point(f"static {prefill}P/{decode}D", slo_attainment, gpu_hours, discipline, Kind.SWEEP)


def policy_points(
    policies: Mapping[str, Mapping[str, float]],
    discipline: str = FCFS,
    bounds: Collection[str] = ("oracle-replay",),
) -> list[Point]:
    """Points of a comparison's ``policies`` document (``{"pdscaler": {"slo_attainment":
    0.843, "gpu_hours": 28.26, ...}, ...}``, as ``Comparison.to_json`` and queue.json
    write it); the names in ``bounds`` (the lower bound's replay) are bounds."""
    return [
        Point(
            name,
            float(row["slo_attainment"]),
            float(row["gpu_hours"]),
            discipline,
            Kind.BOUND if name in bounds else Kind.POLICY,
        )
        for name, row in policies.items()
    ]


def sweep_points(sizes: Iterable[Mapping[str, float]], discipline: str = FCFS) -> list[Point]:
    """Points of the sizes a static sweep replayed, each ``{"prefill": 19, "decode": 2,
    "slo_attainment": 0.850, "gpu_hours": 20.10}`` (``tuning.StaticSearch.tried`` or a
    ``StaticChoice`` as JSON); the same size twice counts once."""
    seen: dict[tuple[int, int], Point] = {}
    for s in sizes:
        key = (int(s["prefill"]), int(s["decode"]))
        seen.setdefault(
            key, static_point(*key, float(s["slo_attainment"]), float(s["gpu_hours"]), discipline)
        )
    return list(seen.values())


def comparison_points(doc: Mapping[str, Any], discipline: str = FCFS) -> list[Point]:
    """Every point of one ``Comparison.to_json`` document: its policies' rows (the
    ablation rows, ``pdscaler`` variants named ``pdscaler, ...`` or ``pdscaler + ...``,
    left out: they are neither pdscaler's row nor a rival's), its static sweep, and
    ``oracle-replay`` as a bound. ``"pdscaler, deadline queue"`` is pdscaler's row
    under the deadline queue."""
    pols = doc["policies"]
    rows = {n: r for n, r in pols.items() if n == "pdscaler" or not n.startswith("pdscaler")}
    points = policy_points(rows, discipline)
    if discipline == FCFS and DEADLINE_ABLATION in pols:
        points += policy_points({"pdscaler": pols[DEADLINE_ABLATION]}, DEADLINE)
    return points + sweep_points(doc.get("static_sweep", ()), discipline)


def dominates(a: Point, b: Point, eps: float = 0.0) -> bool:
    """``a`` has attainment >= and GPU-hours <= ``b``'s, one strictly (beyond ``eps``,
    relative for the GPU-hours, absolute for the attainment): (85.0%, 20.1) dominates
    (84.3%, 28.3); (84.3%, 28.3) does not dominate itself; (85.0%, 30.0) does not
    dominate (84.3%, 28.3)."""
    ge = a.slo_attainment >= b.slo_attainment - eps
    le = a.gpu_hours <= b.gpu_hours * (1.0 + eps)
    strict = a.slo_attainment > b.slo_attainment + eps or a.gpu_hours < b.gpu_hours * (1.0 - eps)
    return ge and le and strict


@dataclass(frozen=True)
class Verdict:
    """One row (``point``: a policy under one discipline) against every counted point:
    the points of other policies dominating it (``pareto`` when none does) and the
    cheapest point of another policy with at least its attainment (None: none has)."""

    point: Point
    dominated_by: tuple[Point, ...]
    cheapest_as_good: Point | None

    @property
    def pareto(self) -> bool:
        return not self.dominated_by

    @property
    def labels(self) -> tuple[str, ...]:
        """The dominating points' labels, cheapest first: ``("static 19P/2D",)``."""
        return tuple(p.label for p in self.dominated_by)


def verdict(
    policy: str, points: Sequence[Point], discipline: str = FCFS, eps: float = 0.0
) -> Verdict:
    """Judge ``policy``'s row under ``discipline`` against the points of every other
    policy under every discipline and every swept static size (bounds skipped).
    Raises ValueError when ``points`` holds no such row."""
    own = [
        p
        for p in points
        if p.policy == policy and p.discipline == discipline and p.kind is not Kind.BOUND
    ]
    if len(own) != 1:
        raise ValueError(f"{len(own)} rows of {policy!r} under {discipline!r}: need one")
    row = own[0]
    rivals = [p for p in points if p.policy != policy and p.kind is not Kind.BOUND]
    by = sorted((r for r in rivals if dominates(r, row, eps)), key=_cost)
    as_good = [r for r in rivals if r.slo_attainment >= row.slo_attainment]
    return Verdict(row, tuple(by), min(as_good, key=_cost, default=None))


def _cost(p: Point) -> tuple[float, float]:
    """Cheapest first, then the higher attainment."""
    return p.gpu_hours, -p.slo_attainment
