"""One trace, several policies: build each controller by name, run them in the closed
loop, and condense the runs with the SLO-feasible oracle, the lower bound, the work
floor and the feasibility ceiling into one comparison.

Owns: the policy names (``POLICIES``, what ``--policy all`` runs, and the extras
``oracle-replay``: the lower bound's schedule replayed; ``static-hindsight``:
``static-best`` under its honest name, a bound; ``static-yesterday``: sized on the
previous span; ``online-reference``: ``sim.reference``; ``EXTERNAL``: controllers a
caller registers by name, e.g. the bench's NVIDIA Dynamo planner), which of them are
static (``STATIC_POLICIES``: they start at their size and never get the pre-roll the
dynamic ones replay before the scored span, ``compare(preroll_s=...)``), the SLO-feasible oracle's
search (``feasible_oracle``: plan in bins no wider than the TTFT limit at full load,
replay, ``oracle.repair_path`` where the misses were, one replica a bin at a time,
at most ``ORACLE_ONE_ITERATIONS`` repairs; conv-10x, 90 s, seed 0: 99.02% for 21.11
GPU-h in 6 repairs, where the coarse repair's one step overshot to 99.92% for 26.42),
and the JSON document of a comparison. "x oracle" is a ratio to THAT oracle's
replayed GPU-hours (``FeasibleOracle.gpu_hours_at`` gives the oracle at a policy's
own attainment). Shared by ``pdscaler simulate`` and the bench. Must not:
print, write files or read clocks (``progress`` gets the policy name and the simulated
fraction done).

The tuned baselines (``static-best``, ``hpa-tuned``) are searched by replaying
candidates (``pdscaler.sim.tuning``) unless ``Tuned`` hands over an earlier choice
(the bench tunes on seed 0 and replays that choice on the other seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pdscaler.sim import baselines, tuning
from pdscaler.sim.controllers import Controller, Decide, PdscalerController, ScheduleController
from pdscaler.sim.dynamo import DynamoConfig, DynamoPlannerController
from pdscaler.sim.loop import LoopConfig, Run, run
from pdscaler.sim.oracle import (
    OracleResult,
    Repair,
    Schedule,
    feasibility_ceiling,
    fine_bin,
    lower_bound,
    repair_path,
    schedule,
    work_floor,
)
from pdscaler.sim.reference import REFERENCE, ReferenceController, reference_config
from pdscaler.sim.results import (
    Summary,
    pareto_front,
    preroll_summary,
    summarize,
    ttft_limits,
)
from pdscaler.sim.traces import Trace, with_preroll

#: ``--policy all``: pdscaler and every baseline (the tuned ones first; the naive HPA
#: ``hpa-queue``, static peak and static mean are kept as labelled extras).
POLICIES: tuple[str, ...] = (
    "pdscaler",
    "static-best",
    "hpa-tuned",
    "dynamo-planner",
    "fixed-ratio",
    "forecast-only",
    "static-peak",
    "static-mean",
    "hpa-queue",
)
#: The lower bound's schedule replayed in the engine (what SLO the bound would get).
ORACLE_REPLAY = "oracle-replay"
#: ``static-best`` under its honest name: sized by replaying the very span it is
#: scored on, a hindsight BOUND, not what a team can run (the same search and choice).
STATIC_HINDSIGHT = "static-hindsight"
#: The cheapest static size that met the target on the previous span (day, or the
#: other half-hour) plus ``tuning.YESTERDAY_MARGIN``: what platform teams run.
STATIC_YESTERDAY = "static-yesterday"
#: Dynamo's throughput-based mode alone (without load-based scaling on top): a
#: labelled extra, not in ``all``.
DYNAMO_THROUGHPUT = "dynamo-throughput"
KNOWN = (
    *POLICIES,
    ORACLE_REPLAY,
    DYNAMO_THROUGHPUT,
    STATIC_HINDSIGHT,
    STATIC_YESTERDAY,
    REFERENCE,
)
#: The attainment target of the oracle and of the tuned baselines.
TARGET = 0.99
#: Repairs of the SLO-feasible oracle's schedule after its first replay (coarse).
ORACLE_ITERATIONS = 8
#: How the oracle's schedule is repaired: ``one`` replica more in each bin where misses
#: were charged (the tight oracle), or ``coarse``: proportionally to the share of the
#: bin that missed (the first oracle: conv-10x, 90 s, seed 0 overshoots to 26.42 GPU-h).
ORACLE_ONE = "one"
ORACLE_COARSE = "coarse"
#: Repairs of the tight oracle (one replica a bin each: more of them).
ORACLE_ONE_ITERATIONS = 40
#: The tight oracle stops when this many repairs in a row did not raise its best
#: attainment (misses a replica does not remove: a synthetic trace of 4,000-token
#: bursts at 40 req/s stays at 98.29% from its 11th repair to its 40th).
ORACLE_STALL = 8
#: Within this much of the target, a repair adds +1 only in the worst bins.
ORACLE_GENTLE = 0.05
#: Policies that start at their own size and replay the scored span alone, never a
#: pre-roll (``compare(preroll_s=...)``): the statics and the bound's replay. Every
#: other policy is dynamic and, with a pre-roll, enters the scored span in its own
#: steady state.
STATIC_POLICIES = frozenset(
    {"static-best", STATIC_HINDSIGHT, STATIC_YESTERDAY, "static-peak", "static-mean", ORACLE_REPLAY}
)


def parse_policies(text: str) -> tuple[str, ...]:
    """``all`` -> POLICIES; ``pdscaler,hpa-queue`` -> both; unknown names: ValueError
    listing the known ones."""
    names = POLICIES if text.strip() == "all" else tuple(n.strip() for n in text.split(","))
    unknown = [n for n in names if n not in KNOWN and n not in EXTERNAL]
    if unknown or not names:
        raise ValueError(
            f"unknown policy {', '.join(unknown) or repr(text)}: use all or one of "
            + ", ".join(KNOWN)
        )
    return tuple(dict.fromkeys(names))


class OracleReplay(ScheduleController):
    """A schedule replayed from t=0 at its own first level (not the warm start),
    keeping at each tick the most replicas needed from ``back`` seconds ago (work that
    arrived in a burst just before the tick is still queued) to ``lead`` ahead."""

    def __init__(self, name: str, sched: Schedule, lead: float, back: float) -> None:
        super().__init__(
            name, sched.times.tolist(), sched.prefill.tolist(), sched.decode.tolist(), lead
        )
        self._back = back
        self.initial: tuple[int, int] = self.at(0.0)

    def at(self, now: float) -> tuple[int, int]:
        p, d = super().at(now)
        if now - self._back > 0:
            q, e = super().at(now - self._back)
            return max(p, q), max(d, e)
        return p, d


@dataclass(frozen=True)
class Tuned:
    """Earlier choices for the tuned baselines (None: search them here)."""

    static: tuple[int, int] | None = None
    hpa: baselines.HpaConfig | None = None
    dynamo: DynamoConfig | None = None
    #: ``static-yesterday``'s size (the margin included), chosen on the previous span
    yesterday: tuple[int, int] | None = None


#: Controllers from outside this package by name (the bench registers NVIDIA Dynamo's
#: own planner here): ``EXTERNAL[name](cfg, tuned) -> Controller``. Each is dynamic
#: (pre-rolled); a controller with a ``close()`` is closed after its run.
EXTERNAL: dict[str, Callable[[LoopConfig, Tuned], Controller]] = {}


def controller(
    name: str,
    trace: Trace,
    cfg: LoopConfig,
    bound: OracleResult,
    decide: Decide | None = None,
    tuned: Tuned | None = None,
    replayed: Trace | None = None,
) -> Controller:
    """The controller called ``name`` for this trace and config (``static-best``,
    ``static-hindsight``, ``static-yesterday`` and ``hpa-tuned`` need their choice in
    ``tuned``). The static peak and mean are sized with the pools' profile and the KV
    bound (``baselines.window_needs``). ``online-reference`` (``sim.reference``) runs
    under ``reference.reference_config(cfg)`` in ``compare`` and reads the arrivals of
    ``replayed``, the trace it is replayed on (``trace`` with its pre-roll; default
    ``trace``). A name of ``EXTERNAL`` is built by its maker."""
    spec = cfg.spec
    tuned = tuned or Tuned()

    def static_sized(label: str) -> Controller:
        if tuned.static is None:
            raise ValueError(f"{label} needs a size (compare() searches it)")
        return baselines.StaticController(label, *tuned.static)

    def static_yesterday() -> Controller:
        if tuned.yesterday is None:
            raise ValueError(
                "static-yesterday needs a size chosen on the previous span "
                "(tuning.static_yesterday, or compare(previous=...))"
            )
        return baselines.StaticController(STATIC_YESTERDAY, *tuned.yesterday)

    kv = baselines.kv_capacity(spec, cfg.params)

    def hpa_tuned() -> Controller:
        if tuned.hpa is None:
            raise ValueError("hpa-tuned needs a configuration (compare() searches it)")
        return baselines.HpaQueueController(spec, config=tuned.hpa, name="hpa-tuned")

    def dynamo_tuned() -> Controller:
        if tuned.dynamo is None:
            raise ValueError("dynamo-planner needs a configuration (compare() searches it)")
        return DynamoPlannerController(spec, cfg.params, tuned.dynamo)

    makers: dict[str, Callable[[], Controller]] = {
        "pdscaler": lambda: PdscalerController(spec, decide, cfg.flips),
        "static-best": lambda: static_sized("static-best"),
        STATIC_HINDSIGHT: lambda: static_sized(STATIC_HINDSIGHT),
        STATIC_YESTERDAY: static_yesterday,
        "hpa-tuned": hpa_tuned,
        "dynamo-planner": dynamo_tuned,
        DYNAMO_THROUGHPUT: lambda: DynamoPlannerController(
            spec, cfg.params, DynamoConfig(load_based=False)
        ),
        "static-peak": lambda: baselines.static_peak(trace, spec, kv),
        "static-mean": lambda: baselines.static_mean(trace, spec, kv),
        "hpa-queue": lambda: baselines.HpaQueueController(spec),
        "fixed-ratio": lambda: baselines.FixedRatioController.profiled(trace, spec),
        "forecast-only": lambda: baselines.ForecastOnlyController(spec),
        REFERENCE: lambda: ReferenceController(spec, replayed or trace, kv),
        ORACLE_REPLAY: lambda: ScheduleController(
            ORACLE_REPLAY,
            bound.schedule.times.tolist(),
            bound.schedule.prefill.tolist(),
            bound.schedule.decode.tolist(),
            lead=cfg.startup_s + spec.scaling.interval_seconds,
        ),
    }
    if name in EXTERNAL:
        return EXTERNAL[name](cfg, tuned)
    if name not in makers:
        raise ValueError(f"unknown policy {name}")
    return makers[name]()


@dataclass(frozen=True)
class FeasibleOracle:
    """The SLO-feasible clairvoyant schedule: its replay (GPU-hours and attainment),
    whether it met ``target`` (the attainment asked for, capped at ``ceiling``, the
    trace's feasibility ceiling), and every try (attainment, GPU-hours) in order."""

    schedule: Schedule
    run: Run
    summary: Summary
    target: float
    met: bool
    tries: tuple[tuple[float, float], ...]
    ceiling: float
    #: ``ORACLE_ONE`` or ``ORACLE_COARSE``; the repair after each try but the last
    step: str = ORACLE_COARSE
    path: tuple[Repair, ...] = ()

    @property
    def gpu_hours(self) -> float:
        return self.summary.gpu_hours

    @property
    def attainment(self) -> float:
        return self.summary.slo_attainment

    def gpu_hours_at(self, attainment: float) -> float | None:
        """The cheapest try reaching ``attainment`` (the oracle at a policy's own
        attainment, to compare at equal attainment); None when no try did. Tries
        (95.1%, 18.2), (98.7%, 20.0), (99.1%, 21.0): at 97% -> 20.0; at 99.5% -> None."""
        reached = [h for a, h in self.tries if a >= attainment]
        return min(reached) if reached else None

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_hours": self.gpu_hours,
            "slo_attainment": self.attainment,
            "target": self.target,
            "met": self.met,
            "bin_s": self.schedule.bin_s,
            "repairs": len(self.tries) - 1,
            "tries": [list(t) for t in self.tries],
            "step": self.step,
            "path": [r.to_json() for r in self.path],
        }


def feasible_oracle(
    trace: Trace,
    cfg: LoopConfig,
    target: float = TARGET,
    iterations: int | None = None,
    step: str = ORACLE_ONE,
    lean: bool = True,
) -> FeasibleOracle:
    """Plan at full TRUE capacity in bins no wider than the TTFT limit, replay it (it
    orders each replica a start-up plus one interval ahead and keeps it through gaps
    shorter than that), and repair where it missed until the replay meets ``target``
    (or ``iterations`` repairs were made, or the tight oracle stalled for
    ``ORACLE_STALL``: then ``met`` is False): one replica a bin at a time (twice as
    many after a repair whose replay came out identical, as a bin raised below the level
    the replay orders over its lead does; ``step`` ``one``, at most
    ``ORACLE_ONE_ITERATIONS`` repairs) or in proportion
    to the misses (``coarse``, ``ORACLE_ITERATIONS``); within ``ORACLE_GENTLE`` of the
    target both add +1 in the worst bins only. The result is the cheapest try that
    meets the target (else the one with the highest attainment), with every try and
    every repair (``path``: which pool, which bins, how many misses why). The target is
    capped at the feasibility ceiling: no schedule serves a request that cannot fit
    alone. ``lean`` False: the first plan sizes prefill for each bin's own work, not
    the interval's mean rate (the diurnal bench: at x70 the lean first plan met 12.1% of
    day 1 00:00-02:00 on the hand-made engine, each bin's own work 84.0%, so its few
    repairs start near the target)."""
    if step not in (ORACLE_ONE, ORACLE_COARSE):
        raise ValueError(f"oracle step must be {ORACLE_ONE} or {ORACLE_COARSE}, got {step!r}")
    if iterations is None:
        iterations = ORACLE_ONE_ITERATIONS if step == ORACLE_ONE else ORACLE_ITERATIONS
    spec = cfg.spec
    slo = spec.slo
    ceiling = feasibility_ceiling(
        trace,
        cfg.params,
        ttft_s=slo.ttft_seconds,
        tpot_s=slo.tpot_seconds,
        ttft_per_token_s=cfg.ttft_per_token_s,
    )
    goal = min(target, ceiling)
    interval = spec.scaling.interval_seconds
    sched = schedule(
        trace,
        cfg.params,
        tpot_s=slo.tpot_seconds,
        bin_s=fine_bin(slo.ttft_seconds, interval),
        minimum=(spec.prefill.replicas.min, spec.decode.replicas.min),
        smooth_s=interval if lean else None,
    )
    limits = ttft_limits(trace.prompt, slo.ttft_seconds, cfg.ttft_per_token_s)
    top = (spec.prefill.replicas.max, spec.decode.replicas.max)
    lead = cfg.startup_s + interval
    back = slo.ttft_seconds + cfg.ttft_per_token_s * float(trace.prompt.max(initial=0))
    tries: list[tuple[float, float]] = []
    path: list[Repair] = []
    best: tuple[Schedule, Run, Summary] | None = None
    by = 1
    for i in range(iterations + 1):
        replay = run(trace, OracleReplay("oracle", sched, lead, back), cfg)
        s = summarize(replay)
        tries.append((s.slo_attainment, s.gpu_hours))
        if best is None or _better(s, best[2], goal):
            best = (sched, replay, s)
        if s.slo_attainment >= goal or i == iterations or _stalled(tries, step):
            break
        short = goal - s.slo_attainment
        fix = short * len(trace) if short < ORACLE_GENTLE else None
        # a replica the replay never asked for (its bin below the level the replay
        # orders over its lead) changed nothing: double the step until one shows
        by = 2 * by if len(tries) > 1 and tries[-1] == tries[-2] else 1
        sched, repaired = repair_path(
            sched,
            replay.times,
            ttft_limit=limits,
            tpot_s=slo.tpot_seconds,
            maximum=top,
            fix=fix,
            one=step == ORACLE_ONE,
            by=by,
        )
        path.append(repaired)
    assert best is not None
    sched, replay, s = best
    met = s.slo_attainment >= goal
    return FeasibleOracle(sched, replay, s, goal, met, tuple(tries), ceiling, step, tuple(path))


def _stalled(tries: Sequence[tuple[float, float]], step: str) -> bool:
    """The tight oracle's last ``ORACLE_STALL`` tries did not beat the best before."""
    if step != ORACLE_ONE or len(tries) <= ORACLE_STALL:
        return False
    before = max(a for a, _ in tries[:-ORACLE_STALL])
    return max(a for a, _ in tries[-ORACLE_STALL:]) <= before


def _better(s: Summary, than: Summary, goal: float) -> bool:
    """Meeting ``goal`` beats missing it; among those meeting it the cheaper wins,
    among those missing it the higher attainment."""
    if (s.slo_attainment >= goal) != (than.slo_attainment >= goal):
        return s.slo_attainment >= goal
    if s.slo_attainment >= goal:
        return s.gpu_hours < than.gpu_hours
    return s.slo_attainment > than.slo_attainment


@dataclass(frozen=True)
class Comparison:
    trace: Trace
    cfg: LoopConfig
    runs: tuple[Run, ...]
    summaries: tuple[Summary, ...]
    oracle: FeasibleOracle
    lower_bound: OracleResult
    work_floor_gpu_hours: float
    feasibility_ceiling: float
    static_best: tuple[tuning.StaticChoice, ...] = ()
    hpa_tuned: tuning.HpaChoice | None = None
    dynamo_tuned: tuning.DynamoChoice | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    #: Every size the static search replayed on this trace (``StaticSearch.tried``).
    static_sweep: tuple[dict[str, float], ...] = ()
    static_yesterday: tuning.YesterdayChoice | None = None
    #: The pre-roll's own figures of each pre-rolled policy (``compare(preroll_s=...)``),
    #: never added into its row.
    prerolls: dict[str, Summary] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON document of ``pdscaler simulate``::

        {"policies": {"pdscaler": {"slo_attainment": 0.995, ..., "gpu_hours": 9.8,
                                   "ratio_to_oracle": 1.12}, "static-best": ..., ...},
         "oracle": {"gpu_hours": 8.75, "slo_attainment": 0.991, "target": 0.99, ...},
         "lower_bound": {"gpu_hours": 6.9, "bin_s": 15.0},
         "work_floor": {"gpu_hours": 6.1}, "feasibility_ceiling": 1.0,
         "static_best": [{"target": 0.99, "prefill": 3, "decode": 4, ...}, ...],
         "hpa_tuned": {"config": {...}, "slo_attainment": ..., "tried": [...]},
         "dynamo_tuned": {"config": {"slo_scale": 0.5, ...}, ...},
         "pareto_front": ["pdscaler", "static-best"], "meta": {...}}
        """
        oracle_h = self.oracle.gpu_hours
        hpa = None
        if self.hpa_tuned is not None:
            hpa = {**choice_json(self.hpa_tuned), "label": self.hpa_tuned.config.label}
        dynamo = None if self.dynamo_tuned is None else choice_json(self.dynamo_tuned)
        return {
            "policies": {s.policy: s.to_json(oracle_h) for s in self.summaries},
            "oracle": self.oracle.to_json(),
            "lower_bound": {
                "gpu_hours": self.lower_bound.gpu_hours,
                "bin_s": self.lower_bound.schedule.bin_s,
            },
            "work_floor": {"gpu_hours": self.work_floor_gpu_hours},
            "feasibility_ceiling": self.feasibility_ceiling,
            "static_best": [asdict(c) for c in self.static_best],
            "static_sweep": [dict(t) for t in self.static_sweep],
            "static_yesterday": None
            if self.static_yesterday is None
            else asdict(self.static_yesterday),
            "hpa_tuned": hpa,
            "dynamo_tuned": dynamo,
            "pareto_front": sorted(pareto_front(self.summaries)),
            "preroll": {n: s.to_json() for n, s in self.prerolls.items()},
            "meta": self.meta,
        }


def choice_json(choice: tuning.Choice[Any]) -> dict[str, Any]:
    """A tuned baseline's choice as JSON: its config, figures and every candidate."""
    return {
        "config": asdict(choice.config),
        "slo_attainment": choice.slo_attainment,
        "gpu_hours": choice.gpu_hours,
        "met": choice.met,
        "tried": [
            {"config": asdict(c), "slo_attainment": a, "gpu_hours": g} for c, a, g in choice.tried
        ],
    }


def bounds(trace: Trace, cfg: LoopConfig, derate: float = 1.0) -> tuple[OracleResult, float]:
    """The lower bound (15 s bins at full load, minimum replicas = the spec's) and the
    work floor of ``trace``."""
    spec = cfg.spec
    tpot = spec.slo.tpot_seconds
    bound = lower_bound(
        trace,
        cfg.params,
        startup_s=cfg.startup_s,
        tpot_s=tpot,
        bin_s=spec.scaling.interval_seconds,
        minimum=(spec.prefill.replicas.min, spec.decode.replicas.min),
        derate=derate,
    )
    return bound, work_floor(trace, cfg.params, tpot_s=tpot)


def compare(
    trace: Trace,
    names: Sequence[str],
    cfg: LoopConfig,
    *,
    progress: Callable[[str, float], None] | None = None,
    decide: Decide | None = None,
    meta: dict[str, Any] | None = None,
    tuned: Tuned | None = None,
    target: float = TARGET,
    previous: Trace | None = None,
    oracle_step: str = ORACLE_ONE,
    preroll_s: float = 0.0,
    preroll_source: str = "head",
) -> Comparison:
    """Run every policy in ``names`` on ``trace`` with the same config and seed.
    ``static-best`` (or ``static-hindsight``, the same search) is searched for
    ``target`` and for the attainment pdscaler reached (when pdscaler runs first); the
    policy row is the one for ``target``; every size it replayed is kept
    (``Comparison.static_sweep``). ``static-yesterday`` is sized on ``previous`` (the
    span before ``trace``) unless ``tuned`` hands its size over. The oracle is repaired
    one replica at a time unless ``oracle_step`` is ``coarse``.

    With ``preroll_s`` > 0 every dynamic policy (not in ``STATIC_POLICIES``; the tuned
    HPA and Dynamo searches too) is replayed on ``traces.with_preroll(trace,
    preroll_s, preroll_source)`` under ``LoopConfig.preroll_s``: its row is the scored
    span's (``trace``'s requests exactly, t=0 at its start), the pre-roll's figures are
    kept apart (``Comparison.prerolls``). The statics, the oracle and the bounds replay
    ``trace`` alone, starting at their own size. 600 s of head pre-roll on an hour:
    pdscaler replays 70 minutes and is scored on the last 60."""
    bound, floor = bounds(trace, cfg)
    rtrace, rcfg = trace, cfg
    if preroll_s > 0:
        rtrace = with_preroll(trace, preroll_s, preroll_source)
        rcfg = replace(cfg, preroll_s=preroll_s)
    prerolls: dict[str, Summary] = {}
    tuned = tuned or Tuned()
    static_choices: list[tuning.StaticChoice] = []
    sweep: list[dict[str, float]] = []
    yesterday: tuning.YesterdayChoice | None = None
    hpa_choice: tuning.HpaChoice | None = None
    dynamo_choice: tuning.DynamoChoice | None = None
    runs: list[Run] = []
    for name in names:
        if name in ("static-best", STATIC_HINDSIGHT) and tuned.static is None:
            targets = [target]
            pd = [r for r in runs if r.policy == "pdscaler"]
            if pd:
                att = summarize(pd[0]).slo_attainment
                if att < target:
                    targets.append(att)
            static_choices, search = tuning.static_best(trace, cfg, targets)
            sweep = search.tried()
            tuned = replace(tuned, static=(static_choices[0].prefill, static_choices[0].decode))
        if name == STATIC_YESTERDAY and tuned.yesterday is None and previous is not None:
            yesterday = tuning.static_yesterday(previous, cfg, target)
            tuned = replace(tuned, yesterday=(yesterday.prefill, yesterday.decode))
        if name == "hpa-tuned" and tuned.hpa is None:
            hpa_choice = tuning.hpa_tuned(rtrace, rcfg, target)
            tuned = replace(tuned, hpa=hpa_choice.config)
        if name == "dynamo-planner" and tuned.dynamo is None:
            dynamo_choice = tuning.dynamo_tuned(rtrace, rcfg, target)
            tuned = replace(tuned, dynamo=dynamo_choice.config)
        static = name in STATIC_POLICIES
        on, on_cfg = (trace, cfg) if static else (rtrace, rcfg)
        ctrl = controller(name, trace, on_cfg, bound, decide, tuned, replayed=on)
        report = None if progress is None else _named(progress, name)
        loop_cfg = reference_config(on_cfg) if name == REFERENCE else on_cfg
        try:
            runs.append(run(on, ctrl, loop_cfg, report))
        finally:
            getattr(ctrl, "close", lambda: None)()
        pre = preroll_summary(runs[-1])
        if pre is not None:
            prerolls[name] = pre
    feasible = feasible_oracle(trace, cfg, target, step=oracle_step)
    info = {
        "trace": trace.name,
        "requests": len(trace),
        "span_s": trace.span,
        "startup_s": cfg.startup_s,
        "seed": cfg.seed,
        "slo": {
            "ttft_s": cfg.spec.slo.ttft_seconds,
            "ttft_per_token_s": cfg.ttft_per_token_s,
            "tpot_s": cfg.spec.slo.tpot_seconds,
            "percentile": cfg.spec.slo.percentile,
        },
        "oracle_bin_s": feasible.schedule.bin_s,
        "oracle_step": feasible.step,
        **({"preroll_s": preroll_s, "preroll_source": preroll_source} if preroll_s > 0 else {}),
        "lower_bound_bin_s": bound.schedule.bin_s,
        **({"static_best_size": list(tuned.static)} if tuned.static else {}),
        **({"hpa_tuned_config": tuned.hpa.label} if tuned.hpa else {}),
        **({"dynamo_slo_scale": tuned.dynamo.slo_scale} if tuned.dynamo else {}),
        **(meta or {}),
    }
    return Comparison(
        trace,
        cfg,
        tuple(runs),
        tuple(summarize(r) for r in runs),
        feasible,
        bound,
        floor,
        feasible.ceiling,
        tuple(static_choices),
        hpa_choice,
        dynamo_choice,
        info,
        tuple(sweep),
        yesterday,
        prerolls,
    )


def _named(progress: Callable[[str, float], None], name: str) -> Callable[[float], None]:
    return lambda fraction: progress(name, fraction)
