"""The queue discipline applied to every policy and the oracle (``python -m bench``'s
``queue`` part): each case of the matrix, seed 0, replayed by every policy and the
SLO-feasible oracle with the engines ordering by deadline (a request that can no longer
meet its TTFT yields to one that can, ``EngineParams.queue_discipline``), beside the
same seed's FCFS figures from the quality part. The ablation row "pdscaler, deadline
queue" changes the engine for pdscaler alone; this part shows what the same engine
change gives every other policy, so that it flatters none, and the quality part's
verdicts count these rows (``bench.quality_verdicts.points``).

The deadline replays run inside the quality part's matrix (``quality_run.run_case`` with
``discipline="deadline"``, the same pre-roll, tuned choices and static-yesterday
sizes, queued on the same workers: no barrier after the matrix); this part reads them
from the quality document (``from_quality``) and replays only what an older document
lacks (``run_queue``).

Owns: the part's rows (``from_quality``, ``run_queue``), its report (``report``:
queue.md, its header from the JSON's ``measured_at``) and its JSON.
Must not: re-tune (the tuned baselines replay the quality part's seed-0 choices) or
re-run FCFS (the quality part's seed 0 is that run, bit for bit).

Reading the table: each cell is ``FCFS -> deadline`` SLO met (GPU-h under deadline);
the last line is the mean gain in points per policy over the cases.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench import provenance, quality, quality_run, quality_verdicts
from bench.markdown import table, two
from pdscaler.cli.common import percent as pct

DISCIPLINE = "deadline"
SEED = 0
#: Policies reported (every row of a quality case, the oracle as its own column).
COLUMNS: tuple[str, ...] = quality.ROWS


def row(key: str, case: dict[str, Any], deadline: dict[str, Any]) -> dict[str, Any]:
    """A case's figures under both disciplines: FCFS from its seed-0 run, ``deadline``
    a ``quality_run.run_case`` document of the same seed under the deadline queue."""
    fcfs = quality_verdicts.seed_zero(case) or case["seeds"][0]
    return {"case": key, "fcfs": _figures(fcfs), DISCIPLINE: _figures(deadline)}


def run_one(
    key: str, case: dict[str, Any], tuned: dict[str, Any], plan: dict[str, Any]
) -> dict[str, Any]:
    """One case at seed 0 under the deadline queue (a quality document without its
    deadline replay): every policy and the oracle, as the matrix runs them."""
    group = quality.Group.of(case)
    p = quality.Plan(duration=plan["duration"], preroll_s=plan.get("preroll_s", 0.0))
    doc = quality_run.run_case(group, case["startup_s"], SEED, tuned, p, "", DISCIPLINE)
    return row(key, case, doc)


def _figures(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {
        n: {
            "slo_attainment": doc["policies"][n]["slo_attainment"],
            "gpu_hours": doc["policies"][n]["gpu_hours"],
        }
        for n in COLUMNS
        if n in doc["policies"]
    }
    o = doc["oracle"]
    out["oracle"] = {"slo_attainment": o["slo_attainment"], "gpu_hours": o["gpu_hours"]}
    return out


def from_quality(doc: dict[str, Any]) -> dict[str, Any]:
    """The part's result from a quality document's deadline replays (cases without one
    are left out)."""
    rows = [row(k, c, c[DISCIPLINE]) for k, c in doc["cases"].items() if c.get(DISCIPLINE)]
    return {"discipline": DISCIPLINE, "seed": SEED, "cases": rows}


def run_queue(
    doc: dict[str, Any], workers: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Every case of the quality document ``doc`` under the deadline queue, seed 0: its
    own deadline replays (``from_quality``), else replayed here at the start-ups the
    document's plan names (``queue_startups``; documents written before it: the
    ablations' start-ups) on ``workers`` processes."""
    plan = doc["plan"]
    done = from_quality(doc)
    if done["cases"]:
        return done
    want = plan.get("queue_startups") or plan["ablation_startups"]
    keys = [k for k, c in doc["cases"].items() if c["startup_s"] in want and c["seeds"]]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {
            k: pool.submit(
                run_one, k, doc["cases"][k], doc["tuning"][doc["cases"][k]["group"]], plan
            )
            for k in keys
        }
        rows = []
        for k in keys:
            rows.append(futures[k].result())
            log(f"bench queue: {k} under the {DISCIPLINE} queue")
    return {"discipline": DISCIPLINE, "seed": SEED, "cases": rows}


def gains(result: dict[str, Any]) -> dict[str, float]:
    """Mean gain in SLO points (deadline - FCFS) per policy over the cases:
    cases where pdscaler went 80% -> 93% and 90% -> 91% give pdscaler 7.0."""
    names = [*COLUMNS, "oracle"]
    out = {}
    for n in names:
        deltas = [
            100 * (r[DISCIPLINE][n]["slo_attainment"] - r["fcfs"][n]["slo_attainment"])
            for r in result["cases"]
            if n in r["fcfs"] and n in r[DISCIPLINE]
        ]
        if deltas:
            out[n] = sum(deltas) / len(deltas)
    return out


def baseline_gains(g: dict[str, float]) -> dict[str, float]:
    """``gains`` of the baselines alone (neither pdscaler nor the oracle)."""
    return {n: v for n, v in g.items() if n not in ("pdscaler", "oracle")}


def mean_gain(g: dict[str, float]) -> float:
    """The baselines' mean gain (NaN without any): {pdscaler 2, a 10, b 20} -> 15."""
    others = baseline_gains(g)
    return sum(others.values()) / len(others) if others else float("nan")


def report(result: dict[str, Any], command: str) -> str:
    names = [n for n in [*COLUMNS, "oracle"] if any(n in r["fcfs"] for r in result["cases"])]
    rows = []
    for r in result["cases"]:
        row = [r["case"]]
        for n in names:
            f, d = r["fcfs"].get(n), r[DISCIPLINE].get(n)
            if f is None or d is None:
                row.append("-")
            else:
                after = f"{pct(d['slo_attainment'])} ({two(d['gpu_hours'])})"
                row.append(f"{pct(f['slo_attainment'])} -> {after}")
        rows.append(row)
    g = gains(result)
    rows.append(["mean gain, points", *(f"{g[n]:+.2f}" if n in g else "-" for n in names)])
    labels = [quality.LABELS.get(n, n) for n in names]
    return "\n".join(
        [
            "# Queue discipline: every policy and the oracle",
            "",
            provenance.line(result.get(provenance.KEY)),
            "",
            f"Generated by `{command}`. Seed {result['seed']}, the quality part's cases "
            f"({len(result['cases'])}). Each cell: SLO met under FCFS (the quality part's run) "
            f"-> under the {result['discipline']} queue (GPU-h under it). The tuned baselines "
            "replay the quality part's seed-0 choices (tuned under FCFS), the dynamic ones "
            "after the same pre-roll; the oracle is planned and repaired under each "
            "discipline. The quality part's verdicts count every row here.",
            "",
            table(["case", *labels], rows),
            "",
        ]
    )
