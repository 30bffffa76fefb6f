"""The oracle bound (integer replicas per bin, ordered a start-up ahead, kept through
short gaps) and the work-conserving floor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdscaler.sim.engine import EngineParams
from pdscaler.sim.oracle import level_seconds, lower_bound, schedule, work_floor
from pdscaler.sim.traces import Trace, load_trace, scale_rate

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def test_level_seconds_keeps_replicas_through_short_gaps() -> None:
    levels = np.array([1, 1, 0, 1])
    assert level_seconds(levels, 30.0, 60.0) == pytest.approx(120.0)  # gap < T_s: kept
    assert level_seconds(levels, 30.0, 10.0) == pytest.approx(100.0)  # [0,60) + [80,120)
    assert level_seconds(np.array([0, 0, 2, 2]), 30.0, 45.0) == pytest.approx(2 * 105.0)
    assert level_seconds(np.array([2, 1, 2]), 10.0, 0.0) == pytest.approx(50.0)
    assert level_seconds(np.array([], dtype=np.int64), 10.0, 5.0) == 0.0


def constant_trace(rate: float, seconds: float, prompt: int, output: int) -> Trace:
    n = int(rate * seconds)
    arrival = np.arange(n) / rate
    return Trace("c", arrival, np.full(n, prompt), np.full(n, output), seconds)


def test_schedule_covers_each_bin_with_true_capacity() -> None:
    params = EngineParams()
    # 10 req/s x 1600 tokens: 16,000 tok/s / 8,370 + 10 x 1,600^2 / (8,500 x 53,400) of
    # attention = 1.91 + 0.06 = 1.97 -> 2 prefill replicas
    trace = constant_trace(10.0, 600.0, 1600, 20)
    sched = schedule(trace, params, tpot_s=0.05, bin_s=15.0)
    full = slice(1, 39)  # whole bins inside the trace
    assert np.all(sched.prefill[full] == 2)
    assert np.all(sched.decode[full] == 1)  # 200 tok/s, far below one replica
    assert sched.prefill[-1] == 1  # minimum kept after the trace


def test_oracle_bills_levels_with_the_startup_lead() -> None:
    params = EngineParams()
    trace = constant_trace(10.0, 600.0, 1600, 20)
    bound = lower_bound(trace, params, startup_s=60.0, tpot_s=0.05, bin_s=15.0)
    horizon = len(bound.schedule.times) * 15.0
    # prefill: 2 replicas over the trace (present at t=0, no lead), 1 in the tail
    expected_p = (horizon + 600.0) / 3600.0
    assert bound.prefill_gpu_hours == pytest.approx(expected_p, rel=0.03)
    assert bound.gpu_hours == pytest.approx(bound.prefill_gpu_hours + bound.decode_gpu_hours)


def test_work_floor_is_the_tokens_at_true_capacity() -> None:
    params = EngineParams()
    trace = constant_trace(10.0, 360.0, 1600, 20)
    cap_d = params.decode_tps(1600.0, 20.0, 0.05)
    attention = 3600 * 1600**2 / (8500 * 53_400)  # 20.3 s of the prompts' attention
    expected = (3600 * 1600 / params.prefill_batch_tps() + attention + 3600 * 20 / cap_d) / 3600
    assert work_floor(trace, params, tpot_s=0.05) == pytest.approx(expected)
    assert params.prefill_batch_tps() == pytest.approx(8192 / (0.015 + 8192 / 8500))


@pytest.mark.parametrize("name", ["conv", "code"])
def test_floor_below_oracle_below_static_peak_on_the_real_traces(name: str) -> None:
    trace = scale_rate(load_trace(TRACES / f"AzureLLMInferenceTrace_{name}.csv"), 5.0)
    params = EngineParams()
    bound = lower_bound(trace, params, startup_s=90.0, tpot_s=0.05)
    floor = work_floor(trace, params, tpot_s=0.05)
    peak_p, peak_d = int(bound.schedule.prefill.max()), int(bound.schedule.decode.max())
    peak_hours = (peak_p + peak_d) * len(bound.schedule.times) * 15.0 / 3600.0
    assert floor < bound.gpu_hours < peak_hours
    # a longer start-up can only cost the oracle more (earlier orders, fewer gaps)
    slower = lower_bound(trace, params, startup_s=300.0, tpot_s=0.05)
    assert slower.gpu_hours >= bound.gpu_hours


def test_derate_plans_head_room() -> None:
    params = EngineParams()
    trace = constant_trace(10.0, 600.0, 1600, 20)
    # half the capacity: (1.91 + 0.06) / 0.5 = 3.94 -> 4 replicas instead of 2
    sched = schedule(trace, params, tpot_s=0.05, bin_s=15.0, derate=0.5)
    assert np.all(sched.prefill[1:39] == 4)
    with pytest.raises(ValueError, match="derate"):
        schedule(trace, params, tpot_s=0.05, derate=0.0)
