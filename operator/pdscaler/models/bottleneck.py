"""Bottleneck attribution (docs/models.md §4): which pool to scale first.

Owns: turning each pool's signals into one pressure number and naming the pool under
the larger pressure, with the reasons. Prefill is judged by TTFT vs its SLO, its queue
and its token utilisation; decode by TPOT vs its SLO, its queue (waiting/running
requests), KV-cache usage and its token utilisation. Purely computational; must not
fetch metrics or decide replica counts (the policy does that).

Every signal is normalised so that 1.0 is "at the limit":

* latency: latency / SLO            (TTFT 3.0 s vs 2.0 s SLO -> 1.5)
* utilisation: utilisation / target (load/capacity 0.84 vs target 0.7 -> 1.2)
* queue: queue depth / queue limit  (6 waiting vs a limit of 4 -> 1.5)
* KV usage: kv_usage / kv limit     (0.95 vs 0.9 -> 1.06), decode only

A pool's pressure is the largest of its known signals (an unknown signal, ``None``, is
skipped: it adds no pressure; what missing data means is the policy's call). A pool is under
pressure when its pressure exceeds 1.0; the bottleneck is the pool under the larger
pressure, ties going to prefill (its overload hits TTFT directly, docs/models.md §2), and
``None`` when neither pool is under pressure.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdscaler.models._checks import finite, non_negative, positive
from pdscaler.types import PerRole, Role

#: A pool is under pressure when its normalised pressure exceeds this.
PRESSURE_LIMIT = 1.0
#: Default KV-cache usage (fraction of blocks) beyond which decode is saturated.
KV_LIMIT = 0.9
#: Default queue depth (requests waiting, summed over the pool) that counts as full.
QUEUE_LIMIT = 1.0
#: The latency each pool is judged by (at the SLO percentile).
LATENCY = PerRole(prefill="TTFT", decode="TPOT")
#: Whether a pool's KV-cache usage is read (decode holds the running requests' KV cache).
READS_KV = PerRole(prefill=False, decode=True)


@dataclass(frozen=True)
class PoolSignals:
    """One pool's measurements. ``latency_seconds`` is TTFT (prefill) or TPOT (decode)
    at the SLO percentile; ``utilization`` is token load / token capacity of the ready
    replicas (not capped at 1); ``kv_usage`` in [0, 1] is read for decode only.
    ``None`` = not measured."""

    latency_seconds: float | None
    slo_seconds: float
    queue_depth: float | None = None
    utilization: float | None = None
    kv_usage: float | None = None
    target_utilization: float = 1.0
    queue_limit: float = QUEUE_LIMIT
    kv_limit: float = KV_LIMIT


@dataclass(frozen=True)
class Bottleneck:
    """``pool`` to scale first (``None``: neither is under pressure), each pool's
    pressure (1.0 = at the limit) and one reason per signal over its limit, e.g.
    ``"prefill TTFT 3.00s > SLO 2.00s (1.50x)"``."""

    pool: Role | None
    pressures: PerRole[float]
    reasons: tuple[str, ...]

    def pressure(self, role: Role) -> float:
        """The pressure of ``role``'s pool."""
        return self.pressures.pool(role)


def pool_pressure(role: Role, signals: PoolSignals) -> tuple[float, tuple[str, ...]]:
    """``(pressure, reasons)`` of one pool; reasons name every signal above its limit.

    Decode with TPOT 62 ms vs 50 ms SLO and KV usage 0.5 -> (1.24, ("decode TPOT
    0.062s > SLO 0.050s (1.24x)",)). No signal known -> (0.0, ()).
    """
    positive("slo_seconds", signals.slo_seconds)
    positive("target_utilization", signals.target_utilization)
    positive("queue_limit", signals.queue_limit)
    positive("kv_limit", signals.kv_limit)
    latency_name = LATENCY.pool(role)
    parts: list[tuple[float, str]] = []
    if signals.latency_seconds is not None:
        latency = non_negative("latency_seconds", signals.latency_seconds)
        score = latency / signals.slo_seconds
        parts.append(
            (score, f"{role} {latency_name} {latency:.3f}s > SLO {signals.slo_seconds:.3f}s")
        )
    if signals.queue_depth is not None:
        queue = non_negative("queue_depth", signals.queue_depth)
        parts.append(
            (queue / signals.queue_limit, f"{role} queue {queue:g} > limit {signals.queue_limit:g}")
        )
    if signals.utilization is not None:
        util = non_negative("utilization", finite("utilization", signals.utilization))
        parts.append(
            (
                util / signals.target_utilization,
                f"{role} token utilisation {util:.0%} > target {signals.target_utilization:.0%}",
            )
        )
    if READS_KV.pool(role) and signals.kv_usage is not None:
        kv = non_negative("kv_usage", signals.kv_usage)
        parts.append((kv / signals.kv_limit, f"{role} KV usage {kv:.0%} > {signals.kv_limit:.0%}"))
    pressure = max((score for score, _ in parts), default=0.0)
    reasons = tuple(
        f"{text} ({score:.2f}x)"
        for score, text in sorted(parts, key=lambda p: -p[0])
        if score > PRESSURE_LIMIT
    )
    return pressure, reasons


def locate_bottleneck(prefill: PoolSignals, decode: PoolSignals) -> Bottleneck:
    """The pool to scale first.

    Prefill TTFT 1.2 s of 2 s (0.6), decode TPOT 62 ms of 50 ms (1.24) -> DECODE.
    Prefill TTFT 3 s of 2 s (1.5) and decode KV usage 0.95 of 0.9 (1.06) -> PREFILL.
    Both calm -> None. Equal pressure over the limit -> PREFILL.
    """
    signals = PerRole(prefill=prefill, decode=decode)
    scored = PerRole.build(lambda role: pool_pressure(role, signals.pool(role)))
    pressures = scored.map(lambda score: score[0])
    # the first role with the largest pressure: ties go to prefill
    top, worst = max(pressures.items(), key=lambda item: item[1])
    return Bottleneck(
        pool=top if worst > PRESSURE_LIMIT else None,
        pressures=pressures,
        reasons=tuple(reason for _, (_, reasons) in scored.items() for reason in reasons),
    )
