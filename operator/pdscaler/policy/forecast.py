"""A short-horizon forecast of the request rate, over T_s + one interval.

Owns: the rate the pools must serve when capacity started now is up. A least-squares
line through the recent (time, rate) points; a rising trend is extrapolated over at most
the rate's averaging window, growth clamped to 2x the current rate; a falling or flat
trend forecasts the current rate (scale-downs are the stabilization window's job, not
the forecast's). Must not: read clocks or metrics; it is given the history.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The forecast never exceeds this multiple of the current rate.
MAX_GROWTH = 2.0
#: Fewest points for a trend.
MIN_POINTS = 3


def trend(history: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope (req/s per second) of ``history``; 0 with < 3 points or no
    time spread. Points (0, 10), (15, 11), (30, 12) -> 1/15 = 0.0667."""
    points = [(t, r) for t, r in history if math.isfinite(t) and math.isfinite(r)]
    if len(points) < MIN_POINTS:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return 0.0
    return sum((t - mean_t) * (r - mean_r) for t, r in points) / var


def forecast_rate(
    current: float,
    history: Sequence[tuple[float, float]],
    horizon_seconds: float,
    trend_seconds: float | None = None,
) -> float:
    """Rate expected ``horizon_seconds`` ahead, the trend extrapolated over at most
    ``trend_seconds`` (the rate's averaging window).

    Current 12 req/s, slope 1/15 req/s per s, horizon T_s 60 + interval 15 = 75 s ->
    12 + 5 = 17 req/s. A slope of 1 req/s per s would give 87; clamped to 24 (2x).
    Falling history -> 12 (the current rate).

    Why ``trend_seconds``: the rate is a window average, which ramps for a whole window
    after a plain step. A step 10 -> 20 req/s read through a 120 s window rises 1/12
    req/s per s for 120 s; extrapolated over T_s 300 + 15 s it forecasts 36 req/s
    although the rate stays 20. Over at most the window (120 s) it forecasts at most
    the step itself (10 + 120/12 = 20 when the ramp starts), and for a real ramp the
    window's lag plus the next minute.
    """
    slope = trend(history)
    if slope <= 0 or horizon_seconds <= 0:
        return current
    if trend_seconds is not None:
        horizon_seconds = min(horizon_seconds, trend_seconds)
    return min(current + slope * horizon_seconds, current * MAX_GROWTH)
