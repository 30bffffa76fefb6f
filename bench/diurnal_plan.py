"""The diurnal matrix (``bench.diurnal``'s docstring has the worked numbers): the rate
scale (``peak_need``, ``bench_scale``), the engines (``ENGINES``: the hand-made one and
every record of bench/engines/), the policies (``POLICIES``, their order ``JOB_ORDER``
and which of them share a replay or need the tuning), the spans and what a policy
replays (``Plan``, ``FULL``, ``cuts``, ``case``, ``config``). Pure definitions: the
tuning, the run and the command line are ``bench.diurnal``, the verdicts
``bench.diurnal_verdicts``, the report ``bench.diurnal_report``, and this module
imports none of them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import cast

import numpy as np

from bench import dynamo_real, quality
from pdscaler.sim import compare as sim_compare
from pdscaler.sim.compare import STATIC_HINDSIGHT, STATIC_YESTERDAY, Tuned
from pdscaler.sim.controllers import Controller
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.loop import LoopConfig
from pdscaler.sim.measured import HANDMADE_LABEL, engines_in
from pdscaler.sim.oracle import OracleResult
from pdscaler.sim.profiles import with_measured_profile, with_pool_profiles
from pdscaler.sim.reference import REFERENCE, reference_config
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import DAY_S, Trace, days, load_diurnal, scale_rate
from pdscaler.spec import PDDeploymentSpec

REPO = Path(__file__).resolve().parent.parent
WEEK = REPO / "data" / "traces" / "servegen-m-large-7d.jsonl.gz"
ENGINE_DIR = REPO / "bench" / "engines"
HOUR_S = 3600.0
#: The bench's scale: the busiest hour needs at least this many replicas of the larger
#: pool at full capacity (issue 26).
MIN_PEAK_REPLICAS = 20
#: Each pool's replica bound in the matrix's PDDeployment: the bench's peak needs 20
#: replicas at its MEAN hourly load and ~50-60 prefill in its bursts (hand-made engine,
#: day 1 00:00-02:00: 51 by the per-minute needs), so the simulator's default of 64
#: bound every static search and the oracle; 256 binds nobody.
MAX_REPLICAS = 256
#: The day replayed as the warm-up (pre-roll); the scored span starts at the next one.
WARMUP_DAY = 0
#: The hand-made engine's name in the matrix.
HAND_MADE = "hand-made"
#: The tight oracle's name in the matrix (a clairvoyant bound, never a competitor).
ORACLE = "oracle"
#: Replays a static search makes at most, its per-minute start included (``static_search``).
STATIC_REPLAYS = 8
#: Repairs of the tight oracle on the diurnal spans (each one replays the scored span),
#: from its first plan at each bin's own work (``feasible_oracle(lean=False)``).
ORACLE_REPAIRS = 4
#: Rows sized on the scored span (bounds and hindsight): never "the best baseline".
CLAIRVOYANT = frozenset({STATIC_HINDSIGHT, "static-peak", ORACLE})


@dataclass(frozen=True)
class PeakNeed:
    """The busiest ``window_s`` of a trace at rate x1 and the replicas it needs at full
    TRUE capacity (``bench_scale``): fractional, per pool."""

    start_s: float
    requests: int
    rate: float
    prompt_mean: float
    output_mean: float
    prefill_s_per_request: float
    decode_tps_per_replica: float
    prefill: float
    decode: float

    @property
    def larger(self) -> float:
        return max(self.prefill, self.decode)


def peak_need(
    trace: Trace, params: EngineParams, tpot_s: float, window_s: float = HOUR_S
) -> PeakNeed:
    """The busiest window by requests and what its mean load needs: prefill =
    rate x the mean of ``prefill_work_s`` (the prompt at full batches plus its own
    attention), decode = rate x mean output / ``decode_tps`` at the window's mean mix
    (module docstring: hour 27 of the week, 0.2890 and 0.0587 replicas)."""
    nbins = max(1, math.ceil(trace.span / window_s))
    b = np.minimum((trace.arrival // window_s).astype(np.int64), nbins - 1)
    k = int(np.argmax(np.bincount(b, minlength=nbins)))
    sel = b == k
    n = int(np.sum(sel))
    prompt = trace.prompt[sel].astype(np.float64)
    output = trace.output[sel].astype(np.float64)
    rate = n / window_s
    lp, ld = float(prompt.mean()), float(output.mean())
    per_request = params.prefill_work_s(float(prompt.sum()), float(np.sum(prompt**2))) / n
    decode_tps = params.decode_tps(lp, ld, tpot_s)
    return PeakNeed(
        start_s=k * window_s,
        requests=n,
        rate=rate,
        prompt_mean=lp,
        output_mean=ld,
        prefill_s_per_request=per_request,
        decode_tps_per_replica=decode_tps,
        prefill=rate * per_request,
        decode=rate * ld / decode_tps,
    )


def bench_scale(need: PeakNeed, replicas: int = MIN_PEAK_REPLICAS) -> int:
    """The smallest whole rate multiple at which the peak needs ``replicas`` of the
    larger pool: ceil(20 / 0.2890) = 70 for the week on the hand-made engine."""
    return max(1, math.ceil(replicas / need.larger - 1e-9))


# ---------------------------------------------------------------- registries
@dataclass(frozen=True)
class Engine:
    """An engine of the matrix: the TRUE engine, the model's context (None: the
    hand-made engine, whose profile is ``with_measured_profile``'s) and its label."""

    params: EngineParams
    max_context: int | None
    label: str

    def spec(self, startup_s: float) -> PDDeploymentSpec:
        """The simulated PDDeployment a team deploys on this engine: the hand-made
        engine's measured profile, or the pools ``pdscaler plan profile`` writes."""
        base = sim_spec(startup_s=startup_s, max_replicas=MAX_REPLICAS)
        if self.max_context is None:
            return with_measured_profile(base, self.params)
        return with_pool_profiles(base, self.params, self.max_context)


def hand_made() -> Engine:
    """The hand-made engine (Llama-2-7B-class on one A100, engine.py's docstring)."""
    return Engine(EngineParams(), None, HANDMADE_LABEL)


def measured(name: str) -> Callable[[], Engine]:
    """The engine recorded as bench/engines/<name>.json."""

    def load() -> Engine:
        e = engines_in(ENGINE_DIR)[name]
        d = e.deployment
        return Engine(
            e.params,
            e.facts.max_context,
            f"measured: {d.model} on {d.system}, {d.backend}, TP{d.tp}",
        )

    return load


#: Engines by name: the hand-made one and every measured record of bench/engines/.
ENGINES: dict[str, Callable[[], Engine]] = {
    HAND_MADE: hand_made,
    **{name: measured(name) for name in sorted(p.stem for p in ENGINE_DIR.glob("*.json"))},
}


@dataclass(frozen=True)
class Case:
    """What a policy is built from: the warm-up span (the pre-roll, and where the
    out-of-sample baselines are sized and tuned), the scored span, the config (without
    a pre-roll), the engine and the tuned choices (``tuned``: ``tune_job``'s)."""

    engine: str
    params: EngineParams
    scale: int
    startup_s: float
    seed: int
    warmup: Trace
    scored: Trace
    cfg: LoopConfig
    tuned: Tuned = field(default_factory=Tuned)

    @property
    def preroll_s(self) -> float:
        return self.warmup.span

    def prerolled(self) -> Trace:
        """The warm-up then the scored span, on one clock (the loop's pre-roll)."""
        w, s = self.warmup, self.scored
        return Trace(
            f"{s.name}+warmup",
            np.concatenate([w.arrival, s.arrival + w.span]),
            np.concatenate([w.prompt, s.prompt]),
            np.concatenate([w.output, s.output]),
            w.span + s.span,
        )


@dataclass(frozen=True)
class PolicySpec:
    """One policy of the matrix. ``preroll``: it replays the warm-up as its pre-roll
    (dynamic policies), else it starts at its size on the scored span (statics, the
    oracle). A policy with a name ``compare.controller`` knows is built there (with the
    case's tuned choices); ``loop`` adapts the loop's settings (the online reference's
    per-second scrapes)."""

    name: str
    preroll: bool
    label: str = ""
    loop: Callable[[LoopConfig], LoopConfig] | None = None

    def make(self, c: Case, replayed: Trace) -> Controller:
        """The controller for case ``c``, replayed on ``replayed`` (the online reference
        reads its arrivals). No policy here replays the lower bound's schedule, the one
        use of ``compare.controller``'s bound."""
        no_bound = cast(OracleResult, None)
        return sim_compare.controller(
            self.name, c.scored, c.cfg, no_bound, tuned=c.tuned, replayed=replayed
        )


POLICIES: dict[str, PolicySpec] = {
    p.name: p
    for p in (
        PolicySpec("pdscaler", True, "pdscaler (pre-rolled on the warm-up span)"),
        PolicySpec(
            STATIC_HINDSIGHT,
            False,
            "static-hindsight (BOUND: the cheapest static meeting 99% on the scored span)",
        ),
        PolicySpec(
            STATIC_YESTERDAY,
            False,
            "static-yesterday (the cheapest static meeting 99% on the warm-up span, +20%)",
        ),
        PolicySpec("static-peak", False, "static-peak (the scored span's busiest minute)"),
        PolicySpec("hpa-tuned", True, "hpa-tuned (grid tuned on the warm-up span)"),
        PolicySpec(
            "dynamo-planner",
            True,
            "dynamo-planner (our re-implementation; SLO scale tuned on the warm-up span)",
        ),
        PolicySpec(
            dynamo_real.NAME,
            True,
            "dynamo-planner-real (NVIDIA Dynamo 1.6.1's own planner, the same SLO scale)",
        ),
        PolicySpec(
            REFERENCE,
            True,
            "online-reference (idealised reactive: true arrivals, past only)",
            loop=reference_config,
        ),
        PolicySpec(ORACLE, False, "oracle (tight SLO-feasible clairvoyant bound)"),
    )
}
#: Policies whose row is replayed once per (engine, seed): a static size (the oracle's
#: schedule is ordered a start-up ahead, so it is replayed per start-up).
SHARED_ACROSS_STARTUPS = frozenset({STATIC_HINDSIGHT, STATIC_YESTERDAY, "static-peak"})
#: Policies that need ``tune_job``'s choices (a run of none of them tunes nothing).
TUNED = frozenset(
    {STATIC_HINDSIGHT, STATIC_YESTERDAY, "hpa-tuned", "dynamo-planner", dynamo_real.NAME}
)
#: The order the matrix's jobs run in (``Plan.matrix``).
JOB_ORDER = (
    "pdscaler",
    STATIC_YESTERDAY,
    "static-peak",
    ORACLE,
    REFERENCE,
    "hpa-tuned",
    "dynamo-planner",
    dynamo_real.NAME,
    STATIC_HINDSIGHT,
)
#: Rows that come from the tuning's own replay (the hindsight search replayed its size
#: on the scored span already).
FROM_TUNING = frozenset({STATIC_HINDSIGHT})
_ = quality  # imported for its registration of dynamo-planner-real (compare.EXTERNAL)


# ---------------------------------------------------------------- the matrix
@dataclass(frozen=True)
class Plan:
    engines: tuple[str, ...] = (
        HAND_MADE,
        "qwen3-32b-h200-vllm-tp2",
        "qwen3-8b-h100-vllm-tp1",
    )
    startups: tuple[float, ...] = (90.0, 300.0)
    seeds: tuple[int, ...] = (0,)
    policies: tuple[str, ...] = tuple(POLICIES)
    #: Hours of the warm-up day's end replayed as the pre-roll and used for the
    #: out-of-sample sizing and tuning (24: all of day 0). 1: 23:00-24:00, day 0's
    #: busiest hour (3.2 req/s at x1), so static-yesterday is yesterday's peak + 20%.
    warmup_hours: float = 1.0
    #: Hours scored from the start of the day after the warm-up (24: one day). 4:
    #: 00:00-04:00, 1.4 -> 2.8 -> 2.4 -> 3.3 req/s (the week's busiest hour), after the
    #: warm-up's 3.2: a fall by 2.3x then a rise by 2.4x.
    scored_hours: float = 4.0
    #: One replay per process at a time; a pre-rolled day (19.5 million requests at x70)
    #: peaked at 10.1 GB, so two at once need ~21 GB; the default spans' largest replay
    #: (Qwen3-8B, 5 h at x395: ~18 million requests) about as much.
    workers: int = 1
    #: Jobs run together only while their ``replay_gb`` sum stays below this.
    memory_gb: float = 17.0
    min_peak_replicas: int = MIN_PEAK_REPLICAS
    #: A fixed rate scale instead of ``bench_scale``'s (the tests' small runs).
    scale: int | None = None
    trace_path: str = str(WEEK.relative_to(REPO))  # repo-relative: results name no machine path
    #: Start-up at which the baselines are tuned (on the warm-up span).
    tune_startup: float = 90.0
    oracle_repairs: int = ORACLE_REPAIRS

    def matrix(self) -> list[tuple[str, float, int, str]]:
        """Every (engine, start-up, seed, policy) replayed, policy by policy in the
        order of ``JOB_ORDER`` (pdscaler, then the cheap statics and the oracle, the
        dynamic baselines last), each over every engine and start-up, so that a run
        stopped by its budget has pdscaler and the same policies in every case; a
        static size at the first start-up only (``SHARED_ACROSS_STARTUPS``), the
        hindsight bound not at all (its search replayed it)."""
        jobs = [
            (e, st, seed, p)
            for e in self.engines
            for st in self.startups
            for seed in self.seeds
            for p in self.policies
            if p not in FROM_TUNING and (p not in SHARED_ACROSS_STARTUPS or st == self.startups[0])
        ]
        return sorted(jobs, key=lambda j: (JOB_ORDER.index(j[3]), self.engines.index(j[0])))


#: The full matrix of issue 26 (``python -m bench.diurnal --full``): every engine, full
#: days, seeds 0-2.
FULL = Plan(engines=tuple(ENGINES), seeds=(0, 1, 2), warmup_hours=24.0, scored_hours=24.0)


def cuts(plan: Plan) -> str:
    """What ``plan`` leaves out of ``FULL`` ("" when nothing)."""
    out = []
    gone = [e for e in FULL.engines if e not in plan.engines]
    if gone:
        out.append("engines " + ", ".join(gone))
    seeds = [str(s) for s in FULL.seeds if s not in plan.seeds]
    if seeds:
        out.append("seeds " + ", ".join(seeds))
    if plan.warmup_hours < FULL.warmup_hours:
        out.append(
            f"the warm-up is day 0's last {plan.warmup_hours:g} h, not all of it (the "
            "pre-roll and the span static-yesterday, hpa-tuned and the Dynamo planners' "
            "SLO scale are sized and tuned on)"
        )
    if plan.scored_hours < FULL.scored_hours:
        out.append(f"day 1's first {plan.scored_hours:g} h are scored, not all of it")
    left = [p for p in POLICIES if p not in plan.policies]
    if left:
        out.append("policies " + ", ".join(left))
    return "; ".join(out)


def scale_for(plan: Plan, week: Trace, params: EngineParams) -> tuple[int, PeakNeed]:
    need = peak_need(week, params, sim_spec().slo.tpot_seconds)
    return (plan.scale or bench_scale(need, plan.min_peak_replicas)), need


def loop_config(engine: Engine, startup: float, seed: int) -> LoopConfig:
    """The simulated PDDeployment on ``engine`` (its profile) and the loop's settings,
    without a pre-roll (``config`` adds it for the dynamic policies)."""
    return LoopConfig(spec=engine.spec(startup), params=engine.params, startup_s=startup, seed=seed)


def spans(plan: Plan, week: Trace) -> tuple[Trace, Trace]:
    """The warm-up (day 0's last ``warmup_hours``) and the scored span (day 1's first
    ``scored_hours``) at rate x1, on day 0's clock."""
    both = days(week, WARMUP_DAY, 2)
    warm_s, scored_s = plan.warmup_hours * HOUR_S, plan.scored_hours * HOUR_S
    return both.window(DAY_S - warm_s, DAY_S), both.window(DAY_S, DAY_S + scored_s)


def case(
    plan: Plan,
    engine: str,
    startup: float,
    seed: int,
    week: Trace | None = None,
    tuned: Tuned | None = None,
) -> Case:
    """The traces and config of one (engine, start-up, seed): day 0's last
    ``warmup_hours`` and day 1's first ``scored_hours``, each rate-scaled with its own
    seed (so the scored span is the same whatever the pre-roll)."""
    week = week if week is not None else load_diurnal(REPO / plan.trace_path)
    e = ENGINES[engine]()
    scale, _ = scale_for(plan, week, e.params)
    warmup, scored = spans(plan, week)
    return Case(
        engine,
        e.params,
        scale,
        startup,
        seed,
        scale_rate(warmup, scale, seed=2 * seed + 1),
        scale_rate(scored, scale, seed=2 * seed),
        loop_config(e, startup, seed),
        tuned or Tuned(),
    )


def config(c: Case, policy: PolicySpec) -> tuple[Trace, LoopConfig]:
    """The trace and config a policy replays: pre-rolled on the warm-up, or the scored
    span alone; the policy's own loop settings applied."""
    trace, cfg = (
        (c.prerolled(), replace(c.cfg, preroll_s=c.preroll_s))
        if policy.preroll
        else (
            c.scored,
            c.cfg,
        )
    )
    return trace, (policy.loop(cfg) if policy.loop else cfg)
