"""The day's shape: a seasonal forecast of the request rate from the operator's own
history (issue 27, item 4).

Owns: ``observe`` (one tick's rate into 5-minute buckets of the UTC day; a closed hour
folded into the profile by exponential smoothing, ``ALPHA``), ``level`` (the last
hour's rate over what the profile expected for it), ``forecast`` (the profile at
``now + horizon`` times that level, or None when the season is not trusted) and the
persisted form (``encode``/``decode``: the profile to 3 significant digits and the
start, about 2 KB). Memory is bounded: 288 buckets, at most 12 pending and 12 recent.
Must not: read clocks (``now`` is the tick's) or do I/O.

Trusted only with at least a day of history (``now - start >= DAY_S``) and at least
``MIN_RECENT`` closed buckets of the last hour with an expectation, whose level lies
within [1/BAND, BAND]: a day that departs from its shape (an outage, a launch, a
holiday) falls back to the trend forecast (``policy.forecast``).

Worked numbers (5-minute buckets, ALPHA 0.5): yesterday's 09:55, 10:00 and 10:05
buckets averaged 4, 4 and 6 req/s, and the last hour ran at 1.1x what the profile
expected. At 09:59:00 with a horizon of T_s 90 + interval 15 = 105 s the target
10:00:45 lies between the centres 09:57:30 (4) and 10:02:30 (4): 4 x 1.1 = 4.4 req/s;
at 10:03:45 (a quarter of the way to 10:07:30's 6) 4.5 x 1.1 = 4.95. A bucket seen
3 req/s one day and 5 the next is 0.5 x 5 + 0.5 x 3 = 4 req/s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from pdscaler.types import Season

#: Seconds per bucket (5 minutes) and buckets per day.
BUCKET_S = 300.0
BUCKETS = 288
DAY_S = BUCKET_S * BUCKETS
#: Buckets per fold (an hour): the profile changes at most this often.
FOLD = 12
#: Weight of the newest day in a bucket's smoothed rate.
ALPHA = 0.5
#: The last hour's buckets kept for the level, and the fewest the level needs.
RECENT = 12
MIN_RECENT = 3
#: The level must lie within [1/BAND, BAND] for the season to be trusted.
BAND = 1.5
#: Significant digits of the persisted profile.
DIGITS = 3


def observe(season: Season, now: float, rate: float) -> Season:
    """``season`` with this tick's ``rate`` (req/s) at ``now``.

    Samples of one bucket are averaged; when a later bucket starts, the open one is
    closed (kept in ``pending`` and ``recent`` with what the profile expected of it)
    and, when the hour changed too, the pending buckets fold into the profile. A bucket
    at 100-300 s (bucket 0) seen 2 then 4 req/s, then a sample at 310 s: bucket 0 closes
    at 3 req/s (recent (0, 3.0, None): nothing expected yet). A clock that goes back
    restarts the open bucket; a non-finite or negative rate is ignored."""
    if not (math.isfinite(now) and math.isfinite(rate)) or rate < 0:
        return season
    start = now if season.start is None else min(season.start, now)
    b = math.floor(now / BUCKET_S)
    if season.bucket is None or b < season.bucket:
        return dataclasses.replace(season, start=start, bucket=b, total=rate, count=1)
    if b == season.bucket:
        return dataclasses.replace(
            season, start=start, total=season.total + rate, count=season.count + 1
        )
    closed = season.total / max(season.count, 1)
    profile = season.profile or (None,) * BUCKETS
    expected = profile[season.bucket % BUCKETS]
    pending = (*season.pending, (season.bucket, closed))[-FOLD:]
    recent = (*season.recent, (season.bucket, closed, expected))[-RECENT:]
    if b // FOLD != season.bucket // FOLD:
        profile, pending = fold(profile, pending), ()
    return Season(start, profile, b, rate, 1, pending, recent)


def fold(
    profile: tuple[float | None, ...], closed: tuple[tuple[int, float], ...]
) -> tuple[float | None, ...]:
    """The profile with ``closed`` buckets smoothed in: a bucket never seen takes the
    observation; else ALPHA x new + (1 - ALPHA) x old (3 then 5 -> 4)."""
    out = list(profile)
    for index, value in closed:
        old = out[index % BUCKETS]
        out[index % BUCKETS] = value if old is None else ALPHA * value + (1 - ALPHA) * old
    return tuple(out)


def level(season: Season, now: float) -> float | None:
    """The last hour's observed rate over the profile's expectation for the same
    buckets, or None with fewer than MIN_RECENT buckets that had one. Observed 11, 22,
    33 where 10, 20, 30 were expected -> 66 / 60 = 1.1."""
    oldest = math.floor(now / BUCKET_S) - RECENT
    pairs = [(o, e) for b, o, e in season.recent if b >= oldest and e is not None]
    expected = sum(e for _, e in pairs)
    if len(pairs) < MIN_RECENT or expected <= 0:
        return None
    return sum(o for o, _ in pairs) / expected


def at(profile: tuple[float | None, ...], t: float) -> float | None:
    """The profile at time ``t``, linear between bucket centres (a bucket's value at
    its centre, ``(k + 0.5) x BUCKET_S``); one side unseen -> the other; both -> None.
    Buckets 4 and 6 req/s, ``t`` a quarter of the way from the first's centre -> 4.5."""
    if not profile:
        return None
    u = t / BUCKET_S - 0.5
    k = math.floor(u)
    a, b = profile[k % BUCKETS], profile[(k + 1) % BUCKETS]
    if a is None or b is None:
        return a if b is None else b
    return a + (b - a) * (u - k)


def forecast(season: Season, now: float, horizon_s: float) -> float | None:
    """The rate expected at ``now + horizon_s``: the profile there times the last
    hour's level; None (use the trend) with under a day of history, too few recent
    buckets, a level outside [1/BAND, BAND] or an unseen profile there. Profile 4 req/s
    at the target, level 1.1 -> 4.4; level 1.6 -> None (the day departs from its shape).
    """
    if season.start is None or now - season.start < DAY_S:
        return None
    lvl = level(season, now)
    if lvl is None or not 1 / BAND <= lvl <= BAND:
        return None
    shape = at(season.profile, now + horizon_s)
    return None if shape is None else lvl * shape


def trusted(season: Season, now: float) -> bool:
    """Whether ``forecast`` would use the season at ``now`` (anywhere it has a profile)."""
    return forecast(season, now, 0.0) is not None


# ---- the persisted form ----------------------------------------------------------


def _sig(x: float) -> float:
    """``x`` to DIGITS significant digits: 12.345 -> 12.3, 0 -> 0."""
    if x == 0:
        return 0.0
    return round(x, DIGITS - 1 - math.floor(math.log10(abs(x))))


def encode(season: Season) -> dict[str, Any] | None:
    """The bounded form kept in ``status.memory.season``: the start (whole seconds) and
    the folded profile to 3 significant digits (null = unseen), about 2 KB; the open
    hour and the recent buckets are not kept (the level refills in 15 minutes). None
    when nothing was folded yet. Start 100.7, profile 2.3456 in bucket 0 ->
    {"start": 100, "profile": [2.35, null, ...]}."""
    if season.start is None or not season.profile:
        return None
    profile = [None if v is None else _sig(v) for v in season.profile]
    return {"start": math.floor(season.start), "profile": profile}


def decode(data: Any) -> Season:
    """The season a restarted operator resumes with; anything malformed (wrong length,
    a negative or non-finite value, no start) -> an empty season, which learns again."""
    if not isinstance(data, dict):
        return Season()
    start, raw = data.get("start"), data.get("profile")
    if not isinstance(start, int | float) or not isinstance(raw, list) or len(raw) != BUCKETS:
        return Season()
    profile: list[float | None] = []
    for v in raw:
        if v is None:
            profile.append(None)
        elif isinstance(v, int | float) and math.isfinite(v) and v >= 0:
            profile.append(float(v))
        else:
            return Season()
    if not math.isfinite(start):
        return Season()
    return Season(start=float(start), profile=tuple(profile))
