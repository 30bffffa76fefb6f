"""The decision-quality bench and the step-load check (bench/quality*.py, bench/step.py,
bench/__main__.py): the verdict logic, the drain measurement, and a quick end-to-end run
that writes every result file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import dynamo_real, provenance, quality, quality_report, quality_verdicts, step
from bench.__main__ import QUICK_PREROLL_S, main
from pdscaler.sim.engine import RequestTimes
from pdscaler.sim.results import Summary


def summary(name: str, att: float, hours: float) -> Summary:
    return Summary(name, 100, 100, att, 0.2, 1.0, 0.02, 0.03, hours, hours / 2, hours / 2, 4, 0)


def case(*rows: Summary, oracle: float = 10.0) -> dict[str, Any]:
    """One case of the matrix (one seed) as ``run_matrix`` documents it."""
    seed = {
        "policies": {r.policy: r.to_json(oracle) for r in rows},
        "oracle": {"gpu_hours": oracle, "slo_attainment": 0.99, "met": True, "repairs": 0},
        "lower_bound": {"gpu_hours": oracle * 0.8},
        "work_floor": {"gpu_hours": oracle / 2},
        "feasibility_ceiling": 1.0,
        "seconds": 1.0,
    }
    doc = {"group": "conv-1x", "trace": "conv", "scale": 1.0, "held_out": False}
    doc |= {"startup_s": 30.0, "seeds": [seed]}
    doc["aggregate"] = quality_verdicts.aggregate([seed])
    return doc


def test_verdict_names_who_dominates_pdscaler() -> None:
    c = case(
        summary("pdscaler", 0.990, 12.0),
        summary("static-peak", 0.995, 11.0),  # better and cheaper: dominates
        summary("hpa-queue", 0.999, 20.0),  # better but dearer
        summary("oracle-replay", 0.999, 10.0),  # a check of the bound, not a contender
    )
    v = quality_verdicts.verdict(c)
    assert v["dominated_by"] == ["static-peak"]
    assert not v["pareto"]
    assert v["meets_attainment"]
    assert v["meets_cost"]  # 12 / 10 = 1.2
    assert v["cheapest_as_good"] == "static-peak"
    assert "no: static-peak" in quality_report.headline({"cases": {"c": c}})


def test_verdict_on_the_front_when_nobody_is_better_and_cheaper() -> None:
    c = case(summary("pdscaler", 0.995, 13.0), summary("static-mean", 0.8, 9.0))
    v = quality_verdicts.verdict(c)
    assert v["pareto"]
    assert not v["meets_cost"]  # 1.3x
    assert v["cheapest_as_good"] is None
    assert "| no |" in quality_report.headline({"cases": {"c": c}})


def times(arrival: list[float], start: list[float]) -> RequestTimes:
    a, s = np.array(arrival), np.array(start)
    n = len(a)
    return RequestTimes(a, np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64), s, s, s, s, s)


def test_cleared_at_is_when_arrivals_stop_queueing() -> None:
    t = times([590.0, 601.0, 602.0, 610.0, 640.0], [600.0, 601.2, 632.0, 630.0, 640.3])
    assert step.cleared_at(t, 600.0) == 640.0  # 590 is before the step: ignored
    assert step.cleared_at(times([601.0], [601.5]), 600.0) is None  # nobody queued
    assert step.cleared_at(times([601.0, 602.0], [605.0, math.nan]), 600.0) == math.inf


#: Experiment A of bench/step.py, every (T_s, n1) it measures, with the relative error
#: the drain model is held to there and why (step.md's "prediction error" column).
#: n1 = 8 runs 8 x ~8,000 = 64,000 tokens/s against ~60,000 arriving: a margin of ~6%,
#: so a 1% error in lambda or mu moves B / (mu - lambda) by ~15%: 15%. T_s 30 s: the
#: backlog is small and the measured drain is a first passage that a Poisson lull can
#: end early (the fluid model predicts the mean): 15%. Longer start-ups with a real
#: margin: 5%. None: the model predicts a drain longer than the run's 1,200 s after the
#: step, and the engine's queue must indeed never empty within it.
STEP_TOLERANCE: dict[tuple[float, int], float | None] = {
    (30.0, 8): 0.15,  # measured -13% (thin margin and short start-up)
    (30.0, 9): 0.15,  # measured +10% (short start-up: first passage)
    (30.0, 11): 0.15,  # measured +7% (short start-up: first passage)
    (90.0, 8): 0.15,  # measured -11% (thin margin)
    (90.0, 9): 0.05,  # measured +2%
    (90.0, 11): 0.05,  # measured +1%
    (300.0, 8): None,  # predicted 1,720 s > 1,200 s: never drains within the run
    (300.0, 9): 0.05,  # measured -2%
    (300.0, 11): 0.05,  # measured -0%
}
COMMITTED_STEP = {
    (r["startup_s"], r["n1"]): r
    for r in json.loads((Path(step.__file__).parent / "results" / "step.json").read_text())[
        "model_rows"
    ]
}


def test_the_tolerances_cover_every_case_the_step_part_measures() -> None:
    measured = {(t, n1) for t in quality.Plan().startups for n1 in (8, 9, 11)}
    assert set(STEP_TOLERANCE) == measured == set(COMMITTED_STEP)


@pytest.mark.parametrize(("startup", "n1"), sorted(STEP_TOLERANCE))
def test_the_drain_model_predicts_every_measured_step_case_within_its_tolerance(
    startup: float, n1: int
) -> None:
    """Seed 0, as ``make bench`` runs it: the measurement here is the one step.json
    records (the simulator is deterministic; a change to it must re-measure step.json),
    and the prediction is within the case's stated tolerance of it."""
    row = step.model_check(step.scenario(seed=0), startup=startup, n1=n1)
    committed = COMMITTED_STEP[(startup, n1)]
    assert row.predicted_s == pytest.approx(committed["predicted_s"], rel=1e-9)
    tolerance = STEP_TOLERANCE[(startup, n1)]
    if tolerance is None:
        assert row.measured_s == math.inf
        assert committed["measured_s"] is None
        assert row.predicted_s is not None
        assert row.predicted_s > step.AFTER_S
        return
    assert row.measured_s == pytest.approx(committed["measured_s"], rel=1e-9), "re-measure"
    assert row.error is not None
    assert abs(row.error) <= tolerance, (row.error, tolerance)


def test_quick_bench_writes_every_result(tmp_path: Path) -> None:
    assert main(["--quick", "--only", "quality,queue,step", "--out", str(tmp_path)]) == 0
    for name in (
        "README.md",
        "quality.md",
        "quality.json",
        "queue.md",
        "queue.json",
        "quality-conv-2x-30s.png",
        "quality-code-2x-30s.png",
        "step.md",
        "step.png",
        "step.json",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    doc = json.loads((tmp_path / "quality.json").read_text())
    conv = doc["cases"]["conv-2x-30s"]
    seed0 = conv["seeds"][0]
    assert set(seed0["policies"]) >= {
        "pdscaler",
        "static-peak",
        "hpa-queue",
        "static-hindsight",
        "static-yesterday",
        "hpa-tuned",
        "dynamo-planner",
        "online-reference",
    }
    # NVIDIA Dynamo's own planner runs when its venv exists, else the results say why
    if dynamo_real.available():
        assert dynamo_real.NAME in seed0["policies"]
        assert doc["real_dynamo"] == dynamo_real.NAME
    else:
        assert doc["real_dynamo"].startswith("not measured")
    # the dynamic policies after the quick mode's pre-roll, scored apart
    assert seed0["meta"]["preroll_s"] == QUICK_PREROLL_S
    assert "pdscaler" in seed0["preroll"]
    assert "static-hindsight" not in seed0["preroll"]
    assert conv["verdict"]["case"] == "conv-2x, start-up 30 s"
    assert conv["verdict"]["deadline"] is not None  # judged under both disciplines
    assert seed0["oracle"]["tries"]
    assert seed0["oracle"]["step"] == "one"  # the tight oracle
    assert seed0["oracle"]["gpu_hours"] >= seed0["lower_bound"]["gpu_hours"]
    readme = (tmp_path / "README.md").read_text()
    assert "pdscaler SLO met" in readme
    # every results file says where it was measured: the same commit and date for all
    stamp = doc["measured_at"]
    assert re.fullmatch(r"[0-9a-f]{7}(\+dirty)?", stamp["commit"]), stamp  # git's HEAD
    for name in ("queue.json", "step.json"):
        assert json.loads((tmp_path / name).read_text())["measured_at"] == stamp, name
    for name in ("quality.md", "queue.md", "step.md"):
        assert provenance.line(stamp) in (tmp_path / name).read_text(), name
    assert "python -m bench --quick" in readme
    quality_md = (tmp_path / "quality.md").read_text()
    assert "| conv-2x, start-up 30 s |" in quality_md
    # 10-minute windows: the requests from 5 min on are counted apart, as a percentage
    settled = seed0["policies"]["pdscaler"]["slo_attainment_settled"]
    assert 0.0 <= settled <= 1.0
    assert f"| {100 * settled:.2f}% |" in quality_md
    assert "| after 5 min |" in quality_md
    # ... and the summary shows pdscaler's beside its whole-run attainment
    assert "| case | pdscaler SLO met | after 5 min | pdscaler GPU-h |" in quality_md
    first = next(r for r in quality_md.splitlines() if r.startswith("| conv-2x, start-up 30 s |"))
    assert first.split(" | ")[2] == f"{100 * settled:.2f}%"
    # the queue part: every policy and the oracle under both disciplines, FCFS being
    # the quality part's own seed-0 run
    q = json.loads((tmp_path / "queue.json").read_text())
    row = next(r for r in q["cases"] if r["case"] == "conv-2x-30s")
    assert (
        row["fcfs"]["pdscaler"]["slo_attainment"] == seed0["policies"]["pdscaler"]["slo_attainment"]
    )
    assert set(row["deadline"]) >= {
        "pdscaler",
        "static-hindsight",
        "static-yesterday",
        "hpa-tuned",
        "dynamo-planner",
        "oracle",
    }
    deadline = row["deadline"]["dynamo-planner"]
    assert (
        f"-> {100 * deadline['slo_attainment']:.2f}% ({deadline['gpu_hours']:.2f})"
        in (tmp_path / "queue.md").read_text()
    )
    assert "## Queue discipline" in readme
    # the ablation table: pdscaler and each ablation row, per case
    ablations = [label for label, _ in quality.ABLATIONS]
    assert "| case | pdscaler | " + " | ".join(ablations) + " |" in quality_md
    no_kv = conv["aggregate"]["policies"]["pdscaler, no KV memory term"]
    cell = f"{100 * no_kv['slo_attainment']['mean']:.2f}%, {no_kv['gpu_hours']['mean']:.2f}"
    assert cell in quality_md


@pytest.mark.parametrize(
    "args", [["--only", "magic"], ["--startups", "a,b"], ["--rate-scale", "0"]]
)
def test_bad_arguments_exit_2(args: list[str], tmp_path: Path) -> None:
    assert main([*args, "--out", str(tmp_path)]) == 2


def test_a_failing_overhead_part_is_reported_not_faked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.__main__ as entry
    import bench.overhead.cli

    def boom(argv: list[str]) -> int:
        raise RuntimeError("namespace bench-overhead already exists")

    monkeypatch.setattr(bench.overhead.cli, "main", boom)
    line = entry.overhead(tmp_path, quick=True)
    assert line.startswith("not measured: the overhead benchmark failed")
    assert "already exists" in line


def test_ablations_run_at_the_targets_startups_and_the_table_lists_those_cases() -> None:
    """The ablations run at start-up 30 and 90 s only (a quarter of the matrix's time at
    300 s); the table lists the cases that have them, no row of dashes for the others."""
    assert quality.Plan().ablation_startups == (30.0, 90.0)
    stat = {"mean": 0.99, "min": 0.98, "max": 1.0}
    row = {"slo_attainment": stat, "gpu_hours": {"mean": 3.5, "min": 3.0, "max": 4.0}}

    def case(startup: float, ablated: bool) -> dict[str, object]:
        policies = {"pdscaler": row, **({"pdscaler, no profile": row} if ablated else {})}
        return {"group": "conv-1x", "startup_s": startup, "aggregate": {"policies": policies}}

    text = quality_report.ablation_table(
        [case(90.0, True), case(300.0, False)], ["pdscaler, no profile"]
    )
    assert "| conv-1x, start-up 90 s | 99.00%, 3.50 | 99.00%, 3.50 |" in text
    assert "start-up 300 s" not in text


def test_the_queue_part_needs_the_quality_cases(tmp_path: Path) -> None:
    """Alone, without a quality.json to read, it says so and measures nothing."""
    assert main(["--quick", "--only", "queue", "--out", str(tmp_path)]) == 0
    assert "not measured: it needs the quality part's cases" in (tmp_path / "README.md").read_text()
    assert not (tmp_path / "queue.json").exists()


def test_queue_gains_are_mean_points_per_policy() -> None:
    from bench import queue

    def case(fcfs: float, deadline: float) -> dict[str, Any]:
        at = {"gpu_hours": 1.0}
        return {
            "fcfs": {"pdscaler": {**at, "slo_attainment": fcfs}},
            "deadline": {"pdscaler": {**at, "slo_attainment": deadline}},
        }

    result = {"cases": [case(0.80, 0.93), case(0.90, 0.91)]}
    assert queue.gains(result) == pytest.approx({"pdscaler": 7.0})


def test_a_case_knows_its_group() -> None:
    """``Group.of``: the group of a quality.json case, the long-context variant by slug."""
    groups = (quality.Group("conv", 4.0), quality.Group("conv", 1.0, long=True))
    for group in (*groups, quality.Group("mix", 1.0)):
        case = {"group": group.slug, "trace": group.trace, "scale": group.scale}
        assert quality.Group.of(case) == group


def test_the_committed_reports_re_render_from_their_json(tmp_path: Path) -> None:
    """``python -m bench --rerender`` measures nothing: from the committed JSON it writes
    the committed quality.md and queue.md byte for byte (the labels and the header
    included), and leaves the JSON as it was."""
    results = Path(quality.__file__).parent / "results"
    for name in ("quality.json", "queue.json", "step.json"):
        (tmp_path / name).write_bytes((results / name).read_bytes())
    assert main(["--rerender", "--out", str(tmp_path)]) == 0
    for name in ("quality.md", "queue.md"):
        assert (tmp_path / name).read_text() == (results / name).read_text(), name
    for name in ("quality.json", "queue.json", "step.json"):
        assert (tmp_path / name).read_bytes() == (results / name).read_bytes(), name
    summary = (tmp_path / "README.md").read_text()
    assert "Measured at commit 7469781" in summary
    assert "## Step load" in summary


def test_the_mix_is_a_tuning_case_and_conv_long_held_out() -> None:
    assert quality.Group("mix", 1.0).kind == quality.TUNING_CASE
    assert quality.Group("conv", 1.0, long=True).kind == quality.HELD_OUT
    assert quality.Group("code", 4.0).kind == quality.MATRIX
    doc = json.loads((Path(quality.__file__).parent / "results" / "quality.json").read_text())
    text = quality_report.report(doc, "python -m bench")
    held = text.split("## Held out from pdscaler's development")[1].split("## Tuning case")[0]
    assert "| conv-long-1x, start-up 90 s |" in held
    assert "mix-1x" not in held
    tuning = text.split("## Tuning case: the demo's mix shift")[1].split("## Tuning (seed 0)")[0]
    assert "| mix-1x, start-up 90 s |" in tuning
