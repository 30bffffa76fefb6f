"""Running the decision-quality matrix of ``bench.quality``: the tuning of each group on
seed 0 (``tune``: the static-hindsight search, the HPA grid, the Dynamo planners' SLO
scale, static-yesterday's two half-hour sizes), every case (``run_case``: every policy,
the ablations, the oracle; ``compare_case``), and the whole matrix in two worker
processes (``run_matrix``), each case aggregated over its seeds and judged
(``bench.quality_verdicts``). Writes nothing but the seed-0 plots; the report is
``bench.quality_report``, which this module never imports.

static-yesterday on an hour trace (``yesterday_sizes``, ``yesterday_run``): each
half-hour runs the size the OTHER half-hour needed plus 20%, and the two replays are
joined into one Run (``join``: every request of both halves counted once, each half
billed until its own last request)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import dynamo_real
from bench.provenance import engine_label
from bench.quality import (
    CASE_POLICIES,
    PREROLL_SOURCE,
    REAL_DYNAMO,
    REAL_DYNAMO_MISSING,
    ROWS,
    TARGET_ATTAINMENT,
    Group,
    Plan,
    config,
    groups,
    load,
    patched,
    prerolled,
    queue_startups,
)
from bench.quality_verdicts import aggregate, verdict
from pdscaler.sim import tuning, verdicts
from pdscaler.sim.baselines import StaticController
from pdscaler.sim.compare import (
    STATIC_YESTERDAY,
    Comparison,
    Tuned,
    choice_json,
    compare,
)
from pdscaler.sim.controllers import PdscalerController
from pdscaler.sim.dynamo import DynamoConfig
from pdscaler.sim.engine import RequestTimes
from pdscaler.sim.loop import LoopConfig, Run, Timeline, run
from pdscaler.sim.plot import render_png
from pdscaler.sim.results import preroll_summary, summarize
from pdscaler.sim.traces import Trace
from pdscaler.types import FlipOptions


def yesterday_sizes(trace: Trace, cfg: LoopConfig) -> dict[str, Any]:
    """``static-yesterday`` on an hour trace, which has no previous day: each half-hour's
    size is the cheapest static meeting the target on the OTHER half-hour plus
    ``tuning.YESTERDAY_MARGIN`` (``tuning.static_yesterday``), so that no request is
    scored by a size chosen on it. ``first``: the size the first half-hour runs (sized
    on the second), ``second``: the reverse; each with the search's choice on the half
    it was sized on (``sized_on``: that half's hindsight bound)."""
    first, second = tuning.halves(trace)
    for_second = tuning.static_yesterday(first, cfg, TARGET_ATTAINMENT)
    for_first = tuning.static_yesterday(second, cfg, TARGET_ATTAINMENT)
    return {"first": asdict(for_first), "second": asdict(for_second), "mid_s": trace.span / 2}


def tune(group: Group, plan: Plan) -> dict[str, Any]:
    """Seed 0, start-up ``plan.tune_startup``: the static-hindsight search (target 99%;
    every size it replays is kept, ``static_sweep``), the HPA grid and the Dynamo
    planner's SLO scales (both with the pre-roll, like every dynamic policy),
    static-yesterday's two half-hour sizes, and pdscaler (pre-rolled) at every start-up
    so that the static search can also answer "the cheapest static size reaching
    pdscaler's attainment" there."""
    trace = load(group, plan, 0)
    cfg = config(group, plan.tune_startup, 0)
    rtrace, rcfg = prerolled(trace, cfg, plan)
    choices, search = tuning.static_best(trace, cfg, [TARGET_ATTAINMENT])
    hpa = tuning.hpa_tuned(rtrace, rcfg, TARGET_ATTAINMENT)
    dynamo = tuning.dynamo_tuned(rtrace, rcfg, TARGET_ATTAINMENT)
    at_pd = {}
    for startup in group.startups:
        c = config(group, startup, 0)
        rt, rc = prerolled(trace, c, plan)
        pd = summarize(run(rt, PdscalerController(c.spec), rc)).slo_attainment
        at_pd[f"{startup:g}"] = asdict(search.choose(pd))
    return {
        "static_best": asdict(choices[0]),
        "static_at_pdscaler": at_pd,
        "static_replays": len(search.runs),
        "static_sweep": search.tried(),
        "static_yesterday": yesterday_sizes(trace, cfg),
        "hpa": {**choice_json(hpa), "label": hpa.config.label},
        "dynamo": choice_json(dynamo),
    }


def join(first: Run, second: Run, at: float, name: str) -> Run:
    """Two replays of consecutive spans as one Run over both: ``second``'s times moved
    ``at`` seconds later, GPU-seconds added (each half billed until its own last
    request is done). Every request of both halves counts once."""
    a, b = first.times, second.times

    def cat(x: Any, y: Any, shift: float = 0.0) -> Any:
        return np.concatenate([x, y + shift])

    rejected = None
    if a.rejected is not None or b.rejected is not None:
        rejected = np.concatenate(
            [
                np.zeros(len(a.arrival), bool) if a.rejected is None else a.rejected,
                np.zeros(len(b.arrival), bool) if b.rejected is None else b.rejected,
            ]
        )
    times = RequestTimes(
        cat(a.arrival, b.arrival, at),
        cat(a.prompt, b.prompt),
        cat(a.output, b.output),
        cat(a.prefill_start, b.prefill_start, at),
        cat(a.prefill_end, b.prefill_end, at),
        cat(a.decode_admit, b.decode_admit, at),
        cat(a.first_token, b.first_token, at),
        cat(a.finish, b.finish, at),
        rejected,
    )
    ta, tb = first.timeline, second.timeline
    timeline = Timeline(
        cat(ta.time, tb.time, at),
        cat(ta.prefill_desired, tb.prefill_desired),
        cat(ta.prefill_ready, tb.prefill_ready),
        cat(ta.decode_desired, tb.decode_desired),
        cat(ta.decode_ready, tb.decode_ready),
        cat(ta.prefill_queue, tb.prefill_queue),
        cat(ta.decode_queue, tb.decode_queue),
    )
    return replace(
        first,
        policy=name,
        times=times,
        gpu_seconds={r: first.gpu_seconds[r] + second.gpu_seconds[r] for r in first.gpu_seconds},
        end=at + second.end,
        timeline=timeline,
        actions=(),
        notes=(),
        predicted_drains=(),
    )


def yesterday_run(
    trace: Trace, cfg: LoopConfig, sizes: dict[str, Any]
) -> tuple[Run, tuple[Run, Run]]:
    """static-yesterday's replay of ``trace``: its first half-hour at ``sizes["first"]``
    (sized on the second), its second at ``sizes["second"]`` (sized on the first),
    joined into one Run of the whole hour, every request scored out of sample; and the
    two half-hours' own runs."""
    first, second = tuning.halves(trace)
    runs = [
        run(half, StaticController(STATIC_YESTERDAY, sizes[k]["prefill"], sizes[k]["decode"]), cfg)
        for half, k in ((first, "first"), (second, "second"))
    ]
    return join(runs[0], runs[1], trace.span / 2.0, STATIC_YESTERDAY), (runs[0], runs[1])


def compare_case(
    group: Group, trace: Trace, cfg: LoopConfig, tuned: dict[str, Any], plan: Plan
) -> Comparison:
    """Every policy of a case and the oracle on ``trace`` under ``cfg``, the tuned ones
    replaying the group's seed-0 choices (``tuned``: ``tune``'s document), the dynamic
    ones after ``plan.preroll_s`` of pre-roll, static-yesterday from its two half-hours
    (``yesterday_run``), in the order of ``ROWS``."""
    from pdscaler.sim.baselines import HpaConfig

    sb = tuned["static_best"]
    h = tuned["hpa"]["config"]
    hpa = HpaConfig(h["target"], tuple(h["prefill"]), tuple(h["decode"]))
    comp = compare(
        trace,
        CASE_POLICIES,
        cfg,
        tuned=Tuned((sb["prefill"], sb["decode"]), hpa, DynamoConfig(**tuned["dynamo"]["config"])),
        meta={"rate_scale": group.scale, "group": group.slug},
        preroll_s=plan.preroll_s,
        preroll_source=PREROLL_SOURCE,
    )
    yesterday, halves = yesterday_run(trace, cfg, tuned["static_yesterday"])
    runs = {r.policy: r for r in (*comp.runs, yesterday)}
    order = [n for n in ROWS if n in runs]
    return replace(
        comp,
        runs=tuple(runs[n] for n in order),
        summaries=tuple(summarize(runs[n]) for n in order),
        meta={
            **comp.meta,
            "static_yesterday_halves": [summarize(h).to_json() for h in halves],
        },
    )


def run_case(
    group: Group,
    startup: float,
    seed: int,
    tuned: dict[str, Any],
    plan: Plan,
    plot_dir: str,
    discipline: str = verdicts.FCFS,
) -> dict[str, Any]:
    """One (group, start-up, seed): every policy, the ablations (FCFS only), the
    oracle; ``discipline`` ``deadline``: the engines order by deadline (``bench.queue``)."""
    t0 = time.perf_counter()
    trace = load(group, plan, seed)
    cfg = config(group, startup, seed)
    if discipline != verdicts.FCFS:
        cfg = replace(cfg, params=replace(cfg.params, queue_discipline=discipline))
    comp = compare_case(group, trace, cfg, tuned, plan)
    doc = comp.to_json()
    ablate = discipline == verdicts.FCFS and startup in plan.ablation_startups
    for label, patch in plan.ablations if ablate else ():
        c = cfg
        if "engine" in patch:
            c = replace(c, params=replace(c.params, **patch["engine"]))
        if "flips" in patch:
            c = replace(c, flips=FlipOptions(**patch["flips"]))
        c = replace(c, **patch.get("loop", {}))
        spec = patched(c.spec, patch.get("spec", {}))
        ctrl = PdscalerController(spec, flips=c.flips)
        ctrl.name = label
        rtrace, rcfg = prerolled(trace, c, plan)
        result = run(rtrace, ctrl, rcfg)
        doc["policies"][label] = summarize(result).to_json(comp.oracle.gpu_hours)
        pre = preroll_summary(result)
        if pre is not None:
            doc["preroll"][label] = pre.to_json()
    if seed == 0 and plot_dir and discipline == verdicts.FCFS:
        png = render_png(
            trace, comp.runs, comp.oracle.schedule, title=f"{group.name}, start-up {startup:g} s"
        )
        (Path(plot_dir) / f"quality-{group.slug}-{startup:g}s.png").write_bytes(png)
    doc["seconds"] = time.perf_counter() - t0
    return doc


def run_matrix(
    plan: Plan, log: Callable[[str], None] = print, out_dir: Path | None = None
) -> dict[str, Any]:
    """Tune every group, then run its cases, all in parallel: the heaviest loads are
    tuned first and a group's cases are queued as soon as its tuning is done, so that
    no worker idles behind a barrier or ends on a long case alone. Seed 0 of the
    start-ups ``queue_startups`` names is also replayed under the deadline queue (each
    case's ``deadline``, for ``bench.queue`` and the verdicts). The document ``write``
    reports (in the matrix's order, whatever order the jobs ran in)."""
    started = time.perf_counter()
    gs = groups(plan)
    plot_dir = "" if out_dir is None else str(out_dir)
    deadline: dict[tuple[Group, float], Any] = {}
    with ProcessPoolExecutor(max_workers=plan.workers) as pool:
        heaviest = sorted(gs, key=lambda g: (-g.scale, g.long))
        tuned_f = {pool.submit(tune, g, plan): g for g in heaviest}
        tuned = {}
        queued = {}
        for f in as_completed(tuned_f):
            g = tuned_f[f]
            tuned[g] = f.result()
            log(f"bench quality: tuned {g.name}")
            for st in g.startups:
                for seed in g.seeds:
                    queued[(g, st, seed)] = pool.submit(
                        run_case, g, st, seed, tuned[g], plan, plot_dir
                    )
            for st in queue_startups(plan, g):
                deadline[(g, st)] = pool.submit(
                    run_case, g, st, g.seeds[0], tuned[g], plan, "", verdicts.DEADLINE
                )
        cases: dict[str, Any] = {}
        order = [(g, st, seed) for g in gs for st in g.startups for seed in g.seeds]
        for g, st, seed in order:
            doc = queued[(g, st, seed)].result()
            key = f"{g.slug}-{st:g}s"
            cases.setdefault(
                key,
                {
                    "group": g.slug,
                    "trace": g.trace,
                    "scale": g.scale,
                    "held_out": g.held_out,
                    "startup_s": st,
                    "seeds": [],
                },
            )
            cases[key]["seeds"].append(doc)
            log(f"bench quality: {g.name}, start-up {st:g} s, seed {seed}: {doc['seconds']:.1f} s")
        for (g, st), f in deadline.items():
            cases[f"{g.slug}-{st:g}s"][verdicts.DEADLINE] = f.result()
            log(f"bench quality: {g.name}, start-up {st:g} s under the deadline queue")
    for case in cases.values():
        case["aggregate"] = aggregate(case["seeds"])
        g = next(x for x in gs if x.slug == case["group"])
        case["static_at_pdscaler"] = tuned[g]["static_at_pdscaler"][f"{case['startup_s']:g}"]
        case["verdict"] = verdict(case, tuned[g])
    return {
        "plan": {**asdict(plan), "ablations": [a[0] for a in plan.ablations]},
        "groups": {g.slug: {"startups": g.startups, "seeds": g.seeds} for g in gs},
        "tuning": {g.slug: tuned[g] for g in gs},
        "cases": cases,
        "real_dynamo": REAL_DYNAMO if dynamo_real.available() else REAL_DYNAMO_MISSING,
        "wall_s": time.perf_counter() - started,
        "engine": engine_label(),
    }
