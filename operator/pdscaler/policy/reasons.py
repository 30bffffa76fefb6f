"""Reason constants and the human sentences of the policy's decisions.

Owns: the machine-readable ``action`` values a Decision carries (they become the
``reason`` of Kubernetes Events and of ``status.lastDecision``) and small pure
functions that format numbers into the sentence a person reads, e.g.
``Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s``.
Must not: decide anything (no replica arithmetic, no model calls) or do I/O.
"""

from __future__ import annotations

import math

from pdscaler.types import Role

SCALED_PREFILL = "ScaledPrefill"
SCALED_DECODE = "ScaledDecode"
SCALED_BOTH = "ScaledBoth"
SCALED_DOWN = "ScaledDown"
HOLD = "Hold"
HOLD_METRICS_UNAVAILABLE = "HoldMetricsUnavailable"
CAPACITY_LIMITED = "CapacityLimited"

ACTIONS = (
    SCALED_PREFILL,
    SCALED_DECODE,
    SCALED_BOTH,
    SCALED_DOWN,
    HOLD,
    HOLD_METRICS_UNAVAILABLE,
    CAPACITY_LIMITED,
)


def scaled_action(role: Role) -> str:
    """``ScaledPrefill`` / ``ScaledDecode``: the action of a scale-up of ``role``."""
    return SCALED_PREFILL if role is Role.PREFILL else SCALED_DECODE


def percentile_label(percentile: float) -> str:
    """``0.95`` -> ``p95``, ``0.99`` -> ``p99``, ``0.999`` -> ``p99.9``."""
    return f"p{round(percentile * 100, 3):g}"


def seconds(value: float | None) -> str:
    """A duration for a sentence: ``0.062`` -> ``62ms``, ``2.0`` -> ``2s``,
    ``38.24`` -> ``38s``, ``3.14`` -> ``3.1s``, ``None`` -> ``never``."""
    if value is None or math.isinf(value):
        return "never"
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 10:
        return f"{value:.2g}s" if value != int(value) else f"{value:.0f}s"
    return f"{value:.0f}s"


def latency_name(role: Role) -> str:
    """The latency a pool answers for: TTFT (prefill), TPOT (decode)."""
    return "TTFT" if role is Role.PREFILL else "TPOT"


def pool_signals(
    role: Role,
    percentile: float,
    latency: float | None,
    slo: float,
    queue: float | None,
    utilization: float | None,
    target_utilization: float,
    kv_usage: float | None = None,
    kv_limit: float = 0.9,
) -> str:
    """Why a pool is under pressure, strongest-first, only the signals over their limit.

    ``pool_signals(Role.DECODE, 0.95, 0.062, 0.05, 0, 0.5, 0.7)`` ->
    ``"TPOT p95 62ms > 50ms SLO"``; a prefill queue of 12 and utilisation 0.91 of 0.7 ->
    ``"queue 12; utilization 91% > 70% target"``. Empty when nothing is over.
    """
    parts: list[str] = []
    if latency is not None and latency > slo:
        parts.append(
            f"{latency_name(role)} {percentile_label(percentile)} "
            f"{seconds(latency)} > {seconds(slo)} SLO"
        )
    if queue is not None and queue > 0:
        parts.append(f"queue {queue:g}")
    if utilization is not None and utilization > target_utilization:
        parts.append(f"utilization {utilization:.0%} > {target_utilization:.0%} target")
    if kv_usage is not None and kv_usage > kv_limit:
        parts.append(f"KV cache {kv_usage:.0%} > {kv_limit:.0%}")
    return "; ".join(parts)


def change(role: Role, before: int, after: int) -> str:
    """``decode 4->6``."""
    return f"{role.value} {before}->{after}"
