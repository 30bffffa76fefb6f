"""The decode memory bound (docs/models.md §2b): decode replicas the KV cache needs.

Owns: Little's law for the KV a decode pool holds (``decode_memory``), the larger of the
throughput and memory sizings (``decode_bound``, which says which one binds;
``with_memory`` applies it to a ``RatioResult``), and whether
one request's context fits one replica at all (``fits_one_replica``). Purely
computational, no side effects; must not read metrics, clocks or the spec (the caller
passes numbers: req/s, tokens, seconds, tokens of KV per replica).

A sequence stays resident about ``t_d = L_d * TPOT`` seconds holding about
``L_p + L_d / 2`` tokens of KV, so the pool holds ``R * t_d`` sequences and

    N_D(memory) = R * t_d * (L_p + L_d/2) / (M * u_kv)
    N_D = max(N_D(throughput), N_D(memory))

Long-context chat (golden): R = 3.5 req/s, L_p = 12,000, L_d = 350, TPOT 30 ms,
M = 100,000 tokens, u_kv = 0.9: t_d = 10.5 s, 36.75 sequences of 12,175 tokens =
447,431 tokens -> N_D(memory) = 4.97 -> 5, against 1.25 -> 2 by throughput
(P_decode 1,400 tok/s, u 0.7): memory binds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from pdscaler.models._checks import ceil_replicas, fraction, non_negative, positive
from pdscaler.models.bottleneck import KV_LIMIT
from pdscaler.models.profile import decode_context
from pdscaler.models.ratio import RatioResult


class DecodeBound(StrEnum):
    """What sizes the decode pool: its output tokens/s or its KV memory."""

    THROUGHPUT = "throughput"
    MEMORY = "memory"


@dataclass(frozen=True)
class MemoryResult:
    """Decode replicas the KV cache needs for a load.

    ``residence_seconds`` t_d, ``resident_sequences`` R * t_d, ``tokens_per_sequence``
    L_p + L_d/2, ``resident_tokens`` their product, ``n_decode`` the fractional
    replicas (resident tokens / (M * u_kv)) and ``decode_replicas`` its ceiling.
    """

    residence_seconds: float
    resident_sequences: float
    tokens_per_sequence: float
    resident_tokens: float
    n_decode: float
    decode_replicas: int


def decode_memory(
    rate: float,
    prompt_tokens: float,
    output_tokens: float,
    tpot_seconds: float,
    kv_cache_tokens: float,
    kv_utilization: float = KV_LIMIT,
) -> MemoryResult:
    """The memory sizing of the decode pool (module docstring; golden 4.97 -> 5).

    Raises ValueError for negative/NaN loads, a negative TPOT, a non-positive KV size or
    a target KV utilisation outside (0, 1].
    """
    rate = non_negative("rate", rate)
    prompt_tokens = non_negative("prompt_tokens", prompt_tokens)
    output_tokens = non_negative("output_tokens", output_tokens)
    tpot_seconds = non_negative("tpot_seconds", tpot_seconds)
    kv_cache_tokens = positive("kv_cache_tokens", kv_cache_tokens)
    kv_utilization = fraction("kv_utilization", kv_utilization)

    residence = output_tokens * tpot_seconds
    sequences = rate * residence
    per_sequence = decode_context(prompt_tokens, output_tokens)
    resident = sequences * per_sequence
    n_decode = resident / (kv_cache_tokens * kv_utilization)
    return MemoryResult(
        residence_seconds=residence,
        resident_sequences=sequences,
        tokens_per_sequence=per_sequence,
        resident_tokens=resident,
        n_decode=n_decode,
        decode_replicas=ceil_replicas(n_decode),
    )


def decode_bound(n_throughput: float, memory: MemoryResult | None) -> tuple[float, DecodeBound]:
    """``(max(N_D throughput, N_D memory), which one)``; throughput when there is no
    memory term or on a tie: (1.25, 4.97) -> (4.97, MEMORY); (17.86, None) ->
    (17.86, THROUGHPUT)."""
    if memory is not None and memory.n_decode > n_throughput:
        return memory.n_decode, DecodeBound.MEMORY
    return n_throughput, DecodeBound.THROUGHPUT


def with_memory(ratio: RatioResult, memory: MemoryResult | None) -> tuple[RatioResult, DecodeBound]:
    """The ratio model's result with decode raised to the memory term when that is
    larger (N_D, its ceiling and N_P / N_D), and which bound sizes decode: golden
    N_D 1.25 -> 4.97 (``MEMORY``), ratio 7.06 / 4.97 = 1.42; unchanged otherwise."""
    n_decode, bound = decode_bound(ratio.n_decode, memory)
    if bound is DecodeBound.THROUGHPUT:
        return ratio, bound
    raised = dataclasses.replace(
        ratio,
        n_decode=n_decode,
        decode_replicas=ceil_replicas(n_decode),
        ratio=ratio.n_prefill / n_decode,
    )
    return raised, bound


def memory_service_rate(
    prompt_tokens: float,
    output_tokens: float,
    tpot_seconds: float,
    kv_cache_tokens: float,
    kv_utilization: float = KV_LIMIT,
) -> float:
    """Requests/s one decode replica completes when its KV is the limit: it holds
    ``M * u_kv / (L_p + L_d/2)`` sequences, each for ``t_d`` seconds. Golden: 90,000 /
    12,175 = 7.39 sequences over 10.5 s = 0.704 req/s. ``inf`` when a sequence takes no
    time or no memory."""
    per_sequence = decode_context(prompt_tokens, output_tokens)
    residence = output_tokens * tpot_seconds
    if per_sequence <= 0 or residence <= 0:
        return float("inf")
    return kv_cache_tokens * kv_utilization / per_sequence / residence


def fits_one_replica(prompt_tokens: float, output_tokens: float, kv_cache_tokens: float) -> bool:
    """Whether one request's whole context (L_p + L_d) fits one replica's KV: a request
    that does not can never be served, at any pool size (126,000 + 300 > 100,000)."""
    return prompt_tokens + output_tokens <= kv_cache_tokens
