"""Turning what the metrics edge reports into numbers the policy may trust.

Owns: the rule that garbage is unknown: a negative, NaN or infinite measurement is
treated exactly like a missing one (``None``) and named in the problems, so the policy
holds instead of acting on it. Must not: invent values (never 0 for unknown), read
Prometheus, or decide anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pdscaler.types import MetricsSnapshot, PoolMetrics


def clean(value: float | None) -> float | None:
    """``value`` if it is a finite number >= 0, else ``None``: ``-1``, ``nan``,
    ``inf`` -> None; ``0.0`` -> 0.0 (a measured zero is knowledge)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number


@dataclass(frozen=True)
class CleanMetrics:
    """A snapshot with garbage removed, and why it cannot size the pools (if so).

    ``usable`` is True when the load shape is known: R, L_p and L_d, or R = 0 (idle:
    with no requests the lengths are irrelevant and the load is zero).
    """

    snapshot: MetricsSnapshot | None
    problems: tuple[str, ...]

    @property
    def usable(self) -> bool:
        snap = self.snapshot
        if snap is None or snap.request_rate is None:
            return False
        return snap.request_rate == 0 or snap.complete


def _pool(name: str, pool: PoolMetrics, problems: list[str]) -> PoolMetrics:
    fields = {
        "queue_depth": pool.queue_depth,
        "running": pool.running,
        "latency_seconds": pool.latency_seconds,
        "tokens_per_second": pool.tokens_per_second,
        "kv_usage": pool.kv_usage,
    }
    cleaned: dict[str, float | None] = {}
    for key, value in fields.items():
        cleaned[key] = clean(value)
        if value is not None and cleaned[key] is None:
            problems.append(f"{name} {key} is invalid ({value!r})")
    by_pod = {pod: v for pod, v in pool.running_by_pod.items() if clean(v) is not None}
    return replace(
        pool,
        queue_depth=cleaned["queue_depth"],
        running=cleaned["running"],
        latency_seconds=cleaned["latency_seconds"],
        tokens_per_second=cleaned["tokens_per_second"],
        kv_usage=cleaned["kv_usage"],
        running_by_pod=by_pod,
    )


def sanitize(metrics: MetricsSnapshot | None) -> CleanMetrics:
    """Clean every number of ``metrics``; list each invalid or missing load value.

    ``None`` (Prometheus unreachable) -> unusable with the problem "no metrics snapshot".
    A snapshot with ``request_rate=nan`` -> request_rate None, problem
    ``"request_rate is invalid (nan)"``, unusable.
    """
    if metrics is None:
        return CleanMetrics(None, ("no metrics snapshot (Prometheus unreachable)",))
    problems = list(metrics.problems)
    load: dict[str, float | None] = {}
    for key in ("request_rate", "prompt_tokens", "output_tokens"):
        value = getattr(metrics, key)
        load[key] = clean(value)
        if value is not None and load[key] is None:
            problems.append(f"{key} is invalid ({value!r})")
    snapshot = replace(
        metrics,
        request_rate=load["request_rate"],
        prompt_tokens=load["prompt_tokens"],
        output_tokens=load["output_tokens"],
        prefill=_pool("prefill", metrics.prefill, problems),
        decode=_pool("decode", metrics.decode, problems),
    )
    result = CleanMetrics(snapshot, tuple(problems))
    if not result.usable:
        missing = [k for k, v in load.items() if v is None]
        extra = [f"{k} unknown" for k in missing if not any(p.startswith(k) for p in problems)]
        result = CleanMetrics(snapshot, tuple(problems) + tuple(extra))
    return result
