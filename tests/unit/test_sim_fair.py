"""Fair baselines and the SLO-feasible oracle (issue 11): the Dynamo-style planner's
worked example, the tuned HPA grid and how "best" is picked, the oracle's repair and
the feasibility ceiling, the length-aware TTFT SLO, the seeded jitter and the
long-context variant, and the oracle's replay meeting its target on a small trace."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from pdscaler.sim.baselines import HpaConfig, HpaQueueController, hpa_grid
from pdscaler.sim.compare import Tuned, compare, feasible_oracle
from pdscaler.sim.controllers import View
from pdscaler.sim.dynamo import (
    DynamoConfig,
    DynamoPlannerController,
    decode_target_tokens,
    prefill_profile_tps,
    prefill_target_tokens,
)
from pdscaler.sim.engine import EngineParams, RequestTimes
from pdscaler.sim.loop import LoopConfig
from pdscaler.sim.oracle import Schedule, _worst, feasibility_ceiling, fine_bin, repair
from pdscaler.sim.results import met_slo, ttft_limits
from pdscaler.sim.scenarios import Segment, jitter, long_context, synthetic
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import Trace
from pdscaler.sim.tuning import pick
from pdscaler.types import PoolMetrics, PoolObservation
from support.builders import snapshot, spaced_trace

SPEC = sim_spec(startup_s=60.0)
PARAMS = EngineParams()


def view(now: float, rate: float, prompt: float, output: float) -> View:
    return View(
        now,
        snapshot(rate, prompt, output, prefill_queue=0.0, decode_queue=0.0, time=now),
        PoolObservation(1, 1),
        PoolObservation(1, 1),
    )


def test_dynamo_throughput_mode_worked_example_and_interval() -> None:
    # 10 req/s of 1,155 + 211 tokens: prefill 11,550 / 7,509 -> 2; decode 2,110 / ~1,730 -> 2
    ctrl = DynamoPlannerController(SPEC, PARAMS, DynamoConfig(load_based=False))
    assert ctrl.name == "dynamo-throughput"
    t = ctrl.tick(view(15.0, 10.0, 1155.0, 211.0))
    assert t is not None
    assert (t.prefill, t.decode) == (2, 2)
    # inside its 60 s interval it keeps the last floor, whatever the load says
    again = ctrl.tick(view(30.0, 40.0, 1155.0, 211.0))
    assert again is not None
    assert (again.prefill, again.decode) == (2, 2)
    later = ctrl.tick(view(75.0, 40.0, 1155.0, 211.0))
    assert later is not None
    # profiled one request at a time: 40 * 1,155 / 7,509 = 6.15 -> 7 (batched: 5.64 -> 6)
    assert prefill_profile_tps(PARAMS, 1155.0) == pytest.approx(7508.7, abs=0.1)
    assert later.prefill == 7


def test_dynamo_load_based_targets_reverse_solve_the_engine_line() -> None:
    # the engine's line at 1,155-token prompts: full batches plus each prompt's attention
    per_token = 1.0 / PARAMS.prefill_batch_tps() + 1155.0 / (8500.0 * 53_400.0)
    assert prefill_target_tokens(PARAMS, 2.0, 1155.0) == pytest.approx(
        (2.0 - 0.015) / per_token - 1155.0
    )
    assert prefill_target_tokens(PARAMS, 2.0, 1155.0) == pytest.approx(15112, abs=1)
    assert prefill_target_tokens(PARAMS, 0.5, 5000.0) is None  # an idle worker cannot
    assert decode_target_tokens(PARAMS, 0.05, 1155.0, 211.0) == pytest.approx(115385, abs=1)


def loaded(
    now: float, queue: float, running: float, prefill: int, by_pod: dict[str, float]
) -> View:
    snap = snapshot(10.0, 1155.0, 211.0, prefill_queue=queue, running=running, time=now)
    decode = PoolMetrics(queue_depth=0.0, running=running, running_by_pod=by_pod)
    return View(
        now,
        dataclasses.replace(snap, decode=decode),
        PoolObservation(prefill, prefill),
        PoolObservation(2, 2),
    )


def test_dynamo_load_based_steps_above_the_throughput_floor() -> None:
    """The floor is 2 + 2 (10 req/s). Prefill: 15 waiting + 15 running on 2 Ready
    replicas hold 17,325 tokens each > 15,112: one more (3). Decode: both pods above
    115,385 KV tokens (100 sequences * 1,260.5): one more; one pod below: no step."""
    ctrl = DynamoPlannerController(SPEC, PARAMS)
    assert ctrl.name == "dynamo-planner"
    hot = ctrl.tick(loaded(15.0, 15.0, 15.0, 2, {"d-0": 100.0, "d-1": 100.0}))
    assert hot is not None
    assert (hot.prefill, hot.decode) == (3, 3)
    mixed = ctrl.tick(loaded(30.0, 15.0, 15.0, 3, {"d-0": 100.0, "d-1": 10.0}))
    assert mixed is not None
    assert (mixed.prefill, mixed.decode) == (3, 2)  # 11,550 per worker: no step; floor 2
    # quiet: 4 replicas holding 1 request each (1,155 < 15,112 * 3/4 * 0.8): one fewer,
    # never below the floor
    quiet = ctrl.tick(loaded(45.0, 0.0, 4.0, 4, {"d-0": 1.0, "d-1": 1.0}))
    assert quiet is not None
    assert quiet.prefill == 3
    floor = ctrl.tick(loaded(60.0, 0.0, 2.0, 2, {"d-0": 1.0, "d-1": 1.0}))
    assert floor is not None
    assert (floor.prefill, floor.decode) == (2, 2)


def test_hpa_grid_has_three_targets_two_maxima_and_a_quiet_min() -> None:
    arrival = np.arange(0.0, 600.0, 0.1)  # 10 req/s of 1,000 + 200 tokens
    n = len(arrival)
    trace = Trace(
        "t", arrival, np.full(n, 1000, dtype=np.int64), np.full(n, 200, dtype=np.int64), 600.0
    )
    grid = hpa_grid(trace, SPEC)
    assert [c.target for c in grid] == [2.0, 2.0, 5.0, 5.0, 10.0, 10.0]
    # prefill load 10,000 tok/s / 7,000 -> 2 (quiet = peak here); max ceil(1.2*2), ceil(1.5*2)
    assert {c.prefill for c in grid} == {(2, 3)}
    # a configured HPA starts at its min
    hpa = HpaQueueController(SPEC, config=grid[0], name="hpa-tuned")
    assert hpa.initial == (grid[0].prefill[0], grid[0].decode[0])
    assert hpa.name == "hpa-tuned"


def test_hpa_grid_replays_each_configuration_once() -> None:
    arrival = np.arange(0.0, 600.0, 1.0)  # 1 req/s: both pools' peaks are 1 replica
    n = len(arrival)
    trace = Trace(
        "t", arrival, np.full(n, 1000, dtype=np.int64), np.full(n, 200, dtype=np.int64), 600.0
    )
    grid = hpa_grid(trace, SPEC)
    # max ceil(1.2 x 1) = ceil(1.5 x 1) = 2 in both pools: one configuration per target
    assert [c.target for c in grid] == [2.0, 5.0, 10.0]
    assert {(c.prefill[1], c.decode[1]) for c in grid} == {(2, 2)}


def test_pick_is_the_cheapest_meeting_the_target_else_the_highest() -> None:
    a, b, c = (HpaConfig(t, (1, 4), (1, 4)) for t in (2.0, 5.0, 10.0))
    chosen = pick([(a, 0.995, 9.0), (b, 0.991, 7.0), (c, 0.98, 5.0)], 0.99)
    assert chosen.config is b
    assert chosen.met
    fallback = pick([(a, 0.95, 9.0), (b, 0.97, 7.0), (c, 0.97, 8.0)], 0.99)
    assert fallback.config is b
    assert not fallback.met


def times(arrival: list[float], prefill_end: list[float], first: list[float]) -> RequestTimes:
    a = np.array(arrival)
    n = len(a)
    pe, ft = np.array(prefill_end), np.array(first)
    return RequestTimes(
        a,
        np.full(n, 1000, dtype=np.int64),
        np.full(n, 10, dtype=np.int64),
        a,
        pe,
        pe,
        ft,
        ft + 0.02 * 9,
    )


def test_repair_adds_capacity_only_where_the_misses_are() -> None:
    sched = Schedule(
        np.arange(5, dtype=np.float64) * 2.0,
        np.full(5, 3, dtype=np.int64),
        np.full(5, 2, dtype=np.int64),
        2.0,
    )
    # bin 3 (t 6-8 s): two requests, one misses TTFT in its prefill (3 s queue + prefill)
    t = times([6.5, 7.0, 1.0], [9.5, 7.5, 1.5], [9.6, 7.6, 1.6])
    limits = ttft_limits(t.prompt, 2.0)
    new, misses = repair(sched, t, ttft_limit=limits, tpot_s=0.05)
    assert misses == 1
    # bin 3 and the one before: 3 + ceil(3 * 1 / 2) = 5; elsewhere unchanged
    assert new.prefill.tolist() == [3, 3, 5, 5, 3]
    assert new.decode.tolist() == [2, 2, 2, 2, 2]
    gentle, _ = repair(sched, t, ttft_limit=limits, tpot_s=0.05, fix=1.0)
    assert gentle.prefill.tolist() == [3, 3, 4, 4, 3]


def test_repair_leaves_requests_no_replica_can_serve_alone() -> None:
    """A request rejected as unservable (its context fits no decode replica) misses
    whatever the schedule: repair charges it to no pool and adds nothing for it."""
    sched = Schedule(
        np.arange(3, dtype=np.float64) * 2.0,
        np.full(3, 2, dtype=np.int64),
        np.full(3, 2, dtype=np.int64),
        2.0,
    )
    nan = math.nan
    t = dataclasses.replace(
        times([1.0, 3.0], [1.5, nan], [1.6, nan]), rejected=np.array([False, True])
    )
    t = dataclasses.replace(t, finish=np.array([1.6 + 0.18, 3.0]))
    with np.errstate(all="raise"):
        new, misses = repair(sched, t, ttft_limit=ttft_limits(t.prompt, 2.0), tpot_s=0.05)
    assert misses == 0
    assert new.prefill.tolist() == [2, 2, 2]
    assert new.decode.tolist() == [2, 2, 2]


def test_worst_bins_until_they_hold_the_misses() -> None:
    assert _worst(np.array([0.0, 5.0, 1.0, 3.0]), 7.0).tolist() == [0, 1, 0, 1]


def test_feasibility_ceiling_and_length_aware_ttft() -> None:
    # 1,000 tokens fit; 20,000 tokens: 3 chunks, 45 + 2,353 + 881 (attention) + 405 ms
    # = 3.7 s > 2 s
    trace = spaced_trace([1000, 20_000])
    assert feasibility_ceiling(trace, PARAMS, ttft_s=2.0, tpot_s=0.05) == 0.5
    # 2 s + 0.1 ms/token: 4 s for the long one (3.7 s fits)
    both = feasibility_ceiling(trace, PARAMS, ttft_s=2.0, tpot_s=0.05, ttft_per_token_s=1e-4)
    assert both == 1.0
    assert ttft_limits(np.array([1000, 16000]), 2.0, 1e-4).tolist() == [2.1, 3.6]
    t = times([0.0, 0.0], [2.05, 2.05], [2.05, 2.05])
    assert met_slo(t, 2.0, 0.05).tolist() == [False, False]
    assert met_slo(t, 2.0, 0.05, 1e-4).tolist() == [True, True]  # 2.1 s each
    assert fine_bin(2.0, 15.0) == 2.0


def test_jitter_is_seeded_and_keeps_the_load() -> None:
    trace = synthetic("s", [Segment(120.0, 10.0, 1000.0, 100.0)], seed=3)
    assert jitter(trace, 0) is trace
    a, b = jitter(trace, 1), jitter(trace, 1)
    assert np.array_equal(a.arrival, b.arrival)
    assert not np.array_equal(a.arrival, trace.arrival)
    assert len(a) == len(trace)
    assert a.span == trace.span
    assert np.all(np.diff(a.arrival) >= 0)
    assert np.max(np.abs(np.sort(a.arrival) - np.sort(trace.arrival))) < 10.0
    assert sorted(a.prompt.tolist()) == sorted(trace.prompt.tolist())


def test_long_context_maps_prompts_onto_8k_16k_by_rank() -> None:
    trace = spaced_trace([500, 100, 3000], output=1)
    long = long_context(trace)
    assert long.prompt.tolist() == [12288, 8192, 16384]
    assert np.array_equal(long.output, trace.output)


def test_the_oracle_replay_meets_its_target_and_costs_at_least_the_bound() -> None:
    trace = synthetic(
        "steps", [Segment(240.0, 4.0, 1500.0, 150.0), Segment(240.0, 12.0, 1500.0, 150.0)], 1
    )
    cfg = LoopConfig(spec=sim_spec(startup_s=30.0), startup_s=30.0)
    f = feasible_oracle(trace, cfg, 0.99)
    assert f.met
    assert f.attainment >= 0.99
    comp = compare(trace, ("pdscaler", "static-best"), cfg, tuned=Tuned())
    doc = comp.to_json()
    assert doc["oracle"]["gpu_hours"] >= doc["lower_bound"]["gpu_hours"]
    assert doc["oracle"]["slo_attainment"] >= 0.99
    assert doc["static_best"][0]["target"] == 0.99
    assert doc["policies"]["static-best"]["ratio_to_oracle"] > 0
