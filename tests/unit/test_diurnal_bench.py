"""bench/diurnal.py: the rate scale (the busiest hour needs at least 20 replicas of the
larger pool at full capacity), the warm-up and scored spans, and the pre-roll every
dynamic policy gets (static ones start at their size on the scored span)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench import diurnal
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.traces import DAY_S, Trace, days, load_diurnal

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "diurnal-2d.jsonl"


def test_the_peak_need_of_a_hand_made_trace() -> None:
    """Hour 1 holds 36 requests of 1,000 prompt and 100 output tokens (0.01 req/s), hour
    0 one. Prefill: 1,000 / 8,369.73 (full 8,192-token batches: 8,192 / (0.015 + 8,192 /
    8,500)) + 1,000^2 / (8,500 x 53,400) = 0.119478 + 0.002203 = 0.121681 s a request,
    so 0.0012168 replicas; decode: 1.0 output tokens/s against one replica's
    ``decode_tps`` at 1,000/100 (90 sequences by the KV: 100,000 / 1,100)."""
    arrival = np.concatenate([[10.0], 3600.0 + np.arange(36) * 100.0])
    trace = Trace(
        "h",
        arrival,
        np.full(37, 1000, dtype=np.int64),
        np.full(37, 100, dtype=np.int64),
        7200.0,
    )
    params = EngineParams()
    need = diurnal.peak_need(trace, params, 0.05)
    assert (need.start_s, need.requests, need.rate) == (3600.0, 36, 0.01)
    assert need.prefill_s_per_request == pytest.approx(0.121681, abs=1e-6)
    assert need.prefill == pytest.approx(0.0012168, abs=1e-7)
    batch, step = params.decode_operating_point(1000.0, 100.0, 0.05)
    assert batch == 90
    assert need.decode == pytest.approx(0.01 * 100.0 / (batch / step))
    assert need.larger == need.prefill
    assert diurnal.bench_scale(need) == math.ceil(20 / need.prefill) == 16_437


def test_the_week_is_replayed_at_x70_where_its_peak_hour_needs_20_prefill_replicas() -> None:
    """The module docstring's worked numbers, on the committed week."""
    week = load_diurnal(diurnal.WEEK)
    need = diurnal.peak_need(week, EngineParams(), 0.05)
    assert need.start_s == 27 * 3600.0  # day 1, 03:00
    assert need.requests == 11_843
    assert need.prompt_mean == pytest.approx(723.0, abs=0.05)
    assert need.output_mean == pytest.approx(47.0, abs=0.05)
    assert need.prefill == pytest.approx(0.2890, abs=5e-5)
    assert need.decode == pytest.approx(0.0587, abs=5e-5)
    scale = diurnal.bench_scale(need)
    assert scale == 70
    assert scale * need.larger >= 20 > (scale - 1) * need.larger
    assert len(days(week, 1)) * scale == 9_397_500


def _case(warmup_hours: float = 24.0) -> diurnal.Case:
    plan = diurnal.Plan(scale=2, warmup_hours=warmup_hours, trace_path=str(FIXTURE))
    return diurnal.case(plan, "default", 90.0, 0)


def test_the_warmup_day_precedes_the_scored_day_on_one_clock() -> None:
    c = _case()
    assert c.preroll_s == DAY_S
    assert (c.warmup.span, c.scored.span) == (DAY_S, DAY_S)
    assert len(c.warmup) == 2 * 5  # day 0's five requests, doubled
    assert len(c.scored) == 2 * 3
    both = c.prerolled()
    assert both.span == 2 * DAY_S
    assert np.array_equal(both.arrival[10:], c.scored.arrival + DAY_S)
    assert np.all(np.diff(both.arrival) >= 0)
    short = _case(warmup_hours=1.0)  # day 0's last hour: its request at 86,399.999 s
    assert short.preroll_s == 3600.0
    assert short.warmup.arrival.tolist() == pytest.approx([3599.999] * 2)


def test_dynamic_policies_are_pre_rolled_static_ones_start_at_their_size() -> None:
    """Issue 26, set-up error 2 on the diurnal bench: every dynamic policy starts from
    its own steady state (the warm-up day replayed as its pre-roll, scored apart)."""
    c = _case()
    for name, spec in diurnal.POLICIES.items():
        trace, cfg = diurnal.config(c, spec)
        ctrl = spec.make(c)
        static = getattr(ctrl, "initial", None) is not None
        assert spec.preroll != static, name
        if spec.preroll:
            assert cfg.preroll_s == DAY_S
            assert trace.span == 2 * DAY_S
        else:
            assert cfg.preroll_s == 0.0
            assert trace is c.scored
    assert diurnal.POLICIES["pdscaler"].preroll


def test_the_plan_runs_the_pre_rolled_jobs_first_and_refuses_unknown_names() -> None:
    jobs = diurnal.Plan().matrix()
    assert len(jobs) == 2 * 3  # start-up 90 and 300 s x 3 policies
    assert [j[3] for j in jobs[:2]] == ["pdscaler", "pdscaler"]
    args = diurnal.parser().parse_args(["--policies", "pdscaler,nope"])
    with pytest.raises(ValueError, match="nope"):
        diurnal.plan_of(args)


def test_a_job_reports_the_scored_span_and_its_preroll_apart() -> None:
    plan = diurnal.Plan(scale=2, trace_path=str(FIXTURE))
    dynamic = diurnal.run_job(plan, "default", 90.0, 0, "pdscaler")
    static = diurnal.run_job(plan, "default", 90.0, 0, "static-peak")
    assert dynamic["scored"]["requests"] == static["scored"]["requests"] == 6
    assert dynamic["preroll"]["requests"] == 10  # day 0's five requests, doubled
    assert dynamic["requests_replayed"] == 16
    assert static["preroll"] is None
    assert static["requests_replayed"] == 6
    assert static["static_size"] == [1, 1]
    doc = {
        "plan": dataclasses.asdict(plan),
        "policies": {"pdscaler": "pdscaler", "static-peak": "static-peak"},
        "scales": {},
        "rows": [dynamic, static],
        "jobs": 3,
        "jobs_done": 2,
        "wall_s": 1.0,
        "engine": "pure Python",
        "measured_at": {"commit": "0000000", "date": "2026-12-05 10:00 UTC"},
    }
    text = diurnal.report(doc, "python -m bench.diurnal")
    assert "INCOMPLETE: 2 of 3 jobs" in text
    pd_row = next(line for line in text.splitlines() if "| pdscaler |" in line)
    static_row = next(line for line in text.splitlines() if "| static-peak |" in line)
    assert "| dynamic |" in pd_row
    assert "| 1P/1D |" in static_row
    assert "| - | - |" in static_row  # no pre-roll figures for a static policy
    assert "| - |" not in pd_row


def test_the_preroll_table_lists_pre_rolled_rows_longest_first(tmp_path: Path) -> None:
    stamp = {"commit": "0000000", "date": "2026-12-05 10:00 UTC"}

    def doc(hours: float, attainment: float) -> dict[str, object]:
        row = {
            "policy": "pdscaler",
            "startup_s": 90.0,
            "seed": 0,
            "scored": {"slo_attainment": attainment, "gpu_hours": 10.0},
            "preroll": {"slo_attainment": 0.5},
        }
        static = {**row, "policy": "static-peak", "preroll": None}
        return {"plan": {"warmup_hours": hours}, "rows": [row, static], "measured_at": stamp}

    paths = []
    for hours, att in ((2.0, 0.93), (24.0, 0.95)):
        path = tmp_path / f"{hours:g}.json"
        path.write_text(json.dumps(doc(hours, att)))
        paths.append(path)
    text = diurnal.preroll_table(paths)
    rows = [line for line in text.splitlines() if line.startswith("| pdscaler")]
    assert [r.split(" | ")[3:5] for r in rows] == [["24 h", "95.00%"], ["2 h", "93.00%"]]
    assert "static-peak" not in text
