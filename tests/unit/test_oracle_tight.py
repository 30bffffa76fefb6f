"""The tight SLO-feasible oracle (issue 26, item 5): repaired one replica a bin at a
time, with its repair path recorded, no more expensive than the coarse repair (which
overshoots) and still meeting the target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdscaler.sim.compare import (
    ORACLE_COARSE,
    ORACLE_ONE,
    ORACLE_ONE_ITERATIONS,
    ORACLE_STALL,
    FeasibleOracle,
    feasible_oracle,
)
from pdscaler.sim.engine import EngineParams, RequestTimes
from pdscaler.sim.loop import LoopConfig
from pdscaler.sim.oracle import Schedule, _runs, repair, repair_path
from pdscaler.sim.profiles import with_measured_profile
from pdscaler.sim.results import ttft_limits
from pdscaler.sim.scenarios import Segment, jitter, synthetic
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import load_trace, scale_rate

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def one_miss() -> tuple[Schedule, RequestTimes]:
    """Five 2 s bins of 3P/2D; in bin 3 (6-8 s) one of two requests misses its TTFT
    after 3 s queued for and in prefill."""
    sched = Schedule(
        np.arange(5, dtype=np.float64) * 2.0,
        np.full(5, 3, dtype=np.int64),
        np.full(5, 2, dtype=np.int64),
        2.0,
    )
    a = np.array([6.5, 7.0, 1.0])
    pe = np.array([9.5, 7.5, 1.5])
    ft = pe + 0.1
    n = len(a)
    t = RequestTimes(
        a,
        np.full(n, 1000, dtype=np.int64),
        np.full(n, 10, dtype=np.int64),
        a,
        pe,
        pe,
        ft,
        ft + 0.02 * 9,
    )
    return sched, t


def test_one_replica_at_a_time_and_the_path_says_where_and_why() -> None:
    sched, t = one_miss()
    limits = ttft_limits(t.prompt, 2.0)
    tight, step = repair_path(sched, t, ttft_limit=limits, tpot_s=0.05, one=True)
    # the miss's bin and the one before it: +1 (the coarse repair adds ceil(3 / 2) = 2)
    assert tight.prefill.tolist() == [3, 3, 4, 4, 3]
    assert tight.decode.tolist() == [2, 2, 2, 2, 2]
    assert (step.misses, step.prefill_misses, step.decode_misses) == (1, 1, 0)
    assert step.prefill_added == ((4.0, 8.0, 1),)
    assert step.decode_added == ()
    doc = step.to_json()
    assert doc["prefill"]["why"] == "TTFT misses queued for or in prefill"
    assert doc["prefill"]["added"] == [[4.0, 8.0, 1]]
    # after a repair the replay did not see, the step doubles
    doubled, _ = repair_path(sched, t, ttft_limit=limits, tpot_s=0.05, one=True, by=2)
    assert doubled.prefill.tolist() == [3, 3, 5, 5, 3]
    coarse, c_step = repair_path(sched, t, ttft_limit=limits, tpot_s=0.05)
    assert coarse.prefill.tolist() == [3, 3, 5, 5, 3]
    assert c_step.prefill_added == ((4.0, 8.0, 2),)
    # repair() is the coarse repair, as before
    old, misses = repair(sched, t, ttft_limit=limits, tpot_s=0.05)
    assert misses == 1
    assert old.prefill.tolist() == coarse.prefill.tolist()


def test_runs_of_added_replicas() -> None:
    assert _runs(np.array([0, 1, 1, 0, 2]), 2.0) == ((2.0, 6.0, 1), (8.0, 10.0, 2))
    assert _runs(np.array([3, 3]), 1.0) == ((0.0, 2.0, 3),)
    assert _runs(np.zeros(4, dtype=np.int64), 2.0) == ()


@pytest.fixture(scope="module")
def conv_4x() -> tuple[FeasibleOracle, FeasibleOracle]:
    """The bench's conversation case at 4x, its first 5 minutes, seed 0, start-up 90 s:
    (tight, coarse)."""
    trace = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv").window(0.0, 300.0)
    trace = jitter(scale_rate(trace, 4.0, seed=0), 0)
    spec = with_measured_profile(sim_spec(startup_s=90.0), EngineParams())
    cfg = LoopConfig(spec=spec, startup_s=90.0)
    return feasible_oracle(trace, cfg), feasible_oracle(trace, cfg, step=ORACLE_COARSE)


def test_the_tight_oracle_meets_the_target_for_less_than_the_coarse_one(
    conv_4x: tuple[FeasibleOracle, FeasibleOracle],
) -> None:
    tight, coarse = conv_4x
    assert tight.step == ORACLE_ONE
    assert tight.met
    assert tight.attainment >= 0.99
    assert coarse.met
    # the coarse repair overshoots (measured: 100% for 0.94 GPU-h against 99.33% for
    # 0.77): the tight one is cheaper
    assert tight.gpu_hours < coarse.gpu_hours
    # every repair added one replica where it added any
    assert tight.path
    for step in tight.path:
        assert all(n == 1 for *_, n in step.prefill_added + step.decode_added)
        assert step.misses > 0
    assert len(tight.path) == len(tight.tries) - 1
    assert any(n > 1 for s in coarse.path for *_, n in s.prefill_added + s.decode_added)
    doc = tight.to_json()
    assert doc["step"] == ORACLE_ONE
    assert len(doc["path"]) == doc["repairs"]


def test_the_oracle_at_a_policys_own_attainment(
    conv_4x: tuple[FeasibleOracle, FeasibleOracle],
) -> None:
    tight, _ = conv_4x
    first = tight.tries[0]
    assert tight.gpu_hours_at(0.0) == min(h for _, h in tight.tries)
    assert tight.gpu_hours_at(first[0]) == min(h for a, h in tight.tries if a >= first[0])
    assert tight.gpu_hours_at(tight.attainment) == pytest.approx(tight.gpu_hours)
    assert tight.gpu_hours_at(1.0 + 1e-9) is None


def test_the_tight_oracle_stops_when_repairs_stop_helping() -> None:
    # 4,000-token bursts at 40 req/s: some misses no replica removes (98.29% from the
    # 11th repair on, measured)
    segs = [
        Segment(60.0, 8.0, 2000.0, 200.0),
        Segment(20.0, 40.0, 4000.0, 200.0),
        Segment(60.0, 8.0, 2000.0, 200.0),
        Segment(20.0, 40.0, 4000.0, 200.0),
        Segment(60.0, 8.0, 2000.0, 200.0),
    ]
    trace = synthetic("bursts", segs, 1)
    f = feasible_oracle(trace, LoopConfig(spec=sim_spec(startup_s=30.0), startup_s=30.0))
    assert not f.met
    assert len(f.tries) < ORACLE_ONE_ITERATIONS + 1
    assert len(f.tries) > ORACLE_STALL
    # the result is the try with the highest attainment, the cheapest of those
    best = max(a for a, _ in f.tries)
    assert f.attainment == best
    assert f.gpu_hours == min(h for a, h in f.tries if a == best)
