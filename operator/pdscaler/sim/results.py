"""What a run is worth: SLO attainment, latency percentiles, GPU-hours, scale actions and
reversals, the Pareto front, and the JSON result of ``pdscaler simulate``.

Owns: the definitions, once.

* A request meets the SLO when its TTFT <= ``slo.ttftSeconds`` AND its TPOT <=
  ``slo.tpotSeconds``; a request that never finished misses it. SLO attainment is
  the fraction of ALL requests of the trace that met it (0-1).
* The settled attainment is the same over the requests arriving ``SETTLED_AFTER_S``
  (5 min) or later. A replay starts with the pools of ``setup.warm_start`` (sized for
  the first two minutes' MEAN rate) and the controllers' Prometheus windows empty; the
  Azure conversation trace at 10x ramps from ~6,000 to ~60,000 prompt tokens/s in its
  first 40 s, so most of a dynamic policy's misses fall in that start. Both are
  reported; the overall figure is the headline.
* With a pre-roll (``LoopConfig.preroll_s``) a Run is its scored span, on that span's
  clock: every figure here (attainment, settled attainment 5 min after the SCORED
  start, percentiles, GPU-hours, actions, reversals) is the scored span's; the
  pre-roll's own figures are ``preroll_summary`` (reported apart, never added in). A
  reversal needs both actions in the span summarised.
* Percentiles are over all requests, an unfinished one counting as infinitely late
  (so a p99 is ``inf`` when more than 1% never finished; JSON writes ``null``).
* A scale action is one change of one pool's desired replicas; a reversal is an
  action whose direction is opposite to the same pool's previous action less than
  ``REVERSAL_WINDOW_S`` (10 min) earlier (flapping, not following a daily curve).
* A policy is on the Pareto front when no other policy has both attainment >= and
  GPU-hours <= with at least one strictly better.

Must not: run anything, read clocks or write files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pdscaler.sim.engine import FloatArray, RequestTimes
from pdscaler.sim.loop import Action, Run
from pdscaler.types import Role

REVERSAL_WINDOW_S = 600.0
#: Requests arriving this long after the replay's start count for the settled attainment.
SETTLED_AFTER_S = 300.0


def ttft_limits(prompt: np.ndarray, ttft_s: float, per_token_s: float = 0.0) -> FloatArray:
    """Each request's TTFT limit: ``ttft_s + per_token_s * prompt`` (length-aware SLO):
    2 s + 0.1 ms/token -> 2.1 s for a 1,000-token prompt, 3.6 s for 16,000."""
    return ttft_s + per_token_s * np.asarray(prompt, dtype=np.float64)


def met_slo(
    times: RequestTimes, ttft_s: float, tpot_s: float, ttft_per_token_s: float = 0.0
) -> np.ndarray:
    """Boolean per request: TTFT and TPOT both within the SLO (NaN = never = miss).
    A tolerance of 1 ns absorbs float noise at exactly the SLO. ``ttft_per_token_s``
    makes the TTFT limit length-aware (``ttft_limits``)."""
    ok_ttft, ok_tpot, _, _ = _within(times, ttft_s, tpot_s, ttft_per_token_s)
    ok: np.ndarray = ok_ttft & ok_tpot
    return ok


def _within(
    times: RequestTimes, ttft_s: float, tpot_s: float, ttft_per_token_s: float
) -> tuple[np.ndarray, np.ndarray, FloatArray, FloatArray]:
    """(TTFT within its limit, TPOT within the SLO, TTFT with NaN as +inf, each TTFT
    limit), per request: what ``met_slo`` and ``blame`` both judge by."""
    limit = ttft_limits(times.prompt, ttft_s, ttft_per_token_s)
    with np.errstate(invalid="ignore"):
        ttft = np.nan_to_num(times.ttft, nan=math.inf)
        tpot = np.nan_to_num(times.tpot, nan=math.inf)
        return ttft <= limit + 1e-9, tpot <= tpot_s + 1e-9, ttft, limit


def blame(
    times: RequestTimes, ttft_s: float, tpot_s: float, ttft_per_token_s: float = 0.0
) -> tuple[float, float]:
    """Which pool a replay's misses are short of: the share of ALL requests that miss
    the SLO and would meet it with no prefill queueing (``prefill_start - arrival``
    removed from their TTFT), and likewise with no decode admission wait
    (``decode_admit - prefill_end`` removed) or that miss only on TPOT (decode's own
    step). A request neither cures is in neither share. Worked numbers, the diurnal
    bench's hand-made engine on day 1 00:00-02:00 at x70: 64P/16D meets 94.65%, blame
    (0.000, 0.053) (decode admission waits of 13.8 s at p99); 24P/32D meets 40.95%,
    blame (0.59, 0.00)."""
    n = len(times.arrival)
    if n == 0:
        return 0.0, 0.0
    ok_ttft, ok_tpot, ttft, limit = _within(times, ttft_s, tpot_s, ttft_per_token_s)
    with np.errstate(invalid="ignore"):
        p_wait = np.nan_to_num(times.prefill_start - times.arrival, nan=0.0)
        d_wait = np.nan_to_num(times.decode_admit - times.prefill_end, nan=0.0)
        miss = ~(ok_ttft & ok_tpot)
        cured_p = miss & ok_tpot & (ttft - p_wait <= limit + 1e-9)
        cured_d = miss & ((ok_ttft & ~ok_tpot) | (ok_tpot & (ttft - d_wait <= limit + 1e-9)))
    return float(np.sum(cured_p)) / n, float(np.sum(cured_d)) / n


def percentile(values: FloatArray, q: float) -> float:
    """Nearest-rank-interpolated percentile (numpy's default) with NaN as +inf:
    [1, 2, 3, NaN] p50 -> 2.5, p99 -> inf."""
    if len(values) == 0:
        return math.nan
    with np.errstate(invalid="ignore"):
        value = float(np.percentile(np.nan_to_num(values, nan=math.inf), q))
    # interpolating towards +inf gives inf - inf = NaN inside numpy: the answer is inf
    return math.inf if math.isnan(value) else value


def reversals(actions: Sequence[Action], window_s: float = REVERSAL_WINDOW_S) -> int:
    """Actions that undo the same pool's previous one within ``window_s``: prefill
    2->4 at 0 s, 4->3 at 300 s (reversal), 3->2 at 900 s (same direction) -> 1."""
    last: dict[Role, Action] = {}
    count = 0
    for a in sorted(actions, key=lambda a: a.time):
        prev = last.get(a.role)
        if prev is not None and a.time - prev.time < window_s:
            up_before = prev.after > prev.before
            up_now = a.after > a.before
            count += up_before != up_now
        last[a.role] = a
    return count


@dataclass(frozen=True)
class Summary:
    """One policy on one trace. Seconds and GPU-hours; attainment 0-1."""

    policy: str
    requests: int
    finished: int
    slo_attainment: float
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    gpu_hours: float
    prefill_gpu_hours: float
    decode_gpu_hours: float
    scale_actions: int
    reversals: int
    #: Attainment over the requests arriving SETTLED_AFTER_S or later (NaN: none did).
    slo_attainment_settled: float = math.nan
    #: Requests no pool size serves: their context (prompt + output) does not fit one
    #: decode replica's KV; answered with an error on arrival (counted as SLO misses).
    unservable: int = 0
    #: Replicas moved between the pools by a role change (``Engine.flip``).
    role_flips: int = 0

    def to_json(self, oracle_gpu_hours: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {k: _json_number(v) for k, v in asdict(self).items()}
        del out["policy"]
        if oracle_gpu_hours:
            out["ratio_to_oracle"] = _json_number(self.gpu_hours / oracle_gpu_hours)
        return out


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summarize(run: Run) -> Summary:
    t = run.times
    ok = met_slo(t, run.slo_ttft_s, run.slo_tpot_s, run.slo_ttft_per_token_s)
    n = len(t.arrival)
    p = run.gpu_seconds[Role.PREFILL] / 3600.0
    d = run.gpu_seconds[Role.DECODE] / 3600.0
    return Summary(
        policy=run.policy,
        requests=n,
        finished=int(np.sum(np.isfinite(t.finish))),
        slo_attainment=float(np.mean(ok)) if n else 1.0,
        ttft_p50_s=percentile(t.ttft, 50),
        ttft_p99_s=percentile(t.ttft, 99),
        tpot_p50_s=percentile(t.tpot, 50),
        tpot_p99_s=percentile(t.tpot, 99),
        gpu_hours=p + d,
        prefill_gpu_hours=p,
        decode_gpu_hours=d,
        scale_actions=len(run.actions),
        reversals=reversals(run.actions),
        slo_attainment_settled=settled_attainment(t.arrival, ok),
        unservable=t.unservable,
        role_flips=sum(a.flipped for a in run.actions if a.role is Role.PREFILL),
    )


def preroll_summary(run: Run) -> Summary | None:
    """The figures of a run's pre-roll (``Run.preroll``), None without one: the same
    definitions over the requests that arrived in it and the GPU-seconds billed before
    the scored start."""
    return None if run.preroll is None else summarize(run.preroll)


def settled_attainment(arrival: FloatArray, ok: np.ndarray) -> float:
    """The share of ``ok`` among requests arriving at ``SETTLED_AFTER_S`` or later (NaN
    when none did): arrivals 10, 200, 400, 500 s with ok F, F, T, F -> 0.5."""
    late = arrival >= SETTLED_AFTER_S
    return float(np.mean(ok[late])) if np.any(late) else math.nan


def attainment_over_time(run: Run, bin_s: float = 60.0) -> tuple[FloatArray, FloatArray]:
    """(bin start, fraction of the requests ARRIVING in that bin that met the SLO);
    NaN for a bin without arrivals."""
    t = run.times
    if len(t.arrival) == 0:
        return np.zeros(0), np.zeros(0)
    ok = met_slo(t, run.slo_ttft_s, run.slo_tpot_s, run.slo_ttft_per_token_s).astype(np.float64)
    nbins = max(1, math.ceil(float(t.arrival.max()) / bin_s + 1e-9))
    b = np.minimum((t.arrival // bin_s).astype(np.int64), nbins - 1)
    count = np.bincount(b, minlength=nbins).astype(np.float64)
    good = np.bincount(b, weights=ok, minlength=nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(count > 0, good / count, np.nan)
    return np.arange(nbins, dtype=np.float64) * bin_s, frac


def pareto_front(summaries: Sequence[Summary]) -> set[str]:
    """Names not dominated on (higher attainment, fewer GPU-hours)."""
    front = set()
    for a in summaries:
        dominated = any(
            b.slo_attainment >= a.slo_attainment
            and b.gpu_hours <= a.gpu_hours
            and (b.slo_attainment > a.slo_attainment or b.gpu_hours < a.gpu_hours)
            for b in summaries
            if b is not a
        )
        if not dominated:
            front.add(a.policy)
    return front


def result_json(
    summaries: Sequence[Summary],
    *,
    oracle_gpu_hours: float,
    work_floor_gpu_hours: float,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document of ``pdscaler simulate``::

    {"policies": {"pdscaler": {"slo_attainment": 0.995, "ttft_p99_s": 1.2, ...,
                               "gpu_hours": 9.8, "ratio_to_oracle": 1.12, ...}, ...},
     "oracle": {"gpu_hours": 8.75}, "work_floor": {"gpu_hours": 6.1},
     "pareto_front": ["pdscaler", "static-mean"], "meta": {...}}
    """
    return {
        "policies": {s.policy: s.to_json(oracle_gpu_hours) for s in summaries},
        "oracle": {"gpu_hours": oracle_gpu_hours},
        "work_floor": {"gpu_hours": work_floor_gpu_hours},
        "pareto_front": sorted(pareto_front(summaries)),
        "meta": meta,
    }
