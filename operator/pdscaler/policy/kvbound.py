"""The decode memory bound as the policy applies it (docs/models.md §2b).

Owns: when the memory term is on (``decode.kvCacheTokens`` set: it is off when no M is
known), the TPOT a sequence's residence is priced at, the decode sizing that is the
larger of throughput and memory (``with_memory``), the KV usage the load implies for
the ready replicas (a load signal that sees the shortage before the cache fills), and
a replica's service rate when its KV is the limit (the drain model's). Purely
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


def kv_cache_tokens(spec: PDDeploymentSpec) -> int | None:
    """M of one decode replica: ``spec.decode.kvCacheTokens`` (None: the term is off)."""
    return spec.decode.kv_cache_tokens


def decode_tpot(spec: PDDeploymentSpec, snap: MetricsSnapshot) -> float:
    """The TPOT residence is priced at: observed 30 ms of a 50 ms SLO -> 0.03; observed
    62 ms -> 0.05 (the SLO: more replicas bring it there); unknown -> 0.05."""
    slo = spec.slo.tpot_seconds
    observed = snap.decode.latency_seconds
    if observed is None or not observed > 0:
        return slo
    return min(observed, slo)


def memory_sizes(
    spec: PDDeploymentSpec, rate: float, prompt: float, output: float, tpot: float
) -> MemoryResult | None:
    """The memory sizing at ``rate``; None when the term is off (no M)."""
    m = kv_cache_tokens(spec)
    if m is None:
        return None
    return decode_memory(rate, prompt, output, tpot, float(m), KV_LIMIT)


def kv_demand(memory: MemoryResult | None, spec: PDDeploymentSpec, ready: int) -> float | None:
    """The share of the READY replicas' KV the load holds (one replica when none is
    ready): 447,431 tokens on 2 x 100,000 -> 2.24. None when the term is off."""
    m = kv_cache_tokens(spec)
    if memory is None or m is None:
        return None
    return memory.resident_tokens / (max(ready, 1) * m)


def memory_rate(spec: PDDeploymentSpec, prompt: float, output: float, tpot: float) -> float | None:
    """Requests/s one decode replica completes when its KV binds (``models.
    memory_service_rate``: 0.704 req/s at the golden long-context mix); None when off."""
    m = kv_cache_tokens(spec)
    if m is None:
        return None
    return memory_service_rate(prompt, output, tpot, float(m), KV_LIMIT)


__all__ = ["decode_tpot", "kv_demand", "memory_rate", "memory_sizes", "with_memory"]
