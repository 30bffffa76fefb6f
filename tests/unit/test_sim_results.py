"""Results: SLO attainment counts unfinished requests as misses, percentiles treat them
as infinitely late, reversals are flapping within 10 minutes, the Pareto front, and the
JSON document's shape."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pdscaler.sim.engine import RequestTimes
from pdscaler.sim.loop import Action
from pdscaler.sim.results import (
    SETTLED_AFTER_S,
    Summary,
    met_slo,
    pareto_front,
    percentile,
    result_json,
    reversals,
    settled_attainment,
)
from pdscaler.types import Role

NAN = math.nan


def times(ttft: list[float], tpot: list[float], output: int = 11) -> RequestTimes:
    """Requests arriving at 0 with the given TTFT and TPOT (NaN: never)."""
    n = len(ttft)
    first = np.array(ttft)
    finish = first + np.array(tpot) * (output - 1)
    zeros = np.zeros(n)
    return RequestTimes(
        arrival=zeros,
        prompt=np.full(n, 100),
        output=np.full(n, output),
        prefill_start=zeros,
        prefill_end=zeros,
        decode_admit=zeros,
        first_token=first,
        finish=finish,
    )


def test_slo_needs_both_targets_and_a_finish() -> None:
    t = times([1.0, 2.0, 3.0, 1.0, NAN], [0.04, 0.05, 0.01, 0.06, NAN])
    assert met_slo(t, 2.0, 0.05).tolist() == [True, True, False, False, False]


def test_percentiles_count_unfinished_as_infinite() -> None:
    assert percentile(np.array([1.0, 2.0, 3.0, NAN]), 50) == pytest.approx(2.5)
    assert percentile(np.array([1.0, 2.0, 3.0, NAN]), 99) == math.inf
    assert math.isnan(percentile(np.array([]), 50))


def test_reversals_are_direction_changes_within_ten_minutes() -> None:
    acts = [
        Action(0.0, Role.PREFILL, 2, 4),
        Action(300.0, Role.PREFILL, 4, 3),  # reversal
        Action(900.0, Role.PREFILL, 3, 2),  # same direction
        Action(950.0, Role.DECODE, 1, 2),  # other pool: first action
        Action(2000.0, Role.DECODE, 2, 1),  # too late to count
    ]
    assert reversals(acts) == 1


def summary(name: str, att: float, hours: float, p99: float = 1.0) -> Summary:
    return Summary(name, 10, 10, att, 0.1, p99, 0.01, 0.02, hours, hours / 2, hours / 2, 3, 1)


def test_pareto_front() -> None:
    rows = [
        summary("a", 0.99, 10.0),
        summary("b", 0.95, 8.0),
        summary("c", 0.95, 9.0),  # dominated by b
        summary("d", 0.99, 10.0),  # ties with a: neither dominates
        summary("e", 0.999, 30.0),
    ]
    assert pareto_front(rows) == {"a", "b", "d", "e"}


def test_result_json_shape() -> None:
    doc = result_json(
        [summary("pdscaler", 0.995, 11.0, p99=math.inf)],
        oracle_gpu_hours=10.0,
        work_floor_gpu_hours=6.0,
        meta={"trace": "t"},
    )
    text = json.dumps(doc)  # strictly serialisable: no NaN/inf
    assert "Infinity" not in text
    pd = doc["policies"]["pdscaler"]
    assert pd["slo_attainment"] == 0.995
    assert pd["ttft_p99_s"] is None
    assert pd["ratio_to_oracle"] == pytest.approx(1.1)
    for key in ("tpot_p99_s", "gpu_hours", "scale_actions", "reversals"):
        assert key in pd
    assert doc["oracle"] == {"gpu_hours": 10.0}
    assert doc["work_floor"] == {"gpu_hours": 6.0}
    assert doc["pareto_front"] == ["pdscaler"]
    assert pd["slo_attainment_settled"] is None  # NaN (not measured here) -> null


def test_settled_attainment_counts_only_requests_after_the_start() -> None:
    """Arrivals 10, 200, 400, 500 s with ok F, F, T, F: 0.25 overall, 0.5 settled
    (the two from 300 s on); nobody after 300 s -> NaN."""
    arrival = np.array([10.0, 200.0, 400.0, 500.0])
    ok = np.array([False, False, True, False])
    assert SETTLED_AFTER_S == 300.0
    assert settled_attainment(arrival, ok) == 0.5
    assert math.isnan(settled_attainment(arrival[:2], ok[:2]))
