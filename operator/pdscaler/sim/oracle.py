"""The bounds every policy is measured against: the oracle's GPU-hours and the
work-conserving floor.

Owns: ``oracle`` (an autoscaler that knows the whole trace and the engine's TRUE
capacities: per ``bin_s`` bin, the fewest integer replicas whose capacity covers the
work of that bin, each ordered ``startup_s`` before it is needed and kept through idle
gaps shorter than the start-up time, never below the spec's minimum per pool) and
``work_floor`` (total prefill tokens / P_prefill + total decode tokens / P_decode, as
if GPUs could be billed by the token). Must not: run the engine (a schedule can be
replayed with ``controllers.ScheduleController`` to see what SLO it would get).

Capacities (TRUE, from ``EngineParams``): prefill runs full batches,
``prefill_batch_tps`` (8,370 tokens/s with the defaults); decode runs the largest
batch whose step meets the TPOT SLO and whose KV fits, ``decode_tps`` at the bin's
mean lengths (~1,730 tokens/s at the chat mix, 50 ms). Decode tokens are spread over
each request's decode time at that step (not lumped at its arrival).

Billing a level: replica k is needed in the bins where the schedule is >= k; each run
of such bins [a, b) is billed from ``a - startup_s`` (0 for a run starting at 0: the
initial replicas are there) to ``b``, and overlapping intervals are merged, which is
exactly "keep it through gaps shorter than the start-up". Needs 1 replica in
[0, 60) and [90, 120) with T_s = 60: billed [0, 60) + [30, 120) -> [0, 120) = 120 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pdscaler.sim.engine import EngineParams, FloatArray, IntArray
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
) -> Schedule:
    """The oracle's replicas per bin over the trace and its decode tail. ``derate`` < 1
    plans every replica at that fraction of its true capacity (head-room: the
    SLO-feasible oracle of the bench searches the largest derate whose schedule, replayed,
    meets the SLO)."""
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
    psum = np.bincount(b, weights=trace.prompt.astype(np.float64), minlength=nbins)
    osum = np.bincount(b, weights=trace.output.astype(np.float64), minlength=nbins)
    per_sec = _decode_tokens_per_second(trace, step, horizon)
    sec_bin = np.minimum((np.arange(horizon) // bin_s).astype(np.int64), nbins - 1)
    otok = np.bincount(sec_bin, weights=per_sec, minlength=nbins)
    prefill_cap = params.prefill_batch_tps() * derate
    prefill = np.ceil(psum / (prefill_cap * bin_s) - 1e-9).astype(np.int64)
    mix_cap = params.decode_tps(float(trace.prompt.mean()), float(trace.output.mean()), tpot_s)
    caps = np.array(
        [
            params.decode_tps(p / c, o / c, tpot_s) if c > 0 else mix_cap
            for p, o, c in zip(psum, osum, count, strict=True)
        ]
    )
    decode = np.ceil(otok / (caps * derate * bin_s) - 1e-9).astype(np.int64)
    return Schedule(
        np.arange(nbins, dtype=np.float64) * bin_s,
        np.maximum(prefill, minimum[0]),
        np.maximum(decode, minimum[1]),
        bin_s,
    )


def oracle(
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
    19,366 conversation requests, 22.4M prompt tokens / 8,370 + 4.09M output tokens /
    ~1,730 -> about 2,680 + 2,360 GPU-s = 1.4 GPU-hours."""
    if len(trace) == 0:
        return 0.0
    prefill_s = float(trace.prompt.sum()) / params.prefill_batch_tps()
    cap = params.decode_tps(float(trace.prompt.mean()), float(trace.output.mean()), tpot_s)
    decode_s = float(trace.output.sum()) / cap
    return (prefill_s * params.prefill_gpus + decode_s * params.decode_gpus) / 3600.0
