"""A simulated Prometheus: the scrapes of the engine's pods, and the three queries an
autoscaler runs on them (rate over a window, histogram_quantile over a window, the
latest gauge value), each seen with a lag.

Owns: storing one :class:`~pdscaler.sim.engine.Sample` per scrape interval and
answering queries the way PromQL would: ``rate(c[w])`` from the first and last samples
inside the window (no data -> None, never 0), ``histogram_quantile(q,
rate(h_bucket[w]))`` with Prometheus' linear interpolation inside the bucket (None
when the window saw no observations; the +Inf bucket answers the highest finite
bound), and instant gauges from the newest sample at least ``lag`` seconds old.
Must not: read clocks or see the engine's state directly; autoscalers only get what
Prometheus would give them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

import numpy as np

from pdscaler.sim.engine import Sample


def histogram_quantile(q: float, counts: Sequence[float], bounds: Sequence[float]) -> float | None:
    """Prometheus' ``histogram_quantile`` on per-bucket counts (not cumulative).

    Buckets (0.1, 0.5, +Inf) with counts (10, 10, 0): q=0.75 -> rank 15 falls in the
    second bucket halfway -> 0.1 + (0.5 - 0.1) * 0.5 = 0.3.
    """
    total = float(sum(counts))
    if total <= 0:
        return None
    rank = q * total
    cum = 0.0
    for i, c in enumerate(counts):
        if cum + c >= rank and c > 0:
            upper = bounds[i]
            lower = bounds[i - 1] if i > 0 else 0.0
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - cum) / c
        cum += c
    finite = [b for b in bounds if not math.isinf(b)]
    return finite[-1] if finite else None


class PromView:
    """Scrapes in time order; queries at ``now`` see only samples with
    ``time <= now - lag``."""

    def __init__(self, lag: float = 5.0) -> None:
        self.lag = lag
        self.samples: list[Sample] = []
        self._times: list[float] = []

    def scrape(self, sample: Sample) -> None:
        self.samples.append(sample)
        self._times.append(sample.time)

    def _window(self, now: float, window: float) -> tuple[Sample, Sample] | None:
        hi = bisect.bisect_right(self._times, now - self.lag) - 1
        if hi < 0:
            return None
        lo = bisect.bisect_left(self._times, self._times[hi] - window)
        if hi - lo < 1:
            return None
        return self.samples[lo], self.samples[hi]

    def latest(self, now: float) -> Sample | None:
        hi = bisect.bisect_right(self._times, now - self.lag) - 1
        return self.samples[hi] if hi >= 0 else None

    def rate(self, now: float, window: float, counter: Callable[[Sample], float]) -> float | None:
        """Per-second increase of ``counter`` over the window (None without 2 samples)."""
        pair = self._window(now, window)
        if pair is None:
            return None
        a, b = pair
        return (counter(b) - counter(a)) / (b.time - a.time)

    def increase(
        self, now: float, window: float, counter: Callable[[Sample], float]
    ) -> float | None:
        pair = self._window(now, window)
        if pair is None:
            return None
        return counter(pair[1]) - counter(pair[0])

    def quantile(
        self,
        now: float,
        window: float,
        q: float,
        hist: Callable[[Sample], Sequence[float]],
        bounds: Sequence[float],
    ) -> float | None:
        """``histogram_quantile(q, rate(h_bucket[window]))``; None with no observations.
        ``hist`` gives per-bucket counts (``PodStats.ttft_counts``)."""
        pair = self._window(now, window)
        if pair is None:
            return None
        delta = np.asarray(hist(pair[1]), dtype=np.float64) - np.asarray(hist(pair[0]))
        return histogram_quantile(q, [float(x) for x in delta], bounds)
