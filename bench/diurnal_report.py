"""The diurnal report: ``bench/results/diurnal.md`` and ``diurnal.json`` (``write``),
the pre-roll-length table (``preroll_table``: ``diurnal-preroll.md``), and the verdict
cells README's diurnal table shares (``figures_cell``, ``oracle_cell``). Rendered from
the document alone (``python -m bench.diurnal --render`` re-renders a committed
``diurnal.json``); imports the matrix's definitions (``bench.diurnal_plan``), never the
run."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import provenance
from bench.diurnal_plan import HOUR_S, ORACLE, ORACLE_REPAIRS, STATIC_REPLAYS
from bench.markdown import numeric_columns, table, two
from bench.quality_report import clean, real_dynamo_text
from pdscaler.cli.common import percent as pct
from pdscaler.sim.compare import TARGET


# ---------------------------------------------------------------- report
def figures_cell(scored: dict[str, Any] | None) -> str:
    """A row's SLO met and GPU-hours: ``94.53%, 143.8``; ``not run`` without the row
    (the verdict table's cells and README's, ``bench.readme``)."""
    s = scored or {}
    return f"{pct(s['slo_attainment'])}, {s['gpu_hours']:.1f}" if s else "not run"


def oracle_cell(o: dict[str, Any] | None) -> str:
    """``94.54%, 266.7 (4 repairs, 99% not reached)``; ``not run`` without an oracle."""
    if o is None:
        return "not run"
    short = "" if o["met"] else f", {TARGET:.0%} not reached"
    return f"{figures_cell(o)} ({o['repairs']} repairs{short})"


def _pct(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else pct(v)


def _incomplete(doc: dict[str, Any]) -> str:
    done, jobs = doc.get("jobs_done"), doc.get("jobs")
    if done is None or done == jobs:
        return ""
    return f" (INCOMPLETE: {done} of {jobs} jobs done when this was written)"


def _size(size: Sequence[int] | None) -> str:
    return f"{size[0]}P/{size[1]}D" if size else "dynamic"


def _shown_size(r: dict[str, Any]) -> str:
    """A static's size; ``dynamic`` for a pre-rolled policy (the HPA's ``initial``, its
    start, is not a size it keeps); ``schedule`` for the oracle."""
    if r["policy"] == ORACLE:
        return "schedule"
    return "dynamic" if r["preroll"] is not None else _size(r["static_size"])


def _replay_note(r: dict[str, Any]) -> str:
    if r.get("from_tuning"):
        return "its search's replay"
    if "shared_from_startup_s" in r:
        return f"as at {r['shared_from_startup_s']:g} s"
    return f"{r['replay_s']:.0f} s"


def rows_table(doc: dict[str, Any]) -> str:
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
        shared = r.get("from_tuning") or "shared_from_startup_s" in r
        body.append(
            [
                r["engine"],
                f"{r['startup_s']:g} s",
                str(r["seed"]),
                r["policy"],
                _shown_size(r),
                _pct(s["slo_attainment"]),
                _pct(s["slo_attainment_settled"]),
                f"{s['gpu_hours']:.1f}",
                str(s["scale_actions"]),
                str(s["reversals"]),
                "never" if s["ttft_p99_s"] is None else f"{s['ttft_p99_s']:.2f} s",
                "-" if p is None else _pct(p["slo_attainment"]),
                "-" if p is None else f"{p['gpu_hours']:.1f}",
                _replay_note(r),
                "-" if shared else f"{r['requests_per_s']:,.0f}",
                "-" if shared else f"{r['max_rss_gb']:.1f} GB",
            ]
        )
    return table(headers, body, right=numeric_columns(body, len(headers)))


def verdict_table(doc: dict[str, Any]) -> str:
    body = []
    for v in doc.get("verdicts", ()):
        pd, best, o = v["pdscaler"], v["best_online"], v["oracle"]
        dom = v["dominated_by"]
        more = f" (+{len(dom) - 3} more)" if len(dom) > 3 else ""
        body.append(
            [
                f"{v['engine']}, {v['startup_s']:g} s, seed {v['seed']}",
                figures_cell(pd),
                "-" if best is None else f"{best['policy']}: {figures_cell(best)}",
                "-" if best is None else two(pd["gpu_hours"] / best["gpu_hours"]),
                oracle_cell(o),
                "-" if o is None else two(o["ratio"]),
                "-" if o is None or o["ratio_at_equal"] is None else two(o["ratio_at_equal"]),
                "yes" if v["pareto"] else "no: " + ", ".join(dom[:3]) + more,
                ", ".join(v["policies_missing"]) or "none",
            ]
        )
    return table(
        [
            "case",
            "pdscaler: SLO, GPU-h",
            "best non-clairvoyant baseline: SLO, GPU-h",
            "pdscaler GPU-h / its",
            "tight oracle: SLO, GPU-h",
            "x oracle",
            "x oracle at equal SLO",
            "Pareto (FCFS)",
            "rows not measured",
        ],
        body,
    )


def tuning_table(doc: dict[str, Any]) -> str:
    body = []
    for key, t in doc.get("tuning", {}).items():
        h, y, d = t["static_hindsight"], t["static_yesterday"], t["dynamo"]
        on = y["sized_on"]
        body.append(
            [
                key,
                f"{_size((h['prefill'], h['decode']))}: {pct(h['slo_attainment'])}, "
                f"{h['gpu_hours']:.1f}" + ("" if h["met"] else " (99% not reached)"),
                str(len(t["static_sweep"])),
                f"{_size((on['prefill'], on['decode']))} ({pct(on['slo_attainment'])} there"
                + ("" if on["met"] else ", 99% not reached")
                + f") -> {_size((y['prefill'], y['decode']))}",
                str(len(t["static_yesterday_sweep"])),
                f"{t['hpa']['label']}: {pct(t['hpa']['slo_attainment'])}"
                + ("" if t["hpa"]["met"] else " (99% not reached: highest attainment)")
                + f" of {len(t['hpa']['tried'])}",
                f"{d['config']['slo_scale']:g} x the SLO: {pct(d['slo_attainment'])}"
                + ("" if d["met"] else " (99% not reached: highest attainment)")
                + f" of {len(d['tried'])}",
                f"{t['seconds']:.0f} s",
            ]
        )
    return table(
        [
            "engine/seed",
            "static-hindsight (scored span)",
            "replays",
            "static-yesterday: on the warm-up -> run (+20%)",
            "replays",
            "hpa-tuned (warm-up span)",
            "Dynamo SLO scale (warm-up span)",
            "tuning time",
        ],
        body,
    )


def report(doc: dict[str, Any], command: str) -> str:
    plan = doc["plan"]
    cut = doc.get("cuts", "")
    lines = [
        "# Diurnal benchmark",
        "",
        provenance.line(doc.get(provenance.KEY)),
        "",
        f"Generated by `{command}`: the ServeGen week (data/traces/README.md), day 0's "
        f"last {plan['warmup_hours']:g} h replayed as the pre-roll of the dynamic "
        f"policies (scored apart) and used to size and tune the out-of-sample "
        f"baselines, day 1's first {plan['scored_hours']:g} h scored; seeds "
        f"{', '.join(str(s) for s in plan['seeds'])}; start-up "
        f"{', '.join(f'{s:g}' for s in plan['startups'])} s. Simulator {doc['engine']}; "
        f"{plan['workers']} worker process(es); matrix wall time {doc['wall_s']:.0f} s"
        f"{_incomplete(doc)}.",
        "",
        (
            f"CUT to fit the 60-minute budget on 2 cores (seeds first, then scored hours, "
            f"then engines; the full matrix is `python -m bench.diurnal --full`): {cut}."
            if cut
            else "The full matrix: nothing cut."
        ),
        "",
    ]
    for engine, sc in doc["scales"].items():
        peak = sc["peak_hour"]
        lines += [
            f"Engine `{engine}` ({sc.get('label', engine)}): rate x{sc['scale']} (the busiest "
            f"hour, starting at {peak['start_s'] / HOUR_S:g} h, {peak['rate']:.3f} req/s of "
            f"{peak['prompt_mean']:.0f}/{peak['output_mean']:.0f} tokens, needs "
            f"{peak['prefill']:.4f} prefill and {peak['decode']:.4f} decode replicas at "
            f"x1: {sc['scale'] * peak['prefill']:.1f} and {sc['scale'] * peak['decode']:.1f} "
            "at the bench scale).",
            "",
        ]
    lines += [
        "## Where pdscaler stands",
        "",
        verdict_table(doc),
        "",
        "Best non-clairvoyant baseline: among the rows not sized on the scored span (not "
        "static-hindsight, static-peak or the oracle), the cheapest with at least "
        "pdscaler's attainment, else the highest attainment. Pareto: pdscaler's row "
        "against every other row of the case and every static size the hindsight "
        "search replayed on the scored span (`pdscaler.sim.verdicts`; the oracle is a "
        "bound, never a competitor); FCFS only (the deadline queue was not replayed "
        "here). x oracle at equal SLO: pdscaler's GPU-h over the cheapest oracle try "
        "reaching its attainment.",
        "",
        "## Every row",
        "",
        rows_table(doc),
        "",
        f"## Tuning (start-up {plan.get('tune_startup', 90.0):g} s)",
        "",
        tuning_table(doc),
        "",
        "Policies:",
        "",
    ]
    lines += [f"* `{n}`: {label}" for n, label in doc["policies"].items()]
    lines += [
        "",
        "Definitions: SLO = share of the scored span's requests with TTFT <= 2 s and "
        "TPOT <= 50 ms (pdscaler.sim.results); GPU-h billed from the scored span's start "
        "to its last request's end; the pre-roll's figures are its own requests and "
        "GPU-hours, never added in. `size`: a static policy's replicas (it replays the "
        "scored span only, starting at its size; its replay does not depend on the "
        "start-up, so it is replayed once and stands for both: `replay` says `as at 90 "
        "s`). Static searches (bench.diurnal.static_search): each pool's 1-minute need "
        "(profile at the minute's mix, KV bound) at the 99th percentile of the "
        "requests, replayed, then pool by pool: a miss grows the pool its misses are "
        "short of (`results.blame`), and from the cheapest size meeting 99% one pool at "
        "a time steps down 12% until each pool's step misses, at most "
        f"{STATIC_REPLAYS} replays (the `replays` columns). Oracle: "
        "`compare.feasible_oracle(lean=False)`, its first plan sized for each 2-second "
        "bin's own work, then repaired one replica a bin at a time, at most "
        f"{plan.get('oracle_repairs', ORACLE_REPAIRS)} repairs (each a replay of the "
        "scored span). hpa-tuned: every configuration of `baselines.hpa_grid` on "
        "the warm-up span, replayed there (no pre-roll), the cheapest meeting 99% else "
        "the highest attainment; the Dynamo planners' SLO scale likewise "
        f"(`tuning.DYNAMO_SLO_SCALES`). {real_dynamo_text(doc)}",
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
    (out_dir / "diurnal.json").write_text(
        json.dumps(clean(doc), indent=1, allow_nan=False) + "\n", encoding="utf-8"
    )
    (out_dir / "diurnal.md").write_text(report(doc, command), encoding="utf-8")
