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

The observed floor (``observed_floor``): the memory term prices the MEAN request (mean
prompt, mean output, mean residence), which heavy-tailed outputs and bursts of arrivals
break: on the ServeGen week at x70 (the diurnal bench, hand-made engine) the term asks
4-16 decode replicas while the cache the engines REPORT in use is full in every burst
(decode queues of 1,000-6,000 requests, 4.4% of all requests missing for decode
admission alone). What the engines report is the truth the mean misses, so decode is
held at no fewer replicas than keep the KV in use now at ``KV_TARGET`` of the ready
replicas' cache; the stabilization window keeps that for its length, so a burst's KV
is held until bursts stop recurring. Measured (issue 27, seed 0, start-up 90 s): the
diurnal hand-made case 93.20% SLO at 309.7 GPU-h -> 95.38% at 302.7 (target 0.6).
"""

from __future__ import annotations

from pdscaler.models import (
    MemoryResult,
    ceil_replicas,
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


#: The share of the ready decode replicas' KV cache that the KV the engines report in
#: use may fill before decode grows (``observed_floor``). Fitted on the tuning traces
#: (the diurnal week's hand-made case, the hour matrix): 0.8 -> 94.55% at 311.8 GPU-h,
#: 0.6 -> 95.38% at 302.7, 0.45 -> 96.36% at 315.6, 0.3 -> 97.09% at 350.9 (base 93.20%
#: at 309.7); on the conversation hours 0.6 costs at most +8% (long context).
KV_TARGET = 0.6


def observed_floor(kv_usage: float | None, ready: int, target: float = KV_TARGET) -> int:
    """Decode replicas that hold the KV in use now at ``target`` of their cache: 8
    ready at 90% in use -> ceil(8 x 0.9 / 0.6) = 12; 8 ready at 30% -> 4; unknown
    usage, nothing ready or no target -> 0 (no floor)."""
    if kv_usage is None or not kv_usage > 0 or ready <= 0 or not target > 0:
        return 0
    return ceil_replicas(kv_usage * ready / target)


__all__ = [
    "KV_TARGET",
    "decode_tpot",
    "kv_cache_tokens",
    "kv_demand",
    "memory_rate",
    "memory_sizes",
    "observed_floor",
    "with_memory",
]
