"""The ratio model (docs/models.md §2): steady-state replicas of each pool.

Owns: N_P = R*L_p / (P_prefill*u_P), N_D = R*L_d / (P_decode*u_D), their ceilings and
the P:D ratio. Purely computational, no side effects; must not read metrics, clocks or
the spec (the caller passes numbers in SI units: req/s, tokens, tokens/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdscaler.models._checks import ceil_replicas, fraction, non_negative, positive


@dataclass(frozen=True)
class RatioResult:
    """Steady-state sizing of both pools.

    ``n_prefill``/``n_decode`` are the fractional replicas, ``*_replicas`` their ceilings
    (capacity must cover load). ``ratio`` is N_P / N_D, computed from the workload shape
    so it is defined even at zero load:
    ``(L_p / (P_prefill*u_P)) / (L_d / (P_decode*u_D))``; ``inf`` when L_d = 0 < L_p,
    ``nan`` when both lengths are 0 (no work at all, no ratio).
    ``*_load_tps`` are the tokens/s each pool must process (R*L_p, R*L_d).
    """

    n_prefill: float
    n_decode: float
    prefill_replicas: int
    decode_replicas: int
    ratio: float
    prefill_load_tps: float
    decode_load_tps: float


def ratio_model(
    rate: float,
    prompt_tokens: float,
    output_tokens: float,
    prefill_tps: float,
    decode_tps: float,
    prefill_utilization: float = 0.7,
    decode_utilization: float = 0.7,
) -> RatioResult:
    """Size both pools for ``rate`` req/s of ``prompt_tokens`` in / ``output_tokens`` out.

    Chat service (golden): R=20, L_p=2000, L_d=500, P_prefill=3000, P_decode=800, u=0.7:
    N_P = 40000/2100 = 19.05 -> 20, N_D = 10000/560 = 17.86 -> 18, ratio 1.067 (~1:1).

    Raises ValueError for negative/NaN loads, non-positive throughputs, or a target
    utilisation outside (0, 1].
    """
    rate = non_negative("rate", rate)
    prompt_tokens = non_negative("prompt_tokens", prompt_tokens)
    output_tokens = non_negative("output_tokens", output_tokens)
    prefill_tps = positive("prefill_tps", prefill_tps)
    decode_tps = positive("decode_tps", decode_tps)
    prefill_utilization = fraction("prefill_utilization", prefill_utilization)
    decode_utilization = fraction("decode_utilization", decode_utilization)

    prefill_load = rate * prompt_tokens
    decode_load = rate * output_tokens
    prefill_capacity = prefill_tps * prefill_utilization
    decode_capacity = decode_tps * decode_utilization
    n_prefill = prefill_load / prefill_capacity
    n_decode = decode_load / decode_capacity
    return RatioResult(
        n_prefill=n_prefill,
        n_decode=n_decode,
        prefill_replicas=ceil_replicas(n_prefill),
        decode_replicas=ceil_replicas(n_decode),
        ratio=shape_ratio(prompt_tokens, output_tokens, prefill_capacity, decode_capacity),
        prefill_load_tps=prefill_load,
        decode_load_tps=decode_load,
    )


def shape_ratio(
    prompt_tokens: float,
    output_tokens: float,
    prefill_capacity_tps: float,
    decode_capacity_tps: float,
) -> float:
    """N_P / N_D from the workload shape alone (R cancels):
    ``(L_p / C_P) / (L_d / C_D)`` with C = per-replica tokens/s at target utilisation.

    2000/2100 / (500/560) = 1.0667. ``inf`` when only L_d is 0, ``nan`` when both are.
    """
    per_request_prefill = prompt_tokens / prefill_capacity_tps
    per_request_decode = output_tokens / decode_capacity_tps
    if per_request_decode == 0:
        return math.nan if per_request_prefill == 0 else math.inf
    return per_request_prefill / per_request_decode
