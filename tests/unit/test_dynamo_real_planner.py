"""NVIDIA Dynamo's planner (ai-dynamo 1.6.1, its replay adapter, in the venv
bench/install-dynamo.sh makes) driven by bench/dynamo_real for a few ticks: its
decisions are what its own formulas give on our engine.

Throughput-based (dynamo/planner/core/throughput_scaling.py ``_compute_*_replicas``
over engine_query.py ``_find_prefill_capacity`` / ``_find_decode_capacity``): replicas =
ceil(predicted requests / interval / per-engine RPS), where the prefill engine's RPS is
the best of b / prefill_time(b x ISL) over batches b <= max_num_batched_tokens // ISL
meeting the TTFT target, and decode's the best of b / (OSL x ITL(b)) over b <=
min(max_num_seqs, max_kv // (ISL + OSL // 2)) meeting the ITL target. On a linear engine
(attention off) the planner's regression of its profile is exact, so the formulas can be
evaluated here from ``EngineParams``: ISL 1,000, OSL 200, 18 req/s: prefill 8 / (0.015 +
8,000 / 8,500) = 8.367 RPS -> ceil(2.15) = 3; decode b = 90 (100,000 // 1,100), ITL 12 +
9 + 24.75 = 45.75 ms, 90 / (200 x 0.04575) = 9.836 RPS -> ceil(1.83) = 2.

Load-based (load_scaling.py ``_scale_decision``): +1 when every worker's estimated TTFT
is above the target.

Under CI the venv must be there (``.ci/run`` runs bench/install-dynamo.sh): a missing
venv skips these locally and fails them in CI.
"""

from __future__ import annotations

import math
import time

import pytest

from bench.dynamo_real import RealDynamoConfig, RealDynamoController, available
from pdscaler.sim.controllers import Target, View
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.setup import sim_spec
from pdscaler.types import MetricsSnapshot, PoolMetrics, PoolObservation
from support.skips import skip_unless_ci

LINEAR = EngineParams(prefill_attention_tokens=math.inf)
ISL, OSL, RATE = 1000.0, 200.0, 18.0


@pytest.fixture(autouse=True)
def _needs_the_venv() -> None:
    if not available():
        skip_unless_ci("Dynamo's planner venv missing: run bench/install-dynamo.sh")


def view(now: float, p: int = 1, d: int = 1, queue: float = 0.0) -> View:
    m = MetricsSnapshot(
        time=now,
        request_rate=RATE,
        prompt_tokens=ISL,
        output_tokens=OSL,
        prefill=PoolMetrics(queue_depth=queue, running=0.0, latency_seconds=0.5),
        decode=PoolMetrics(queue_depth=0.0, running=10.0 * d, latency_seconds=0.03),
    )
    return View(now, m, PoolObservation(p, p), PoolObservation(d, d))


def prefill_rps(params: EngineParams, isl: float, ttft_s: float) -> float:
    """engine_query._find_prefill_capacity on the exact profile (no chunking below the
    token budget)."""
    best = 0.0
    for b in range(1, int(params.prefill_token_budget // isl) + 1):
        t = params.prefill_seconds(b * isl, 0.0)
        if t <= ttft_s:
            best = max(best, b / t)
    return best


def decode_rps(params: EngineParams, isl: float, osl: float, itl_s: float) -> float:
    """engine_query._find_decode_capacity (every batch size when there are <= 128)."""
    ctx = int(isl) + int(osl) // 2
    top = min(params.decode_max_seqs, params.decode_kv_tokens // ctx)
    assert top <= 128
    best = 0.0
    for b in range(1, top + 1):
        itl = params.decode_step(b, b * ctx)
        if itl <= itl_s:
            best = max(best, b / (osl * itl))
    return best


def test_throughput_scaling_is_the_planners_formula() -> None:
    ctrl = RealDynamoController(
        sim_spec(startup_s=90.0), LINEAR, RealDynamoConfig(load_based=False)
    )
    try:
        answers = [ctrl.tick(view(t)) for t in (15.0, 20.0, 30.0, 45.0)]
        assert answers == [None, None, None, None]  # load ticks only: nothing to scale on
        assert ctrl.calls == 3  # 20 s is before the planner's next tick (30 s): not called
        assert ctrl.bootstrap["status"] == "installed"
        assert ctrl.bootstrap["prefill_fpm_count"] > 0
        assert ctrl.bootstrap["decode_fpm_count"] > 0
        target = ctrl.tick(view(60.0))  # the first throughput tick (interval 60 s)
        diag = ctrl.last_answer["diag"]
    finally:
        ctrl.close()
    assert diag["predicted_num_req"] == pytest.approx(RATE * 60.0)
    p_rps, d_rps = prefill_rps(LINEAR, ISL, 2.0), decode_rps(LINEAR, ISL, OSL, 0.05)
    assert p_rps == pytest.approx(8 / (0.015 + 8000 / 8500))
    assert d_rps == pytest.approx(90 / (200 * 0.04575))
    assert diag["engine_rps_prefill"] == pytest.approx(p_rps, rel=1e-6)
    assert diag["engine_rps_decode"] == pytest.approx(d_rps, rel=1e-6)
    want = (math.ceil(RATE / p_rps), math.ceil(RATE / d_rps))
    assert want == (3, 2)
    assert target is not None
    assert (target.prefill, target.decode) == want


def test_load_scaling_adds_a_prefill_replica_when_every_worker_is_late() -> None:
    """And the replay rate of the real planner alone (load-based ticks, subprocess round
    trips included): well above the loop's needs (240 ticks an hour at 15 s)."""
    ctrl = RealDynamoController(sim_spec(startup_s=90.0), LINEAR, RealDynamoConfig())
    try:
        target = ctrl.tick(view(15.0, p=2, d=2, queue=400.0))  # 200 x 1,000 tokens each
        diag = ctrl.last_answer["diag"]
        t0 = time.perf_counter()
        for k in range(2, 42):
            ctrl.tick(view(15.0 * k, p=3, d=1))
        rate = 40 / (time.perf_counter() - t0)
    finally:
        ctrl.close()
    # 200,000 queued tokens drain in ~24 full batches of 8,192 (0.979 s each)
    assert diag["estimated_ttft_ms"] > 20_000
    assert isinstance(target, Target)
    assert target.prefill == 3
    assert rate > 20
