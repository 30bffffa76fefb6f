"""Burst head-room for prefill (``spec.scaling.burstHeadroom``, docs/models.md §2c).

Owns: learning the factor ``h >= 1`` by which prefill is held above its mean-rate
sizing so that arrival bursts shorter than a tick are served within the TTFT SLO, and
the head-room replicas it buys. Purely computational; must not read clocks, do I/O or
apply bounds (``limits`` caps the result at the pool's max and the GPU budget).

What is observed. Bursts that last seconds come and go between two ticks (15 s) and two
scrapes: the rate over the metrics window averages them away and the queue is usually
empty again when it is sampled. What they leave is the TTFT percentile over the window:
above its SLO while prefill, sized for the mean, is not short by its load (utilisation
within target, fewer than one request waiting per ready replica, no replica still
starting: those are a shortage being fixed). That is the signature
the factor learns from, the same series in the operator and in the simulator:

* burst signature (TTFT p over SLO, prefill not short): ``h *= 1 + GAIN * (min(r, 2) -
  1)`` with r = TTFT / SLO, at most ``MAX_FACTOR``;
* TTFT comfortably met (r < ``RELAX_BELOW``): ``h *= 1 - DECAY``, never below 1;
* otherwise (prefill short by its load: the ratio and drain models act; TTFT unknown):
  h is kept.

Worked numbers: h = 1, TTFT p99 3 s over a 2 s SLO (r 1.5) at 60% utilisation, no
queue: h = 1 + 0.1 x 0.5 = 1.05; the same for 8 ticks (the breach stays in the 2-minute
window): 1.05^8 = 1.48. N_P 5.2 -> ceil(5.2 x 1.48) = 8 replicas, 2 of them head-room
(ceil(5.2) = 6). With TTFT at 0.5 s afterwards, h decays 1% a tick: back to 1 after
~40 minutes.
"""

from __future__ import annotations

import math

from pdscaler.models import ceil_replicas

#: Growth of the factor per tick, per unit of TTFT over its SLO (r - 1, r at most 2).
GAIN = 0.1
#: The most head-room: prefill is never held above this many times its mean sizing.
MAX_FACTOR = 3.0
#: Below this share of the TTFT SLO the head-room is more than the SLO needs: it decays.
RELAX_BELOW = 0.5
#: Decay of the factor per tick while the TTFT SLO is comfortably met.
DECAY = 0.01


def learn_factor(previous: float, ttft: float | None, slo: float, short: bool) -> float:
    """The factor after one tick (module docstring): 1.0, TTFT 3 s of 2 s, not short ->
    1.05; 1.48, TTFT 0.5 s of 2 s -> 1.465; 1.48, short by load -> 1.48; 1.0, TTFT 0.5 s
    -> 1.0."""
    h = previous if math.isfinite(previous) and previous >= 1.0 else 1.0
    if ttft is None or not math.isfinite(ttft) or slo <= 0:
        return h
    r = ttft / slo
    if r > 1.0 and not short:
        return min(h * (1.0 + GAIN * (min(r, 2.0) - 1.0)), MAX_FACTOR)
    if r < RELAX_BELOW:
        return max(1.0, h * (1.0 - DECAY))
    return h


def headroom_target(n_prefill: float, factor: float) -> tuple[int, int]:
    """(prefill replicas with head-room, how many of them are head-room):
    N_P 5.2 at h 1.48 -> (8, 2); h 1 -> (6, 0); no load -> (0, 0)."""
    base = ceil_replicas(n_prefill)
    with_room = max(base, ceil_replicas(n_prefill * max(factor, 1.0)))
    return with_room, with_room - base
