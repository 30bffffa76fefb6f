"""M read from the engine (issue 11, item 1): vLLM reports its KV capacity in the labels
of ``vllm:cache_config_info`` (``num_gpu_blocks`` x ``block_size``); the vllm preset
queries it on the decode pool, the snapshot carries the smallest, and the policy's
memory term uses it when the spec sets no ``decode.kvCacheTokens`` (the spec's M wins).
The labels are tenant-controlled input: anything but positive integers is ignored with
a problem, never a crash or a giant M."""

from __future__ import annotations

import dataclasses

import pytest

from pdlab.engine.expo import render_pod
from pdscaler import metricsql as mq
from pdscaler.metricsql.answers import parse_kv_capacity
from pdscaler.policy.kvbound import kv_cache_tokens
from pdscaler.sim.engine import EngineParams, PodStats
from pdscaler.types import MetricsSnapshot, PoolMetrics
from support.builders import chat_spec, run, snapshot
from support.prom_answers import NAME, NOW, NS, full_answers, spec, vector

LONG_POOLS = {"prefill": {"tokensPerSecond": 8500}, "decode": {"tokensPerSecond": 1400}}


def info(blocks: str, size: str = "16") -> tuple[dict[str, str], str]:
    return {"num_gpu_blocks": blocks, "block_size": size}, "1"


def test_the_smallest_replica_bounds_m() -> None:
    answer = vector(info("6250"), info("7000"))
    assert parse_kv_capacity(answer) == (100_000.0, ())


def test_an_engine_that_does_not_report_it_is_no_problem() -> None:
    assert parse_kv_capacity(vector()) == (None, ())


@pytest.mark.parametrize(
    ("blocks", "size"),
    [("-5", "16"), ("abc", "16"), ("1e9", "16"), ("0", "16"), ("6250", ""), ("\u0663", "16")],
)
def test_labels_that_are_not_positive_integers_are_ignored_with_a_problem(
    blocks: str, size: str
) -> None:
    m, problems = parse_kv_capacity(vector(info(blocks, size), info("6250")))
    assert m == 100_000.0
    assert len(problems) == 1
    assert "not positive integers" in problems[0]


def test_a_giant_product_is_not_believed() -> None:
    m, problems = parse_kv_capacity(vector(info("99999999999", "1024")))
    assert m is None
    assert "above" in problems[0]


def test_the_vllm_preset_queries_the_decode_pool_and_sglang_does_not() -> None:
    queries = {q.key: q for q in mq.build_queries(spec(), NS, NAME)}
    q = queries[mq.Key.KV_CAPACITY]
    assert q.promql == (
        "max by (num_gpu_blocks, block_size) (vllm:cache_config_info"
        '{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="decode"})'
    )
    assert q.pool is not None
    assert q.pool.value == "decode"
    sglang = {q.key for q in mq.build_queries(spec("sglang"), NS, NAME)}
    assert mq.Key.KV_CAPACITY not in sglang


def test_absent_or_stale_capacity_leaves_the_snapshot_complete() -> None:
    s = spec()
    answers = full_answers(s)
    del answers[mq.Key.KV_CAPACITY]
    snap = mq.assemble(mq.build_queries(s, NS, NAME), answers, now=NOW)
    assert snap.decode.kv_capacity_tokens is None
    assert snap.complete
    answers = full_answers(s)
    answers[mq.Key.FRESHNESS] = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 1)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 600)),
    )
    stale = mq.assemble(mq.build_queries(s, NS, NAME), answers, now=NOW)
    assert stale.decode.kv_capacity_tokens is None


def with_m(snap: MetricsSnapshot, m: float | None) -> MetricsSnapshot:
    return dataclasses.replace(snap, decode=dataclasses.replace(snap.decode, kv_capacity_tokens=m))


def test_the_spec_m_wins_over_the_engine_report() -> None:
    snap = with_m(snapshot(), 100_000.0)
    assert kv_cache_tokens(chat_spec(), snap) == 100_000.0
    own = chat_spec(decode={"tokensPerSecond": 800, "kvCacheTokens": 50_000})
    assert kv_cache_tokens(own, snap) == 50_000.0
    assert kv_cache_tokens(chat_spec(), snapshot()) is None


def test_the_engine_reported_m_turns_the_memory_term_on() -> None:
    """The long-context golden of test_policy_kvbound (3.5 req/s of 12,000 / 350, TPOT
    30 ms, 8 / 2) with M from the engine and none in the spec: decode sized by memory
    (N_D 4.97, 8 replicas), as with ``kvCacheTokens: 100000``; without the report: 2."""
    base = snapshot(3.5, 12_000.0, 350.0, tpot=0.03)
    d = run(chat_spec(**LONG_POOLS), with_m(base, 100_000.0), 8, 2)
    assert d.model.decode_bound == "memory"
    assert d.model.n_decode_memory == pytest.approx(4.9715, abs=1e-4)
    assert d.decode == 8
    off = run(chat_spec(**LONG_POOLS), base, 8, 2)
    assert off.model.decode_bound is None
    assert off.decode == 2


def test_the_engine_simulator_exports_what_the_preset_reads() -> None:
    stats = PodStats(kv_capacity_tokens=float(EngineParams().decode_kv_tokens))
    page = render_pod(stats)
    assert 'vllm:cache_config_info{block_size="16",num_gpu_blocks="6250"} 1' in page
    assert "vllm:cache_config_info{" not in render_pod(PodStats())  # not reported


def test_pool_metrics_default_is_unknown() -> None:
    assert PoolMetrics().kv_capacity_tokens is None
