"""The serving model against closed forms: Pollaczek-Khinchine waits of single-replica
M/D/1 and M/G/1 cases, the drain example of docs/models.md §3, exact GPU-second accounting,
KV admission, start-up, losing a pod, and determinism for a seed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pdscaler.models import drain_time
from pdscaler.sim.engine import Engine, EngineParams, State
from pdscaler.types import Role

#: A prefill that is effectively instantaneous, and a hand-off that costs nothing: used
#: to isolate the decode queue.
INSTANT_PREFILL: dict[str, Any] = {"prefill_tps": 1e12, "prefill_overhead_s": 0.0}
NO_HANDOFF: dict[str, Any] = {"kv_handoff_base_s": 0.0, "kv_handoff_s_per_token": 0.0}
#: A decode pool that never queues anything (to isolate the prefill queue).
ROOMY_DECODE: dict[str, Any] = {"decode_max_seqs": 100_000, "decode_kv_tokens": 10**12}
#: Prefill linear in tokens (no attention term), for the closed forms of fixed services.
LINEAR_PREFILL: dict[str, Any] = {"prefill_attention_tokens": math.inf}


def poisson(rate: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate, n))


def pk_wait(rate: float, mean_s: float, second_moment: float) -> float:
    """Pollaczek-Khinchine mean wait in queue of an M/G/1: lambda E[S^2] / (2 (1 - rho))."""
    rho = rate * mean_s
    return rate * second_moment / (2.0 * (1.0 - rho))


def run_all(engine: Engine) -> None:
    engine.run_until(math.inf)
    assert not engine.pending()


def test_prefill_md1_wait_matches_pollaczek_khinchine() -> None:
    # One prefill replica, batch budget = one prompt: deterministic S = 1000/10000 = 0.1 s.
    # lambda = 7/s -> rho 0.7, W = 7 * 0.01 / 0.6 = 0.1167 s.
    rate, n = 7.0, 40_000
    arrival = poisson(rate, n, seed=1)
    params = EngineParams(
        prefill_tps=10_000.0,
        prefill_overhead_s=0.0,
        prefill_token_budget=1000,
        **LINEAR_PREFILL,
        **ROOMY_DECODE,
    )
    engine = Engine(arrival, [1000] * n, [2] * n, params, startup_s=0.0, initial=(1, 1))
    run_all(engine)
    t = engine.times()
    wait = float(np.mean(t.prefill_start - t.arrival))
    expected = pk_wait(rate, 0.1, 0.01)
    assert expected == pytest.approx(0.11667, rel=1e-3)
    assert wait == pytest.approx(expected, rel=0.08)
    # service is exactly the deterministic 0.1 s
    assert np.allclose(t.prefill_end - t.prefill_start, 0.1)


def test_prefill_mg1_wait_with_variable_prompts() -> None:
    # Prompts uniform on [200, 1800] tokens at 10,000 tok/s + 20 ms overhead:
    # S = 0.02 + L/10000, E[S] = 0.12, Var = (0.16^2)/12, E[S^2] = 0.0144 + 0.002133.
    rate, n = 6.0, 40_000
    rng = np.random.default_rng(7)
    prompts = rng.integers(200, 1801, n)
    params = EngineParams(
        prefill_tps=10_000.0,
        prefill_overhead_s=0.02,
        prefill_token_budget=1,  # every batch is one request
        **LINEAR_PREFILL,
        **ROOMY_DECODE,
    )
    engine = Engine(poisson(rate, n, 2), prompts, [2] * n, params, startup_s=0.0)
    run_all(engine)
    t = engine.times()
    service = 0.02 + prompts / 10_000.0
    expected = pk_wait(rate, float(np.mean(service)), float(np.mean(service**2)))
    assert float(np.mean(t.prefill_start - t.arrival)) == pytest.approx(expected, rel=0.08)


def test_decode_md1_wait_with_one_sequence_slot() -> None:
    # One decode slot, step 10 ms regardless of batch/KV, 10 output tokens -> the slot is
    # held exactly 10 steps = 0.1 s (first token one step after admission). lambda = 7
    # -> W = 0.1167 s.
    rate, n = 7.0, 40_000
    params = EngineParams(
        **INSTANT_PREFILL,
        **NO_HANDOFF,
        decode_step_base_s=0.01,
        decode_step_per_seq_s=0.0,
        decode_step_per_kv_token_s=0.0,
        decode_max_seqs=1,
    )
    engine = Engine(poisson(rate, n, 3), [100] * n, [10] * n, params, startup_s=0.0)
    run_all(engine)
    t = engine.times()
    assert np.allclose(t.finish - t.decode_admit, 0.1)
    wait = float(np.mean(t.decode_admit - t.prefill_end))
    assert wait == pytest.approx(pk_wait(rate, 0.1, 0.01), rel=0.08)
    # TPOT of a lone sequence is the step time: (0.1 - 0.01) / 9
    assert np.allclose(t.tpot, 0.01)


def test_drain_example_of_models_md_is_reproduced() -> None:
    # docs/models.md §3: lambda = 3.5 req/s, T_s = 10 s, mu = 4.55 req/s -> drained at 43.3 s.
    # 7 prefill replicas of 0.65 req/s (1538.46 tokens at 1000 tok/s, no batching) are
    # asked for at t=0 with no capacity before; requests arrive every 1/3.5 s.
    rate, horizon = 3.5, 120.0
    n = int(rate * horizon)
    arrival = np.arange(n) / rate
    per_replica = 0.65
    tokens = 1000.0 / per_replica
    params = EngineParams(
        prefill_tps=1000.0,
        prefill_overhead_s=0.0,
        prefill_token_budget=1,
        startup_jitter=0.0,
        **LINEAR_PREFILL,
        **ROOMY_DECODE,
    )
    engine = Engine(arrival, [round(tokens)] * n, [2] * n, params, startup_s=10.0, initial=(0, 1))
    engine.scale_to(Role.PREFILL, 7, 0.0)
    run_all(engine)
    t = engine.times()
    waited = (t.prefill_start - t.arrival) > 1e-9
    drained = float(np.max(t.prefill_start[waited]))
    predicted = drain_time(rate, 7 * per_replica, 10.0, rate * 10.0).drain_seconds
    assert predicted == pytest.approx(43.3, abs=0.05)
    assert drained == pytest.approx(predicted, rel=0.10)
    # nothing is served before the replicas are up at T_s
    assert float(np.min(t.prefill_start)) == pytest.approx(10.0)


def test_gpu_seconds_are_billed_from_request_until_gone() -> None:
    params = EngineParams(startup_jitter=0.0, decode_gpus=2)
    engine = Engine([], [], [], params, startup_s=30.0, initial=(1, 1))
    engine.scale_to(Role.PREFILL, 3, 10.0)  # 2 more, requested at 10, ready at 40
    engine.scale_to(Role.DECODE, 2, 50.0)  # 1 more, requested at 50
    engine.scale_to(Role.DECODE, 1, 55.0)  # cancelled while starting: 5 s billed
    engine.scale_to(Role.PREFILL, 1, 100.0)  # two idle replicas go at 100
    engine.run_until(200.0)
    billed = engine.gpu_seconds(200.0)
    assert billed[Role.PREFILL] == pytest.approx(200.0 + 2 * 90.0)
    assert billed[Role.DECODE] == pytest.approx(2 * (200.0 + 5.0))
    assert engine.desired(Role.PREFILL) == 1
    assert engine.startup_samples[Role.PREFILL] == [30.0, 30.0]


def test_a_draining_decode_replica_is_billed_until_its_last_request_ends() -> None:
    params = EngineParams(**INSTANT_PREFILL, **NO_HANDOFF, startup_jitter=0.0)
    engine = Engine([0.0], [100], [500], params, startup_s=0.0, initial=(1, 2))
    engine.run_until(1.0)
    busy = next(r for r in engine.pool(Role.DECODE) if r.work == 1)
    engine.scale_to(Role.DECODE, 0, 1.0)  # the idle one goes at once, the busy one drains
    assert busy.state is State.DRAINING
    run_all(engine)
    finish = float(engine.times().finish[0])
    assert busy.gone_at == pytest.approx(finish)
    assert engine.gpu_seconds(1000.0)[Role.DECODE] == pytest.approx(1.0 + finish)


def test_new_replicas_serve_only_after_startup() -> None:
    params = EngineParams(startup_jitter=0.0)
    arrival = np.linspace(0.0, 20.0, 41)
    engine = Engine(arrival, [500] * 41, [5] * 41, params, startup_s=30.0, initial=(0, 1))
    engine.scale_to(Role.PREFILL, 1, 0.0)
    run_all(engine)
    assert float(np.min(engine.times().prefill_start)) == pytest.approx(30.0)


def test_prefill_batches_respect_the_token_budget() -> None:
    # six 1000-token prompts queued when the replica comes up at 1 s: batches of 3
    # (3 s each, linear) -> done at 4 s and 7 s
    params = EngineParams(
        prefill_token_budget=3000,
        prefill_overhead_s=0.0,
        prefill_tps=1000.0,
        startup_jitter=0,
        **LINEAR_PREFILL,
    )
    engine = Engine([0.0] * 6, [1000] * 6, [2] * 6, params, startup_s=1.0, initial=(0, 4))
    engine.scale_to(Role.PREFILL, 1, 0.0)
    run_all(engine)
    ends = sorted(engine.times().prefill_end.tolist())
    assert ends == pytest.approx([4.0] * 3 + [7.0] * 3)


def test_decode_admission_waits_for_kv_capacity() -> None:
    # KV for 1,000 tokens; each request reserves 500 + 100: only one runs at a time.
    params = EngineParams(**INSTANT_PREFILL, **NO_HANDOFF, decode_kv_tokens=1000)
    engine = Engine([0.0, 0.0], [500, 500], [100, 100], params, startup_s=0.0)
    run_all(engine)
    t = engine.times()
    first, second = np.sort(t.decode_admit)
    assert first == pytest.approx(0.0, abs=1e-6)
    assert second == pytest.approx(float(np.min(t.finish)))


def test_losing_a_pod_requeues_its_requests() -> None:
    params = EngineParams(**NO_HANDOFF, startup_jitter=0.0)
    n = 20
    engine = Engine([0.0] * n, [400] * n, [300] * n, params, startup_s=0.0, initial=(1, 2))
    engine.run_until(0.5)
    victim = max(engine.pool(Role.DECODE), key=lambda r: r.work)
    held = victim.work
    assert held > 0
    engine.remove_replica(victim.name, 0.5, lose=True)
    assert victim.state is State.GONE
    run_all(engine)
    t = engine.times()
    assert np.all(np.isfinite(t.finish))
    assert int(np.sum(t.decode_admit > 0.5)) >= held


def test_pool_counters_add_up_to_the_work_done() -> None:
    rng = np.random.default_rng(5)
    n = 3000
    prompts, outputs = rng.integers(50, 3000, n), rng.integers(1, 400, n)
    params = EngineParams()
    engine = Engine(poisson(4.0, n, 5), prompts, outputs, params, startup_s=20.0)
    for k, t in enumerate(np.arange(0.0, 800.0, 15.0)):
        engine.scale_to(Role.DECODE, 1 + k % 3, float(t))  # churn the decode pool
    run_all(engine)
    s = engine.sample(engine.now)
    assert s.prefill.request_success == n
    assert s.prefill.prompt_tokens == int(prompts.sum())
    assert s.decode.request_success == n
    assert s.decode.generation_tokens == pytest.approx(float(outputs.sum()), rel=1e-6)
    assert sum(s.decode.itl_counts) == pytest.approx(float(outputs.sum()), rel=1e-6)
    assert sum(s.prefill.ttft_counts) == n
    assert s.prefill.waiting == s.decode.waiting == 0


def test_same_seed_same_result_and_the_seed_matters() -> None:
    n = 2000
    arrival = poisson(5.0, n, 9)

    def run(seed: int) -> np.ndarray:
        engine = Engine(arrival, [900] * n, [150] * n, EngineParams(), startup_s=60, seed=seed)
        engine.scale_to(Role.PREFILL, 3, 5.0)
        engine.scale_to(Role.DECODE, 2, 5.0)
        run_all(engine)
        return engine.times().finish

    a, b, c = run(1), run(1), run(2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_requests_can_be_added_while_running_and_replicas_named() -> None:
    params = EngineParams()
    engine = Engine([], [], [], params, startup_s=0.0, initial=(0, 0))
    engine.add_replica(Role.PREFILL, 0.0, name="chat-p-0", ready_at=0.0)
    engine.add_replica(Role.DECODE, 0.0, name="chat-d-0", ready_at=0.0)
    engine.run_until(10.0)
    engine.add_requests([10.0, 11.0], [800, 800], [20, 20])
    with pytest.raises(ValueError, match="sorted"):
        engine.add_requests([5.0], [1], [1])
    engine.run_until(60.0)
    stats = engine.pod_stats(60.0)
    assert set(stats) == {"chat-p-0", "chat-d-0"}
    assert stats["chat-p-0"].request_success == 2
    assert stats["chat-d-0"].request_success == 2
    engine.remove_replica("chat-d-0", 60.0)
    assert "chat-d-0" not in engine.pod_stats(61.0)
