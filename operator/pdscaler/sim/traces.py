"""Request traces for the simulator: parsing and deterministic rate scaling.

Owns: reading the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,
GeneratedTokens``, timestamps like ``2023-11-16 18:15:46.6805900``) and the Mooncake
JSONL format (one object per line: ``timestamp`` in ms, ``input_length``,
``output_length``) into arrays of arrival seconds (from the first request), prompt and
output tokens; ``scale_rate`` which multiplies the request RATE while keeping the time
axis (thinning or duplicating requests, seeded); and per-window load statistics.
Multi-day traffic: ``load_diurnal`` reads the ServeGen week (Mooncake JSONL, gzipped:
data/traces/README.md) on its own clock (t=0 is the start of the generator's first
window, not the first request) and ``days`` cuts whole days out of it. Fair starts:
``with_preroll`` puts a trace's own first (or last) minutes before it, for the loop's
``LoopConfig.preroll_s``.
Must not: compress or stretch time, draw unseeded randomness, or do any I/O besides
reading the one file it is given.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Seconds in a day (``days``).
DAY_S = 86_400.0
#: How ``with_preroll`` fills the pre-roll of a trace that has no traffic before it.
PREROLL_SOURCES = ("head", "wrap")
#: One line of Mooncake JSONL in the usual key order and nothing else (the fast path of
#: ``load_mooncake_jsonl``; any other line takes the JSON parser).
_MOONCAKE_LINE = re.compile(
    r'^[ \t]*\{\s*"timestamp"\s*:\s*(-?[0-9.eE+-]+)\s*,\s*"input_length"\s*:\s*(\d+)'
    r'\s*,\s*"output_length"\s*:\s*(\d+)\s*\}[ \t\r]*$',
    re.MULTILINE,
)


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


def _read_text(path: Path) -> str:
    """The file's text; gunzipped when its name ends in ``.gz``."""
    if path.suffix.lower() == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            return fh.read()
    return path.read_text(encoding="utf-8")


def _mooncake_columns(path: Path) -> tuple[FloatArray, IntArray, IntArray]:
    """(arrival seconds as recorded, prompt, output) of a Mooncake JSONL file, in file
    order. Lines of exactly ``{"timestamp": t, "input_length": p, "output_length": o}``
    are read by one regular expression (the ServeGen week's 892,816 lines in ~2 s
    instead of ~8); a file with any other line is parsed line by line as JSON."""
    text = _read_text(path)
    rows = _MOONCAKE_LINE.findall(text)
    if rows and len(rows) == sum(1 for line in text.splitlines() if line.strip()):
        cols = np.array(rows, dtype=np.float64).T
        return cols[0] / 1000.0, cols[1].astype(np.int64), cols[2].astype(np.int64)
    t: list[float] = []
    p: list[int] = []
    o: list[int] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            t.append(float(obj["timestamp"]) / 1000.0)
            p.append(int(obj["input_length"]))
            o.append(int(obj["output_length"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: {exc!r}") from exc
    return np.array(t, dtype=np.float64), np.array(p, dtype=np.int64), np.array(o, dtype=np.int64)


def _stem(path: Path) -> str:
    """``servegen-m-large-7d`` of ``servegen-m-large-7d.jsonl.gz``."""
    name = path.name
    for suffix in (".gz", ".jsonl", ".json", ".csv"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def load_mooncake_jsonl(path: Path) -> Trace:
    """Parse Mooncake JSONL (gzipped when the name ends in ``.gz``): ``{"timestamp":
    27482, "input_length": 6955, "output_length": 52, ...}`` per line, timestamp in
    milliseconds. Arrivals from the first request (as every trace here)."""
    t, p, o = _mooncake_columns(path)
    return _build(_stem(path), t.tolist(), p.tolist(), o.tolist())


def load_diurnal(path: Path) -> Trace:
    """Days of traffic in Mooncake JSONL (``servegen-m-large-7d.jsonl.gz``) on the
    file's own clock: an arrival is its ``timestamp`` (ms from the start of the
    generator's first window), NOT re-based to the first request, so day k is
    [k * 86,400, (k + 1) * 86,400) s; the span is whole days (the last arrival rounded
    up to a day: 604,799.999 s -> 604,800, 7 days). Raises ValueError on an empty file,
    a negative timestamp or an unsorted file (a day cut would then be wrong)."""
    t, p, o = _mooncake_columns(path)
    if len(t) == 0:
        raise ValueError(f"trace {path} has no requests")
    if t[0] < 0 or np.any(np.diff(t) < 0):
        raise ValueError(f"{path}: timestamps must be sorted and not negative")
    span = max(1.0, math.ceil(float(t[-1]) / DAY_S)) * DAY_S
    return Trace(_stem(path), t, p, o, span)


def days(trace: Trace, first: int, count: int = 1) -> Trace:
    """Days ``first`` .. ``first + count - 1`` of a ``load_diurnal`` trace, re-based to
    start at 0 (span ``count`` days): ``days(week, 0, 2)`` is the warm-up day and the
    first scored day, 0-172,800 s. Raises ValueError outside the trace."""
    if first < 0 or count < 1 or (first + count) * DAY_S > trace.span + 1e-6:
        raise ValueError(
            f"days {first}..{first + count - 1} are outside the trace's {trace.span / DAY_S:g} days"
        )
    out = trace.window(first * DAY_S, (first + count) * DAY_S)
    return Trace(f"{trace.name}-d{first}+{count}", out.arrival, out.prompt, out.output, out.span)


def with_preroll(trace: Trace, seconds: float, source: str = "head") -> Trace:
    """``trace`` preceded by ``seconds`` of its own traffic, for ``LoopConfig.preroll_s =
    seconds``: the result's [0, seconds) is the pre-roll and [seconds, seconds + span)
    is ``trace`` (its arrivals + ``seconds``). The hour traces have no traffic before
    their first request, so ``source`` says which is replayed before it: ``head`` (the
    bench's choice) the trace's own first ``seconds`` (the same mix and level the scored
    span opens with), ``wrap`` its last ``seconds`` (the span's end included). A 3,502 s
    trace with 600 s of ``head`` pre-roll: 4,102 s, the requests of [0, 600) twice (at t
    and t + 600).
    Apply it last (after rate scaling and jitter), so the pre-roll is the scored
    traffic's own copy."""
    if source not in PREROLL_SOURCES:
        raise ValueError(f"pre-roll source must be one of {PREROLL_SOURCES}, got {source!r}")
    if not 0 < seconds <= trace.span:
        raise ValueError(f"pre-roll must be in (0, {trace.span:g}] s, got {seconds!r}")
    if source == "head":
        lo, sel = 0.0, trace.arrival < seconds
    else:  # [span - seconds, span]: the last request of a recorded trace sits at the span
        lo = trace.span - seconds
        sel = trace.arrival >= lo
    return Trace(
        f"{trace.name}+{source}{seconds:g}s",
        np.concatenate([trace.arrival[sel] - lo, trace.arrival + seconds]),
        np.concatenate([trace.prompt[sel], trace.prompt]),
        np.concatenate([trace.output[sel], trace.output]),
        trace.span + seconds,
    )


def load_trace(path: Path) -> Trace:
    """Azure CSV by its ``.csv`` suffix, Mooncake for ``.jsonl``/``.json`` (either
    gzipped: ``.jsonl.gz``)."""
    suffixes = [x.lower() for x in path.suffixes[-2:]]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]
    if suffixes[-1:] == [".csv"] and path.suffix.lower() == ".csv":
        return load_azure_csv(path)
    if suffixes[-1:] in ([".jsonl"], [".json"]):
        return load_mooncake_jsonl(path)
    raise ValueError(f"{path}: unknown trace format (expected .csv, .jsonl or .jsonl.gz)")


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
