"""The bounds every policy is measured against: the SLO-feasible oracle's schedule and
its repair, the fluid lower bound, the work-conserving floor and the feasibility
ceiling.

Owns: ``repair`` (one step of the SLO-feasible oracle: given a schedule and the
per-request timings of its replay, add replicas to the bins where the misses
happened, proportionally to the share of that bin's requests that missed; the search
loop that replays it lives in ``compare.feasible_oracle``), ``feasibility_ceiling``
(the share of requests whose own service time, alone on an idle replica, fits the
SLO), ``lower_bound`` (an autoscaler that knows the whole trace and the engine's TRUE
capacities: per ``bin_s`` bin, the fewest integer replicas whose capacity covers the
work of that bin, each ordered ``startup_s`` before it is needed and kept through idle
gaps shorter than the start-up time, never below the spec's minimum per pool) and
``work_floor`` (total prefill tokens / P_prefill + the prompts' attention + total
decode tokens / P_decode, as if GPUs could be billed by the token). ``lower_bound`` at
full load in 15 s bins, replayed, meets only 50-85% of the SLO: a LOWER BOUND, not an
achievable schedule.
Must not: run the engine (a schedule can be replayed with
``controllers.ScheduleController`` to see what SLO it would get).

Capacities (TRUE, from ``EngineParams``): prefill runs full batches,
``prefill_batch_tps`` (8,370 tokens/s with the defaults), plus each prompt's attention,
quadratic in its own length (``prefill_attention_s`` of the sum of the squared
prompts): a bin's prefill work is ``tokens / 8,370 + sum(L^2) / (8,500 * 53,400)``
replica-seconds (1 req/s of 16,000 tokens: 1.91 + 0.56 = 2.48 -> 3 replicas, 2
without the attention); decode runs the largest batch whose step meets the TPOT SLO
and whose KV fits, ``decode_tps`` at the bin's mean lengths (~1,730 tokens/s at the
chat mix, 50 ms). Decode tokens are spread over each request's decode time at that
step (not lumped at its arrival).

Billing a level: replica k is needed in the bins where the schedule is >= k; each run
of such bins [a, b) is billed from ``a - startup_s`` (0 for a run starting at 0: the
initial replicas are there) to ``b``, and overlapping intervals are merged, which is
exactly "keep it through gaps shorter than the start-up". Needs 1 replica in
[0, 60) and [90, 120) with T_s = 60: billed [0, 60) + [30, 120) -> [0, 120) = 120 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pdscaler.sim.engine import EngineParams, FloatArray, IntArray, RequestTimes
from pdscaler.sim.traces import Trace


@dataclass(frozen=True)
class Schedule:
    """Replicas needed per bin (bin k starts at ``times[k]``)."""

    times: FloatArray
    prefill: IntArray
    decode: IntArray
    bin_s: float


@dataclass(frozen=True)
class OracleResult:
    gpu_hours: float
    prefill_gpu_hours: float
    decode_gpu_hours: float
    schedule: Schedule


def level_seconds(levels: IntArray, bin_s: float, startup_s: float) -> float:
    """Replica-seconds to provide ``levels[k]`` replicas in bin k (module docstring):
    levels [1, 1, 0, 1] of 30 s bins with T_s 60 -> [0, 60) + [30, 120) = 120 s; with
    T_s 10 -> [0, 60) + [80, 120) = 100 s."""
    total = 0.0
    top = int(levels.max()) if len(levels) else 0
    for k in range(1, top + 1):
        need = np.concatenate(([False], levels >= k, [False]))
        edges = np.flatnonzero(np.diff(need.astype(np.int8)))
        starts, ends = edges[0::2] * bin_s, edges[1::2] * bin_s
        billed_from = np.where(starts > 0, np.maximum(0.0, starts - startup_s), 0.0)
        covered_to = -math.inf
        for a, b in zip(billed_from, ends, strict=True):
            a = max(float(a), covered_to)
            total += max(0.0, float(b) - a)
            covered_to = max(covered_to, float(b))
    return total


def _decode_tokens_per_second(trace: Trace, step_s: float, horizon: int) -> FloatArray:
    """Output tokens generated in each second [0, horizon), each request spreading its
    tokens at one per ``step_s`` from its arrival (1-second resolution)."""
    start = np.minimum(trace.arrival.astype(np.int64), horizon - 1)
    end = np.ceil(trace.arrival + trace.output * step_s).astype(np.int64)
    end = np.minimum(np.maximum(end, start + 1), horizon)
    per_sec = trace.output / (end - start)
    diff = np.zeros(horizon + 1)
    np.add.at(diff, start, per_sec)
    np.add.at(diff, end, -per_sec)
    return np.cumsum(diff)[:horizon]


def schedule(
    trace: Trace,
    params: EngineParams,
    *,
    tpot_s: float,
    bin_s: float = 15.0,
    minimum: tuple[int, int] = (1, 1),
    derate: float = 1.0,
    smooth_s: float | None = None,
) -> Schedule:
    """The oracle's replicas per bin over the trace and its decode tail. ``derate`` < 1
    plans every replica at that fraction of its true capacity. ``smooth_s``: size
    prefill for the mean rate of the ``smooth_s`` seconds from each bin on (the lean
    first plan of the SLO-feasible oracle, which ``repair`` then raises where its
    replay missed) instead of each bin's own work."""
    if not 0 < derate <= 1:
        raise ValueError(f"derate must be in (0, 1], got {derate}")
    if len(trace) == 0:
        return Schedule(np.zeros(1), np.array([minimum[0]]), np.array([minimum[1]]), bin_s)
    _, step = params.decode_operating_point(
        float(trace.prompt.mean()), float(trace.output.mean()), tpot_s
    )
    tail = float(np.max(trace.arrival + trace.output * step))
    horizon = math.ceil(max(trace.span, tail)) + 1
    nbins = math.ceil(horizon / bin_s)
    b = np.minimum((trace.arrival // bin_s).astype(np.int64), nbins - 1)
    count = np.bincount(b, minlength=nbins).astype(np.float64)
    prompt = trace.prompt.astype(np.float64)
    psum = np.bincount(b, weights=prompt, minlength=nbins)
    qsum = np.bincount(b, weights=prompt * prompt, minlength=nbins)
    osum = np.bincount(b, weights=trace.output.astype(np.float64), minlength=nbins)
    per_sec = _decode_tokens_per_second(trace, step, horizon)
    sec_bin = np.minimum((np.arange(horizon) // bin_s).astype(np.int64), nbins - 1)
    otok = np.bincount(sec_bin, weights=per_sec, minlength=nbins)
    # replica-seconds of prefill per bin: full batches plus each prompt's attention
    work = psum / params.prefill_batch_tps() + params.prefill_attention_s(1.0) * qsum
    # smoothing: the mean rate of the m bins [k, k + m), the lean start of the repair
    m = None if smooth_s is None or smooth_s <= bin_s else max(1, round(smooth_s / bin_s))
    if m is None:
        prefill = np.ceil(work / (derate * bin_s) - 1e-9).astype(np.int64)
    else:
        sums, widths = _window_sums(work, m)
        rate = sums / (widths * bin_s)
        prefill = np.ceil(rate / derate - 1e-9).astype(np.int64)
    mix_cap = params.decode_tps(float(trace.prompt.mean()), float(trace.output.mean()), tpot_s)
    caps = np.array(
        [
            params.decode_tps(p / c, o / c, tpot_s) if c > 0 else mix_cap
            for p, o, c in zip(psum, osum, count, strict=True)
        ]
    )
    drate = otok / (caps * derate * bin_s)
    if m is not None:
        sums, widths = _window_sums(drate, m)
        drate = sums / widths
    decode = np.ceil(drate - 1e-9).astype(np.int64)
    return Schedule(
        np.arange(nbins, dtype=np.float64) * bin_s,
        np.maximum(prefill, minimum[0]),
        np.maximum(decode, minimum[1]),
        bin_s,
    )


def _window_sums(x: FloatArray | IntArray, m: int) -> tuple[FloatArray, IntArray]:
    """Per bin k: the sum of ``x`` over bins [k, k + m) cut at the end, and how many
    bins that is: ``_window_sums([1, 2, 3], 2)`` -> ``([3, 5, 3], [2, 2, 1])``."""
    n = len(x)
    csum = np.concatenate(([0.0], np.cumsum(x)))
    end = np.minimum(np.arange(n) + m, n)
    return csum[end] - csum[:n], end - np.arange(n)


def lower_bound(
    trace: Trace,
    params: EngineParams,
    *,
    startup_s: float,
    tpot_s: float,
    bin_s: float = 15.0,
    minimum: tuple[int, int] = (1, 1),
    derate: float = 1.0,
) -> OracleResult:
    """GPU-hours of the oracle's schedule, billed as in the module docstring."""
    sched = schedule(trace, params, tpot_s=tpot_s, bin_s=bin_s, minimum=minimum, derate=derate)
    p = level_seconds(sched.prefill, bin_s, startup_s) * params.prefill_gpus / 3600.0
    d = level_seconds(sched.decode, bin_s, startup_s) * params.decode_gpus / 3600.0
    return OracleResult(p + d, p, d, sched)


def work_floor(trace: Trace, params: EngineParams, *, tpot_s: float) -> float:
    """GPU-hours if every GPU-second did useful work at the TRUE capacity:
    19,366 conversation requests, 22.4M prompt tokens / 8,370 + their attention
    (sum L^2 / (8,500 x 53,400): 1,155 tokens on average, but long ones weigh) + 4.09M
    output tokens / ~1,730 -> about 2,670 + 110 + 2,370 GPU-s = 1.43 GPU-hours."""
    if len(trace) == 0:
        return 0.0
    prompt = trace.prompt.astype(np.float64)
    prefill_s = params.prefill_work_s(float(prompt.sum()), float(np.sum(prompt * prompt)))
    cap = params.decode_tps(float(trace.prompt.mean()), float(trace.output.mean()), tpot_s)
    decode_s = float(trace.output.sum()) / cap
    return (prefill_s * params.prefill_gpus + decode_s * params.decode_gpus) / 3600.0


def fine_bin(ttft_s: float, interval_s: float) -> float:
    """The SLO-feasible oracle's bin: no wider than the TTFT limit nor the interval,
    at least 1 s: TTFT 2 s, interval 15 s -> 2 s."""
    return max(1.0, min(ttft_s, interval_s))


def _bins(t: FloatArray, bin_s: float, nbins: int) -> IntArray:
    b = np.nan_to_num(t, nan=0.0) // bin_s
    return np.clip(b.astype(np.int64), 0, nbins - 1)


@dataclass(frozen=True)
class Repair:
    """One repair of a schedule after its replay: the SLO misses, how many were charged
    to each pool (prefill: TTFT misses that spent at least half their TTFT queued for or
    in prefill; decode: waiting for a decode slot, a slow TPOT, unfinished, or a TTFT
    miss a quarter of which came after the prefill), and the replicas added to each as
    runs of bins ``(from_s, to_s, +n)``."""

    misses: int
    prefill_misses: int
    decode_misses: int
    prefill_added: tuple[tuple[float, float, int], ...]
    decode_added: tuple[tuple[float, float, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "misses": self.misses,
            "prefill": {
                "why": "TTFT misses queued for or in prefill",
                "misses": self.prefill_misses,
                "added": [list(r) for r in self.prefill_added],
            },
            "decode": {
                "why": "waited for a decode slot, slow TPOT or unfinished",
                "misses": self.decode_misses,
                "added": [list(r) for r in self.decode_added],
            },
        }


def _runs(added: IntArray, bin_s: float) -> tuple[tuple[float, float, int], ...]:
    """Runs of equal positive additions as (from_s, to_s, +n): [0, 1, 1, 0, 2] in 2 s
    bins -> ((2.0, 6.0, 1), (8.0, 10.0, 2))."""
    out: list[tuple[float, float, int]] = []
    k, n = 0, len(added)
    while k < n:
        j = k
        while j + 1 < n and added[j + 1] == added[k]:
            j += 1
        if added[k] > 0:
            out.append((k * bin_s, (j + 1) * bin_s, int(added[k])))
        k = j + 1
    return tuple(out)


def repair(
    sched: Schedule,
    times: RequestTimes,
    *,
    ttft_limit: FloatArray,
    tpot_s: float,
    maximum: tuple[int, int] = (10_000, 10_000),
    fix: float | None = None,
) -> tuple[Schedule, int]:
    """Add capacity where the replay of ``sched`` missed the SLO, proportionally (the
    coarse repair of ``repair_path``); (new schedule, misses)."""
    new, step = repair_path(
        sched, times, ttft_limit=ttft_limit, tpot_s=tpot_s, maximum=maximum, fix=fix
    )
    return new, step.misses


def repair_path(
    sched: Schedule,
    times: RequestTimes,
    *,
    ttft_limit: FloatArray,
    tpot_s: float,
    maximum: tuple[int, int] = (10_000, 10_000),
    fix: float | None = None,
    one: bool = False,
    by: int = 1,
) -> tuple[Schedule, Repair]:
    """Add capacity where the replay of ``sched`` missed the SLO; (new schedule, what
    was charged and added).

    Each miss is charged to one pool: a TTFT miss whose time to the end of its prefill
    (queue + prefill) is at least half of its TTFT (or whose prefill never ended) to
    prefill in its arrival bin and the one before; any other miss (waiting for a decode
    slot, a slow TPOT, unfinished), and a TTFT miss a quarter of which was spent after
    the prefill, to decode in every bin from its arrival to its finish. Coarse (the
    default): a bin gets ``ceil(level * missed / requests)`` more replicas (at least 1)
    where ``missed`` is the misses charged to it: 3 prefill replicas in a bin where 40%
    of the requests missed TTFT -> 3 + ceil(1.2) = 5. ``one``: +``by`` replicas (1
    unless the last repair changed nothing the replay saw) in each bin with misses
    charged to it (3 -> 4), the tight oracle's step. Bins without misses are unchanged.
    With ``fix`` (close to the target: the misses still to remove), only the bins with
    the most misses get +1 (+``by`` when ``one``) each, until they hold twice ``fix``
    misses.
    """
    nb = len(sched.times)
    bs = sched.bin_s
    with np.errstate(invalid="ignore"):
        ttft = np.nan_to_num(times.ttft, nan=math.inf)
        tpot = np.nan_to_num(times.tpot, nan=math.inf)
        pre = np.nan_to_num(times.prefill_end - times.arrival, nan=math.inf)
    # a request no replica can hold (rejected as unservable) misses whatever the
    # schedule: it is charged to no pool
    servable = np.ones(len(ttft), dtype=bool) if times.rejected is None else ~times.rejected
    miss_ttft = servable & (ttft > ttft_limit + 1e-9)
    miss = miss_ttft | (servable & (tpot > tpot_s + 1e-9))
    with np.errstate(invalid="ignore"):  # inf - inf: a prefill that never ended
        after = ttft - pre
    on_prefill = miss_ttft & (pre >= after)
    on_decode = miss & (~on_prefill | (after >= 0.25 * ttft))
    arr_bin = _bins(times.arrival, bs, nb)
    count = np.maximum(np.bincount(arr_bin, minlength=nb), 1).astype(np.float64)
    p_miss = np.bincount(arr_bin[on_prefill], minlength=nb).astype(np.float64)
    p_frac = p_miss / count
    # the bin before a miss fills the queue too
    p_miss[:-1] += p_miss[1:]
    p_frac[:-1] = np.maximum(p_frac[:-1], p_frac[1:])
    # decode: each missing request spreads its weight over its own bins
    end = np.where(np.isfinite(times.finish), times.finish, times.arrival + 60.0)
    lo = arr_bin[on_decode]
    hi = np.maximum(_bins(end[on_decode], bs, nb), lo) + 1
    diff = np.zeros(nb + 1)
    np.add.at(diff, lo, 1.0)
    np.add.at(diff, hi, -1.0)
    d_miss = np.cumsum(diff)[:nb]
    if one:
        p_add = by * (p_miss > 0).astype(np.int64)
        d_add = by * (d_miss > 0).astype(np.int64)
    else:
        # share of the bin's concurrent requests: arrivals in the bin are a proxy
        p_add = np.where(p_miss > 0, np.maximum(1, np.ceil(sched.prefill * p_frac)), 0)
        d_share = np.minimum(1.0, d_miss / count)
        d_add = np.where(d_miss > 0, np.maximum(1, np.ceil(sched.decode * d_share)), 0)
    if fix is not None:
        # only the worst bins, until they hold ``fix`` misses (times 2: not all of a
        # bin's misses are fixed by one more replica), with +1 replica each
        p_add = _worst(p_miss, 2.0 * fix) * (by if one else 1)
        d_add = _worst(d_miss, 2.0 * fix) * (by if one else 1)
    prefill = np.minimum(sched.prefill + p_add.astype(np.int64), maximum[0])
    decode = np.minimum(sched.decode + d_add.astype(np.int64), maximum[1])
    step = Repair(
        int(np.sum(miss)),
        int(np.sum(on_prefill)),
        int(np.sum(on_decode)),
        _runs(prefill - sched.prefill, bs),
        _runs(decode - sched.decode, bs),
    )
    return Schedule(sched.times, prefill, decode, bs), step


def _worst(misses: FloatArray, fix: float) -> IntArray:
    """+1 in the bins with the most misses until they hold ``fix``: misses [0, 5, 1, 3],
    fix 7 -> [0, 1, 0, 1]."""
    order = np.argsort(-misses, kind="stable")
    held = np.cumsum(misses[order])
    take = order[: int(np.searchsorted(held, fix)) + 1]
    out = np.zeros(len(misses), dtype=np.int64)
    out[take[misses[take] > 0]] = 1
    return out


def feasibility_ceiling(
    trace: Trace,
    params: EngineParams,
    *,
    ttft_s: float,
    tpot_s: float,
    ttft_per_token_s: float = 0.0,
) -> float:
    """The share of requests that could meet the SLO at all: alone on idle replicas,
    its prefill (chunks of the token budget, each with the batch overhead, the prompt's
    attention over itself, plus the KV hand-off) fits its TTFT limit, its decode step
    at batch 1 fits the TPOT, and its KV fits a decode replica. Chat-length requests
    all fit (1,000 tokens: 15 + 118 + 2 + 25 ms); a 20,000-token prompt takes 3 chunks,
    45 + 2,353 + 881 (attention) + 405 ms = 3.7 s > 2 s; a 40,000-token one 75 + 4,706
    + 3,525 + 805 ms = 9.1 s."""
    if len(trace) == 0:
        return 1.0
    p = trace.prompt.astype(np.float64)
    o = trace.output.astype(np.float64)
    chunks = np.ceil(np.maximum(p, 1.0) / params.prefill_token_budget)
    prefill = (
        chunks * params.prefill_overhead_s
        + p / params.prefill_tps
        + params.prefill_attention_s(1.0) * p * p
        + params.kv_handoff_base_s
        + params.kv_handoff_s_per_token * p
    )
    step = (
        params.decode_step_base_s
        + params.decode_step_per_seq_s
        + params.decode_step_per_kv_token_s * (p + o)
    )
    ok = (
        (prefill <= ttft_s + ttft_per_token_s * p + 1e-9)
        & (step <= tpot_s + 1e-9)
        & (p + o <= params.decode_kv_tokens)
    )
    return float(np.mean(ok))
