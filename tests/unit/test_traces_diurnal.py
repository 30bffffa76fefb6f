"""Days of diurnal traffic: the ServeGen week's loader on its own clock, the day cuts,
the gzipped and slow (JSON) paths of the Mooncake parser, the committed file against
data/traces/README.md, and the pre-roll a trace without earlier traffic is given."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from pdscaler.sim.traces import (
    DAY_S,
    Trace,
    days,
    load_diurnal,
    load_profile,
    load_trace,
    with_preroll,
)

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "diurnal-2d.jsonl"
WEEK = REPO / "data" / "traces" / "servegen-m-large-7d.jsonl.gz"
README = REPO / "data" / "traces" / "README.md"


def test_the_diurnal_loader_keeps_the_files_clock() -> None:
    week = load_diurnal(FIXTURE)
    assert week.name == "diurnal-2d"
    assert len(week) == 8
    # not re-based to the first request (1.5 s): day boundaries stay at k x 86,400 s
    assert week.arrival.tolist() == [
        1.5, 3600.0, 3600.0, 43200.25, 86399.999, 86400.0, 90000.0, 172000.0,
    ]  # fmt: skip
    assert week.prompt.tolist() == [100, 200, 300, 400, 500, 600, 700, 800]
    assert week.output.tolist() == [10, 20, 30, 40, 50, 60, 70, 80]
    assert week.span == 2 * DAY_S  # 172,000 s rounded up to whole days


def test_days_cut_whole_days_and_rebase_them() -> None:
    week = load_diurnal(FIXTURE)
    day0, day1, both = days(week, 0), days(week, 1), days(week, 0, 2)
    assert day0.arrival.tolist() == [1.5, 3600.0, 3600.0, 43200.25, 86399.999]
    assert day1.arrival.tolist() == [0.0, 3600.0, 85600.0]  # 86,400 is day 1's first
    assert day1.prompt.tolist() == [600, 700, 800]
    assert (day0.span, day1.span, both.span) == (DAY_S, DAY_S, 2 * DAY_S)
    assert len(both) == len(week)
    assert day1.name == "diurnal-2d-d1+1"
    for first, count in ((2, 1), (1, 2), (-1, 1), (0, 0)):
        with pytest.raises(ValueError, match="outside"):
            days(week, first, count)


def test_gzip_and_the_json_path_read_the_same_requests(tmp_path: Path) -> None:
    text = FIXTURE.read_text(encoding="utf-8")
    gz = tmp_path / "w.jsonl.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    # a line with another key takes the line-by-line JSON parser: same result
    odd = tmp_path / "odd.jsonl"
    odd.write_text(
        text.replace('"output_length": 80}', '"output_length": 80, "hash_ids": [1, 2]}') + "\n",
        encoding="utf-8",
    )
    plain, zipped, slow = load_diurnal(FIXTURE), load_diurnal(gz), load_diurnal(odd)
    for other in (zipped, slow):
        assert np.array_equal(other.arrival, plain.arrival)
        assert np.array_equal(other.prompt, plain.prompt)
        assert np.array_equal(other.output, plain.output)
    # load_trace takes .jsonl.gz too, re-based to the first request like every trace
    rebased = load_trace(gz)
    assert rebased.name == "w"
    assert np.allclose(rebased.arrival, plain.arrival - 1.5)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(gzip.compress(b'{"timestamp": 1, "input_length": 2}\n'))
    with pytest.raises(ValueError, match=r"bad\.jsonl\.gz:1"):
        load_trace(bad)


def test_an_unsorted_or_empty_week_is_refused(tmp_path: Path) -> None:
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    unsorted = tmp_path / "u.jsonl"
    unsorted.write_text("\n".join([lines[1], lines[0]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="sorted"):
        load_diurnal(unsorted)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no requests"):
        load_diurnal(empty)


def test_the_committed_week_is_the_one_the_readme_describes() -> None:
    """sha256, rows, span and the hourly rates of data/traces/README.md."""
    readme = README.read_text(encoding="utf-8")
    digest = re.search(r"sha256 of the file: ([0-9a-f]{64})", readme)
    assert digest is not None
    assert hashlib.sha256(WEEK.read_bytes()).hexdigest() == digest.group(1)
    week = load_diurnal(WEEK)
    assert len(week) == 892_816
    assert week.span == 7 * DAY_S == 604_800.0
    assert week.arrival[-1] == pytest.approx(604_799.999)
    hourly = load_profile(week, 3600.0).rate
    assert len(hourly) == 168
    assert (round(hourly.mean(), 2), round(hourly.min(), 2), round(hourly.max(), 2)) == (
        1.48,
        0.71,
        3.29,
    )
    assert round(float(week.prompt.mean())) == 920
    assert round(float(week.output.mean())) == 169


def _hour() -> Trace:
    """Five requests over a 100 s trace."""
    return Trace(
        "h",
        np.array([0.0, 10.0, 30.0, 70.0, 100.0]),
        np.array([1, 2, 3, 4, 5], dtype=np.int64),
        np.array([6, 7, 8, 9, 10], dtype=np.int64),
        100.0,
    )


def test_the_preroll_replays_the_head_or_the_wrapped_tail() -> None:
    trace = _hour()
    head = with_preroll(trace, 40.0)
    # [0, 40): the trace's first 40 s; then the trace itself moved by 40 s
    assert head.arrival.tolist() == [0.0, 10.0, 30.0, 40.0, 50.0, 70.0, 110.0, 140.0]
    assert head.prompt.tolist() == [1, 2, 3, 1, 2, 3, 4, 5]
    assert head.span == 140.0
    assert (head.arrival[3:] - 40.0).tolist() == trace.arrival.tolist()
    # [0, 30) excludes the request at 30 s: it is the scored span's, not the pre-roll's
    assert len(with_preroll(trace, 30.0)) == 2 + 5
    wrap = with_preroll(trace, 40.0, "wrap")
    # [60, 100] of the trace (the requests at 70 and 100 s) replayed at 10 and 40 s
    assert wrap.arrival.tolist() == [10.0, 40.0, 40.0, 50.0, 70.0, 110.0, 140.0]
    assert wrap.output.tolist() == [9, 10, 6, 7, 8, 9, 10]
    for bad in (0.0, -5.0, 101.0):
        with pytest.raises(ValueError, match="pre-roll must be"):
            with_preroll(trace, bad)
    with pytest.raises(ValueError, match="source"):
        with_preroll(trace, 10.0, "mirror")
