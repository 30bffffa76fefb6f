"""Tuning the baselines the way a platform team would, by replaying candidates: the
cheapest static deployment that meets a target (``static-best``), the best HPA of a
small grid (``hpa-tuned``) and the best targets to hand the Dynamo-style planner
(``dynamo-planner``).

Owns: the searches and how "best" is chosen. Static: for each attainment target, the
fewest (prefill, decode) replicas whose replay meets it (binary search of each pool
with the other ample, then +1 on whichever pool helps more until the pair meets it, at
most ``REPAIR_STEPS`` steps); when even the ample pair misses, the highest attainment
tried. HPA: every configuration of ``baselines.hpa_grid``; Dynamo: every scale of
``DYNAMO_SLO_SCALES``; best = the cheapest meeting the target, else the highest
attainment. Every replay is cached per (trace, sizes),
so a second target reuses the first one's runs. Must not: print, read clocks or write
files.

Example: conversation trace at 1x, target 99%: prefill searched in 1..8 with decode
8, decode in 1..8 with prefill 8 -> (2, 3) if both searches land there and the pair
replays at >= 99%.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pdscaler.sim import baselines
from pdscaler.sim.dynamo import DynamoConfig, DynamoPlannerController
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.results import Summary, summarize
from pdscaler.sim.traces import Trace

#: +1 steps on one pool after the two binary searches.
REPAIR_STEPS = 6
#: The Dynamo-style planner's grid: the TTFT and ITL targets handed to it, as a share
#: of the scored SLO (1: the SLO itself; a team that sees misses tightens them).
DYNAMO_SLO_SCALES = (1.0, 0.7, 0.5, 0.35)

C = TypeVar("C")


@dataclass(frozen=True)
class StaticChoice:
    """The static size chosen for one target, with its replay's figures."""

    target: float
    prefill: int
    decode: int
    slo_attainment: float
    gpu_hours: float
    met: bool


@dataclass
class StaticSearch:
    """Cached static replays of one trace and config."""

    trace: Trace
    cfg: LoopConfig
    runs: dict[tuple[int, int], Summary] = field(default_factory=dict)

    def summary(self, p: int, d: int) -> Summary:
        key = (p, d)
        if key not in self.runs:
            ctrl = baselines.StaticController("static-best", p, d)
            self.runs[key] = summarize(run(self.trace, ctrl, self.cfg))
        return self.runs[key]

    def attainment(self, p: int, d: int) -> float:
        return self.summary(p, d).slo_attainment

    def ample(self) -> tuple[int, int]:
        """Three times the static-peak sizes (priors), inside the spec's bounds."""
        peak = baselines.static_peak(self.trace, self.cfg.spec)
        spec = self.cfg.spec
        return (
            min(spec.prefill.replicas.max, max(2, 3 * peak.prefill)),
            min(spec.decode.replicas.max, max(2, 3 * peak.decode)),
        )

    def _smallest(self, target: float, hi: int, at: int, prefill: bool) -> int:
        """The smallest size of one pool (the other at ``at``) whose attainment meets
        ``target``; ``hi`` if none below does."""
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            a = self.attainment(mid, at) if prefill else self.attainment(at, mid)
            if a >= target:
                hi = mid
            else:
                lo = mid + 1
        return hi

    def choose(self, target: float) -> StaticChoice:
        p_hi, d_hi = self.ample()
        if self.attainment(p_hi, d_hi) < target:
            best = max(self.runs.items(), key=lambda kv: (kv[1].slo_attainment, -kv[1].gpu_hours))
            (p, d), s = best
            return StaticChoice(target, p, d, s.slo_attainment, s.gpu_hours, False)
        p = self._smallest(target, p_hi, d_hi, prefill=True)
        d = self._smallest(target, d_hi, p_hi, prefill=False)
        for _ in range(REPAIR_STEPS):
            if self.attainment(p, d) >= target:
                break
            up_p, up_d = self.attainment(p + 1, d), self.attainment(p, d + 1)
            if up_p >= up_d:
                p += 1
            else:
                d += 1
        s = self.summary(p, d)
        met = s.slo_attainment >= target
        if not met:
            s = self.summary(p_hi, d_hi)
            p, d = p_hi, d_hi
        return StaticChoice(target, p, d, s.slo_attainment, s.gpu_hours, met)


def static_best(
    trace: Trace, cfg: LoopConfig, targets: Sequence[float]
) -> tuple[list[StaticChoice], StaticSearch]:
    """One choice per target (same order), and the search (its cache of replays)."""
    search = StaticSearch(trace, cfg)
    return [search.choose(t) for t in targets], search


@dataclass(frozen=True)
class Choice(Generic[C]):
    """The chosen configuration of a tuned baseline and every candidate's (config,
    attainment, GPU-h)."""

    config: C
    slo_attainment: float
    gpu_hours: float
    met: bool
    tried: tuple[tuple[C, float, float], ...]


HpaChoice = Choice[baselines.HpaConfig]
DynamoChoice = Choice[DynamoConfig]


def pick(tried: Sequence[tuple[C, float, float]], target: float) -> Choice[C]:
    """Cheapest meeting ``target``, else the highest attainment (ties: cheaper)."""
    meeting = [t for t in tried if t[1] >= target]
    if meeting:
        cfg, a, h = min(meeting, key=lambda t: t[2])
        return Choice(cfg, a, h, True, tuple(tried))
    cfg, a, h = max(tried, key=lambda t: (t[1], -t[2]))
    return Choice(cfg, a, h, False, tuple(tried))


def hpa_tuned(trace: Trace, cfg: LoopConfig, target: float) -> HpaChoice:
    """Replay every configuration of the grid and pick the best (module docstring)."""
    tried = []
    for config in baselines.hpa_grid(trace, cfg.spec):
        ctrl = baselines.HpaQueueController(cfg.spec, config=config, name="hpa-tuned")
        s = summarize(run(trace, ctrl, cfg))
        tried.append((config, s.slo_attainment, s.gpu_hours))
    return pick(tried, target)


def dynamo_tuned(trace: Trace, cfg: LoopConfig, target: float) -> DynamoChoice:
    """Replay the Dynamo-style planner at each of ``DYNAMO_SLO_SCALES`` (the TTFT and ITL
    targets it is handed, as a share of the scored SLO) and pick the best."""
    tried = []
    for scale in DYNAMO_SLO_SCALES:
        config = DynamoConfig(slo_scale=scale)
        s = summarize(run(trace, DynamoPlannerController(cfg.spec, cfg.params, config), cfg))
        tried.append((config, s.slo_attainment, s.gpu_hours))
    return pick(tried, target)
