"""The diurnal benchmark: days of production-shaped traffic (the ServeGen week,
data/traces/README.md), a warm-up day replayed as every dynamic policy's pre-roll, and
the days after it scored. ``make bench-diurnal`` (budget: 60 minutes on 2 cores).

Owns: the diurnal matrix (``Plan``: engine profiles x start-ups x seeds x policies),
the rate scale of the bench (``bench_scale``), the policy and engine registries other
parts plug into (``POLICIES``, ``ENGINES``), running the matrix (``run_matrix``, one
replay per worker process) and the report: ``bench/results/diurnal.md`` and
``diurnal.json``. Must not: score a pre-roll, size a baseline on the span it is scored
on without saying so, or report a number it did not measure.

Scale (``bench_scale``): the trace is replayed at the smallest whole rate multiple at
which its busiest hour needs at least ``MIN_PEAK_REPLICAS`` = 20 replicas of the
larger pool at the engine's full TRUE capacity. Worked numbers, default engine
(``EngineParams()``, TPOT SLO 50 ms): the busiest hour of the week is hour 27 (day 1,
03:00-04:00) with 11,843 requests (3.290 req/s), prompts 723 tokens and outputs 47 on
average. Prefill: a request's prompt costs ``prefill_work_s`` = 723 / 8,370 + its
attention (the mean squared prompt / (8,500 x 53,400)) = 0.08786 replica-seconds, so
3.290 req/s need 0.2890 prefill replicas; decode: 3.290 x 47.0 = 154.7 output tokens/s
against 2,634 tokens/s a replica (129 sequences at a 49.0 ms step) = 0.0587. Prefill is
the larger pool: 20 / 0.2890 = 69.2 -> x70, where the peak hour needs 20.2 prefill and
4.1 decode replicas, and a day is 7.7-10.2 million requests (day 1: 9.40 million). The
busiest minutes need more than the hour's mean (static-peak sizes day 1's busiest
minute at 64 prefill and 21 decode replicas at x70, bench/results/diurnal.md): the
scale is a floor on the pools' size, not a headroom.

Spans (``Plan``): ``warmup_hours`` of the warm-up day's end (24: all of day 0) are the
pre-roll of the dynamic policies (``LoopConfig.preroll_s``; scored apart, reported as
"pre-roll"), then ``scored_hours`` from day 1's start are scored (24: day 1 only, for
speed; bench/results/speed.md). Memory: the engine keeps every request's record, ~500
bytes each; a pre-rolled job (19.5 million requests) peaked at 10.1 GB, so the bench
runs one replay per worker and one worker by default. Static policies start at their
size and replay the scored span only (their state does not depend on history; the
requests in flight at midnight, the only difference, are a few seconds of a quiet
hour).

Plugging in (other parts of issue 26): a policy is a ``PolicySpec`` in ``POLICIES``
(its name, ``make(case) -> Controller`` and whether it gets the pre-roll): a static
size chosen on the warm-up day by replay (``static-yesterday``), the hindsight bound,
the online reference, Dynamo's planner are one entry each, and ``Case`` hands them the
warm-up trace, the scored trace, the config and the engine. An engine profile is an
entry of ``ENGINES`` (name -> ``EngineParams``; the measured profiles of bench/engines/
register there); the scale is computed per engine. Bounds (the tight oracle) replay
the scored trace without a pre-roll, as the statics do.

Budget: the skeleton's 6 jobs took 871 s with one worker on the shared 2 cores
(compiled): 170-290 s a pre-rolled dynamic job, 75-110 s a static one, ~13 s of set-up
each. An hour holds about a dozen of each; the full matrix of issue 26 (3 engines x 2
start-ups x ~8 policies, plus the static searches' and the oracle's replays) does not
fit at this speed without fewer scored hours or a faster engine (speed.md).
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
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import native, provenance
from bench.markdown import numeric_columns, table
from pdscaler.cli.common import percent as pct
from pdscaler.sim.baselines import StaticController, kv_capacity, static_peak
from pdscaler.sim.controllers import Controller, PdscalerController
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.profiles import with_measured_profile
from pdscaler.sim.results import preroll_summary, summarize
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import DAY_S, Trace, days, load_diurnal, scale_rate

REPO = Path(__file__).resolve().parent.parent
WEEK = REPO / "data" / "traces" / "servegen-m-large-7d.jsonl.gz"
RESULTS = Path(__file__).resolve().parent / "results"
HOUR_S = 3600.0
#: The bench's scale: the busiest hour needs at least this many replicas of the larger
#: pool at full capacity (issue 26).
MIN_PEAK_REPLICAS = 20
#: The day replayed as the warm-up (pre-roll); the scored span starts at the next one.
WARMUP_DAY = 0


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
    larger pool: ceil(20 / 0.2890) = 70 for the week on the default engine."""
    return max(1, math.ceil(replicas / need.larger - 1e-9))


# ---------------------------------------------------------------- registries
def default_engine() -> EngineParams:
    """The hand-made engine (Llama-2-7B-class on one A100, engine.py's docstring)."""
    return EngineParams()


#: Engine profiles by name. The measured profiles (bench/engines/) add entries here.
ENGINES: dict[str, Callable[[], EngineParams]] = {"default": default_engine}


@dataclass(frozen=True)
class Case:
    """What a policy is built from: the warm-up span (for sizing out of sample), the
    scored span, the pre-rolled trace (warm-up then scored; its ``preroll_s`` first
    seconds are the warm-up), the config (without a pre-roll) and the engine."""

    engine: str
    params: EngineParams
    scale: int
    startup_s: float
    seed: int
    warmup: Trace
    scored: Trace
    cfg: LoopConfig

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
    """One policy of the matrix: ``make`` builds its controller for a case; ``preroll``:
    it replays the warm-up as its pre-roll (dynamic policies), else it starts at its
    size on the scored span (static ones)."""

    name: str
    make: Callable[[Case], Controller]
    preroll: bool
    label: str = ""


def _static_named(name: str, ctrl: StaticController) -> StaticController:
    return StaticController(name, ctrl.prefill, ctrl.decode)


POLICIES: dict[str, PolicySpec] = {
    p.name: p
    for p in (
        PolicySpec(
            "pdscaler",
            lambda c: PdscalerController(c.cfg.spec, flips=c.cfg.flips),
            preroll=True,
            label="pdscaler (pre-rolled on the warm-up day)",
        ),
        PolicySpec(
            "static-peak",
            lambda c: static_peak(c.scored, c.cfg.spec, kv_capacity(c.cfg.spec, c.params)),
            preroll=False,
            label="static-peak (the scored span's busiest minute: hindsight)",
        ),
        PolicySpec(
            "static-warmup-peak",
            lambda c: _static_named(
                "static-warmup-peak",
                static_peak(c.warmup, c.cfg.spec, kv_capacity(c.cfg.spec, c.params)),
            ),
            preroll=False,
            label="static-warmup-peak (the warm-up day's busiest minute: out of sample)",
        ),
    )
}


# ---------------------------------------------------------------- the matrix
@dataclass(frozen=True)
class Plan:
    engines: tuple[str, ...] = ("default",)
    startups: tuple[float, ...] = (90.0, 300.0)
    seeds: tuple[int, ...] = (0,)
    policies: tuple[str, ...] = ("pdscaler", "static-peak", "static-warmup-peak")
    #: Hours of the warm-up day's end replayed as the pre-roll (24: the whole day).
    warmup_hours: float = 24.0
    #: Hours scored from the start of the day after the warm-up (24: one day).
    scored_hours: float = 24.0
    #: One replay per process at a time; a pre-rolled day (19.5 million requests at x70)
    #: peaked at 10.1 GB, so two at once need ~21 GB.
    workers: int = 1
    min_peak_replicas: int = MIN_PEAK_REPLICAS
    #: A fixed rate scale instead of ``bench_scale``'s (the tests' small runs).
    scale: int | None = None
    trace_path: str = str(WEEK)

    def matrix(self) -> list[tuple[str, float, int, str]]:
        """Every (engine, start-up, seed, policy), the pre-rolled (longest) first."""
        jobs = [
            (e, st, seed, p)
            for e in self.engines
            for st in self.startups
            for seed in self.seeds
            for p in self.policies
        ]
        return sorted(jobs, key=lambda j: not POLICIES[j[3]].preroll)


def scale_for(plan: Plan, week: Trace, params: EngineParams) -> tuple[int, PeakNeed]:
    need = peak_need(week, params, sim_spec().slo.tpot_seconds)
    return (plan.scale or bench_scale(need, plan.min_peak_replicas)), need


def loop_config(params: EngineParams, startup: float, seed: int) -> LoopConfig:
    """The simulated PDDeployment (with the engine's measured profile) and the loop's
    settings, without a pre-roll (``config`` adds it for the dynamic policies)."""
    return LoopConfig(
        spec=with_measured_profile(sim_spec(startup_s=startup), params),
        params=params,
        startup_s=startup,
        seed=seed,
    )


def case(plan: Plan, engine: str, startup: float, seed: int, week: Trace | None = None) -> Case:
    """The traces and config of one (engine, start-up, seed): day 0's last
    ``warmup_hours`` and day 1's first ``scored_hours``, each rate-scaled with its own
    seed (so the scored span is the same whatever the pre-roll)."""
    week = week if week is not None else load_diurnal(Path(plan.trace_path))
    params = ENGINES[engine]()
    scale, _ = scale_for(plan, week, params)
    both = days(week, WARMUP_DAY, 2)
    warm_s, scored_s = plan.warmup_hours * HOUR_S, plan.scored_hours * HOUR_S
    warmup = both.window(DAY_S - warm_s, DAY_S)
    scored = both.window(DAY_S, DAY_S + scored_s)
    cfg = loop_config(params, startup, seed)
    return Case(
        engine,
        params,
        scale,
        startup,
        seed,
        scale_rate(warmup, scale, seed=2 * seed + 1),
        scale_rate(scored, scale, seed=2 * seed),
        cfg,
    )


def config(c: Case, policy: PolicySpec) -> tuple[Trace, LoopConfig]:
    """The trace and config a policy replays: pre-rolled on the warm-up, or the scored
    span alone."""
    if policy.preroll:
        return c.prerolled(), replace(c.cfg, preroll_s=c.preroll_s)
    return c.scored, c.cfg


def run_job(plan: Plan, engine: str, startup: float, seed: int, name: str) -> dict[str, Any]:
    """One policy on one case: its scored figures, its pre-roll's, and the wall time."""
    t0 = time.perf_counter()
    c = case(plan, engine, startup, seed)
    spec = POLICIES[name]
    trace, cfg = config(c, spec)
    ctrl = spec.make(c)
    loaded = time.perf_counter()
    result = run(trace, ctrl, cfg)
    replayed = time.perf_counter() - loaded
    s = summarize(result)
    pre = preroll_summary(result)
    size = getattr(ctrl, "initial", None)
    return {
        "engine": engine,
        "startup_s": startup,
        "seed": seed,
        "policy": name,
        "scale": c.scale,
        "static_size": list(size) if size else None,
        "scored": s.to_json(),
        "preroll": None if pre is None else pre.to_json(),
        "requests_replayed": len(trace),
        "replay_s": replayed,
        "requests_per_s": len(trace) / replayed if replayed > 0 else math.nan,
        "setup_s": loaded - t0,
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def run_matrix(
    plan: Plan,
    log: Callable[[str], None] = print,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Every job of the plan in ``plan.workers`` processes (one replay each: a day at
    the bench scale holds several GB), then the document ``write`` reports;
    ``partial`` gets the document after each job (``jobs_done`` of ``jobs``)."""
    started = time.perf_counter()
    week = load_diurnal(Path(plan.trace_path))
    scales = {}
    for e in plan.engines:
        scale, need = scale_for(plan, week, ENGINES[e]())
        scales[e] = {"scale": scale, "peak_hour": asdict(need), "larger": need.larger}
    jobs = plan.matrix()
    rows: list[dict[str, Any]] = []

    def doc() -> dict[str, Any]:
        order = {job: i for i, job in enumerate(jobs)}
        done = sorted(
            rows, key=lambda r: order[(r["engine"], r["startup_s"], r["seed"], r["policy"])]
        )
        return {
            "plan": asdict(plan),
            "policies": {n: POLICIES[n].label or n for n in plan.policies},
            "scales": scales,
            "rows": done,
            "jobs": len(jobs),
            "jobs_done": len(rows),
            "wall_s": time.perf_counter() - started,
            "engine": native.engine_label(),
            provenance.KEY: provenance.measured_at(),
        }

    with ProcessPoolExecutor(max_workers=plan.workers, max_tasks_per_child=1) as pool:
        futures = {pool.submit(run_job, plan, *job): job for job in jobs}
        for f in as_completed(futures):
            job, row = futures[f], f.result()
            rows.append(row)
            log(
                f"bench diurnal: {job[0]}, start-up {job[1]:g} s, seed {job[2]}, {job[3]}: "
                f"{pct(row['scored']['slo_attainment'])} "
                f"{row['scored']['gpu_hours']:.1f} GPU-h, {row['replay_s']:.0f} s"
            )
            if partial is not None and len(rows) < len(jobs):
                partial(doc())
    return doc()


# ---------------------------------------------------------------- report
def _pct(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else pct(v)


def _incomplete(doc: dict[str, Any]) -> str:
    done, jobs = doc.get("jobs_done"), doc.get("jobs")
    if done is None or done == jobs:
        return ""
    return f" (INCOMPLETE: {done} of {jobs} jobs done when this was written)"


def report(doc: dict[str, Any], command: str) -> str:
    plan = doc["plan"]
    lines = [
        "# Diurnal benchmark",
        "",
        provenance.line(doc.get(provenance.KEY)),
        "",
        f"Generated by `{command}`: the ServeGen week (data/traces/README.md), day 0's "
        f"last {plan['warmup_hours']:g} h replayed as the pre-roll of the dynamic "
        f"policies (scored apart), day 1's first {plan['scored_hours']:g} h scored. "
        f"Simulator {doc['engine']}; {plan['workers']} worker process(es); matrix wall "
        f"time {doc['wall_s']:.0f} s{_incomplete(doc)}. A skeleton: the baselines, engine "
        "profiles, Dynamo's planner and the oracle of issue 26 plug into bench/diurnal.py's "
        "registries.",
        "",
    ]
    for engine, sc in doc["scales"].items():
        peak = sc["peak_hour"]
        lines += [
            f"Engine `{engine}`: rate x{sc['scale']} (the busiest hour, starting at "
            f"{peak['start_s'] / HOUR_S:g} h, {peak['rate']:.3f} req/s of "
            f"{peak['prompt_mean']:.0f}/{peak['output_mean']:.0f} tokens, needs "
            f"{peak['prefill']:.4f} prefill and {peak['decode']:.4f} decode replicas at "
            f"x1: {sc['scale'] * peak['prefill']:.1f} and {sc['scale'] * peak['decode']:.1f} "
            "at the bench scale).",
            "",
        ]
    headers = [
        "engine",
        "start-up",
        "seed",
        "policy",
        "size",
        "SLO (scored)",
        "after 5 min",
        "GPU-h (scored)",
        "actions",
        "reversals",
        "TTFT p99",
        "pre-roll SLO",
        "pre-roll GPU-h",
        "replay",
        "req/s",
        "peak RSS",
    ]
    body = []
    for r in doc["rows"]:
        s, p = r["scored"], r["preroll"]
        size = r["static_size"]
        body.append(
            [
                r["engine"],
                f"{r['startup_s']:g} s",
                str(r["seed"]),
                r["policy"],
                f"{size[0]}P/{size[1]}D" if size else "dynamic",
                _pct(s["slo_attainment"]),
                _pct(s["slo_attainment_settled"]),
                f"{s['gpu_hours']:.1f}",
                str(s["scale_actions"]),
                str(s["reversals"]),
                "never" if s["ttft_p99_s"] is None else f"{s['ttft_p99_s']:.2f} s",
                "-" if p is None else _pct(p["slo_attainment"]),
                "-" if p is None else f"{p['gpu_hours']:.1f}",
                f"{r['replay_s']:.0f} s",
                f"{r['requests_per_s']:,.0f}",
                f"{r['max_rss_gb']:.1f} GB",
            ]
        )
    lines += [table(headers, body, right=numeric_columns(body, len(headers))), ""]
    lines += ["Policies:", ""]
    lines += [f"* `{n}`: {label}" for n, label in doc["policies"].items()]
    lines += [
        "",
        "Definitions: SLO = share of the scored span's requests with TTFT <= 2 s and "
        "TPOT <= 50 ms (pdscaler.sim.results); GPU-h billed from "
        "the scored span's start to its last request's end; the pre-roll's figures "
        "are its own requests and GPU-hours, never added in. `size`: a static "
        "policy's replicas (it replays the scored span only, starting at its size).",
        "",
    ]
    return "\n".join(lines)


def preroll_table(paths: Sequence[Path]) -> str:
    """The pre-roll-length comparison: every pre-rolled row of the given diurnal.json
    files, by seed then pre-roll hours (longest first)."""
    rows = []
    for path in paths:
        doc = json.loads(path.read_text(encoding="utf-8"))
        for r in doc["rows"]:
            if r["preroll"] is not None:
                rows.append((r, doc["plan"]["warmup_hours"], path, doc[provenance.KEY]))
    rows.sort(key=lambda x: (x[0]["policy"], x[0]["startup_s"], x[0]["seed"], -x[1]))
    body = [
        [
            r["policy"],
            f"{r['startup_s']:g} s",
            str(r["seed"]),
            f"{hours:g} h",
            _pct(r["scored"]["slo_attainment"]),
            f"{r['scored']['gpu_hours']:.1f}",
            _pct(r["preroll"]["slo_attainment"]),
            f"`{path.name}` ({stamp['commit']}, {stamp['date']})",
        ]
        for r, hours, path, stamp in rows
    ]
    headers = ["policy", "start-up", "seed", "pre-roll", "SLO (scored)", "GPU-h", "pre-roll SLO"]
    return "\n".join(
        [
            "# Diurnal benchmark: how long a pre-roll",
            "",
            "The same scored day (day 1 at x70, the rate scaling seeded by the seed alone, "
            "so every row of a seed scores the same requests) after pre-rolls of day 0's "
            "last 24 h, 2 h and 15 minutes (`python -m bench.diurnal --policies pdscaler "
            "--startups 90 --seeds S --warmup-hours H`; rendered by `python -m "
            "bench.diurnal --preroll-table <files>`). Two rows of one seed and pre-roll "
            "measured at different commits show whether the replay changed between them.",
            "",
            table([*headers, "measured in"], body, right=numeric_columns(body, len(headers) + 1)),
            "",
        ]
    )


def write(doc: dict[str, Any], out_dir: Path, command: str) -> None:
    doc["command"] = command
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "diurnal.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out_dir / "diurnal.md").write_text(report(doc, command), encoding="utf-8")


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.diurnal", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    p.add_argument("--engines", default="default", help="engine profiles (ENGINES)")
    p.add_argument("--startups", default="90,300", help="start-up seconds (90,300)")
    p.add_argument("--seeds", default="0", help="seeds (0)")
    p.add_argument("--policies", default=",".join(Plan().policies), help="policies (POLICIES)")
    p.add_argument("--warmup-hours", type=float, default=24.0, help="pre-roll hours (24)")
    p.add_argument("--scored-hours", type=float, default=24.0, help="scored hours (24)")
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes (1: ~10 GB each, module doc)"
    )
    p.add_argument("--scale", type=int, default=None, help="fixed rate scale (default: 20 at peak)")
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
