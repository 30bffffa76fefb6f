"""bench/diurnal*.py: the rate scale (the busiest hour needs at least 20 replicas of the
larger pool at full capacity), the warm-up and scored spans, the pre-roll every
dynamic policy gets (the statics and the oracle start at their size on the scored
span), the engines (the hand-made one and the three measured ones), and the
out-of-sample baselines sized and tuned on the warm-up span only."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import diurnal, diurnal_plan, diurnal_report, diurnal_verdicts
from pdscaler.sim import tuning
from pdscaler.sim.compare import TARGET
from pdscaler.sim.engine import EngineParams, RequestTimes
from pdscaler.sim.results import blame
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
    need = diurnal_plan.peak_need(trace, params, 0.05)
    assert (need.start_s, need.requests, need.rate) == (3600.0, 36, 0.01)
    assert need.prefill_s_per_request == pytest.approx(0.121681, abs=1e-6)
    assert need.prefill == pytest.approx(0.0012168, abs=1e-7)
    batch, step = params.decode_operating_point(1000.0, 100.0, 0.05)
    assert batch == 90
    assert need.decode == pytest.approx(0.01 * 100.0 / (batch / step))
    assert need.larger == need.prefill
    assert diurnal_plan.bench_scale(need) == math.ceil(20 / need.prefill) == 16_437


def test_the_week_is_replayed_at_x70_where_its_peak_hour_needs_20_prefill_replicas() -> None:
    """The module docstring's worked numbers, on the committed week."""
    week = load_diurnal(diurnal_plan.WEEK)
    need = diurnal_plan.peak_need(week, EngineParams(), 0.05)
    assert need.start_s == 27 * 3600.0  # day 1, 03:00
    assert need.requests == 11_843
    assert need.prompt_mean == pytest.approx(723.0, abs=0.05)
    assert need.output_mean == pytest.approx(47.0, abs=0.05)
    assert need.prefill == pytest.approx(0.2890, abs=5e-5)
    assert need.decode == pytest.approx(0.0587, abs=5e-5)
    scale = diurnal_plan.bench_scale(need)
    assert scale == 70
    assert scale * need.larger >= 20 > (scale - 1) * need.larger
    assert len(days(week, 1)) * scale == 9_397_500


def _case(warmup_hours: float = 24.0) -> diurnal_plan.Case:
    return diurnal_plan.case(_plan(warmup_hours), diurnal_plan.HAND_MADE, 90.0, 0)


def _plan(warmup_hours: float = 24.0, scored_hours: float = 24.0) -> diurnal_plan.Plan:
    """The fixture's two days at x2: day 0 (its end) the warm-up, day 1 (its start)
    scored."""
    return diurnal_plan.Plan(
        scale=2, warmup_hours=warmup_hours, scored_hours=scored_hours, trace_path=str(FIXTURE)
    )


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


#: The policies that must replay the warm-up as their pre-roll (issue 26 item 4).
DYNAMIC = {
    "pdscaler",
    "hpa-tuned",
    "dynamo-planner",
    "dynamo-planner-real",
    "online-reference",
}


def test_every_dynamic_policy_pre_rolls_the_warmup_statics_and_the_oracle_do_not() -> None:
    """Issue 26, set-up error 2 on the diurnal bench: every dynamic policy starts from
    its own steady state (the warm-up replayed as its pre-roll, scored apart); the
    statics start at their size and the oracle at its schedule, on the scored span."""
    c = _case()
    assert set(diurnal_plan.POLICIES) == DYNAMIC | {
        "static-hindsight",
        "static-yesterday",
        "static-peak",
        "oracle",
    }
    for name, spec in diurnal_plan.POLICIES.items():
        trace, cfg = diurnal_plan.config(c, spec)
        assert spec.preroll == (name in DYNAMIC), name
        if name in DYNAMIC:
            assert cfg.preroll_s == DAY_S, name
            assert trace.span == 2 * DAY_S, name
            assert len(trace) == len(c.warmup) + len(c.scored), name
        else:
            assert cfg.preroll_s == 0.0, name
            assert trace is c.scored, name
    ref_trace, ref = diurnal_plan.config(c, diurnal_plan.POLICIES["online-reference"])
    assert (ref.scrape_interval_s, ref.prom_lag_s, ref.preroll_s) == (1.0, 0.0, DAY_S)
    assert ref_trace.span == 2 * DAY_S


def test_the_plan_runs_pdscaler_first_in_every_case_and_refuses_unknown_names() -> None:
    """A run stopped by its budget has pdscaler in every case and the same policies in
    every case (policy by policy, each over every engine and start-up)."""
    plan = diurnal_plan.Plan()
    jobs = plan.matrix()
    per_engine = 2 * 5 + 2 + 2  # 5 dynamic x 2 start-ups, 2 statics once, the oracle x 2
    assert len(jobs) == len(plan.engines) * per_engine
    first = 2 * len(plan.engines)
    assert {j[3] for j in jobs[:first]} == {"pdscaler"}
    assert {(j[0], j[1]) for j in jobs[:first]} == {
        (e, st) for e in plan.engines for st in plan.startups
    }
    ranks = [diurnal_plan.JOB_ORDER.index(j[3]) for j in jobs]
    assert ranks == sorted(ranks)
    assert "static-hindsight" not in {j[3] for j in jobs}  # its search's replay
    args = diurnal.parser().parse_args(["--policies", "pdscaler,nope"])
    with pytest.raises(ValueError, match="nope"):
        diurnal.plan_of(args)


def test_the_engines_are_the_hand_made_one_and_the_three_measured_ones() -> None:
    measured = {
        "qwen3-8b-h100-vllm-tp1",
        "qwen3-32b-h200-vllm-tp2",
        "qwen3-30b-a3b-h200-vllm-tp1",
    }
    assert set(diurnal_plan.ENGINES) == {diurnal_plan.HAND_MADE} | measured
    assert set(diurnal_plan.FULL.engines) == set(diurnal_plan.ENGINES)
    assert diurnal_plan.HAND_MADE in diurnal_plan.Plan().engines
    assert measured & set(diurnal_plan.Plan().engines)
    hand = diurnal_plan.ENGINES[diurnal_plan.HAND_MADE]()
    assert hand.params == EngineParams()
    assert "hand-made" in hand.label
    for name in measured:
        e = diurnal_plan.ENGINES[name]()
        assert e.max_context == 40_960, name
        assert e.params != EngineParams(), name
        spec = e.spec(90.0)
        # the profile pdscaler plan profile writes: no point past the model's context
        assert max(p.tokens for p in spec.prefill.profile) <= 40_960, name
        assert spec.decode.kv_cache_tokens is not None, name


def _write_trace(path: Path, scored_rate: float) -> Path:
    """Day 0's last 15 minutes at 2 req/s of 2,000/200 tokens, day 1's first 15
    minutes at ``scored_rate`` of the same, one request at day 1's end."""
    lines = []
    for start, rate in ((DAY_S - 900.0, 2.0), (DAY_S, scored_rate)):
        n = int(900 * rate)
        lines += [(start + i / rate, 2000, 200) for i in range(n)]
    lines.append((2 * DAY_S - 1.0, 100, 10))
    path.write_text(
        "".join(
            json.dumps({"timestamp": round(t * 1000), "input_length": p, "output_length": o}) + "\n"
            for t, p, o in lines
        )
    )
    return path


@pytest.fixture(scope="module")
def tuned_pair(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``tune_job`` on two traces with the same warm-up and a scored span at 2 and at
    12 req/s."""
    out = []
    for rate in (2.0, 12.0):
        path = _write_trace(tmp_path_factory.mktemp(f"r{rate:g}") / "t.jsonl", rate)
        plan = diurnal_plan.Plan(
            scale=1, warmup_hours=0.25, scored_hours=0.25, trace_path=str(path)
        )
        out.append(diurnal.tune_job(plan, diurnal_plan.HAND_MADE, 0))
    return out


def test_static_yesterday_is_sized_on_the_warmup_span_only(
    tuned_pair: list[dict[str, Any]],
) -> None:
    """Issue 26, set-up error 1 on the diurnal bench: the scored span six times busier
    moves the hindsight bound, never static-yesterday (sized on the warm-up, +20%)."""
    light, heavy = tuned_pair
    assert size(light, "static_yesterday") == size(heavy, "static_yesterday")
    assert light["static_yesterday_sweep"] == heavy["static_yesterday_sweep"]
    assert size(heavy, "static_hindsight") > size(light, "static_hindsight")
    on = light["static_yesterday"]["sized_on"]
    assert size(light, "static_yesterday") == tuning.with_margin((on["prefill"], on["decode"]))


def size(doc: dict[str, Any], key: str) -> tuple[int, int]:
    return doc[key]["prefill"], doc[key]["decode"]


def test_hpa_tuned_and_the_dynamo_scale_are_tuned_without_the_scored_span(
    tuned_pair: list[dict[str, Any]],
) -> None:
    light, heavy = tuned_pair
    assert light["hpa"] == heavy["hpa"]
    assert light["dynamo"] == heavy["dynamo"]
    # and what they were tuned on is the warm-up's load: the grid's bounds come from it
    grid = {t["config"]["prefill"][1] for t in light["hpa"]["tried"]}
    assert grid == {t["config"]["prefill"][1] for t in heavy["hpa"]["tried"]}


def test_a_static_replay_does_not_depend_on_the_startup() -> None:
    """Why a static size is replayed once and its row stands for every start-up."""
    plan = _plan(1.0, 4.0)
    rows = [
        diurnal.run_job(plan, diurnal_plan.HAND_MADE, st, 0, "static-peak") for st in (90.0, 300.0)
    ]
    assert rows[0]["scored"] == rows[1]["scored"]
    shared = diurnal.shared_rows(replace(plan, startups=(90.0, 300.0)), rows[0])
    assert [(r["startup_s"], r["shared_from_startup_s"]) for r in shared] == [(300.0, 90.0)]


def test_a_job_reports_the_scored_span_and_its_preroll_apart() -> None:
    """Day 0's last hour (its request at 86,399.999 s, doubled) is the pre-roll, day 1's
    first 4 hours (its requests at 0 and 3,600 s, doubled) are scored."""
    plan = _plan(1.0, 4.0)
    dynamic = diurnal.run_job(plan, diurnal_plan.HAND_MADE, 90.0, 0, "pdscaler")
    static = diurnal.run_job(plan, diurnal_plan.HAND_MADE, 90.0, 0, "static-peak")
    oracle = diurnal.run_job(plan, diurnal_plan.HAND_MADE, 90.0, 0, "oracle")
    assert dynamic["scored"]["requests"] == static["scored"]["requests"] == 4
    assert oracle["scored"]["requests"] == 4
    assert oracle["preroll"] is None
    assert oracle["oracle"]["repairs"] <= plan.oracle_repairs
    assert dynamic["preroll"]["requests"] == 2
    assert dynamic["requests_replayed"] == 6
    assert static["preroll"] is None
    assert static["requests_replayed"] == 4
    assert static["static_size"] == [1, 1]
    doc: dict[str, Any] = {
        "plan": dataclasses.asdict(plan),
        "policies": {"pdscaler": "pdscaler", "static-peak": "static-peak"},
        "scales": {},
        "rows": [dynamic, static, oracle],
        "tuning": {},
        "jobs": 4,
        "jobs_done": 3,
        "wall_s": 1.0,
        "engine": "pure Python",
        "cuts": "seeds 1, 2",
        "measured_at": {"commit": "0000000", "date": "2026-12-05 10:00 UTC"},
    }
    doc["verdicts"] = diurnal_verdicts.case_verdicts(doc)
    text = diurnal_report.report(doc, "python -m bench.diurnal")
    assert "INCOMPLETE: 3 of 4 jobs" in text
    assert "CUT to fit the 60-minute budget" in text
    assert "seeds 1, 2" in text
    pd_row = next(line for line in text.splitlines() if "| pdscaler |" in line)
    static_row = next(line for line in text.splitlines() if "| static-peak |" in line)
    assert "| dynamic |" in pd_row
    assert "| 1P/1D |" in static_row
    assert "| - | - |" in static_row  # no pre-roll figures for a static policy
    assert "| - |" not in pd_row
    (v,) = doc["verdicts"]
    assert v["oracle"]["gpu_hours"] == oracle["scored"]["gpu_hours"]
    assert "static-peak" not in (v["best_online"] or {}).get("policy", "")


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
    text = diurnal_report.preroll_table(paths)
    rows = [line for line in text.splitlines() if line.startswith("| pdscaler")]
    assert [r.split(" | ")[3:5] for r in rows] == [["24 h", "95.00%"], ["2 h", "93.00%"]]
    assert "static-peak" not in text


def _times(
    arrival: list[float],
    prefill_start: list[float],
    prefill_end: list[float],
    decode_admit: list[float],
    first_token: list[float],
    finish: list[float],
    output: list[int],
) -> RequestTimes:
    f = np.array
    return RequestTimes(
        f(arrival, dtype=float),
        f([1000] * len(arrival)),
        f(output),
        f(prefill_start, dtype=float),
        f(prefill_end, dtype=float),
        f(decode_admit, dtype=float),
        f(first_token, dtype=float),
        f(finish, dtype=float),
    )


def test_blame_names_the_pool_a_miss_is_short_of() -> None:
    # SLO 2 s / 50 ms. Request 0 meets; 1 waited 3 s for prefill (cured without it);
    # 2 waited 3 s for decode admission; 3 misses TPOT only (decode's step); 4 waited
    # 3 s in both queues (neither alone cures it).
    t = _times(
        arrival=[0, 0, 0, 0, 0],
        prefill_start=[0, 3, 0, 0, 3],
        prefill_end=[0.2, 3.2, 0.2, 0.2, 3.2],
        decode_admit=[0.2, 3.2, 3.2, 0.2, 6.2],
        first_token=[0.3, 3.3, 3.3, 0.3, 6.3],
        finish=[5.3, 8.3, 8.3, 10.3, 11.3],
        output=[101, 101, 101, 101, 101],
    )
    p, d = blame(t, 2.0, 0.05)
    assert p == pytest.approx(1 / 5)
    assert d == pytest.approx(2 / 5)


def test_a_static_search_grows_the_blamed_pool_and_shrinks_one_pool_at_a_time() -> None:
    spec = diurnal_plan.hand_made().spec(90.0)
    # the worked numbers of grown's docstring: decode blamed for 5.3% -> x1.53
    assert diurnal.grown((64, 16), (0.0, 0.053), spec) == (64, 25)
    # a little blame still grows by GROW_MIN; none at all grows the more blamed pool
    assert diurnal.grown((10, 10), (0.003, 0.0), spec) == (12, 10)
    assert diurnal.grown((10, 10), (0.0, 0.001), spec) == (10, 12)
    # never past the spec's bound of MAX_REPLICAS (the old 64 bound every search)
    assert diurnal.grown((250, 10), (0.2, 0.0), spec) == (diurnal_plan.MAX_REPLICAS, 10)
    assert spec.prefill.replicas.max == diurnal_plan.MAX_REPLICAS > 64
    assert diurnal.shrunk((64, 16), 0, spec) == (56, 16)
    assert diurnal.shrunk((1, 16), 0, spec) == (1, 16)


def test_the_diurnal_static_search_sizes_each_pool_for_its_own_misses() -> None:
    # a small trace whose decode is the short pool at the per-minute start: the old joint
    # search (one factor for both pools) kept prefill's surplus; this one must end with
    # a size meeting the target that no single-pool step down from it also met
    plan = diurnal_plan.Plan(
        engines=(diurnal_plan.HAND_MADE,), scale=4, warmup_hours=0.1, scored_hours=0.25
    )
    c = diurnal_plan.case(plan, diurnal_plan.HAND_MADE, 90.0, 0)
    choice, search = diurnal.static_search(c.scored, c.cfg, replays=8)
    assert choice.met
    spec = c.cfg.spec
    for pool in (0, 1):
        down = diurnal.shrunk((choice.prefill, choice.decode), pool, spec)
        if down != (choice.prefill, choice.decode) and down in search.runs:
            assert search.runs[down].slo_attainment < TARGET
