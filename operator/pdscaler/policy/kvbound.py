"""The decode memory bound as the policy applies it (docs/models.md §2b).

Owns: when the memory term is on (M from ``decode.kvCacheTokens``, else from the
engine's own report, ``vllm:cache_config_info``: it is off when no M is known), the
TPOT a sequence's residence is priced at, the decode sizing that is the larger of
throughput and memory (``with_memory``), the KV usage the load implies for the ready
replicas (a load signal that sees the shortage before the cache fills), and a
replica's service rate when its KV is the limit (the drain model's). Purely
computational; must not read clocks, do I/O or apply bounds.

TPOT: the observed decode TPOT at the SLO percentile, at most the TPOT SLO (after a
scale-up the pool runs within it), the SLO when unknown. Long-context chat at 3.5 req/s
(12,000 in / 350 out, M 100,000, TPOT 30 ms observed): N_D 1.25 by throughput, 4.97 by
memory -> decode sized for 4.97 (bound ``memory``); with 2 ready replicas the load
holds 447,431 / 200,000 = 2.24 of their KV (> 0.9: decode is short).
"""

from __future__ import annotations

from pdscaler.models import (
    MemoryResult,
    decode_memory,
    memory_service_rate,
    with_memory,
)
from pdscaler.models.bottleneck import KV_LIMIT
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot


def kv_cache_tokens(spec: PDDeploymentSpec, snap: MetricsSnapshot) -> float | None:
    """M of one decode replica: ``spec.decode.kvCacheTokens`` when set (the user's word
    wins), else what the engine reports (``PoolMetrics.kv_capacity_tokens``: vLLM's
    ``num_gpu_blocks * block_size``); None: neither, the term is off."""
    if spec.decode.kv_cache_tokens is not None:
        return float(spec.decode.kv_cache_tokens)
    return snap.decode.kv_capacity_tokens


def decode_tpot(spec: PDDeploymentSpec, snap: MetricsSnapshot) -> float:
    """The TPOT residence is priced at: observed 30 ms of a 50 ms SLO -> 0.03; observed
    62 ms -> 0.05 (the SLO: more replicas bring it there); unknown -> 0.05."""
    slo = spec.slo.tpot_seconds
    observed = snap.decode.latency_seconds
    if observed is None or not observed > 0:
        return slo
    return min(observed, slo)


def memory_sizes(
    m: float | None, rate: float, prompt: float, output: float, tpot: float
) -> MemoryResult | None:
    """The memory sizing at ``rate`` for M = ``m`` (``kv_cache_tokens``); None when the
    term is off (no M)."""
    if m is None:
        return None
    return decode_memory(rate, prompt, output, tpot, m, KV_LIMIT)


def kv_demand(memory: MemoryResult | None, m: float | None, ready: int) -> float | None:
    """The share of the READY replicas' KV the load holds (one replica when none is
    ready): 447,431 tokens on 2 x 100,000 -> 2.24. None when the term is off."""
    if memory is None or m is None:
        return None
    return memory.resident_tokens / (max(ready, 1) * m)


def memory_rate(m: float | None, prompt: float, output: float, tpot: float) -> float | None:
    """Requests/s one decode replica completes when its KV binds (``models.
    memory_service_rate``: 0.704 req/s at the golden long-context mix); None when off."""
    if m is None:
        return None
    return memory_service_rate(prompt, output, tpot, m, KV_LIMIT)


__all__ = [
    "decode_tpot",
    "kv_cache_tokens",
    "kv_demand",
    "memory_rate",
    "memory_sizes",
    "with_memory",
]
