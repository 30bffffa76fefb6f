"""The README's results section is generated from bench/results/ (bench/readme.py): the
committed README.md says exactly what the committed results files say, and the
generator takes every figure from those files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import quality_report, quality_verdicts, readme, request_path
from pdscaler.sim.results import Summary

OVERHEAD = """# Operator overhead
| date | 2026-11-29 15:00 UTC |
| all | 463 | 10000 | 261 µs | 589 µs | 324 µs | 1.8 ms |
| converged (no change) | 20 | 33.0 ms | 114.4 ms | 38.2 ms | 132.1 ms | 0.0 |
## 3. One operator process handling many PDDeployments: 200 at a 15s interval
| CPU, mean | 38.9% of one core | /proc |
| RSS, peak in window | 191 MiB | /proc |
"""


def test_the_committed_readme_matches_the_committed_results() -> None:
    """Both generated parts: the results section and the request path's sentence."""
    text = readme.README.read_text(encoding="utf-8")
    assert readme.render_all(text) == text, "run: python -m bench.readme"
    assert "225 requests" not in text  # the figure that predated its test


def test_the_request_path_sentence_takes_its_figures_from_the_file(tmp_path: Path) -> None:
    doc = {
        "requests": 300,
        "errors": 0,
        "mixed_pairs": 0,
        "tolerance": 0.15,
        "both_serving_s": 4.3,
        "requests_both_serving": 17,
        "cells": [
            {"cell": "old", "traffic": 0.35, "capacity": 0.31},
            {"cell": "new", "traffic": 0.65, "capacity": 0.69},
        ],
    }
    assert request_path.write(doc, tmp_path) == tmp_path / "request_path.json"
    text = readme.request_path_part(tmp_path)
    assert "rolls v1 -> v2 under aiperf's load: 300 requests, 0 failed, 0 cross-version" in text
    assert "within 15 points of its share of Ready prefill" in text
    assert "(measured 35/65 against 31/69, old cell first, over 4.3 s and 17 requests" in text
    assert "at commit " in text
    assert "not measured (no bench/results/request_path.json" in readme.request_path_part(
        tmp_path / "none"
    )


def test_the_request_path_file_is_written_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(request_path.OUT_ENV, raising=False)
    assert request_path.write({"requests": 1}) is None
    monkeypatch.setenv(request_path.OUT_ENV, str(tmp_path))
    path = request_path.write({"requests": 1})
    assert path is not None
    assert json.loads(path.read_text())["measured_at"]["commit"]


def results(tmp_path: Path) -> Path:
    s = Summary("pdscaler", 100, 100, 0.995, 0.2, 1.0, 0.02, 0.03, 12.0, 6.0, 6.0, 4, 0)
    b = Summary("static-hindsight", 100, 100, 0.999, 0.2, 1.0, 0.02, 0.03, 11.0, 5.5, 5.5, 0, 0)
    seed = {
        "policies": {x.policy: x.to_json(10.0) for x in (s, b)},
        "oracle": {
            "gpu_hours": 10.0,
            "slo_attainment": 0.996,
            "met": True,
            "repairs": 1,
            "tries": [[0.97, 8.0], [0.996, 10.0]],
        },
        "lower_bound": {"gpu_hours": 8.0},
        "work_floor": {"gpu_hours": 5.0},
        "feasibility_ceiling": 1.0,
        "seconds": 1.0,
    }
    case = {"group": "conv-1x", "trace": "conv", "scale": 1.0, "held_out": False}
    case |= {"startup_s": 90.0, "seeds": [seed], "aggregate": quality_verdicts.aggregate([seed])}
    case["verdict"] = quality_verdicts.verdict(case)
    doc = {
        "plan": {"scales": [1.0], "startups": [90.0], "seeds": [0], "workers": 2},
        "groups": {"conv-1x": {"startups": [90.0], "seeds": [0]}},
        "cases": {"conv-1x-90s": case},
        "tuning": {},
        "wall_s": 120.0,
    }
    (tmp_path / "quality.json").write_text(json.dumps(doc), encoding="utf-8")
    rows = [
        {"error": 0.04, "error_prior": 0.10},
        {"error": -0.01, "error_prior": 0.02},
        {"error": 0.22, "error_prior": None},
    ]
    (tmp_path / "step.json").write_text(json.dumps({"model_rows": rows}), encoding="utf-8")
    (tmp_path / "overhead.md").write_text(OVERHEAD, encoding="utf-8")
    fig = {"gpu_hours": 1.0}

    def queued(pd: float, hpa: float) -> dict[str, Any]:
        return {
            "pdscaler": {**fig, "slo_attainment": pd},
            "hpa-tuned": {**fig, "slo_attainment": hpa},
        }

    queue = {
        "discipline": "deadline",
        "seed": 0,
        "cases": [{"case": "conv-1x-90s", "fcfs": queued(0.9, 0.5), "deadline": queued(0.92, 0.8)}],
    }
    (tmp_path / "queue.json").write_text(json.dumps(queue), encoding="utf-8")
    return tmp_path


def test_the_section_takes_its_figures_from_the_results(tmp_path: Path) -> None:
    text = readme.section(results(tmp_path))
    # x oracle at equal SLO: 12 GPU-h over the cheapest oracle try reaching 99.5%: 10.0
    row = "| conv-1x | 99.50%, 12.00 | 1.20 | 1.20 | 99.90%, 11.00 | - | - | - | - | - |"
    assert row + " 10.00 (99.60%; 1 repairs) | no: static-hindsight | - |" in text
    # dominated by static-hindsight (better and cheaper): 0 of 1 on the front
    assert "on the Pareto front (SLO met vs GPU-h, at seed 0," in text
    assert "replayed) in 0 under FCFS and 0 of 0 under the deadline queue" in text
    assert "policies that do in at least one case: static-hindsight" in text
    assert "within 4% in 2 of 3 step-load cases" in text  # 4% counts as within
    assert "in 1 of 3 (worst 10%) with the scenario's nominal rate" in text
    assert "261 µs (p50)" in text
    assert "33.0 ms (p50) with 0 API writes" in text
    assert "200 PDDeployments at a 15s interval with 38.9% of one core" in text
    assert "2.0 min (wall)" in text
    assert "pdscaler gains +2.00 points of SLO met, the baselines +30.00 on average" in text
    assert "(hpa-tuned the most, +30.00)" in text


def test_missing_results_are_said_not_invented(tmp_path: Path) -> None:
    text = readme.section(tmp_path)
    assert "Diurnal traffic: not measured (no diurnal.json)" in text
    assert "not measured (no quality.json)" in text
    assert "not measured (no step.json)" in text
    assert "not measured (no queue.json)" in text
    assert "not measured (no overhead.md)" in text


def test_render_replaces_only_between_the_markers() -> None:
    doc = f"a\n{readme.BEGIN}\nold\n{readme.END}\nz\n"
    assert readme.render(doc, "new") == f"a\n{readme.BEGIN}\nnew\n{readme.END}\nz\n"
    with pytest.raises(ValueError, match="lacks the markers"):
        readme.render("no markers", "new")


def test_merge_unites_two_runs_of_the_matrix(tmp_path: Path) -> None:
    one = json.loads((results(tmp_path) / "quality.json").read_text(encoding="utf-8"))
    two = json.loads(json.dumps(one))
    case = two["cases"].pop("conv-1x-90s")
    case |= {"group": "conv-10x", "scale": 10.0}
    two["cases"]["conv-10x-90s"] = case
    two["plan"]["scales"] = [10.0]
    two["groups"] = {"conv-10x": {"startups": [90.0], "seeds": [0]}}
    merged = quality_report.merge([two, one])
    assert list(merged["cases"]) == ["conv-1x-90s", "conv-10x-90s"]
    assert merged["plan"]["scales"] == [1.0, 10.0]
    assert merged["wall_s"] == 240.0
    assert set(merged["groups"]) == {"conv-1x", "conv-10x"}


def test_an_unsteady_fleet_window_is_said_with_its_figures() -> None:
    note = "- NOT steady at the window's start: 448 of 800 pods Ready (want 400); the lab lagged"
    text = readme.overhead_part(
        f"Measured at commit abc1234, 2026-12-05 10:07 UTC.\n{OVERHEAD}{note}\n"
    )
    assert "38.9% of one core and a peak RSS of 191 MiB (NOT steady at the window's start: " in text
    assert "448 of 800 pods Ready (want 400))" in text
    assert "at commit abc1234" in text
    assert "(NOT steady" not in readme.overhead_part(OVERHEAD)


DIURNAL = readme.RESULTS / "diurnal.json"


def diurnal_doc() -> dict[str, Any]:
    return dict(json.loads(DIURNAL.read_text(encoding="utf-8")))


def test_the_readme_s_diurnal_section_is_what_diurnal_json_renders() -> None:
    """Fails when README.md or diurnal.json changes without the other (re-render with
    python -m bench.readme); the diurnal section comes first, before the hour matrix."""
    text = readme.README.read_text(encoding="utf-8")
    part = "\n".join(readme.diurnal_part(diurnal_doc()))
    assert part in text, "run: python -m bench.readme"
    start = text.index(readme.BEGIN)
    assert start < text.index(part) < text.index("### One hour of Azure traffic")


def test_the_first_diurnal_case_s_pdscaler_figures_are_the_json_s() -> None:
    doc = diurnal_doc()
    first = next(r for r in doc["rows"] if r["policy"] == "pdscaler")
    head = f"| {first['engine']}, {first['startup_s']:g} s, seed {first['seed']} | "
    lines = [
        x for x in readme.README.read_text(encoding="utf-8").splitlines() if x.startswith(head)
    ]
    assert len(lines) == 1, head
    cell = lines[0].split(" | ")[1]
    s = first["scored"]
    assert cell == f"{100 * s['slo_attainment']:.2f}%, {s['gpu_hours']:.1f}"
    assert doc["measured_at"]["commit"] in readme.section()


def test_the_diurnal_section_takes_its_figures_and_cuts_from_the_file() -> None:
    doc = diurnal_doc()
    first = next(r for r in doc["rows"] if r["policy"] == "pdscaler")
    first["scored"] |= {"slo_attainment": 0.123456, "gpu_hours": 7.89}
    doc["cuts"] = ""
    doc["jobs_done"] = doc["jobs"] - 1
    text = "\n".join(readme.diurnal_part(doc))
    assert (
        f"| {first['engine']}, {first['startup_s']:g} s, seed {first['seed']} | 12.35%, 7.9 |"
        in text
    )
    assert "Nothing cut: the full matrix." in text
    assert f"INCOMPLETE: {doc['jobs'] - 1} of {doc['jobs']} jobs done" in text
    plan = doc["plan"]
    assert f"day 0's last {plan['warmup_hours']:g} h replayed" in text
    assert f"the {plan['scored_hours']:g} h from day 1's start scored" in text
