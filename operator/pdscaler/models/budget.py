"""Splitting a GPU budget between the pools (docs/design.md §3 step 5).

Owns: integer replica counts for both pools within ``maxGPUs``, the per-pool min/max
bounds and the wants, and, when the wants do not fit, which pool gets the scarce GPUs.
Purely computational; must not decide the wants (the ratio/drain models do) nor read
the cluster's free GPUs (the caller passes the budget it can actually use).

The rule when GPUs are short: minimise the WORSE pool's utilisation
``load_replicas / replicas`` (the fractional ratio-model count over what it gets), i.e.
raise whichever pool is worse off, one replica at a time, while its next replica fits.
Ties go to ``prefer`` (the bottleneck pool), else to prefill (docs/models.md §2: prefill's
margin matters more). This greedy is min-max optimal: lowering the maximum requires
raising the worse pool, and once its next replica does not fit nothing can lower it;
the GPUs left then go to the other pool.

Worked numbers (chat service, 1 GPU per replica, maxGPUs 32): wants P 20, D 18 (38 GPUs)
with loads 19.05 and 17.86. The min-max split is P 16 / D 15 (both at 119.05%
utilisation: 40000/2100/16 = 10000/560/15 = 1.1905) plus one GPU left that lowers
either pool: to prefill (17/15) by default or with ``prefer=PREFILL``, to decode (16/16)
with ``prefer=DECODE``. Limited = True.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdscaler.models._checks import REL_EPS, non_negative
from pdscaler.types import Role


@dataclass(frozen=True)
class BudgetSplit:
    """Replicas per pool; ``limited`` when the (bounded) wants did not fit the budget."""

    prefill: int
    decode: int
    limited: bool

    def gpus(self, prefill_gpus_per_replica: int, decode_gpus_per_replica: int) -> int:
        """Total GPUs of this split: 17*1 + 15*1 = 32."""
        return self.prefill * prefill_gpus_per_replica + self.decode * decode_gpus_per_replica


def utilization(load_replicas: float, replicas: int) -> float:
    """``load_replicas / replicas``; 0 without load, ``inf`` for load on 0 replicas."""
    if load_replicas <= 0:
        return 0.0
    if replicas <= 0:
        return math.inf
    return load_replicas / replicas


def _check_int(name: str, value: int, low: int) -> int:
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def split_budget(
    max_gpus: int,
    want_prefill: int,
    want_decode: int,
    prefill_gpus_per_replica: int,
    decode_gpus_per_replica: int,
    prefill_min: int,
    prefill_max: int,
    decode_min: int,
    decode_max: int,
    prefill_load_replicas: float,
    decode_load_replicas: float,
    prefer: Role | None = None,
) -> BudgetSplit:
    """Integer replicas for both pools within ``max_gpus``.

    1. Wants are clamped into [min, max] per pool; when both fit, they are the answer.
    2. Otherwise each pool first gets its minimum (when the budget allows both
       minimums; if not, the minimums themselves are split by the same rule), then
       replicas are added one at a time to the pool with the higher utilisation, up
       to its clamped want, while the next replica's GPUs fit.

    Never exceeds ``max_gpus``, never gives a pool more than ``clamp(want, min, max)``,
    and never leaves a pool below its min when ``max_gpus`` covers both minimums.
    See the module docstring for the worked chat numbers (32 GPUs -> 17/15).
    """
    _check_int("max_gpus", max_gpus, 0)
    _check_int("prefill_gpus_per_replica", prefill_gpus_per_replica, 1)
    _check_int("decode_gpus_per_replica", decode_gpus_per_replica, 1)
    _check_int("prefill_min", prefill_min, 0)
    _check_int("decode_min", decode_min, 0)
    _check_int("prefill_max", prefill_max, prefill_min)
    _check_int("decode_max", decode_max, decode_min)
    non_negative("prefill_load_replicas", prefill_load_replicas)
    non_negative("decode_load_replicas", decode_load_replicas)

    cap_p = min(max(want_prefill, prefill_min), prefill_max)
    cap_d = min(max(want_decode, decode_min), decode_max)
    g_p, g_d = prefill_gpus_per_replica, decode_gpus_per_replica
    if cap_p * g_p + cap_d * g_d <= max_gpus:
        return BudgetSplit(prefill=cap_p, decode=cap_d, limited=False)

    first = prefer or Role.PREFILL
    loads = {Role.PREFILL: prefill_load_replicas, Role.DECODE: decode_load_replicas}
    gpus = {Role.PREFILL: g_p, Role.DECODE: g_d}
    counts = {Role.PREFILL: 0, Role.DECODE: 0}
    left = max_gpus
    if prefill_min * g_p + decode_min * g_d <= max_gpus:
        counts = {Role.PREFILL: prefill_min, Role.DECODE: decode_min}
        left -= prefill_min * g_p + decode_min * g_d
        caps = {Role.PREFILL: cap_p, Role.DECODE: cap_d}
        left = _greedy(counts, caps, loads, gpus, left, first)
    else:
        mins = {Role.PREFILL: prefill_min, Role.DECODE: decode_min}
        left = _greedy(counts, mins, loads, gpus, left, first)
    return BudgetSplit(prefill=counts[Role.PREFILL], decode=counts[Role.DECODE], limited=True)


def _greedy(
    counts: dict[Role, int],
    caps: dict[Role, int],
    loads: dict[Role, float],
    gpus: dict[Role, int],
    left: int,
    first: Role,
) -> int:
    """Add replicas (in place) to the worse-utilised pool that can still grow and whose
    next replica fits; ties to ``first``. Returns the GPUs left."""
    other = first.other
    while True:
        growable = [r for r in (first, other) if counts[r] < caps[r] and gpus[r] <= left]
        if not growable:
            return left
        best = growable[0]
        for role in growable[1:]:
            if _worse(
                utilization(loads[role], counts[role]), utilization(loads[best], counts[best])
            ):
                best = role
        counts[best] += 1
        left -= gpus[best]


def _worse(a: float, b: float) -> bool:
    """``a`` is clearly higher than ``b`` (beyond float noise: 1.19047619 vs 1.19047619
    computed two ways is a tie)."""
    if math.isinf(a) or math.isinf(b):
        return a > b
    return a > b + REL_EPS * max(1.0, abs(b))
