"""Prefill pays attention: a prompt of L tokens costs ``L / P (1 + L / A)`` seconds of
compute on top of the batch overhead (``EngineParams.prefill_attention_tokens`` = A,
53,400 tokens for a Llama-2-7B-class model), in the engine, its measured profile, the
oracle's plan and ceiling and the Dynamo-style planner's profile; ``A = inf`` is the
linear cost exactly."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from pdscaler.sim.dynamo import prefill_profile_tps, prefill_target_tokens
from pdscaler.sim.engine import Engine, EngineParams
from pdscaler.sim.oracle import feasibility_ceiling, schedule, work_floor
from pdscaler.sim.profiles import DECODE_CONTEXTS, PREFILL_PROMPTS, measured_profile
from pdscaler.sim.traces import Trace
from pdscaler.types import Role
from support.builders import spaced_trace

PARAMS = EngineParams()
LINEAR = EngineParams(prefill_attention_tokens=math.inf)


def prefill_times(params: EngineParams, prompts: list[int]) -> np.ndarray:
    """Prefill durations of ``prompts``, all arriving at 0 and queued for one replica
    that is Ready at 1 s (so they are batched as the budget allows)."""
    n = len(prompts)
    params = dataclasses.replace(params, startup_jitter=0.0)
    engine = Engine([0.0] * n, prompts, [2] * n, params, startup_s=1.0, initial=(0, 1))
    engine.scale_to(Role.PREFILL, 1, 0.0)
    engine.run_until(math.inf)
    assert not engine.pending()
    t = engine.times()
    return np.asarray(t.prefill_end - t.prefill_start)


def ttft_alone(params: EngineParams, prompt: int) -> float:
    """Time to the end of the prefill of one ``prompt`` arriving at an idle replica."""
    engine = Engine([0.0], [prompt], [2], params, startup_s=0.0)
    engine.run_until(math.inf)
    t = engine.times()
    return float(t.prefill_end[0] - t.arrival[0])


def test_a_long_prompt_alone_pays_its_attention() -> None:
    # 16,000 tokens > the 8,192 budget: one batch of its own (one overhead), 15 ms +
    # 1,882 ms of weights + 16,000^2 / (8,500 x 53,400) = 564 ms of attention = 2.461 s
    ttft = ttft_alone(PARAMS, 16_000)
    assert ttft == pytest.approx(0.015 + 16_000 / 8500 + 16_000**2 / 8500 / 53_400)
    assert ttft == pytest.approx(2.4614, abs=1e-4)
    # the linear engine of before: 1.897 s
    assert ttft_alone(LINEAR, 16_000) == pytest.approx(0.015 + 16_000 / 8500)
    # two of them queued: one batch each (a prompt over the budget is a batch of its
    # own), 2.461 s each
    assert prefill_times(PARAMS, [16_000, 16_000]).tolist() == pytest.approx([ttft] * 2)


def test_a_batch_pays_the_squares_of_its_own_prompts() -> None:
    # two 4,000-token prompts in one batch: 15 + 941 + 2 x 4,000^2 / 453.9e6 = 70.5 ms
    # (not (8,000)^2: each prompt attends to itself only) -> 1.0267 s, the two together
    ttft = prefill_times(PARAMS, [4000, 4000])
    assert ttft.tolist() == pytest.approx([1.026677] * 2, abs=1e-6)
    assert PARAMS.prefill_seconds(8000, 2 * 4000**2) == pytest.approx(1.026677, abs=1e-6)


def test_infinite_attention_tokens_is_the_linear_cost_exactly() -> None:
    rng = np.random.default_rng(3)
    prompts = rng.integers(1, 20_000, 200)
    for tokens in prompts.tolist():
        linear = LINEAR.prefill_overhead_s + tokens / LINEAR.prefill_tps
        assert LINEAR.prefill_seconds(tokens, tokens**2) == linear
    arrival = np.cumsum(rng.exponential(0.5, len(prompts)))
    engine = Engine(arrival, prompts, [2] * len(prompts), LINEAR, startup_s=0.0)
    engine.run_until(math.inf)
    t = engine.times()
    alone = t.prefill_end - t.prefill_start
    batch_of_one = np.isclose(alone, 0.015 + prompts / 8500.0, rtol=0, atol=1e-9)
    assert batch_of_one.mean() > 0.5  # most run alone at this rate
    assert LINEAR.prefill_profile_tps(1024) == pytest.approx(LINEAR.prefill_batch_tps())
    assert prefill_profile_tps(LINEAR, 1155.0) == pytest.approx(1155 / (0.015 + 1155 / 8500))


def test_attention_tokens_must_be_positive() -> None:
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="prefill_attention_tokens"):
            EngineParams(prefill_attention_tokens=bad)


def test_prefill_profile_falls_with_prompt_length() -> None:
    tps = [PARAMS.prefill_profile_tps(n) for n in PREFILL_PROMPTS]
    assert all(b < a for a, b in itertools.pairwise(tps))
    # 8 prompts of 1,024 per batch: 8,192 / (0.015 + 0.9638 + 0.0185) = 8,215 tokens/s;
    # one of 16,384: 16,384 / (0.015 + 1.9275 + 0.5914) = 6,466; 131,072: 2,460
    assert PARAMS.prefill_profile_tps(1024) == pytest.approx(8215, abs=1)
    assert PARAMS.prefill_profile_tps(16_384) == pytest.approx(6466, abs=1)
    assert PARAMS.prefill_profile_tps(131_072) == pytest.approx(2460, abs=1)
    # a linear engine measures no fall over the prompts that pack the budget exactly
    assert {round(LINEAR.prefill_profile_tps(n)) for n in PREFILL_PROMPTS[:6]} == {8370}


def test_decode_profile_is_decode_tps_at_the_mean_context() -> None:
    # context 1,260.5 with 256 output tokens: prompt 1,132.5
    assert PARAMS.decode_profile_tps(1260.5, 0.05) == PARAMS.decode_tps(1132.5, 256.0, 0.05)
    assert PARAMS.decode_profile_tps(100.0, 0.05) == PARAMS.decode_tps(1.0, 256.0, 0.05)
    assert PARAMS.decode_profile_tps(1024, 0.05) == pytest.approx(2018.0, abs=0.1)
    assert PARAMS.decode_profile_tps(65_536, 0.05) == pytest.approx(35.1, abs=0.1)


def test_measured_profile_of_the_default_engine() -> None:
    prefill, decode = measured_profile(PARAMS, 0.05)
    assert prefill == (
        (256, 8330.0), (512, 8291.0), (1024, 8215.0), (2048, 8065.0), (4096, 7782.0),
        (8192, 7271.0), (16384, 6466.0), (32768, 5255.0), (65536, 3813.0), (131072, 2460.0),
    )  # fmt: skip
    assert [x for x, _ in decode] == list(DECODE_CONTEXTS)
    assert decode[2] == (1024, 2018.0)
    # a KV of 20,000 tokens: contexts whose sequence (context + 128) does not fit go
    small = dataclasses.replace(PARAMS, decode_kv_tokens=20_000)
    fits = [x for x, _ in measured_profile(small, 0.05)[1]]
    assert fits == [256, 512, 1024, 2048, 4096, 8192, 16384]


def test_feasibility_ceiling_drops_with_the_attention_of_long_prompts() -> None:
    # 40,000 tokens, TTFT 2 s + 0.15 ms/token = 8 s: linear 75 + 4,706 + 805 ms = 5.6 s
    # fits; with attention + 40,000^2 / 453.9e6 = 3,525 ms -> 9.1 s does not
    trace = spaced_trace([1000, 40_000])
    kw = {"ttft_s": 2.0, "tpot_s": 0.05, "ttft_per_token_s": 1.5e-4}
    assert feasibility_ceiling(trace, LINEAR, **kw) == 1.0
    assert feasibility_ceiling(trace, PARAMS, **kw) == 0.5


def test_oracle_plans_the_attention_of_each_bins_prompts() -> None:
    # 1 req/s of 16,000 tokens: 16,000 / 8,370 = 1.91 replica-s per s linear -> 2;
    # + 16,000^2 / 453.9e6 = 0.56 s of attention -> 2.48 -> 3
    n = 600
    trace = Trace("c", np.arange(n, dtype=np.float64), np.full(n, 16_000), np.full(n, 20), float(n))
    assert np.all(schedule(trace, LINEAR, tpot_s=0.05).prefill[1:39] == 2)
    assert np.all(schedule(trace, PARAMS, tpot_s=0.05).prefill[1:39] == 3)
    smooth = schedule(trace, PARAMS, tpot_s=0.05, bin_s=2.0, smooth_s=15.0)
    assert np.all(smooth.prefill[1:250] == 3)
    # the work floor bills the same attention
    extra = work_floor(trace, PARAMS, tpot_s=0.05) - work_floor(trace, LINEAR, tpot_s=0.05)
    assert extra * 3600 == pytest.approx(n * 16_000**2 / 8500 / 53_400)


def test_dynamo_profiles_one_request_with_its_attention() -> None:
    # 1,155 tokens alone: 1,155 / (0.015 + 0.1359 + 1,155^2 / 453.9e6 = 0.0029) = 7,509
    assert prefill_profile_tps(PARAMS, 1155.0) == pytest.approx(7508.7, abs=0.1)
    assert prefill_profile_tps(PARAMS, 1155.0) == pytest.approx(
        1155.0 / PARAMS.prefill_seconds(1155.0, 1155.0**2)
    )
    # the load line's slope at 1,155-token prompts is 2% steeper: 16,614 -> 16,267 tokens
    assert prefill_target_tokens(PARAMS, 2.0, 1155.0) == pytest.approx(15112, abs=1)
    assert prefill_target_tokens(LINEAR, 2.0, 1155.0) == pytest.approx(15459, abs=1)
