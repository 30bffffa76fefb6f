"""The ScalingTick snapshot bench/dynamo_real builds for Dynamo's replay adapter from the
View every policy gets (no Dynamo needed: the planner itself is driven in
test_dynamo_real_planner.py)."""

from __future__ import annotations

import json

import pytest

from bench.dynamo_compare import BEGIN, END, RESULTS, render
from bench.dynamo_real import (
    RealDynamoConfig,
    decode_fpms,
    planner_config,
    prefill_fpms,
    scaling_tick,
    split,
    traffic,
)
from pdscaler.sim.controllers import View
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.setup import sim_spec
from pdscaler.types import MetricsSnapshot, PoolMetrics, PoolObservation


def snapshot(rate: float | None = 10.0, by_pod: dict[str, float] | None = None) -> MetricsSnapshot:
    return MetricsSnapshot(
        time=30.0,
        request_rate=rate,
        prompt_tokens=1155.0,
        output_tokens=211.0,
        prefill=PoolMetrics(queue_depth=5.0, running=3.0, latency_seconds=0.4),
        decode=PoolMetrics(
            queue_depth=1.0, running=70.0, latency_seconds=0.03, running_by_pod=by_pod or {}
        ),
    )


def test_split_spreads_whole_requests_over_the_workers() -> None:
    assert split(5.0, 2) == [3, 2]
    assert split(4.4, 3) == [2, 1, 1]
    assert split(7.0, 0) == []
    assert sum(split(70.0, 4)) == 70


def test_prefill_workers_hold_their_share_with_the_batch_wall_time() -> None:
    """The module docstring's example: 5 waiting + 3 running over 2 Ready workers."""
    params = EngineParams()
    fpms = prefill_fpms(params, snapshot().prefill, 2, 1155.0)
    assert [f["worker_id"] for f in fpms] == ["prefill-0", "prefill-1"]
    first = fpms[0]
    assert (first["num_queued_prefill"], first["sum_queued_prefill_tokens"]) == (3, 3465)
    assert (first["num_prefill_requests"], first["sum_prefill_tokens"]) == (2, 2310)
    assert first["wall_time"] == pytest.approx(0.015 + 2310 / 8500 + 2 * 1155**2 / (8500 * 53400))
    assert first["wall_time"] == pytest.approx(0.2926, abs=1e-4)
    assert (fpms[1]["num_queued_prefill"], fpms[1]["num_prefill_requests"]) == (2, 1)


def test_decode_workers_use_each_pods_sequences_when_there_is_one_per_ready_pod() -> None:
    params = EngineParams()
    ctx = 1155.0 + 211.0 / 2
    pods = decode_fpms(params, snapshot(by_pod={"d-b": 30.0, "d-a": 40.0}).decode, 2, 1155.0, 211.0)
    assert [(f["worker_id"], f["num_decode_requests"]) for f in pods] == [("d-a", 40), ("d-b", 30)]
    assert pods[0]["sum_decode_kv_tokens"] == round(40 * ctx)
    assert pods[0]["wall_time"] == pytest.approx(params.decode_step(40, 40 * ctx))
    # a draining pod in the scrape (3 pods, 2 Ready): the pool's sequences split evenly
    three = {"d-a": 40.0, "d-b": 30.0, "d-c": 1.0}
    even = decode_fpms(params, snapshot(by_pod=three).decode, 2, 1155.0, 211.0)
    assert [f["num_decode_requests"] for f in even] == [35, 35]
    assert [f["num_queued_decode"] for f in even] == [1, 0]


def test_traffic_window_is_the_rate_over_the_time_since_the_last_call() -> None:
    window = traffic(snapshot(), 15.0)
    assert window is not None
    assert window["num_req"] == pytest.approx(150.0)
    assert (window["avg_isl"], window["avg_osl"]) == (1155.0, 211.0)
    assert window["avg_ttft_ms"] == pytest.approx(400.0)
    assert window["avg_kv_hit_rate"] == 0.0
    assert traffic(snapshot(rate=None), 15.0) is None
    assert traffic(snapshot(), 0.0) is None


def test_scaling_tick_counts_ready_and_asked_for_replicas() -> None:
    view = View(30.0, snapshot(), PoolObservation(3, 2), PoolObservation(4, 4))
    tick = scaling_tick(view, EngineParams(), 1, 15.0)
    assert (tick["active_prefill_count"], tick["non_draining_prefill_count"]) == (2, 3)
    assert (tick["active_decode_count"], tick["non_draining_decode_count"]) == (4, 4)
    assert tick["active_prefill_ids"] == ["prefill-0", "prefill-1"]
    assert len(tick["decode_fpm_snapshots"]) == 4
    assert tick["traffic"]["num_req"] == pytest.approx(150.0)
    # nothing scraped yet: counts and ids only, no FPMs and no traffic window
    empty = scaling_tick(
        View(15.0, None, PoolObservation(1, 1), PoolObservation(2, 2)), EngineParams(), 0, 15.0
    )
    assert empty["prefill_fpm_snapshots"] == []
    assert "traffic" not in empty
    assert empty["active_decode_ids"] == ["decode-0", "decode-1"]


def test_planner_config_from_the_spec_and_the_slo_scale() -> None:
    spec = sim_spec(startup_s=90.0)
    cfg = planner_config(spec, RealDynamoConfig(slo_scale=0.5))
    assert (cfg["ttft_ms"], cfg["itl_ms"]) == (1000.0, 25.0)
    assert cfg["load_adjustment_interval_seconds"] == 15
    assert cfg["throughput_adjustment_interval_seconds"] == 60
    assert cfg["max_gpu_budget"] == spec.scaling.max_gpus == 128
    assert cfg["mode"] == "disagg"
    assert cfg["optimization_target"] == "sla"
    # a replay: the planner's wall-clock deadlines (5 s a plugin call, 30 s a tick) off
    assert cfg["plugin_registration"]["transport"]["request_timeout_seconds"] == 3600.0
    assert cfg["scheduling"]["tick_max_duration_seconds"] == 3600.0
    arima = planner_config(spec, RealDynamoConfig(extra={"load_predictor": "arima"}))
    assert arima["load_predictor"] == "arima"


def test_the_results_note_shows_the_results_file() -> None:
    """bench/results/dynamo-planner.md's table is rendered from dynamo-planner.json."""
    doc = json.loads((RESULTS / "dynamo-planner.json").read_text())
    md = (RESULTS / "dynamo-planner.md").read_text()
    assert f"{BEGIN}\n{render(doc)}\n{END}" in md
    rows = doc["cases"]["conv-4x"]["rows"]
    assert {"re-implementation", "Dynamo 1.6.1"} <= set(rows)
    assert rows["Dynamo 1.6.1"]["planner_ticks"] > 200  # an hour at 15 s
