"""Trace parsing (Azure CSV, Mooncake JSONL), rate scaling that keeps the time axis, and
the per-minute load statistics against the figures of data/traces/README.md."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pdscaler.sim.traces import load_profile, load_trace, scale_rate

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
CONV = TRACES / "AzureLLMInferenceTrace_conv.csv"
CODE = TRACES / "AzureLLMInferenceTrace_code.csv"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_csv_with_seven_digit_fractions(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "t.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.0000000,396,109\n"
        "2023-11-16 18:15:47.1805900,879,0\n",
    )
    trace = load_trace(path)
    assert trace.arrival.tolist() == pytest.approx([0.0, 0.5, 3.31941])
    assert trace.prompt.tolist() == [374, 879, 396]  # sorted by time
    assert trace.output.tolist() == [44, 0, 109]
    assert trace.span == pytest.approx(3.31941)


def test_bad_csv_header_and_row_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not an Azure trace header"):
        load_trace(write(tmp_path, "a.csv", "time,prompt,output\n1,2,3\n"))
    bad = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,x\n"
    with pytest.raises(ValueError, match=r"b\.csv:2"):
        load_trace(write(tmp_path, "b.csv", bad))
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(write(tmp_path, "c.txt", ""))


def test_mooncake_jsonl(tmp_path: Path) -> None:
    lines = [
        '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [1]}',
        "",
        '{"timestamp": 0, "input_length": 100, "output_length": 7}',
    ]
    trace = load_trace(write(tmp_path, "m.jsonl", "\n".join(lines) + "\n"))
    assert trace.arrival.tolist() == [0.0, 27.482]
    assert trace.prompt.tolist() == [100, 6955]
    assert trace.output.tolist() == [7, 52]
    with pytest.raises(ValueError, match=r"x\.jsonl:1"):
        load_trace(write(tmp_path, "x.jsonl", '{"timestamp": 1}\n'))


def test_scale_rate_keeps_the_time_axis() -> None:
    trace = load_trace(CONV).window(0.0, 600.0)
    double = scale_rate(trace, 2.0, seed=3)
    assert len(double) == 2 * len(trace)
    assert double.span == trace.span
    assert np.all(np.diff(double.arrival) >= 0)
    assert double.arrival.min() >= 0
    assert double.arrival.max() <= trace.span
    # the per-minute shape is preserved: each minute has about twice the requests
    ratio = load_profile(double).rate / load_profile(trace).rate
    assert np.allclose(ratio[:-1], 2.0, atol=0.15)
    assert sorted(double.prompt.tolist()) == sorted(trace.prompt.tolist() * 2)


def test_scale_rate_thins_deterministically() -> None:
    trace = load_trace(CONV).window(0.0, 900.0)
    half, again, other = (scale_rate(trace, 0.5, seed=s) for s in (1, 1, 2))
    assert len(half) == pytest.approx(len(trace) / 2, rel=0.05)
    assert np.array_equal(half.arrival, again.arrival)
    assert not np.array_equal(half.arrival, other.arrival)
    assert scale_rate(trace, 1.0) is trace
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            scale_rate(trace, bad)


@pytest.mark.parametrize(
    ("path", "rows", "mean", "p99", "idle"),
    [(CONV, 19_366, 5.55, 8.19, 0), (CODE, 8_819, 2.52, 9.59, 12)],
)
def test_trace_statistics_match_the_readme(
    path: Path, rows: int, mean: float, p99: float, idle: int
) -> None:
    trace = load_trace(path)
    assert len(trace) == rows
    full_minutes = load_profile(trace, 60.0).rate[:-1]  # the last minute is partial
    assert float(full_minutes.mean()) == pytest.approx(mean, abs=0.01)
    assert float(np.percentile(full_minutes, 99)) == pytest.approx(p99, abs=0.01)
    assert int(np.sum(full_minutes == 0)) == idle
