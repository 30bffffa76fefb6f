"""The seasonal forecast (``policy.seasonal``, issue 27 item 4): buckets, the hourly
fold, the level, the trust rules and the persisted form, each with its worked numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import pytest

from pdscaler import status
from pdscaler.policy import seasonal
from pdscaler.policy.seasonal import BUCKET_S, BUCKETS, DAY_S
from pdscaler.types import PolicyMemory, Season


def replay(
    season: Season, start: float, end: float, rate_at: Callable[[float], float], step: float = 15.0
) -> Season:
    """``season`` after one tick every ``step`` seconds in [start, end)."""
    t = start
    while t < end:
        season = seasonal.observe(season, t, rate_at(t))
        t += step
    return season


def day_shape(t: float) -> float:
    """A day: 2 req/s at midnight rising linearly to 8 req/s at noon and back."""
    h = (t % DAY_S) / 3600.0
    return 2.0 + 6.0 * (1.0 - abs(h - 12.0) / 12.0)


def test_a_bucket_averages_its_samples_and_closes_when_the_next_starts() -> None:
    """Bucket 0 seen 2 then 4 req/s, then a sample at 310 s: it closes at 3 req/s, with
    nothing expected of it (no profile yet); the open bucket is 1 with that sample."""
    s = seasonal.observe(Season(), 100.0, 2.0)
    s = seasonal.observe(s, 200.0, 4.0)
    assert (s.bucket, s.total, s.count) == (0, 6.0, 2)
    s = seasonal.observe(s, 310.0, 5.0)
    assert s.recent == ((0, 3.0, None),)
    assert s.pending == ((0, 3.0),)
    assert (s.bucket, s.total, s.count, s.start) == (1, 5.0, 1, 100.0)


def test_the_profile_folds_once_an_hour() -> None:
    """The open hour's closed buckets stay pending until the hour ends: the profile (the
    persisted part) changes at most once an hour."""
    s = replay(Season(), 0.0, 3600.0, lambda t: 3.0)
    assert not any(v is not None for v in s.profile)  # 11 buckets pending, none folded
    assert len(s.pending) == 11
    s = seasonal.observe(s, 3600.0, 3.0)  # the hour ends: all 12 fold
    assert s.pending == ()
    assert s.profile[:12] == (3.0,) * 12
    assert s.profile[12] is None


def test_a_second_day_smooths_into_the_first() -> None:
    """Seen 3 req/s one day and 5 the next: 0.5 x 5 + 0.5 x 3 = 4 (ALPHA 0.5)."""
    assert seasonal.fold((3.0, None), ((0, 5.0), (1, 7.0))) == (4.0, 7.0)
    s = replay(Season(), 0.0, 3601.0, lambda t: 3.0)
    s = replay(s, DAY_S, DAY_S + 3601.0, lambda t: 5.0)
    assert s.profile[0] == pytest.approx(4.0)


def test_the_level_is_the_last_hours_rate_over_its_expectation() -> None:
    """Observed 11, 22, 33 where 10, 20, 30 were expected -> 66 / 60 = 1.1; two buckets
    are too few; buckets older than an hour do not count."""
    s = Season(recent=((100, 11.0, 10.0), (101, 22.0, 20.0), (102, 33.0, 30.0)))
    now = 103 * BUCKET_S
    assert seasonal.level(s, now) == pytest.approx(1.1)
    assert seasonal.level(Season(recent=s.recent[:2]), now) is None
    assert seasonal.level(s, (103 + 13) * BUCKET_S) is None  # bucket 100 is 16 buckets old


def test_the_profile_is_linear_between_bucket_centres() -> None:
    """Buckets 4 and 6 req/s: at the first's centre 4, a quarter of the way 4.5; an unseen
    neighbour gives the seen one; both unseen -> None."""
    profile = (4.0, 6.0, *([None] * (BUCKETS - 2)))
    assert seasonal.at(profile, 150.0) == pytest.approx(4.0)
    assert seasonal.at(profile, 150.0 + 75.0) == pytest.approx(4.5)
    assert seasonal.at(profile, 500.0) == 6.0  # between bucket 1 and unseen bucket 2
    assert seasonal.at(profile, 1000.0) is None
    assert seasonal.at((), 0.0) is None


def test_the_worked_example_of_the_module() -> None:
    """09:55, 10:00, 10:05 at 4, 4, 6 req/s, level 1.1: at 09:59 + 105 s -> 4.4; at
    10:02 + 105 s (10:03:45, a quarter of the way to 6) -> 4.95."""
    profile: list[float | None] = [None] * BUCKETS
    k = 10 * 12  # the 10:00 bucket
    profile[k - 1], profile[k], profile[k + 1] = 4.0, 4.0, 6.0
    ten = DAY_S + 10 * 3600.0
    b = math.floor((ten - 60) / BUCKET_S)
    recent = ((b - 3, 4.4, 4.0), (b - 2, 4.4, 4.0), (b - 1, 4.4, 4.0))
    s = Season(start=0.0, profile=tuple(profile), recent=recent)
    assert seasonal.forecast(s, ten - 60.0, 105.0) == pytest.approx(4.4)
    assert seasonal.forecast(s, ten + 120.0, 105.0) == pytest.approx(4.95)


def test_it_scales_ahead_of_a_rise_and_falls_with_a_trough() -> None:
    """After one day of the shape, the next day's forecast 105 s ahead follows it: at
    05:00 (rising) it is above the current rate, at 14:00 (falling) below it."""
    s = replay(Season(), 0.0, DAY_S + 5 * 3600.0, day_shape)
    now = DAY_S + 5 * 3600.0
    f = seasonal.forecast(s, now, 105.0)
    assert f is not None
    assert f > day_shape(now)
    assert f == pytest.approx(day_shape(now + 105.0), rel=0.01)
    s = replay(s, now, DAY_S + 14 * 3600.0, day_shape)
    now = DAY_S + 14 * 3600.0
    f = seasonal.forecast(s, now, 105.0)
    assert f is not None
    assert f < day_shape(now)


def test_short_history_or_a_departing_day_falls_back() -> None:
    """Under a day of history -> None; a day running at 2x its shape (level 2 > BAND) ->
    None; one at 1.2x is trusted and scaled by it."""
    s = replay(Season(), 0.0, 20 * 3600.0, day_shape)
    assert seasonal.forecast(s, 20 * 3600.0, 105.0) is None  # 20 h < a day
    s = replay(s, 20 * 3600.0, DAY_S, day_shape)
    now = DAY_S + 3 * 3600.0
    doubled = replay(s, DAY_S, now, lambda t: 2.0 * day_shape(t))
    assert seasonal.level(doubled, now) == pytest.approx(2.0, rel=0.01)
    assert seasonal.forecast(doubled, now, 105.0) is None
    assert not seasonal.trusted(doubled, now)
    busier = replay(s, DAY_S, now, lambda t: 1.2 * day_shape(t))
    f = seasonal.forecast(busier, now, 105.0)
    assert f == pytest.approx(1.2 * day_shape(now + 105.0), rel=0.01)


def test_bad_samples_and_a_clock_going_back() -> None:
    """A NaN or negative rate is ignored; a clock that goes back restarts the open
    bucket (and keeps the earliest start)."""
    s = seasonal.observe(Season(), 1000.0, 2.0)
    assert seasonal.observe(s, 1010.0, math.nan) == s
    assert seasonal.observe(s, 1010.0, -1.0) == s
    back = seasonal.observe(s, 400.0, 7.0)
    assert (back.bucket, back.total, back.count, back.start) == (1, 7.0, 1, 400.0)


def test_memory_is_bounded_over_a_week() -> None:
    s = replay(Season(), 0.0, 7 * DAY_S, day_shape, step=60.0)
    assert len(s.profile) == BUCKETS
    assert len(s.pending) <= seasonal.FOLD
    assert len(s.recent) <= seasonal.RECENT


def test_the_persisted_form_round_trips_in_a_few_kib() -> None:
    """Start 100.7, 2.3456 req/s -> {"start": 100, "profile": [2.35, ...]}; a week's
    profile is under 3 KiB of JSON; decode gives the profile and start back."""
    s = Season(start=100.7, profile=(2.3456, *([None] * (BUCKETS - 1))))
    out = seasonal.encode(s)
    assert out is not None
    assert out["start"] == 100
    assert out["profile"][:2] == [2.35, None]
    week = replay(Season(), 0.0, 7 * DAY_S, lambda t: 1234.567 * day_shape(t), step=60.0)
    data = seasonal.encode(week)
    assert data is not None
    assert len(json.dumps(data)) < 3 * 1024
    back = seasonal.decode(json.loads(json.dumps(data)))
    assert back.start == 0.0
    assert len(back.profile) == BUCKETS
    for a, b in zip(back.profile, week.profile, strict=True):
        assert a is not None
        assert b is not None
        assert a == pytest.approx(b, rel=5e-3)
    assert seasonal.encode(Season()) is None


@pytest.mark.parametrize(
    "data",
    [
        None,
        "x",
        {"profile": [1.0] * BUCKETS},
        {"start": 0, "profile": [1.0] * (BUCKETS - 1)},
        {"start": 0, "profile": [-1.0] * BUCKETS},
        {"start": 0, "profile": ["a"] * BUCKETS},
        {"start": float("inf"), "profile": [1.0] * BUCKETS},
    ],
)
def test_a_malformed_persisted_season_is_forgotten(data: object) -> None:
    assert seasonal.decode(data) == Season()


def test_the_season_survives_a_restart_through_status() -> None:
    """``status.memory_to_status`` keeps the folded profile and start; a restarted
    operator (``memory_from_status``) trusts the season again once 3 buckets of the new
    hour have a level (15 minutes), and forecasts what the uninterrupted one does."""
    s = replay(Season(), 0.0, DAY_S + 2 * 3600.0, day_shape)
    now = DAY_S + 2 * 3600.0
    persisted = json.loads(json.dumps(status.memory_to_status(PolicyMemory(season=s), now, 300)))
    assert len(json.dumps(persisted["season"])) < 3 * 1024
    restarted = status.memory_from_status(persisted, now).season
    assert restarted.profile == tuple(
        None if v is None else pytest.approx(v, rel=5e-3) for v in s.profile
    )
    assert not seasonal.trusted(restarted, now)  # no level yet
    later = now + 20 * 60.0
    resumed = replay(restarted, now, later, day_shape)
    kept = replay(s, now, later, day_shape)
    got, want = seasonal.forecast(resumed, later, 105.0), seasonal.forecast(kept, later, 105.0)
    assert got is not None
    assert got == pytest.approx(want, rel=1e-2)


def test_the_persisted_season_changes_at_most_hourly() -> None:
    """Zero writes when converged: within an hour the persisted memory is the same every
    tick (the open hour is not persisted); the fold at the hour changes it."""
    s = replay(Season(), 0.0, DAY_S + 3600.0 + 15.0, day_shape)
    t0 = DAY_S + 3600.0 + 15.0

    def persisted(season: Season, now: float) -> object:
        return status.memory_to_status(PolicyMemory(season=season), now, 300)["season"]

    first = persisted(s, t0)
    for i in range(1, 239):  # the rest of the hour at 15 s
        s = seasonal.observe(s, t0 + 15.0 * i, day_shape(t0 + 15.0 * i) * (1 + 0.01 * (i % 3)))
        assert persisted(s, t0 + 15.0 * i) == first
    s = seasonal.observe(s, DAY_S + 2 * 3600.0, 5.0)
    assert persisted(s, DAY_S + 2 * 3600.0) != first
