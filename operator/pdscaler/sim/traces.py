"""Request traces for the simulator: parsing and deterministic rate scaling.

Owns: reading the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,
GeneratedTokens``, timestamps like ``2023-11-16 18:15:46.6805900``) and the Mooncake
JSONL format (one object per line: ``timestamp`` in ms, ``input_length``,
``output_length``) into arrays of arrival seconds (from the first request), prompt and
output tokens; ``scale_rate`` which multiplies the request RATE while keeping the time
axis (thinning or duplicating requests, seeded); and per-window load statistics.
Must not: compress or stretch time, draw unseeded randomness, or do any I/O besides
reading the one file it is given.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Trace:
    """Arrivals sorted by time, in seconds from the trace's first request.

    ``span`` is the trace's length in seconds (the last arrival of the ORIGINAL trace);
    rate scaling keeps it, so a scaled trace covers the same hour.
    """

    name: str
    arrival: FloatArray
    prompt: IntArray
    output: IntArray
    span: float

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def mean_rate(self) -> float:
        return len(self) / self.span if self.span > 0 else 0.0

    def window(self, start: float, end: float) -> Trace:
        """The requests in [start, end), re-based to start at 0."""
        sel = (self.arrival >= start) & (self.arrival < end)
        return Trace(
            self.name,
            self.arrival[sel] - start,
            self.prompt[sel],
            self.output[sel],
            end - start,
        )


def _azure_time(text: str) -> float:
    """Seconds since the epoch of ``2023-11-16 18:15:46.6805900`` (UTC; 7 fraction
    digits, more than ``datetime`` takes, so the fraction is parsed separately)."""
    text = text.strip()
    whole, _, frac = text.partition(".")
    base = datetime.fromisoformat(whole + "+00:00").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def _build(name: str, t: list[float], p: list[int], o: list[int]) -> Trace:
    if not t:
        raise ValueError(f"trace {name} has no requests")
    arr = np.array(t, dtype=np.float64)
    order = np.argsort(arr, kind="stable")
    arr = arr[order] - arr[order][0]
    return Trace(
        name,
        arr,
        np.array(p, dtype=np.int64)[order],
        np.array(o, dtype=np.int64)[order],
        float(arr[-1]) if len(arr) > 1 else 1.0,
    )


def load_azure_csv(path: Path) -> Trace:
    """Parse the Azure CSV. Rows with a bad field raise ValueError naming the line."""
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    with path.open(encoding="utf-8") as fh:
        header = fh.readline().strip().split(",")
        if header[:3] != ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
            raise ValueError(f"{path}: not an Azure trace header: {header}")
        for n, line in enumerate(fh, start=2):
            if not line.strip():
                continue
            try:
                ts, ctx, gen = line.split(",")[:3]
                t.append(_azure_time(ts))
                p.append(int(ctx))
                o.append(int(gen))
            except ValueError as exc:
                raise ValueError(f"{path}:{n}: {exc}") from exc
    return _build(path.stem, t, p, o)


def load_mooncake_jsonl(path: Path) -> Trace:
    """Parse Mooncake JSONL: ``{"timestamp": 27482, "input_length": 6955,
    "output_length": 52, ...}`` per line, timestamp in milliseconds."""
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                t.append(float(obj["timestamp"]) / 1000.0)
                p.append(int(obj["input_length"]))
                o.append(int(obj["output_length"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{n}: {exc!r}") from exc
    return _build(path.stem, t, p, o)


def load_trace(path: Path) -> Trace:
    """Azure CSV by its ``.csv`` suffix, Mooncake for ``.jsonl``/``.json``."""
    if path.suffix.lower() == ".csv":
        return load_azure_csv(path)
    if path.suffix.lower() in (".jsonl", ".json"):
        return load_mooncake_jsonl(path)
    raise ValueError(f"{path}: unknown trace format (expected .csv or .jsonl)")


def scale_rate(trace: Trace, factor: float, seed: int = 0) -> Trace:
    """Multiply the request rate by ``factor`` without touching the time axis.

    Each request is kept ``floor(factor)`` times plus once more with probability
    ``frac(factor)`` (so 0.5 thins to about half, 2.0 doubles exactly, 2.5 gives 2 or 3
    copies). Extra copies arrive at a seeded uniform offset inside the gap to the next
    request, so the rate's shape (bursts, idle minutes) and the span are preserved.
    """
    if not (factor > 0 and math.isfinite(factor)):
        raise ValueError(f"rate scale must be a positive number, got {factor}")
    if factor == 1.0:
        return trace
    rng = np.random.default_rng(seed)
    n = len(trace)
    whole = math.floor(factor)
    copies = np.full(n, whole, dtype=np.int64) + (rng.random(n) < factor - whole)
    gaps = np.diff(np.append(trace.arrival, trace.span))
    idx = np.repeat(np.arange(n), copies)
    # copy number within each request: 0 for the original, 1.. for duplicates
    starts = np.repeat(np.cumsum(copies) - copies, copies)
    k = np.arange(len(idx)) - starts
    offset = np.where(k > 0, rng.random(len(idx)) * gaps[idx], 0.0)
    arr = trace.arrival[idx] + offset
    order = np.argsort(arr, kind="stable")
    return Trace(
        f"{trace.name}x{factor:g}",
        arr[order],
        trace.prompt[idx][order],
        trace.output[idx][order],
        trace.span,
    )


@dataclass(frozen=True)
class LoadProfile:
    """Per-window load: request rate and mean prompt/output tokens (NaN when empty)."""

    start: FloatArray
    rate: FloatArray
    prompt_mean: FloatArray
    output_mean: FloatArray
    prompt_tps: FloatArray
    output_tps: FloatArray


def load_profile(trace: Trace, window: float = 60.0) -> LoadProfile:
    """Bin the trace into ``window``-second windows. The conversation trace gives a
    1-minute rate of mean 5.55 req/s and p99 8.19 (shared/traces/README.md)."""
    nbins = max(1, math.ceil(trace.span / window))
    b = np.minimum((trace.arrival // window).astype(np.int64), nbins - 1)
    count = np.bincount(b, minlength=nbins).astype(np.float64)
    ptok = np.bincount(b, weights=trace.prompt.astype(np.float64), minlength=nbins)
    otok = np.bincount(b, weights=trace.output.astype(np.float64), minlength=nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        pm = np.where(count > 0, ptok / count, np.nan)
        om = np.where(count > 0, otok / count, np.nan)
    return LoadProfile(
        start=np.arange(nbins, dtype=np.float64) * window,
        rate=count / window,
        prompt_mean=pm,
        output_mean=om,
        prompt_tps=ptok / window,
        output_tps=otok / window,
    )
