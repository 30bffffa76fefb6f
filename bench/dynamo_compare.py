"""Our re-implementation of Dynamo's planner (``pdscaler.sim.dynamo``) against NVIDIA
Dynamo's own (``bench.dynamo_real``) on the bench's hour cases, in the same closed loop:
writes ``bench/results/dynamo-planner.json`` and the generated block of
``bench/results/dynamo-planner.md`` (between its ``<!-- generated -->`` markers).

Rows, each case (conv and code at 4x, start-up 90 s, seed 0, the bench's ``config``:
the simulator's PDDeployment with the measured profile, FCFS):

* ``re-implementation``: ``DynamoPlannerController`` with its defaults (SLO x 1);
* ``re-implementation, SLO x 0.35``: the targets the bench's tuning hands it on these
  cases (quality.json ``tuning``);
* ``Dynamo 1.6.1``: ``RealDynamoController`` configured as the re-implementation
  (constant predictor, throughput-based every 60 s, load-based every 15 s, sensitivity
  80), SLO x 1 and x 0.35;
* ``Dynamo 1.6.1, its defaults``: Dynamo's own defaults for what we set (ARIMA predictor,
  throughput every 180 s), SLO x 1.

Usage: ``.venv/bin/python -m bench.dynamo_compare [--duration S]`` (needs the venv of
bench/install-dynamo.sh). Never run by ``make bench``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import provenance
from bench.dynamo_real import RealDynamoConfig, RealDynamoController
from bench.markdown import between, table
from bench.quality import Group, Plan, config, load
from pdscaler.sim.controllers import Controller
from pdscaler.sim.dynamo import DynamoConfig, DynamoPlannerController
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.results import summarize

RESULTS = Path(__file__).resolve().parent / "results"
CASES = (("conv", 4.0), ("code", 4.0))
STARTUP, SEED = 90.0, 0
TUNED_SCALE = 0.35
BEGIN, END = "<!-- generated -->", "<!-- /generated -->"

Make = Callable[[LoopConfig], Controller]


def rows() -> list[tuple[str, Make]]:
    """(label, controller factory) of every row (module docstring)."""

    def reimpl(scale: float) -> Make:
        return lambda c: DynamoPlannerController(c.spec, c.params, DynamoConfig(slo_scale=scale))

    def real(scale: float, **extra: Any) -> Make:
        cfg = RealDynamoConfig(slo_scale=scale, extra=extra)
        return lambda c: RealDynamoController(c.spec, c.params, cfg)

    return [
        ("re-implementation", reimpl(1.0)),
        (f"re-implementation, SLO x {TUNED_SCALE:g}", reimpl(TUNED_SCALE)),
        ("Dynamo 1.6.1", real(1.0)),
        (f"Dynamo 1.6.1, SLO x {TUNED_SCALE:g}", real(TUNED_SCALE)),
        (
            "Dynamo 1.6.1, its defaults (ARIMA, 180 s)",
            real(1.0, load_predictor="arima", throughput_adjustment_interval_seconds=180),
        ),
    ]


def measure(duration: float | None) -> dict[str, Any]:
    """Every row on every case; the real planner's ticks, their wall time and rate."""
    plan = Plan(duration=duration)
    cases: dict[str, Any] = {}
    versions: dict[str, str] = {}
    for trace, scale in CASES:
        group = Group(trace, scale)
        tr = load(group, plan, SEED)
        cfg = config(group, STARTUP, SEED)
        out: dict[str, Any] = {}
        for label, make in rows():
            ctrl = make(cfg)
            t0 = time.perf_counter()
            r = run(tr, ctrl, cfg)
            wall = time.perf_counter() - t0
            s = summarize(r)
            row: dict[str, Any] = {
                "slo_attainment": s.slo_attainment,
                "gpu_hours": s.gpu_hours,
                "ttft_p99_s": s.ttft_p99_s,
                "tpot_p99_s": s.tpot_p99_s,
                "scale_actions": s.scale_actions,
                "wall_s": wall,
                "requests_per_s": len(tr.arrival) / wall,
            }
            if isinstance(ctrl, RealDynamoController):
                row["planner_ticks"] = ctrl.calls
                row["planner_s"] = ctrl.seconds
                row["planner_ticks_per_s"] = ctrl.calls / ctrl.seconds
                row["planner_start_s"] = ctrl.start_seconds
                row["profile"] = {k: v for k, v in ctrl.bootstrap.items() if k != "versions"}
                versions = ctrl.bootstrap.get("versions", versions)
                ctrl.close()
            out[label] = row
            print(
                f"{group.slug} {label}: {s.slo_attainment:.2%} {s.gpu_hours:.2f} GPU-h {wall:.0f} s"
            )
        cases[group.slug] = {"requests": len(tr.arrival), "span_s": tr.span, "rows": out}
    return {
        "startup_s": STARTUP,
        "seed": SEED,
        "duration_s": duration,
        "versions": versions,
        "cases": cases,
        provenance.KEY: provenance.measured_at(),
    }


def render(doc: dict[str, Any]) -> str:
    """The generated block: one table of every case and row, and the replay rate."""
    body = []
    for slug, case in doc["cases"].items():
        for label, r in case["rows"].items():
            body.append(
                [
                    slug,
                    label,
                    f"{100 * r['slo_attainment']:.2f}%",
                    f"{r['gpu_hours']:.2f}",
                    f"{r['ttft_p99_s']:.2f}",
                    f"{1000 * r['tpot_p99_s']:.1f}",
                    str(r["scale_actions"]),
                ]
            )
    head = [
        "case",
        "planner",
        "SLO attainment",
        "GPU-h",
        "TTFT p99 (s)",
        "TPOT p99 (ms)",
        "scale actions",
    ]
    rates = []
    for label in dict.fromkeys(lb for case in doc["cases"].values() for lb in case["rows"]):
        real = [
            c["rows"][label] for c in doc["cases"].values() if "planner_ticks" in c["rows"][label]
        ]
        if real:
            ticks = sum(r["planner_ticks"] for r in real)
            secs = sum(r["planner_s"] for r in real)
            start = max(r["planner_start_s"] for r in real)
            rates.append(
                f"{label}: {ticks} ticks in {secs:.1f} s, {ticks / secs:.0f} ticks/s "
                f"(start-up of the planner process at most {start:.1f} s)"
            )
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items())
    span = "the whole hour" if doc["duration_s"] is None else f"the first {doc['duration_s']:g} s"
    lines = [
        provenance.line(doc.get(provenance.KEY)),
        "",
        f"Start-up {doc['startup_s']:g} s, seed {doc['seed']}, {span}; "
        f"`python -m bench.dynamo_compare` ({versions}).",
        "",
        table(head, body, right=[False, False, *[True] * (len(head) - 2)]),
        "",
        "Replay rate of the real planner in the simulator (both cases; the subprocess "
        "round trips included, the simulator's own time not): " + "; ".join(rates) + ".",
    ]
    return "\n".join(lines)


def write(doc: dict[str, Any], out: Path = RESULTS) -> None:
    (out / "dynamo-planner.json").write_text(json.dumps(doc, indent=1) + "\n")
    md = out / "dynamo-planner.md"
    md.write_text(between(md.read_text(), BEGIN, END, render(doc), md.name))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=None, help="replay only the first S seconds")
    args = ap.parse_args()
    write(measure(args.duration))


if __name__ == "__main__":
    main()
