"""The decision-quality report: ``bench/results/quality.md`` (summary, held out, tuning
case, tuning, static-yesterday, ablations, full matrix; its header names the commit and
date of ``quality.json``'s ``measured_at``) and ``quality.json`` (``write``), rendered
from the document alone, so a committed ``quality.json`` re-renders to the committed
``quality.md`` (``write_report``; ``python -m bench --rerender``). Also what README and
bench/results/README.md quote (``headline``, ``cuts_line``, ``judged_cell``), the
merging of a matrix run in parts (``merge``) and the JSON's NaN cleaning (``clean``,
the diurnal bench's too). Imports the matrix and the verdicts; nothing it imports
imports it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import provenance
from bench.markdown import spread, table, two
from bench.quality import (
    FLIP_ENGINE_SECONDS,
    HELD_OUT,
    LABELS,
    MATRIX,
    MIX_MINUTES,
    REAL_DYNAMO,
    TARGET_ATTAINMENT,
    TARGET_ORACLE_RATIO,
    TRACE_FILES,
    TUNING_CASE,
    Plan,
)
from bench.quality_verdicts import case_label, kind, seed_zero, verdict
from pdscaler.cli.common import percent as pct
from pdscaler.models.migration import SOFTWARE_PREP_SECONDS
from pdscaler.sim import verdicts
from pdscaler.sim.compare import (
    STATIC_HINDSIGHT,
    STATIC_YESTERDAY,
)


def _finite(stat: dict[str, Any] | None) -> bool:
    """A stat whose mean is a number (the JSON writes a NaN mean as null)."""
    m = None if stat is None else stat.get("mean")
    return m is not None and math.isfinite(m)


def _cell(row: dict[str, Any] | None) -> str:
    """``99.17%, 47.79`` from an aggregate row (seed means); ``-`` without one."""
    if row is None:
        return "-"
    return f"{pct(row['slo_attainment']['mean'])}, {two(row['gpu_hours']['mean'])}"


def judged_cell(v: dict[str, Any] | None) -> str:
    """``yes`` or ``no: static 19P/2D, ...`` (at most three named, then how many more)."""
    if v is None:
        return "not replayed"
    if v["pareto"]:
        return "yes"
    by = v["dominated_by"]
    more = f" (+{len(by) - 3} more)" if len(by) > 3 else ""
    return "no: " + ", ".join(by[:3]) + more


def summary_rows(doc: dict[str, Any], label: str) -> list[list[str]]:
    """The summary rows of the cases labelled ``label`` (``kind``)."""
    rows = []
    for case in doc["cases"].values():
        if kind(case) != label:
            continue
        agg = case["aggregate"]
        pd = agg["policies"]["pdscaler"]
        pols = agg["policies"]
        v = case.get("verdict") or verdict(case, doc.get("tuning", {}).get(case["group"]))
        oracle = agg["oracle"]
        online = v.get("best_online")
        equal = pd.get("ratio_at_equal")
        rows.append(
            [
                case_label(case),
                spread(pd["slo_attainment"], pct),
                pct(pd["slo_attainment_settled"]["mean"]),
                spread(pd["gpu_hours"], two),
                spread(pd["ratio_to_oracle"], two),
                "-" if not _finite(equal) else two(equal["mean"]),
                "-"
                if online is None
                else f"{LABELS.get(online['policy'], online['policy']).split(' (')[0]}"
                + (" (ai-dynamo)" if online["policy"] == REAL_DYNAMO else "")
                + f": {pct(online['slo_attainment'])}, {two(online['gpu_hours'])}",
                _cell(pols.get(STATIC_HINDSIGHT) or pols.get("static-best")),
                _cell(pols.get(STATIC_YESTERDAY)),
                f"{two(oracle['gpu_hours']['mean'])} ({pct(oracle['slo_attainment']['min'])}; "
                f"{oracle['repairs']['mean']:.0f} repairs)",
                pct(agg["feasibility_ceiling"]["mean"]),
                judged_cell(v),
                judged_cell(v.get(verdicts.DEADLINE)),
                "yes" if v["meets_attainment"] and v["meets_cost"] and v["pareto"] else "no",
            ]
        )
    return rows


SUMMARY_HEADERS = [
    "case",
    "pdscaler SLO met",
    "after 5 min",
    "pdscaler GPU-h",
    "x oracle",
    "x oracle at equal SLO",
    "best online baseline: SLO, GPU-h",
    "static-hindsight (bound): SLO, GPU-h",
    "static-yesterday: SLO, GPU-h",
    "oracle GPU-h (worst SLO; repairs)",
    "ceiling",
    "Pareto, FCFS (seed 0)",
    "Pareto, deadline queue (seed 0)",
    f">= {TARGET_ATTAINMENT:.0%}, <= {TARGET_ORACLE_RATIO}x, Pareto",
]


def case_table(case: dict[str, Any]) -> str:
    agg = case["aggregate"]
    rows = []
    pre = agg.get("preroll", {})
    for n, p in agg["policies"].items():
        eq = p.get("ratio_at_equal")
        rows.append(
            [
                LABELS.get(n, n),
                spread(p["slo_attainment"], pct),
                spread(p["slo_attainment_settled"], pct),
                spread(p["gpu_hours"], two),
                spread(p["ratio_to_oracle"], two),
                "-" if not _finite(eq) else spread(eq, two),
                "-" if n not in pre else _cell(pre[n]),
            ]
        )
    o = agg["oracle"]
    rows.append(
        [
            "oracle (SLO-feasible)",
            spread(o["slo_attainment"], pct),
            "-",
            spread(o["gpu_hours"], two),
            "1.00",
            "-",
            "-",
        ]
    )
    for k, label in (("lower_bound", "lower bound (15 s bins)"), ("work_floor", "work floor")):
        rows.append([label, "-", "-", spread(agg[k]["gpu_hours"], two), "-", "-", "-"])
    return table(
        [
            "policy",
            "SLO met",
            "after 5 min",
            "GPU-h",
            "x oracle",
            "x oracle at equal SLO",
            "pre-roll (apart): SLO, GPU-h",
        ],
        rows,
    )


def _size(c: dict[str, Any]) -> str:
    return f"{c['prefill']}P/{c['decode']}D"


def tuning_table(doc: dict[str, Any]) -> str:
    rows = []
    for slug, t in doc["tuning"].items():
        sb = t["static_best"]
        h = t["hpa"]
        y = t.get("static_yesterday")
        rows.append(
            [
                slug,
                f"{_size(sb)}: {pct(sb['slo_attainment'])}, "
                + f"{two(sb['gpu_hours'])}"
                + ("" if sb["met"] else " (99% not reached)"),
                "-"
                if y is None
                else f"first half {_size(y['first'])}, second half {_size(y['second'])}",
                f"{h['label']}: {pct(h['slo_attainment'])}, {two(h['gpu_hours'])}"
                + ("" if h["met"] else " (99% not reached: highest attainment)"),
                _dynamo_choice(t.get("dynamo")),
                str(t["static_replays"]),
            ]
        )
    return table(
        [
            "trace, load",
            "static-hindsight (seed 0)",
            "static-yesterday (sized on the other half, +20%)",
            "hpa-tuned (seed 0, start-up 90 s, pre-rolled)",
            "dynamo-planner: SLO targets handed to it (seed 0, start-up 90 s, pre-rolled)",
            "static sizes replayed (all counted by the verdicts)",
        ],
        rows,
    )


def yesterday_table(doc: dict[str, Any]) -> str:
    """static-yesterday out of sample, per half-hour (seed 0, any start-up: a static's
    replay does not depend on it): the size it runs (sized on the other half +20%), its
    figures there, and the hindsight bound of that half (the cheapest static meeting 99%
    on it)."""
    rows = []
    for slug, t in doc["tuning"].items():
        y = t.get("static_yesterday")
        zero = [seed_zero(c) for c in doc["cases"].values() if c["group"] == slug]
        halves = next((z["meta"].get("static_yesterday_halves") for z in zero if z), None)
        if y is None or not halves:
            continue
        other = {"first": "second", "second": "first"}
        for k, got in zip(("first", "second"), halves, strict=True):
            bound = y[other[k]]["sized_on"]
            rows.append(
                [
                    slug,
                    f"{k} half-hour",
                    f"{_size(y[k]['sized_on'])} on the {other[k]} half -> {_size(y[k])}",
                    f"{pct(got['slo_attainment'])}, {two(got['gpu_hours'])}",
                    f"{_size(bound)}: {pct(bound['slo_attainment'])}, {two(bound['gpu_hours'])}"
                    + ("" if bound["met"] else " (99% not reached)"),
                ]
            )
    return table(
        [
            "trace, load",
            "scored on",
            "sized (cheapest meeting 99% there) -> run (+20%)",
            "static-yesterday there: SLO, GPU-h",
            "hindsight bound there: size, SLO, GPU-h",
        ],
        rows,
    )


def ablation_table(cases: list[dict[str, Any]], labels: Sequence[str]) -> str:
    """One row per case: pdscaler, then each ablation row, as ``SLO met, GPU-h`` (seed
    means): ``| conv-long-1x, start-up 90 s | 96.20%, 25.63 | 78.79%, 23.40 | ...``."""
    names = ["pdscaler", *labels]

    def cell(case: dict[str, Any], name: str) -> str:
        row = case["aggregate"]["policies"].get(name)
        if row is None:
            return "-"
        return f"{pct(row['slo_attainment']['mean'])}, {two(row['gpu_hours']['mean'])}"

    ablated = [c for c in cases if any(n in c["aggregate"]["policies"] for n in labels)]
    rows = [[case_label(c), *(cell(c, n) for n in names)] for c in ablated]
    return table(["case", *names], rows)


def _dynamo_choice(d: dict[str, Any] | None) -> str:
    """``0.5 x the SLO: 97.10%, 22.87`` (tried: every scale's attainment)."""
    if d is None:
        return "-"
    tried = ", ".join(
        f"{t['config']['slo_scale']:g}x {pct(t['slo_attainment'])}" for t in d["tried"]
    )
    met = "" if d["met"] else " (99% not reached: highest attainment)"
    return (
        f"{d['config']['slo_scale']:g} x the SLO: {pct(d['slo_attainment'])}, "
        f"{two(d['gpu_hours'])}{met} (tried {tried})"
    )


def cuts_line(doc: dict[str, Any]) -> str:
    """What the run left out of the full matrix (``Plan()``; "" when nothing)."""
    plan = doc["plan"]
    default = Plan()
    left = []
    for name, got, want in (
        ("loads", plan["scales"], default.scales),
        ("start-ups", plan["startups"], default.startups),
        ("seeds", plan["seeds"], default.seeds),
    ):
        gone = [x for x in want if x not in got]
        if gone:
            unit = "x" if name == "loads" else (" s" if name == "start-ups" else "")
            left.append(f"{name} {', '.join(f'{x:g}{unit}' for x in gone)}")
    head = ""
    if left:
        head = (
            "Reduced matrix (`make bench` cuts seeds before cases towards its 15 minutes "
            "on 2 cores, bench.__main__.SEEDS; the full one is `python -m bench --seeds "
            "0,1,2,3,4`): left out " + "; ".join(left) + ". "
        )
    full = (tuple(plan["startups"]), tuple(plan["seeds"]))
    cut = [
        f"{slug}: start-up {', '.join(f'{x:g}' for x in g['startups'])} s, "
        f"seed{'s' if len(g['seeds']) > 1 else ''} {', '.join(str(x) for x in g['seeds'])}"
        for slug, g in doc.get("groups", {}).items()
        if (tuple(g["startups"]), tuple(g["seeds"])) != full
    ]
    if not cut:
        return head
    return head + "Per load: " + "; ".join(cut) + "."


def simulator(doc: dict[str, Any]) -> str:
    """How the document's simulator ran (``native.engine_label``; documents written
    before the compiled build: pure Python)."""
    return str(doc.get("engine", "pure Python"))


def preroll_text(plan: dict[str, Any]) -> str:
    """What the run's pre-roll was, for the definitions."""
    s = plan.get("preroll_s", 0.0)
    if not s:
        return (
            "No pre-roll: every dynamic policy begins from the same warm start (the first "
            "two minutes' mean sized with the spec's priors)."
        )
    return (
        f"Pre-roll: every dynamic policy (pdscaler and its ablation rows, the HPAs, both "
        f"Dynamo planners, the online reference, fixed-ratio, forecast-only) first replays "
        f"{s / 60:g} minutes of the trace's own traffic (its first {s / 60:g} minutes "
        f"replayed before it, `traces.with_preroll` head, `LoopConfig.preroll_s`) and "
        f"enters the scored hour in its own steady state; the pre-roll's requests and "
        f"GPU-hours are reported apart (the full matrix's pre-roll column), never added "
        f"in. The statics and the oracle start at their own size on the scored hour."
    )


def real_dynamo_text(doc: dict[str, Any]) -> str:
    """Which Dynamo planner ran, for the definitions."""
    got = doc.get("real_dynamo")
    if got == REAL_DYNAMO:
        return (
            "dynamo-planner (ai-dynamo 1.6.1): NVIDIA Dynamo's OWN planner code "
            "(`bench/dynamo_real.py` drives ai-dynamo 1.6.1's offline replay adapter in "
            "its own virtualenv; a shim stands in for the perf-model package the planner "
            "imports, see dynamo-planner.md), the same configuration and SLO scale as the "
            "re-implementation's row."
        )
    if got is None:
        return "dynamo-planner (ai-dynamo 1.6.1): not part of this run."
    return f"dynamo-planner (ai-dynamo 1.6.1): {got}."


def report(doc: dict[str, Any], command: str) -> str:
    plan = doc["plan"]
    cases = list(doc["cases"].values())
    out = [
        "# Decision quality",
        "",
        provenance.line(doc.get(provenance.KEY)),
        "",
        f"Generated by `{command}`; the matrix took {doc['wall_s']:.0f} s (wall; simulator "
        f"{simulator(doc)}). Azure LLM inference traces "
        "2023 (data/traces, CC-BY 4.0) at "
        + ", ".join(f"{s:g}x" for s in plan["scales"])
        + " their request rate (time axis untouched), replica start-up "
        + ", ".join(f"{s:g}" for s in plan["startups"])
        + f" s, seeds {', '.join(str(s) for s in plan['seeds'])} (seed 0: the trace as "
        "recorded; others: every arrival moved by up to 2 s, seeded, and reseeded rate "
        "scaling and start-up jitter). SLO: TTFT <= 2 s and TPOT <= 50 ms per request; "
        "priors 10,000 / 1,400 tokens/s (true engine ~8,040 / ~1,730 at the chat mix; "
        "prefill 8,370 in full batches less each prompt's attention, which grows with its "
        "length: ~6,500 at 16k tokens). Engine: the HAND-MADE one (`EngineParams()`'s "
        "invented constants, not a measured deployment; the engines measured with "
        "aiconfigurator are the diurnal matrix's, diurnal.md). "
        "Figures are `mean [min-max]` over the seeds. " + cuts_line(doc),
        "",
        "Definitions. SLO met: share of ALL requests of the scored hour within both SLOs "
        "(unfinished = missed); after 5 min: the same over the requests that arrive from "
        "minute 5 on (seed mean). "
        + preroll_text(plan)
        + " Oracle: the SLO-feasible clairvoyant schedule (knows the trace and the true "
        "capacities; integer pools planned in 2 s bins, ordered a start-up plus one "
        "interval ahead, kept through gaps shorter than that, billed from the order), "
        "replayed and repaired ONE replica a bin at a time where misses happened until "
        "it meets 99% (or the feasibility ceiling; `compare(oracle_step='one')`, the "
        "tight oracle; the repairs are counted in the summary); `x oracle` = GPU-h / that "
        "oracle's replayed GPU-h; `x oracle at equal SLO` = GPU-h / the cheapest of the "
        "oracle's tries reaching the row's own attainment (`FeasibleOracle.gpu_hours_at`; "
        "- when no try reached it). Lower bound: the fluid schedule in 15 s bins at full "
        "load (not SLO-feasible); work floor: tokens / true throughput. Ceiling: share of "
        "requests whose own service time alone on an idle replica fits the SLO. "
        "static-hindsight (a BOUND, what static-best was): the cheapest static (prefill, "
        "decode) whose replay of the very hour it is scored on meets 99% (seed 0; else "
        "the cheapest near the best of 3x the peak size, the range from the priors and "
        "from the profile with the KV term); static-yesterday (what teams run, out of "
        "sample): each half-hour runs the cheapest static that met 99% on the OTHER "
        "half-hour plus 20% per pool (the hour traces have no previous day; every "
        "request is scored once, by a size not chosen on it; the two halves' replays "
        "are joined, each billed until its own last request; its own table below); "
        "static-peak: sized on the scored hour's busiest minute (hindsight). hpa-tuned: "
        "the cheapest of the grid target 2/5/10 waiting per replica x max 1.2/1.5x "
        "peak, min at the quiet (10th percentile minute) size, meeting 99% on seed 0 at "
        "start-up 90 s, else the highest attainment; all tuned choices are then "
        "replayed unchanged on every seed and start-up. dynamo-planner (our "
        "re-implementation, `pdscaler.sim.dynamo`): NVIDIA Dynamo's SLA planner as its "
        "docs advise for bursty traffic: throughput-based (constant predictor, 60 s "
        "interval, profiles from the true engine) as a floor, load-based scaling on "
        "top, handed the SLO targets x the scale tuned on seed 0. "
        + real_dynamo_text(doc)
        + " online-reference (`pdscaler.sim.reference`): an idealised reactive policy "
        "(the true arrival rate and mix of the last interval, each pool's queue of the "
        "past second, no Prometheus lag; sized like pdscaler, past only): something an "
        "online policy can reach beside the clairvoyant bound. fixed-ratio sizes "
        "decode on its load and prefill at the hour's mean mix (hindsight on the mix). "
        "hpa-naive: min 1, max 64, target 2 (kept as a labelled extra). Best online "
        "baseline: among the rows that do not size from the scored hour (not "
        "static-hindsight, static-peak or fixed-ratio), the cheapest with at least "
        "pdscaler's attainment, else the highest attainment (seed means). Pareto: "
        "pdscaler's seed-0 row against EVERY point measured at seed 0 "
        "(`pdscaler.sim.verdicts`): every other policy's row under FCFS and under the "
        "deadline queue, and every static size the static-hindsight search replayed "
        "(`static_sweep`, counted as deployments; a static's replay does not depend on "
        "the start-up); the oracle is never a competitor. The FCFS and the deadline "
        "column judge pdscaler's row under that queue.",
        "",
        "## Summary",
        "",
        table(SUMMARY_HEADERS, summary_rows(doc, MATRIX)),
        "",
    ]
    held = summary_rows(doc, HELD_OUT)
    if held:
        out += [
            "## Held out from pdscaler's development",
            "",
            "conv-long: the conversation trace, prompts mapped by rank onto 8k-16k tokens, "
            "TTFT SLO 2 s + 0.1 ms per prompt token, decode replica KV 100,000 tokens "
            "(Llama-2-7B fp16, 0.5 MB/token, ~60 GB of an A100-80GB). What was and was "
            "not tuned on it: no commit names it as what a policy change was tuned "
            "against, but later commits quoted its results when judging theirs (eb84db6, "
            "0620c79); the baselines are tuned on its seed 0 like every group (the "
            "Tuning table).",
            "",
            table(SUMMARY_HEADERS, held),
            "",
        ]
    tuning_case = summary_rows(doc, TUNING_CASE)
    if tuning_case:
        out += [
            "## Tuning case: the demo's mix shift",
            "",
            f"mix: the demo's mix shift, {MIX_MINUTES:g} minutes each of chat (20 req/s, "
            "1,000 in / 250 out), long documents (10 req/s, 6,000 / 60) and a chat burst "
            "(40 req/s), the case role flips are for (the `pdscaler + role flips` "
            "ablation row). Not held out: the demo runs this mix, and earlier policy "
            "changes were tuned against it (d0e9d03, b3e1c4c); the baselines are tuned on "
            "its seed 0 like every group.",
            "",
            table(SUMMARY_HEADERS, tuning_case),
            "",
        ]
    out += ["## Tuning (seed 0)", "", tuning_table(doc), ""]
    yt = yesterday_table(doc)
    if yt.count("\n") > 1:
        out += [
            "## static-yesterday out of sample (seed 0)",
            "",
            "Each half-hour replayed at the size the other half-hour needed (+20%), beside "
            "the hindsight bound of that half-hour (the cheapest static meeting 99% on "
            "it). The summary's static-yesterday row is the two halves joined.",
            "",
            yt,
            "",
        ]
    out += [
        "## Ablations",
        "",
        "What each part is worth: the rows of `bench.quality.ABLATIONS`, run like a policy "
        "in every case at start-up "
        + " and ".join(f"{t:g}" for t in plan.get("ablation_startups", ()))
        + " s, against the plain `pdscaler` row (SLO met, GPU-h; seed means): "
        + (", ".join(plan["ablations"]) + "." if plan["ablations"] else "none in this run.")
        + (
            f" The role flips' engines take {FLIP_ENGINE_SECONDS:g} s to change a replica's "
            f"role, twice the {SOFTWARE_PREP_SECONDS:g} s pdscaler plans with."
            if "pdscaler + role flips" in plan["ablations"]
            else ""
        ),
        "",
        *([ablation_table(cases, plan["ablations"]), ""] if plan["ablations"] else []),
        "## Full matrix",
        "",
    ]
    for case in cases:
        sp = case["static_at_pdscaler"]
        out += [
            f"### {case_label(case)}",
            "",
            case_table(case),
            "",
            f"Cheapest static size reaching pdscaler's seed-0 attainment ({pct(sp['target'])}): "
            f"{sp['prefill']}P/{sp['decode']}D, {pct(sp['slo_attainment'])}, "
            f"{two(sp['gpu_hours'])} GPU-h{'' if sp['met'] else ' (not reached)'}. "
            f"Oracle repairs: {spread(case['aggregate']['oracle']['repairs'], '{:.0f}'.format)}; "
            f"replayed in {case['aggregate']['seconds']:.0f} s of worker time."
            + (
                f" Plot: [quality-{case['group']}-{case['startup_s']:g}s.png]"
                f"(quality-{case['group']}-{case['startup_s']:g}s.png)"
            ),
            "",
        ]
    return "\n".join(out)


def headline(doc: dict[str, Any]) -> str:
    """The summary table (also printed in bench/results/README.md)."""
    rows = [r for label in (MATRIX, HELD_OUT, TUNING_CASE) for r in summary_rows(doc, label)]
    return table(SUMMARY_HEADERS, rows)


def write_report(doc: dict[str, Any], out_dir: Path, command: str) -> Path:
    """quality.md from ``doc`` (a re-render from an unchanged quality.json too)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = out_dir / "quality.md"
    md.write_text(report(doc, command) + "\n", encoding="utf-8")
    return md


def write(doc: dict[str, Any], out_dir: Path, command: str) -> Path:
    """quality.md and quality.json."""
    md = write_report(doc, out_dir, command)
    (out_dir / "quality.json").write_text(
        json.dumps(clean(doc), indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    return md


def merge(docs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several ``run_matrix`` documents as one (loads, start-ups and seeds united; the
    groups keep their own start-ups and seeds; wall times added): a matrix run in
    parts, e.g. ``--rate-scales 1,4`` and then ``--rate-scales 10 --seeds 0``."""
    out: dict[str, Any] = {"plan": dict(docs[0]["plan"]), "groups": {}, "tuning": {}}
    out["cases"] = {}
    for key in ("scales", "startups", "seeds"):
        out["plan"][key] = sorted({x for d in docs for x in d["plan"][key]})
    for d in docs:
        out["groups"].update(d.get("groups", {}))
        out["tuning"].update(d["tuning"])
        out["cases"].update(d["cases"])
    order = {t: i for i, t in enumerate(TRACE_FILES)}

    def rank(item: tuple[str, dict[str, Any]]) -> tuple[bool, int, float, float]:
        c = item[1]
        return (c["held_out"], order.get(c["trace"], 99), c["scale"], c["startup_s"])

    out["cases"] = dict(sorted(out["cases"].items(), key=rank))
    out["wall_s"] = sum(d["wall_s"] for d in docs)
    out["engine"] = " / ".join(sorted({simulator(d) for d in docs}))
    return out


def clean(x: Any) -> Any:
    """NaN/inf -> None, recursively (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [clean(v) for v in x]
    return x
