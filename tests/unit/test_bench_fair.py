"""The hour matrix's configuration is the fair one (issue 26, item 4 and 6): every
dynamic policy replays a pre-roll before its scored hour (the statics and the oracle
start at their size), static-yesterday scores no request with a size chosen on it, and
the verdict counts every static size the sweep replayed and the deadline-queue rows.

Each test fails on the bench before this wiring (seen): ``Plan`` had no pre-roll and
every dynamic policy started from the warm start; the bench had no static-yesterday; the
verdict compared the policies' seed means alone (a swept static 19P/2D at 85.0% / 20.1
GPU-h beside pdscaler at 84.3% / 28.3 left pdscaler "Pareto").
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import pytest

from bench import dynamo_real, quality, quality_report, quality_run, quality_verdicts
from bench.__main__ import parse_args
from pdscaler.sim.baselines import HpaConfig
from pdscaler.sim.compare import STATIC_POLICIES
from pdscaler.sim.dynamo import DynamoConfig
from pdscaler.sim.results import Summary
from pdscaler.sim.traces import Trace
from pdscaler.sim.verdicts import DEADLINE


def poisson(rates: list[float], seconds: float, seed: int = 3) -> Trace:
    """Consecutive spans of ``seconds`` at each rate (req/s), chat-like lengths."""
    rng = np.random.default_rng(seed)
    arrivals = [
        i * seconds + np.sort(rng.uniform(0.0, seconds, rng.poisson(r * seconds)))
        for i, r in enumerate(rates)
    ]
    a = np.concatenate(arrivals)
    n = len(a)
    prompt = rng.integers(600, 1600, n).astype(np.int64)
    output = rng.integers(100, 300, n).astype(np.int64)
    return Trace("synthetic", a, prompt, output, seconds * len(rates))


CHAT = quality.Group("conv", 1.0, startups=(30.0,), seeds=(0,))


def test_make_bench_pre_rolls_ten_minutes() -> None:
    """The issue's 10 minutes before the scored hour, in ``make bench``'s plan."""
    _, _, plan = parse_args([])
    assert plan.preroll_s == quality.PREROLL_S == 600.0
    assert quality.PREROLL_SOURCE == "head"


def tuned_for(trace: Trace) -> dict[str, Any]:
    """A tuning document for ``trace`` (fixed choices; static-yesterday's searched)."""
    cfg = quality.config(CHAT, 30.0, 0)
    return {
        "static_best": {"prefill": 2, "decode": 2},
        "hpa": {"config": asdict(HpaConfig(5.0, (1, 6), (1, 6)))},
        "dynamo": {"config": asdict(DynamoConfig())},
        "static_yesterday": quality_run.yesterday_sizes(trace, cfg),
    }


def test_every_dynamic_policy_gets_the_pre_roll_and_no_static_does() -> None:
    """Rows of one case (a 6-minute trace, 2 minutes of pre-roll): each dynamic policy
    has its pre-roll's figures apart and a scored row of the trace's requests exactly;
    the statics none. The real Dynamo planner is a row when its venv exists."""
    trace = poisson([3.0, 3.0], 180.0)
    plan = quality.Plan(preroll_s=120.0)
    cfg = quality.config(CHAT, 30.0, 0)
    doc = quality_run.compare_case(CHAT, trace, cfg, tuned_for(trace), plan).to_json()
    rows = doc["policies"]
    assert list(rows) == [n for n in quality.ROWS if n in rows]
    assert set(rows) >= set(quality.ROWS) - {quality.REAL_DYNAMO}
    assert (quality.REAL_DYNAMO in rows) == dynamo_real.available()
    dynamic = [n for n in rows if n not in STATIC_POLICIES]
    assert {"pdscaler", "hpa-tuned", "online-reference", "dynamo-planner"} <= set(dynamic)
    assert set(doc["preroll"]) == set(dynamic)
    head = int(np.sum(trace.arrival < 120.0))
    for n in dynamic:
        assert doc["preroll"][n]["requests"] == head, n
    for n in rows:
        assert rows[n]["requests"] == len(trace), n
    assert doc["meta"]["preroll_s"] == 120.0


def test_static_yesterday_scores_no_request_with_a_size_chosen_on_it() -> None:
    """Two hours alike in their first half and not in their second (2 then 3 or 12
    req/s): the size that scores the second half is the same (chosen on the first);
    the size that scores the first half follows the second (it was chosen there). The
    hindsight search of each whole hour sizes on what it scores."""
    cfg = quality.config(CHAT, 30.0, 0)
    quiet, busy = poisson([2.0, 3.0], 300.0), poisson([2.0, 12.0], 300.0)
    # the same first half-hour: same arrivals and lengths
    n = int(np.sum(quiet.arrival < 300.0))
    assert np.array_equal(quiet.arrival[:n], busy.arrival[:n])
    yq, yb = quality_run.yesterday_sizes(quiet, cfg), quality_run.yesterday_sizes(busy, cfg)
    assert size(yq, "second") == size(yb, "second")
    assert sum(size(yb, "first")) > sum(size(yq, "first"))
    # the row is both half-hours joined: every request of the hour, once
    run, halves = quality_run.yesterday_run(busy, cfg, yb)
    assert len(run.times.arrival) == len(busy) == sum(len(h.times.arrival) for h in halves)
    assert np.allclose(run.times.arrival, busy.arrival)


def size(y: dict[str, Any], half: str) -> tuple[int, int]:
    return y[half]["prefill"], y[half]["decode"]


def summary(name: str, att: float, hours: float) -> Summary:
    return Summary(name, 100, 100, att, 0.2, 1.0, 0.02, 0.03, hours, hours / 2, hours / 2, 4, 0)


def case_with(rows: list[Summary], deadline: list[Summary] | None = None) -> dict[str, Any]:
    seed = {
        "policies": {r.policy: r.to_json(20.0) for r in rows},
        "oracle": {
            "gpu_hours": 20.0,
            "slo_attainment": 0.99,
            "met": True,
            "repairs": 3,
            "tries": [[0.95, 18.2], [0.99, 20.0]],
        },
        "lower_bound": {"gpu_hours": 15.0},
        "work_floor": {"gpu_hours": 10.0},
        "feasibility_ceiling": 1.0,
        "seconds": 1.0,
        "meta": {"seed": 0},
    }
    case: dict[str, Any] = {"group": "code-4x", "trace": "code", "scale": 4.0}
    case |= {"held_out": False, "startup_s": 90.0, "seeds": [seed]}
    if deadline is not None:
        case[DEADLINE] = {"policies": {r.policy: r.to_json(20.0) for r in deadline}}
    case["aggregate"] = quality_verdicts.aggregate([seed])
    return case


def test_the_verdict_counts_the_static_sweep() -> None:
    """code-4x, start-up 90 s, seed 0 of the committed bench before issue 26: no
    policy's row beats pdscaler on both counts, a size the static search replayed
    does."""
    case = case_with([summary("pdscaler", 0.843, 28.26), summary("static-hindsight", 0.99, 47.8)])
    sweep = [{"prefill": 19, "decode": 2, "slo_attainment": 0.8502, "gpu_hours": 20.10}]
    v = quality_verdicts.verdict(case, {"static_sweep": sweep})
    assert not v["pareto"]
    assert v["dominated_by"] == ["static 19P/2D"]
    assert v["cheapest_as_good"] == "static 19P/2D"
    assert quality_verdicts.verdict(case, {"static_sweep": []})["pareto"]
    doc = {"cases": {"c": case}, "tuning": {"code-4x": {"static_sweep": sweep}}}
    row = next(r for r in quality_report.summary_rows(doc, quality.MATRIX))
    assert "no: static 19P/2D" in row
    # x oracle at equal attainment: the cheapest oracle try reaching 84.3% is 18.2
    assert v["oracle_ratio_equal"] == pytest.approx(28.26 / 18.2)


def test_the_verdict_counts_the_deadline_rows_of_every_policy() -> None:
    """Under the deadline queue hpa-tuned reaches 86% for 25 GPU-h: pdscaler's FCFS row
    (84.3% / 28.3) is dominated by it, its deadline row (87% / 26) is not."""
    case = case_with(
        [summary("pdscaler", 0.843, 28.26), summary("hpa-tuned", 0.70, 20.0)],
        deadline=[summary("pdscaler", 0.87, 26.0), summary("hpa-tuned", 0.86, 25.0)],
    )
    v = quality_verdicts.verdict(case, {"static_sweep": []})
    assert v["dominated_by"] == ["hpa-tuned (deadline)"]
    assert v[DEADLINE]["pareto"]
    assert v[DEADLINE]["slo_attainment"] == pytest.approx(0.87)
