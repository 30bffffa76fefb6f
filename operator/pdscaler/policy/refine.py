"""Online refinement of the capacity priors: P_prefill, P_decode and T_s.

Owns: moving the spec's per-replica throughputs and startup time towards what the
cluster shows, with bounded corrections so one odd window cannot wreck the sizing.
Throughput is learnt only when the pool is saturated (its queue is non-empty: an idle
replica's tokens/s says nothing about what it can do). Must not: read metrics or
clocks itself, or trust an unbounded measurement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: Weight of a new throughput observation in the moving average.
TPS_ALPHA = 0.3
#: A refined throughput stays within [0.5x, 1.5x] of the spec's prior.
TPS_BOUNDS = (0.5, 1.5)
#: A refined startup time stays within [0.5x, 3x] of the spec's prior.
STARTUP_BOUNDS = (0.5, 3.0)
#: Startup is sized on this quantile of observed pod creation -> Ready durations.
STARTUP_QUANTILE = 0.9


def _bound(value: float, prior: float, bounds: tuple[float, float]) -> float:
    return min(max(value, prior * bounds[0]), prior * bounds[1])


def refine_tps(
    prior: float,
    previous: float | None,
    observed_pool_tps: float | None,
    ready: int,
    queue_depth: float | None,
) -> float:
    """The per-replica tokens/s to size with.

    Saturated (queue > 0) with 4 ready replicas serving 14,400 tok/s, prior 3000 and no
    history: observed 3600/replica, EWMA 0.3*3600 + 0.7*3000 = 3180. Observed 10,000 per
    replica is first bounded to 1.5x prior = 4500. Not saturated: the previous value
    (re-bounded, in case the prior changed), or the prior.
    """
    current = _bound(previous, prior, TPS_BOUNDS) if previous is not None else prior
    saturated = queue_depth is not None and queue_depth > 0
    if not saturated or observed_pool_tps is None or ready <= 0:
        return current
    observed = _bound(observed_pool_tps / ready, prior, TPS_BOUNDS)
    return _bound(TPS_ALPHA * observed + (1 - TPS_ALPHA) * current, prior, TPS_BOUNDS)


def quantile(samples: Iterable[float], q: float) -> float | None:
    """Nearest-rank quantile: q=0.9 of 1..10 -> 9; of [5] -> 5; of [] -> None."""
    ordered = sorted(samples)
    if not ordered:
        return None
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def refine_startup(prior: float, previous: float | None, samples: Iterable[float]) -> float:
    """T_s to size with: the p90 of observed startups, bounded to [0.5x, 3x] prior.

    Prior 60 s, samples 40..130 s step 10 (10 samples) -> p90 = 120 s. Samples of
    400 s -> 180 s (3x). No valid samples -> the previous value (re-bounded) or the
    prior. Invalid samples (negative, NaN, inf) are ignored.
    """
    valid = [s for s in samples if math.isfinite(s) and s >= 0]
    observed = quantile(valid, STARTUP_QUANTILE)
    if observed is None:
        return _bound(previous, prior, STARTUP_BOUNDS) if previous is not None else prior
    return _bound(observed, prior, STARTUP_BOUNDS)
