"""Online refinement of the capacity priors: P_prefill, P_decode and T_s.

Owns: each pool's capacity prior at the current mix (its measured profile, or the
constant ``tokensPerSecond``: ``capacity_priors``), moving the per-replica throughputs
and startup time towards what the cluster shows, with bounded corrections so one odd
window cannot wreck the sizing.
Throughput is learnt only while the pool is saturated (at least one request waiting
per ready replica at every tick of a run, ``history.saturated_seconds``): what it
served per replica then raises the estimate, and it lowers it only as far as the
saturated share of the window proves (see ``refine_tps``). A queue seen at one tick is
not saturation: at 70% utilisation a pool serves 0.7x what it can, and bursts queue
briefly; learning from such a window would lower a 3,000 tok/s estimate towards 2,100
and over-provision the pool. Must not: read metrics or
clocks itself, or trust an unbounded measurement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pdscaler.models.profile import capacity_at, decode_context
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

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
    ready: float,
    saturated_share: float,
) -> float:
    """The per-replica tokens/s to size with. ``ready`` is the pool's ready replicas
    averaged over the window of ``observed_pool_tps``; ``saturated_share`` the part of
    that window the pool was saturated (``history.saturated_seconds`` / window, <= 1).

    Two bounds on what one replica can do, C: it served ``observed = tps / ready``, so
    C >= observed; it ran at C for the saturated share s of the window and at some rate
    >= 0 for the rest, so ``observed >= s * C``, i.e. C <= observed / s. While the pool
    is saturated (s > 0) the estimate moves (EWMA, 0.3) towards the bound it violates.
    A pool that is not saturated serves its load, not its capacity, and its tokens/s
    may include replicas that are draining or just became ready: it teaches nothing.

    Prior 3000, no history, 4 ready. 14,400 tok/s (3600/replica) while saturated:
    raised to 0.3*3600 + 0.7*3000 = 3180. 8,000 tok/s (2000/replica) saturated the
    whole window: 0.3*2000 + 0.7*3000 = 2700; saturated half of it: C <= 4000, no
    change; never saturated: no change (a pool at 67% says nothing about its limit).
    Observed 10,000 per replica is first bounded to 1.5x prior = 4500. Nothing observed
    or nobody ready: the previous value (re-bounded, in case the prior changed), or the
    prior.
    """
    current = _bound(previous, prior, TPS_BOUNDS) if previous is not None else prior
    if observed_pool_tps is None or ready <= 0 or saturated_share <= 0:
        return current
    observed = observed_pool_tps / ready
    share = min(saturated_share, 1.0)
    target = current
    if observed > current:
        target = observed
    elif observed / share < current:
        target = observed / share
    if target == current:
        return current
    target = _bound(target, prior, TPS_BOUNDS)
    return _bound(TPS_ALPHA * target + (1 - TPS_ALPHA) * current, prior, TPS_BOUNDS)


def capacity_priors(spec: PDDeploymentSpec, tokens: dict[Role, float]) -> dict[Role, float]:
    """Step 2a, ``profile``: each pool's per-replica tokens/s prior at this tick's mix
    (docs/models.md §2d): its profile read at L_p (prefill) and at L_p + L_d/2
    (decode), or the constant ``tokensPerSecond`` without one. Prefill profile
    (1,024: 8,200), (8,192: 7,300), (16,384: 6,500) at L_p 12,000 -> 6,928; no
    profile -> ``tokensPerSecond``."""
    x = {
        Role.PREFILL: tokens[Role.PREFILL],
        Role.DECODE: decode_context(tokens[Role.PREFILL], tokens[Role.DECODE]),
    }
    return {
        r: capacity_at(spec.pool(r).tokens_per_second, spec.pool(r).profile_points(), x[r])
        for r in (Role.PREFILL, Role.DECODE)
    }


def carry(previous: float | None, previous_prior: float | None, prior: float) -> float | None:
    """A capacity refined against one prior, carried to this tick's prior with its
    correction kept (docs/models.md §2d): learnt 7,000 against a profile's 8,184 at
    1,155 tokens (0.855 of it), the mix now at 12,000 tokens where the profile says
    6,928 -> 5,926. A constant prior (no profile) carries it unchanged; nothing learnt
    -> None; no prior recorded (a status written before profiles) -> unchanged."""
    if previous is None:
        return None
    if previous_prior is None or not previous_prior > 0 or previous_prior == prior:
        return previous
    return previous * prior / previous_prior


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
