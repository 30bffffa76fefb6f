"""Whether prefill's TTFT SLO is within reach of the burst head-room the spec allows:
the ``SLOUnreachable`` condition (docs/models.md §2c). Purely computational.

Owns: the burst signature as both the head-room and this condition read it
(``prefill_short``: prefill is short by its load, so a TTFT breach is a shortage the
ratio and drain models fix), and ``bursts_beyond_headroom``: the condition's reason and
sentence when a breach is a burst the head-room cannot absorb. Must not: size pools
(``headroom`` and ``limits`` do) or read clocks.

A TTFT breach while prefill is not short by its load is a burst shorter than a tick
(docs/models.md §2c). No reactive policy starts replicas within a burst: only capacity
held beforehand absorbs it. The condition is True when none will be held, its reason
naming why:

* ``scaling.burstHeadroom`` off (``BurstHeadroomOff``): the sentence names what
  holding it would cost, the head-room at its cap (``MAX_FACTOR`` times the mean
  sizing);
* the head-room asked for cut by ``replicas.max`` or the GPU budget
  (``BurstHeadroomLimited``): the sentence names the missing replicas and GPUs;
* the factor at its cap (``BurstHeadroomCapped``): more head-room needs a larger floor
  or a looser SLO.

While the factor is still growing within the limits it is False: the head-room is
being learnt. Worked numbers: chat, N_P 19.05, 20 prefill ready at 67% (target 70%),
no queue, TTFT p95 3 s over 2 s, head-room off: ``TTFT p95 3.0s > 2.0s SLO in bursts
the mean load does not explain (prefill 67% utilised, not short); burst head-room is
off: spec.scaling.burstHeadroom holds up to 58 prefill replicas for them (x3.0), 38
more (38 GPUs) than now``.
"""

from __future__ import annotations

import math

from pdscaler.models import ceil_replicas
from pdscaler.models.bottleneck import PRESSURE_LIMIT
from pdscaler.policy import history
from pdscaler.policy.headroom import MAX_FACTOR
from pdscaler.policy.sizing import Attribution, PoolFacts
from pdscaler.policy.tick import Tick
from pdscaler.types import ConditionReason, Role, Unreachable


def prefill_short(attribution: Attribution, prefill: PoolFacts) -> bool:
    """Prefill is short by its load: utilisation over its target, more than one request
    waiting per ready replica, or replicas still starting (a shortage being fixed)."""
    return (
        attribution.load_pressure[Role.PREFILL] > PRESSURE_LIMIT
        or history.backlogged(prefill.queue, prefill.ready)
        or prefill.in_flight > 0
    )


def bursts_beyond_headroom(tick: Tick) -> Unreachable | None:
    """Why this tick's TTFT bursts are out of reach, or None (module docstring)."""
    prefill = tick.facts[Role.PREFILL]
    ttft, slo = prefill.latency, prefill.slo_seconds
    if ttft is None or not math.isfinite(ttft) or slo <= 0 or ttft <= slo:
        return None
    if prefill_short(tick.attribution, prefill):
        return None
    spec = tick.inp.spec
    gpus = spec.prefill.gpus_per_replica
    util = prefill.utilization(tick.rate)
    head = (
        f"TTFT p{spec.slo.percentile * 100:g} {ttft:.1f}s > {slo:.1f}s SLO in bursts the mean "
        f"load does not explain (prefill {util:.0%} utilised, not short)"
    )
    now = tick.final[Role.PREFILL]
    if not spec.scaling.burst_headroom:
        most = ceil_replicas(tick.ratio.n_prefill * MAX_FACTOR)
        more = max(most - now, 0)
        return Unreachable(
            ConditionReason.BURST_HEADROOM_OFF,
            f"{head}; burst head-room is off: spec.scaling.burstHeadroom holds up to "
            f"{most} prefill replicas for them (x{MAX_FACTOR:.1f}), {more} more "
            f"({more * gpus} GPUs) than now",
        )
    missing = tick.headroom - tick.headroom_held
    if missing > 0:
        return Unreachable(
            ConditionReason.BURST_HEADROOM_LIMITED,
            f"{head}; burst head-room wants {now + missing} prefill replicas and "
            f"replicas.max or maxGPUs allow {now}: {missing} more ({missing * gpus} GPUs) "
            "needed",
        )
    if tick.burst_factor >= MAX_FACTOR:
        return Unreachable(
            ConditionReason.BURST_HEADROOM_CAPPED,
            f"{head}; burst head-room is at its cap (x{MAX_FACTOR:.1f}, {now} prefill "
            "replicas): more needs a higher prefill replicas.min or a looser TTFT SLO",
        )
    return None
