"""The diurnal benchmark: days of production-shaped traffic (the ServeGen week,
data/traces/README.md), a warm-up span replayed as every dynamic policy's pre-roll and
used to size and tune the out-of-sample baselines, and the span after it scored.
``make bench-diurnal`` (budget: 60 minutes on 2 cores, one worker).

Owns: the tuning of the baselines on the warm-up span (``tune_job``: the static
searches on per-minute aggregates then a few replays, ``static_search``; the HPA grid
and the Dynamo planners' SLO scale), running the matrix (``run_matrix``, one replay per
worker process) and the command line (``python -m bench.diurnal``). The matrix it runs
(``Plan``: engines x start-ups x seeds x policies; the rate scale ``bench_scale``; the
registries ``POLICIES`` and ``ENGINES``) is ``bench.diurnal_plan``; pdscaler's verdict
per case against the best non-clairvoyant baseline and the tight oracle
(``sim.verdicts``) is ``bench.diurnal_verdicts``; the report
(``bench/results/diurnal.md`` and ``diurnal.json``) is ``bench.diurnal_report``. This
module imports those three and none of them imports it. Must not: score a pre-roll,
size or tune a baseline on the span it is scored on without labelling it a bound, or
report a number it did not measure.

Scale (``bench_scale``): the trace is replayed at the smallest whole rate multiple at
which its busiest hour needs at least ``MIN_PEAK_REPLICAS`` = 20 replicas of the
larger pool at the engine's full TRUE capacity. Worked numbers, hand-made engine
(``EngineParams()``, TPOT SLO 50 ms): the busiest hour of the week is hour 27 (day 1,
03:00-04:00) with 11,843 requests (3.290 req/s), prompts 723 tokens and outputs 47 on
average. Prefill: a request's prompt costs ``prefill_work_s`` = 723 / 8,370 + its
attention (the mean squared prompt / (8,500 x 53,400)) = 0.08786 replica-seconds, so
3.290 req/s need 0.2890 prefill replicas; decode: 3.290 x 47.0 = 154.7 output tokens/s
against 2,634 tokens/s a replica (129 sequences at a 49.0 ms step) = 0.0587. Prefill is
the larger pool: 20 / 0.2890 = 69.2 -> x70, where the peak hour needs 20.2 prefill and
4.1 decode replicas, and a day is 7.7-10.2 million requests (day 1: 9.40 million). The
measured engines are faster per replica, so their scale is higher: Qwen3-32B on two
H200 x164 (0.1222 prefill replicas at x1), Qwen3-8B on one H100 x395, Qwen3-30B-A3B on
one H200 x662 (a day of the latter: ~89 million requests, beyond this machine's memory).

Engines (``ENGINES``): ``hand-made`` (``EngineParams()``'s invented constants, labelled)
with the profile measured off it (``with_measured_profile``), and every record of
bench/engines/ (aiconfigurator 0.12.0's database, ``pdscaler.sim.measured``) with the
pools ``pdscaler plan profile`` writes for it (``with_pool_profiles`` at the model's
40,960-token context).

Spans (``Plan``): ``warmup_hours`` of the warm-up day's end (day 0) are the pre-roll of
the dynamic policies (``LoopConfig.preroll_s``; scored apart, reported as "pre-roll")
AND the span the out-of-sample baselines are sized and tuned on; then ``scored_hours``
from day 1's start are scored. Static policies and the oracle start at their size and
replay the scored span only. A static's replay does not depend on the start-up (it
never starts a replica; checked by tests/unit/test_diurnal_bench.py), so each static
size is replayed once per (engine, seed) and its row stands for every start-up.

Policies (``POLICIES``): pdscaler; ``static-hindsight`` (a BOUND: the cheapest static
meeting 99% on the scored span itself); ``static-yesterday`` (the cheapest static
meeting 99% on the warm-up span, +20% per pool: ``tuning.with_margin``);
``static-peak`` (the scored span's busiest minute: hindsight); ``hpa-tuned`` (the grid
of ``baselines.hpa_grid`` on the warm-up span, replayed there, the cheapest meeting 99%
else the highest attainment: never the scored span); ``dynamo-planner`` (our
re-implementation) and ``dynamo-planner-real`` (NVIDIA Dynamo 1.6.1's own planner,
``bench.dynamo_real``, registered by ``bench.quality``), both handed the SLO scale
tuned on the warm-up span; ``online-reference`` (``sim.reference``); ``oracle`` (the
tight SLO-feasible oracle, ``compare.feasible_oracle`` with ``oracle_repairs``
repairs at most).

Searches on a whole span are expensive (a day is ~65 s a replay at x70), so the
static ones (``static_search``) start from per-minute aggregates: each pool's 1-minute
need (``baselines.window_needs``: the profile at the minute's mix and the KV bound), the
size covering ``TARGET`` of the requests by their minute's need, replayed; then pool by
pool: a replay that misses grows the pool its misses are short of (``results.blame``:
the misses that no prefill queueing, or no decode admission wait, would have cured;
``grown``), and from the cheapest replay meeting the target one pool at a time is
stepped down by 12% (``shrunk``, the least blamed first) until each pool's step
misses: at most ``STATIC_REPLAYS`` replays; the choice is the cheapest replay meeting
the target, else the highest attainment. Every replayed size of the hindsight search
counts in the verdicts (``verdicts.sweep_points``). (The joint search this replaced
scaled both pools by one factor and, at the simulator's old bound of 64 replicas,
chose 64P/16D at 94.65% on the hand-made engine, all its misses decode admission
waits: ``MAX_REPLICAS`` is 256 now.)

The oracle's first plan sizes prefill for each 2-second bin's own work
(``feasible_oracle(lean=False)``; the hour bench's lean first plan, the interval's mean
rate, met 12.1% of day 1 00:00-02:00 at x70 and needed dozens of one-replica repairs),
then ``ORACLE_REPAIRS`` one-replica repairs at most; every try is kept, so pdscaler is
also compared at equal attainment (``gpu_hours_at``).

Budget (``make bench-diurnal``, 60 minutes on 2 cores, two workers under
``Plan.memory_gb``): a pre-rolled day of the measured engines does not fit in memory
(Qwen3-32B: ~44 million requests, ~23 GB) and the full matrix (4 engines x 2 start-ups
x 9 policies x 3 seeds on full days, with the tuning's ~20 replays and the oracle's) is
many hours at ~140,000 requests/s, so ``make bench-diurnal`` runs the cut ``Plan()``
and says so in its header (``CUT``): the hand-made engine, Qwen3-32B on two H200 and
Qwen3-8B on one H100 (x395; the MoE engine, x662, is left out), seed 0, day 0's
busiest hour (23:00-24:00) as the warm-up, day 1's first 4 hours scored (00:00-04:00:
1.4, 2.8, 2.4 and 3.3 req/s at x1 after the warm-up's 3.2: a fall by 2.3x then a rise
by 2.4x to the week's busiest hour). Measured at d219299 (bench/results/diurnal.json):
45 jobs in 2,897 s wall with two workers; the tunings took 517, 635 and 688 s, a
pre-rolled pdscaler replay 15 s (hand-made), 33 s (Qwen3-32B) and 70-81 s (Qwen3-8B,
18.7 million requests), an oracle of five tries up to 296 s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import dynamo_real, native, provenance
from bench.diurnal_plan import (
    ENGINES,
    FULL,
    ORACLE,
    ORACLE_REPAIRS,
    POLICIES,
    REPO,
    SHARED_ACROSS_STARTUPS,
    STATIC_REPLAYS,
    TUNED,
    Plan,
    case,
    config,
    cuts,
    scale_for,
    spans,
)
from bench.diurnal_report import preroll_table, report, write
from bench.diurnal_verdicts import case_verdicts
from bench.quality import REAL_DYNAMO, REAL_DYNAMO_MISSING
from pdscaler.cli.common import percent as pct
from pdscaler.sim import compare as sim_compare
from pdscaler.sim import tuning
from pdscaler.sim.baselines import HpaConfig, StaticController, kv_capacity, window_needs
from pdscaler.sim.compare import STATIC_HINDSIGHT, TARGET, Tuned, choice_json
from pdscaler.sim.dynamo import DynamoConfig
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.results import blame, preroll_summary, summarize
from pdscaler.sim.setup import clamp
from pdscaler.sim.traces import Trace, load_diurnal, load_profile
from pdscaler.spec import PDDeploymentSpec

RESULTS = Path(__file__).resolve().parent / "results"
#: A missed static grows each pool blamed for at least this share of the requests.
BLAME_FLOOR = 0.0025
#: ... by at least this much (``grown``).
GROW_MIN = 0.15
#: The step down of one pool from the cheapest static meeting the target.
SHRINK = 0.88
#: ``replay_gb``: a replay's memory, a base and per million requests replayed.
GB_BASE = 0.5
GB_PER_MILLION = 0.52


# ---------------------------------------------------------------- tuning
def minute_size(trace: Trace, cfg: LoopConfig, target: float) -> tuple[int, int]:
    """Each pool's 1-minute need (``window_needs``: the profile at the minute's mix, the
    KV bound) at the ``target`` quantile of the requests (each minute weighted by its
    requests), rounded up, inside the spec's bounds: the size that covers ``target`` of
    the requests' minutes."""
    spec = cfg.spec
    n_p, n_d = window_needs(trace, spec, kv_capacity(spec, cfg.params))
    weight = load_profile(trace).rate
    out = []
    for need, pool in ((n_p, spec.prefill), (n_d, spec.decode)):
        order = np.argsort(need)
        cum = np.cumsum(weight[order])
        k = int(np.searchsorted(cum, target * cum[-1])) if cum[-1] > 0 else 0
        n = math.ceil(float(need[order][min(k, len(order) - 1)]) - 1e-9)
        out.append(clamp(n, pool.replicas.min, pool.replicas.max))
    return out[0], out[1]


def _bounds(spec: PDDeploymentSpec) -> tuple[tuple[int, int], tuple[int, int]]:
    return (
        (spec.prefill.replicas.min, spec.prefill.replicas.max),
        (spec.decode.replicas.min, spec.decode.replicas.max),
    )


def grown(
    size: tuple[int, int], blamed: tuple[float, float], spec: PDDeploymentSpec
) -> tuple[int, int]:
    """A missed static's next size: each pool blamed for at least ``BLAME_FLOOR`` of the
    requests (``results.blame``; else the more blamed one) grows by 1 + 10 x its blame,
    at least ``GROW_MIN`` and at most double, by one replica at least. 64P/16D with
    blame (0.000, 0.053) -> 64P/25D (x1.53)."""
    grow = [b >= BLAME_FLOOR for b in blamed]
    if not any(grow):
        grow[int(blamed[1] > blamed[0])] = True
    out = []
    for n, b, g, (lo, hi) in zip(size, blamed, grow, _bounds(spec), strict=True):
        factor = 1.0 + min(1.0, max(GROW_MIN, 10.0 * b))
        out.append(clamp(max(n + 1, math.ceil(n * factor - 1e-9)), lo, hi) if g else n)
    return out[0], out[1]


def shrunk(size: tuple[int, int], pool: int, spec: PDDeploymentSpec) -> tuple[int, int]:
    """``size`` with pool 0 (prefill) or 1 (decode) stepped down by ``SHRINK`` (one
    replica at least, not below the spec's minimum): 64P -> 56P."""
    lo = _bounds(spec)[pool][0]
    out = list(size)
    out[pool] = max(lo, min(size[pool] - 1, math.floor(size[pool] * SHRINK + 1e-9)))
    return out[0], out[1]


def static_search(
    trace: Trace, cfg: LoopConfig, target: float = TARGET, replays: int = STATIC_REPLAYS
) -> tuple[tuning.StaticChoice, tuning.StaticSearch]:
    """The module docstring's search, pool by pool: from ``minute_size``, a replay that
    misses grows the pool its misses are short of (``results.blame``, ``grown``); from
    the cheapest replay meeting ``target`` the least blamed pool not yet found tight is
    stepped down (``shrunk``), and a step that misses marks that pool tight. At most
    ``replays`` replays; the cheapest replay meeting ``target``, else the highest
    attainment. Hand-made engine, day 1 00:00-02:00 at x70: the joint search it
    replaces scaled both pools by one factor and chose 64P/16D (94.65%, prefill at the
    old 64 bound, decode short)."""
    search = tuning.StaticSearch(trace, cfg)
    spec = cfg.spec
    blamed: dict[tuple[int, int], tuple[float, float]] = {}

    def replay(size: tuple[int, int]) -> float:
        if size not in search.runs:
            r = run(trace, StaticController("static-best", *size), cfg)
            search.runs[size] = summarize(r)
            blamed[size] = blame(r.times, r.slo_ttft_s, r.slo_tpot_s, r.slo_ttft_per_token_s)
        return search.runs[size].slo_attainment

    size = minute_size(trace, cfg, target)
    best: tuple[int, int] | None = None
    tight: set[int] = set()
    stepped: int | None = None
    for _ in range(replays):
        met = replay(size) >= target
        if met and (best is None or search.runs[size].gpu_hours < search.runs[best].gpu_hours):
            best = size
        if not met and best is None:
            nxt = grown(size, blamed[size], spec)
            if nxt == size:
                break
            size = nxt
            continue
        if not met and stepped is not None:
            tight.add(stepped)
        assert best is not None
        slack = sorted((i for i in (0, 1) if i not in tight), key=lambda i: blamed[best][i])
        nxt_or_none = None
        for i in slack:
            cand = shrunk(best, i, spec)
            if cand == best or cand in search.runs:
                tight.add(i)
                continue
            nxt_or_none, stepped = cand, i
            break
        if nxt_or_none is None:
            break
        size = nxt_or_none
    meeting = {k: s for k, s in search.runs.items() if s.slo_attainment >= target}
    if meeting:
        (p, d), s = min(meeting.items(), key=lambda kv: kv[1].gpu_hours)
    else:
        (p, d), s = max(
            search.runs.items(), key=lambda kv: (kv[1].slo_attainment, -kv[1].gpu_hours)
        )
    return tuning.StaticChoice(
        target, p, d, s.slo_attainment, s.gpu_hours, s.slo_attainment >= target
    ), search


def yesterday(choice: tuning.StaticChoice, spec: PDDeploymentSpec) -> tuning.YesterdayChoice:
    """``static-yesterday`` from the choice on the warm-up span: +``YESTERDAY_MARGIN``
    per pool (``tuning.with_margin``), inside the spec's bounds."""
    p, d = tuning.with_margin((choice.prefill, choice.decode))
    return tuning.YesterdayChoice(
        choice,
        clamp(p, spec.prefill.replicas.min, spec.prefill.replicas.max),
        clamp(d, spec.decode.replicas.min, spec.decode.replicas.max),
        tuning.YESTERDAY_MARGIN,
    )


def tune_job(plan: Plan, engine: str, seed: int, week: Trace | None = None) -> dict[str, Any]:
    """The tuned choices of one (engine, seed), at start-up ``plan.tune_startup``: on
    the WARM-UP span, static-yesterday's size (``static_search`` + 20%), the HPA grid
    (``tuning.hpa_tuned``) and the Dynamo planners' SLO scale (``tuning.dynamo_tuned``);
    on the scored span, the hindsight bound's search (every size it replayed kept for
    the verdicts, and its chosen size's replay as the static-hindsight row)."""
    t0 = time.perf_counter()
    c = case(plan, engine, plan.tune_startup, seed, week)
    hind, search = static_search(c.scored, c.cfg)
    warm, warm_search = static_search(c.warmup, c.cfg)
    hpa = tuning.hpa_tuned(c.warmup, c.cfg, TARGET)
    dyn = tuning.dynamo_tuned(c.warmup, c.cfg, TARGET)
    return {
        "engine": engine,
        "seed": seed,
        "static_hindsight": asdict(hind),
        "static_hindsight_row": search.summary(hind.prefill, hind.decode).to_json(),
        "static_sweep": search.tried(),
        "static_yesterday": asdict(yesterday(warm, c.cfg.spec)),
        "static_yesterday_sweep": warm_search.tried(),
        "hpa": {**choice_json(hpa), "label": hpa.config.label},
        "dynamo": choice_json(dyn),
        "requests": {"warmup": len(c.warmup), "scored": len(c.scored)},
        "seconds": time.perf_counter() - t0,
    }


def tuned_of(doc: dict[str, Any]) -> Tuned:
    """The ``Tuned`` choices of a ``tune_job`` document."""
    h, y, s = doc["hpa"]["config"], doc["static_yesterday"], doc["static_hindsight"]
    return Tuned(
        static=(s["prefill"], s["decode"]),
        hpa=HpaConfig(h["target"], tuple(h["prefill"]), tuple(h["decode"])),
        dynamo=DynamoConfig(**doc["dynamo"]["config"]),
        yesterday=(y["prefill"], y["decode"]),
    )


# ---------------------------------------------------------------- jobs
def _row(
    engine: str, startup: float, seed: int, name: str, scale: int, size: Any
) -> dict[str, Any]:
    return {
        "engine": engine,
        "startup_s": startup,
        "seed": seed,
        "policy": name,
        "scale": scale,
        "static_size": list(size) if size else None,
    }


def run_job(
    plan: Plan,
    engine: str,
    startup: float,
    seed: int,
    name: str,
    tuned: dict[str, Any] | None = None,
    week: Trace | None = None,
) -> dict[str, Any]:
    """One policy on one case: its scored figures, its pre-roll's, and the wall time
    (the oracle: its replay's figures and its tries and repairs, ``oracle``). ``week``:
    the loaded trace (else read from ``plan.trace_path``)."""
    t0 = time.perf_counter()
    c = case(plan, engine, startup, seed, week, None if tuned is None else tuned_of(tuned))
    spec = POLICIES[name]
    trace, cfg = config(c, spec)
    loaded = time.perf_counter()
    oracle = None
    if name == ORACLE:
        found = sim_compare.feasible_oracle(
            trace, cfg, TARGET, iterations=plan.oracle_repairs, lean=False
        )
        s, pre, size = found.summary, None, None
        oracle = found.to_json()
        replayed_requests = len(trace) * len(found.tries)
    else:
        ctrl = spec.make(c, trace)
        try:
            result = run(trace, ctrl, cfg)
        finally:
            getattr(ctrl, "close", lambda: None)()
        s, pre = summarize(result), preroll_summary(result)
        size = None if spec.preroll else getattr(ctrl, "initial", None)
        replayed_requests = len(trace)
    replayed = time.perf_counter() - loaded
    return {
        **_row(engine, startup, seed, name, c.scale, size),
        "scored": s.to_json(),
        "preroll": None if pre is None else pre.to_json(),
        "oracle": oracle,
        "requests_replayed": replayed_requests,
        "replay_s": replayed,
        "requests_per_s": replayed_requests / replayed if replayed > 0 else math.nan,
        "setup_s": loaded - t0,
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def tuning_rows(plan: Plan, doc: dict[str, Any], startups: Sequence[float]) -> list[dict[str, Any]]:
    """The static-hindsight rows of one ``tune_job`` document: its search's replay of
    the chosen size, for every start-up (a static's replay does not depend on it)."""
    s = doc["static_hindsight"]
    return [
        {
            **_row(
                doc["engine"], st, doc["seed"], STATIC_HINDSIGHT, 0, (s["prefill"], s["decode"])
            ),
            "scored": doc["static_hindsight_row"],
            "preroll": None,
            "oracle": None,
            "from_tuning": True,
            "requests_replayed": 0,
            "replay_s": 0.0,
            "requests_per_s": math.nan,
            "setup_s": 0.0,
            "max_rss_gb": math.nan,
        }
        for st in startups
        if STATIC_HINDSIGHT in plan.policies
    ]


def shared_rows(plan: Plan, row: dict[str, Any]) -> list[dict[str, Any]]:
    """A static size's row for the other start-ups (``shared_from`` its replay's)."""
    if row["policy"] not in SHARED_ACROSS_STARTUPS:
        return []
    return [
        {**row, "startup_s": st, "shared_from_startup_s": row["startup_s"]}
        for st in plan.startups
        if st != row["startup_s"]
    ]


def run_matrix(
    plan: Plan,
    log: Callable[[str], None] = print,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Tune each (engine, seed), then replay the jobs, in ``plan.workers`` processes
    (one replay each: a day at the bench scale holds several GB); the document
    ``write`` reports; ``partial`` gets it after each job (``jobs_done`` of ``jobs``)."""
    started = time.perf_counter()
    week = load_diurnal(REPO / plan.trace_path)
    scales: dict[str, dict[str, Any]] = {}
    for e in plan.engines:
        engine = ENGINES[e]()
        scale, need = scale_for(plan, week, engine.params)
        scales[e] = {
            "scale": scale,
            "peak_hour": asdict(need),
            "larger": need.larger,
            "label": engine.label,
        }
    jobs = plan.matrix()
    rows: list[dict[str, Any]] = []
    tuned: dict[str, dict[str, Any]] = {}
    tunes = [(e, s) for e in plan.engines for s in plan.seeds] if TUNED & set(plan.policies) else []

    def doc() -> dict[str, Any]:
        order = {(e, st, seed, p): i for i, (e, st, seed, p) in enumerate(full_order(plan))}
        done = sorted(
            rows, key=lambda r: order[(r["engine"], r["startup_s"], r["seed"], r["policy"])]
        )
        out = {
            "plan": asdict(plan),
            "cuts": cuts(plan),
            "policies": {n: POLICIES[n].label or n for n in plan.policies},
            "scales": scales,
            "tuning": tuned,
            "rows": done,
            "jobs": len(jobs) + len(tunes),
            "jobs_done": len([r for r in rows if "shared_from_startup_s" not in r])
            - len([r for r in rows if r.get("from_tuning")])
            + len(tuned),
            "wall_s": time.perf_counter() - started,
            "engine": provenance.engine_label(),
            "real_dynamo": REAL_DYNAMO if dynamo_real.available() else REAL_DYNAMO_MISSING,
            provenance.KEY: provenance.measured_at(),
        }
        out["verdicts"] = case_verdicts(out)
        return out

    # each engine's pre-rolled replay, in GB (``replay_gb``): no two jobs together above
    # ``plan.memory_gb`` (one alone always runs)
    x1 = sum(len(t) for t in spans(plan, week))  # a pre-rolled replay at rate x1
    per_hour = {e: replay_gb(x1 * scales[e]["scale"]) for e in plan.engines}
    queue: list[tuple[str, Any, float]] = [("tune", t, per_hour[t[0]]) for t in tunes]
    if not tunes:  # nothing to tune: the jobs at once
        queue += [("job", j, per_hour[j[0]]) for j in jobs]
    with ProcessPoolExecutor(max_workers=plan.workers, max_tasks_per_child=1) as pool:
        pending: dict[Future[dict[str, Any]], tuple[str, Any, float]] = {}

        def fill() -> None:
            while queue and len(pending) < plan.workers:
                used = sum(gb for _, _, gb in pending.values())
                k = next(
                    (
                        i
                        for i, (_, _, gb) in enumerate(queue)
                        if not pending or used + gb <= plan.memory_gb
                    ),
                    None,
                )
                if k is None:
                    return
                kind, key, gb = queue.pop(k)
                if kind == "tune":
                    f = pool.submit(tune_job, plan, key[0], key[1], week)
                else:
                    e, st, seed, name = key
                    f = pool.submit(
                        run_job, plan, e, st, seed, name, tuned.get(f"{e}/{seed}"), week
                    )
                pending[f] = (kind, key, gb)

        fill()
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                kind, key, _ = pending.pop(f)
                got = f.result()
                if kind == "tune":
                    e, seed = key
                    tuned[f"{e}/{seed}"] = got
                    rows.extend(tuning_rows(plan, got, plan.startups))
                    log(f"bench diurnal: tuned {e}, seed {seed} ({got['seconds']:.0f} s)")
                    # this (engine, seed)'s jobs, in the matrix's order, at once: a
                    # worker left idle while the slowest engine tunes (Qwen3-8B: the
                    # other two tuned in 517 and 635 s, then one worker ran alone)
                    queue.extend(("job", j, per_hour[j[0]]) for j in jobs if (j[0], j[2]) == key)
                    continue
                rows.append(got)
                rows.extend(shared_rows(plan, got))
                log(
                    f"bench diurnal: {key[0]}, start-up {key[1]:g} s, seed {key[2]}, {key[3]}: "
                    f"{pct(got['scored']['slo_attainment'])} "
                    f"{got['scored']['gpu_hours']:.1f} GPU-h, {got['replay_s']:.0f} s"
                )
            fill()
            if partial is not None and pending:
                partial(doc())
    return doc()


def replay_gb(requests: int) -> float:
    """A replay's peak memory, in GB: ``GB_PER_MILLION`` a million requests plus
    ``GB_BASE`` (a pre-rolled day, 19.5 million requests at x70, peaked at 10.1 GB)."""
    return GB_BASE + GB_PER_MILLION * requests / 1e6


def full_order(plan: Plan) -> list[tuple[str, float, int, str]]:
    """Every (engine, start-up, seed, policy) of the report, in its order."""
    return [
        (e, st, seed, p)
        for e in plan.engines
        for st in plan.startups
        for seed in plan.seeds
        for p in plan.policies
    ]


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.diurnal", description=__doc__.split("\n")[0])
    d = Plan()
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    p.add_argument("--full", action="store_true", help="the full matrix (FULL), not the cut")
    p.add_argument("--engines", default=",".join(d.engines), help="engines (ENGINES)")
    p.add_argument("--startups", default="90,300", help="start-up seconds (90,300)")
    p.add_argument("--seeds", default="0", help="seeds (0)")
    p.add_argument("--policies", default=",".join(d.policies), help="policies (POLICIES)")
    p.add_argument("--warmup-hours", type=float, default=d.warmup_hours, help="warm-up hours")
    p.add_argument("--scored-hours", type=float, default=d.scored_hours, help="scored hours")
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes (1: ~10 GB each, module doc)"
    )
    p.add_argument("--scale", type=int, default=None, help="fixed rate scale (default: 20 at peak)")
    p.add_argument(
        "--oracle-repairs", type=int, default=ORACLE_REPAIRS, help="the oracle's repairs"
    )
    p.add_argument("--render", action="store_true", help="re-render diurnal.md from diurnal.json")
    p.add_argument(
        "--preroll-table",
        nargs="+",
        type=Path,
        default=None,
        help="diurnal.json files: write the pre-roll-length table to --out/diurnal-preroll.md",
    )
    return p


def plan_of(args: argparse.Namespace) -> Plan:
    if args.full:
        return replace(FULL, workers=max(1, args.workers))
    engines = tuple(x.strip() for x in args.engines.split(",") if x.strip())
    policies = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    unknown = [e for e in engines if e not in ENGINES] + [p for p in policies if p not in POLICIES]
    if unknown or not engines or not policies:
        raise ValueError(
            f"unknown {', '.join(unknown) or 'empty list'}: engines {sorted(ENGINES)}, "
            f"policies {sorted(POLICIES)}"
        )
    if not (0 < args.warmup_hours <= 24 and 0 < args.scored_hours <= 24):
        raise ValueError("--warmup-hours and --scored-hours must be in (0, 24]")
    return Plan(
        engines=engines,
        startups=_floats(args.startups),
        seeds=tuple(int(x) for x in args.seeds.split(",")),
        policies=policies,
        warmup_hours=args.warmup_hours,
        scored_hours=args.scored_hours,
        workers=max(1, args.workers),
        scale=args.scale,
        oracle_repairs=args.oracle_repairs,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(args_list)
    if args.preroll_table:
        text = preroll_table(args.preroll_table)
        (args.out / "diurnal-preroll.md").write_text(text, encoding="utf-8")
        return 0
    if args.render:
        doc = json.loads((args.out / "diurnal.json").read_text(encoding="utf-8"))
        (args.out / "diurnal.md").write_text(report(doc, doc["command"]), encoding="utf-8")
        return 0
    try:
        plan = plan_of(args)
    except ValueError as err:
        print(f"bench diurnal: {err}", file=sys.stderr)
        return 2
    if argv is None:
        native.reexec(args_list, module="bench.diurnal")  # compiled, same results
    command = " ".join(["python -m bench.diurnal", *args_list])
    doc = run_matrix(plan, partial=lambda d: write(d, args.out, command))
    write(doc, args.out, command)
    print(f"bench diurnal: wrote diurnal.md/json ({doc['wall_s']:.0f} s, pid {os.getpid()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
