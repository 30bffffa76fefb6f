"""What users would run instead of pdscaler, in the same closed loop and seeing the same
Prometheus view: static provisioning (peak, mean, or any (prefill, decode) size: the
``static-best`` search of ``pdscaler.sim.tuning`` picks the cheapest that meets a
target), the Kubernetes HPA on each pool's queue length (naive, or one of the tuned
grid ``hpa_grid``), a fixed P:D ratio scaled on decode load, and a forecast-only
planner. The planner in the style of NVIDIA Dynamo's SLA planner is ``pdscaler.sim.dynamo``.

Owns: each baseline's sizing rule and the HPA's default behaviour (``HpaBehavior``),
modelled on kube-controller-manager's horizontal.go / replica_calculator.go:

* sync every 15 s (the loop's interval); a metric-based recommendation is ignored when
  ``|usage / (target * current) - 1| <= 0.1`` (tolerance), else
  ``ceil(usage / target)`` (External metric, AverageValue target);
* scale-down stabilization: the applied value is at most the HIGHEST recommendation of
  the last 300 s; scale-up has no stabilization window;
* default scale-up policies, the larger of which applies: +100% or +4 pods per 15 s,
  i.e. from 3 replicas at most max(6, 7) = 7; scale-down: -100% per 15 s (no limit);
* bounds [min, max] from the spec; missing metrics: no change.

The rate-based baselines (fixed ratio, forecast-only) use the same behaviour, so what
separates them from pdscaler is the sizing rule, not the damping. The dynamic ones
size with the spec's PRIOR capacities (they have no online refinement); the static
ones (``window_needs``) with each pool's measured profile when the spec has one and
the decode KV bound when M is known (``kv_capacity``: the spec's, else the engine's own
report), as a team sizing a fleet from a profiling run and the engine's start-up log.
Must not: see the engine's internals, the trace's future, or the true capacities
(static ones are sized offline from the trace's 1-minute load statistics, as a user
would from history).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from pdscaler.models import decode_memory, shape_ratio
from pdscaler.policy.forecast import forecast_rate
from pdscaler.policy.refine import capacity_priors
from pdscaler.sim.controllers import Target, View
from pdscaler.sim.engine import EngineParams, FloatArray
from pdscaler.sim.setup import clamp, size_for
from pdscaler.sim.traces import Trace, load_profile
from pdscaler.spec import PDDeploymentSpec, PoolSpec
from pdscaler.types import Role

#: HPA defaults (kube-controller-manager and autoscaling/v2 behavior).
HPA_TOLERANCE = 0.1
HPA_DOWN_WINDOW_S = 300.0
HPA_UP_PODS = 4
HPA_UP_PERCENT = 100.0
#: Default HPA target: requests waiting per replica (vllm:num_requests_waiting).
HPA_QUEUE_TARGET = 2.0
#: Window of the load statistics the static baselines are sized on.
STATIC_WINDOW_S = 60.0


class HpaBehavior:
    """One pool's HPA stabilization and rate limits (module docstring).

    Current 4, recommendations 8 at t=0: 8 (up is immediate, +4 allowed). Then 2 at
    t=15: stays 8 (the window still holds 8); 2 again at t=330: 2 (8 has left the
    300 s window).
    """

    def __init__(self, low: int, high: int, down_window_s: float = HPA_DOWN_WINDOW_S) -> None:
        self.low, self.high = low, high
        self.down_window_s = down_window_s
        self._recs: deque[tuple[float, int]] = deque()

    def apply(self, now: float, current: int, recommended: int) -> int:
        """The replicas to set. The first call also records ``current`` as if it had
        been recommended just now, so nothing shrinks in the first window (a running
        HPA would have that history)."""
        recommended = clamp(recommended, self.low, self.high)
        if not self._recs:
            self._recs.append((now, current))
        self._recs.append((now, recommended))
        while self._recs and self._recs[0][0] <= now - self.down_window_s:
            self._recs.popleft()
        down_limit = max(r for _, r in self._recs)
        out = min(max(current, recommended), down_limit)
        if out > current:
            up_limit = max(
                math.ceil(current * (1.0 + HPA_UP_PERCENT / 100.0)), current + HPA_UP_PODS
            )
            out = min(out, up_limit)
        return clamp(out, self.low, self.high)


def hpa_recommendation(current: int, usage: float, target: float) -> int:
    """The HPA's replica count for an External metric with an AverageValue target:
    queue 10 at 4 replicas, target 2 -> ratio 1.25 -> ceil(10 / 2) = 5; queue 8.5 ->
    ratio 1.06, within the 10% tolerance -> 4 (unchanged); queue 0 -> 0 (the bounds
    then hold it at min)."""
    if current <= 0:
        return math.ceil(usage / target)
    ratio = usage / (target * current)
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return current
    return math.ceil(usage / target)


def _behaviors(spec: PDDeploymentSpec) -> tuple[HpaBehavior, HpaBehavior]:
    return (
        HpaBehavior(spec.prefill.replicas.min, spec.prefill.replicas.max),
        HpaBehavior(spec.decode.replicas.min, spec.decode.replicas.max),
    )


class StaticController:
    """A fixed size, applied at every tick (the loop only acts on a change)."""

    def __init__(self, name: str, prefill: int, decode: int) -> None:
        self.name = name
        self.prefill, self.decode = prefill, decode
        self.initial = (prefill, decode)  # the loop starts a static policy at its size

    def tick(self, view: View) -> Target:
        return Target(self.prefill, self.decode, note=f"static {self.prefill}P/{self.decode}D")


def kv_capacity(spec: PDDeploymentSpec, params: EngineParams) -> float | None:
    """M, the KV tokens of one decode replica, as a team sizing offline knows it: the
    spec's ``decode.kvCacheTokens`` when set, else what the engine reports
    (``vllm:cache_config_info``; 100,000 with the defaults); None when neither."""
    if spec.decode.kv_cache_tokens is not None:
        return float(spec.decode.kv_cache_tokens)
    return float(params.decode_kv_tokens) if params.export_kv_capacity else None


def window_needs(
    trace: Trace, spec: PDDeploymentSpec, kv_tokens: float | None = None
) -> tuple[FloatArray, FloatArray]:
    """Per ``STATIC_WINDOW_S`` window of the trace: the fractional (prefill, decode)
    replicas its load needs at the pools' target utilisations, each pool's per-replica
    tokens/s read off its measured profile at the window's mix (docs/models.md §2d; the
    constant ``tokensPerSecond`` without one), decode the larger of its throughput and
    the KV bound at the TPOT SLO (docs/models.md §2b) when ``kv_tokens`` is known. Long-context
    conversation at 1x (prompts 8k-16k), its busiest minute: prefill 21.9 (profile
    ~6,900 tokens/s at 12,000 tokens, against 16 with the 10,000 prior), decode 10.7
    by the KV (9.3 by throughput; 2 with the 1,400 prior)."""
    prof = load_profile(trace, STATIC_WINDOW_S)
    u_p, u_d = spec.prefill.target_utilization, spec.decode.target_utilization
    n_p = np.zeros(len(prof.rate))
    n_d = np.zeros(len(prof.rate))
    for k, (rate, lp, ld) in enumerate(
        zip(prof.rate, prof.prompt_mean, prof.output_mean, strict=True)
    ):
        if not rate > 0:
            continue
        cap = capacity_priors(spec, {Role.PREFILL: float(lp), Role.DECODE: float(ld)})
        n_p[k] = prof.prompt_tps[k] / (cap[Role.PREFILL] * u_p)
        n_d[k] = prof.output_tps[k] / (cap[Role.DECODE] * u_d)
        if kv_tokens is not None:
            mem = decode_memory(float(rate), float(lp), float(ld), spec.slo.tpot_seconds, kv_tokens)
            n_d[k] = max(n_d[k], mem.n_decode)
    return n_p, n_d


def _static(
    name: str, trace: Trace, spec: PDDeploymentSpec, peak: bool, kv_tokens: float | None
) -> StaticController:
    """Each pool sized for its own peak (or mean) 1-minute need (``window_needs``):
    N = ceil(load / (capacity * u)), inside the spec's bounds. Without a profile or M
    this is the priors alone: ceil(peak tokens/s / (prior * u)), as before profiles."""
    n_p, n_d = window_needs(trace, spec, kv_tokens)
    stat = np.max if peak else np.mean
    counts = []
    for need, pool in ((n_p, spec.prefill), (n_d, spec.decode)):
        n = math.ceil(float(stat(need)))
        counts.append(clamp(n, pool.replicas.min, pool.replicas.max))
    return StaticController(name, counts[0], counts[1])


def static_peak(
    trace: Trace, spec: PDDeploymentSpec, kv_tokens: float | None = None
) -> StaticController:
    """Provisioned for the busiest minute of the whole trace, all the time."""
    return _static("static-peak", trace, spec, True, kv_tokens)


def static_mean(
    trace: Trace, spec: PDDeploymentSpec, kv_tokens: float | None = None
) -> StaticController:
    """Provisioned for the average load: cheap, and late whenever load is above it."""
    return _static("static-mean", trace, spec, False, kv_tokens)


@dataclass(frozen=True)
class HpaConfig:
    """One HPA configuration for both pools: the waiting-requests target per replica
    and the [min, max] bounds of each pool."""

    target: float
    prefill: tuple[int, int]
    decode: tuple[int, int]

    @property
    def label(self) -> str:
        return (
            f"target {self.target:g}, prefill {self.prefill[0]}-{self.prefill[1]}, "
            f"decode {self.decode[0]}-{self.decode[1]}"
        )


#: Targets of the tuned HPA grid (requests waiting per replica).
HPA_TARGETS = (2.0, 5.0, 10.0)
#: Max replicas of the tuned grid, as multiples of the pool's peak-minute size.
HPA_MAX_FACTORS = (1.2, 1.5)
#: The "quiet load" a tuned HPA's min is sized for: this quantile of the 1-min load.
HPA_QUIET_QUANTILE = 0.1


def hpa_grid(trace: Trace, spec: PDDeploymentSpec) -> list[HpaConfig]:
    """The tuned-HPA candidates a platform team would try: targets 2, 5, 10 waiting per
    replica x max at 1.2 and 1.5x each pool's peak-minute size (priors, as the static
    baselines), min at its quiet (10th percentile minute) size. Conversation trace at
    1x: prefill peak 2 -> max 3 (ceil 2.4) or 3; up to 6 configurations, each once
    (where both maxima of both pools round to the same sizes, one per target)."""
    prof = load_profile(trace, STATIC_WINDOW_S)
    bounds = []
    for load, pool in ((prof.prompt_tps, spec.prefill), (prof.output_tps, spec.decode)):
        cap = pool.tokens_per_second * pool.target_utilization
        quiet = math.ceil(float(np.nanquantile(load, HPA_QUIET_QUANTILE)) / cap)
        peak = math.ceil(float(np.nanmax(load)) / cap)
        low = clamp(quiet, pool.replicas.min, pool.replicas.max)
        highs = [
            clamp(max(low, math.ceil(f * peak)), pool.replicas.min, pool.replicas.max)
            for f in HPA_MAX_FACTORS
        ]
        bounds.append([(low, h) for h in highs])
    grid = (
        HpaConfig(t, p, d) for t in HPA_TARGETS for p, d in zip(bounds[0], bounds[1], strict=True)
    )
    return list(dict.fromkeys(grid))


class HpaQueueController:
    """Two independent HPAs, one per pool, each on the pool's total waiting requests
    (``vllm:num_requests_waiting`` summed) with an AverageValue target per replica.
    Without ``config``: the naive HPA (target 2, the spec's bounds 1-64)."""

    def __init__(
        self,
        spec: PDDeploymentSpec,
        queue_target: tuple[float, float] = (HPA_QUEUE_TARGET,) * 2,
        *,
        config: HpaConfig | None = None,
        name: str = "hpa-queue",
    ) -> None:
        self.name = name
        if config is None:
            self.queue_target = queue_target
            self._beh = _behaviors(spec)
        else:
            self.queue_target = (config.target, config.target)
            self._beh = (HpaBehavior(*config.prefill), HpaBehavior(*config.decode))
            self.initial = (config.prefill[0], config.decode[0])

    def tick(self, view: View) -> Target | None:
        m = view.metrics
        if m is None:
            return None
        out = []
        pools = (
            (view.prefill.replicas, m.prefill.queue_depth, self.queue_target[0], self._beh[0]),
            (view.decode.replicas, m.decode.queue_depth, self.queue_target[1], self._beh[1]),
        )
        for current, queue, target, beh in pools:
            if queue is None:
                out.append(current)
                continue
            out.append(beh.apply(view.now, current, hpa_recommendation(current, queue, target)))
        return Target(out[0], out[1], note="hpa on queue length")


def _load(view: View) -> tuple[float, float, float] | None:
    m = view.metrics
    if m is None or m.request_rate is None:
        return None
    if m.request_rate == 0:
        return 0.0, 0.0, 0.0
    if m.prompt_tokens is None or m.output_tokens is None:
        return None
    return m.request_rate, m.prompt_tokens, m.output_tokens


def _capacity(pool: PoolSpec) -> float:
    return pool.tokens_per_second * pool.target_utilization


class FixedRatioController:
    """Decode sized on decode load (R * L_d over prior * u), prefill a FIXED multiple
    of it, the ratio profiled once on the trace's average mix with the priors:
    conversation trace 1,155/211 tokens, 10,000/1,400 tok/s -> 0.77 prefill per decode
    (a fractional decode count of 2.4 gives ceil(1.84) = 2 prefill)."""

    name = "fixed-ratio"

    def __init__(self, spec: PDDeploymentSpec, ratio: float) -> None:
        if not (ratio > 0 and math.isfinite(ratio)):
            raise ValueError(f"the fixed P:D ratio must be a positive number, got {ratio}")
        self.spec, self.ratio = spec, ratio
        self._beh = _behaviors(spec)

    @classmethod
    def profiled(cls, trace: Trace, spec: PDDeploymentSpec) -> FixedRatioController:
        ratio = shape_ratio(
            float(trace.prompt.mean()),
            float(trace.output.mean()),
            _capacity(spec.prefill),
            _capacity(spec.decode),
        )
        return cls(spec, ratio)

    def tick(self, view: View) -> Target | None:
        load = _load(view)
        if load is None:
            return None
        rate, _, output = load
        n_d = rate * output / _capacity(self.spec.decode)
        want_p, want_d = math.ceil(self.ratio * n_d - 1e-9), math.ceil(n_d - 1e-9)
        p = self._beh[0].apply(view.now, view.prefill.replicas, want_p)
        d = self._beh[1].apply(view.now, view.decode.replicas, want_d)
        return Target(p, d, note=f"fixed ratio {self.ratio:.2f}: decode load {n_d:.2f}")


class ForecastOnlyController:
    """Sizes both pools from the forecast rate (``pdscaler.policy.forecast`` over
    T_s + interval) and the profiled (prior) throughputs with the ratio model: no
    backlog/drain term, no queue or latency feedback, no online refinement."""

    name = "forecast-only"

    #: Rate history kept for the trend (seconds).
    HISTORY_S = 300.0

    def __init__(self, spec: PDDeploymentSpec) -> None:
        self.spec = spec
        self._beh = _behaviors(spec)
        self._history: deque[tuple[float, float]] = deque()

    def tick(self, view: View) -> Target | None:
        load = _load(view)
        if load is None:
            return None
        rate, prompt, output = load
        self._history.append((view.now, rate))
        while self._history[0][0] < view.now - self.HISTORY_S:
            self._history.popleft()
        horizon = self.spec.startup_seconds + self.spec.scaling.interval_seconds
        predicted = forecast_rate(rate, list(self._history), horizon)
        want_p, want_d = size_for(self.spec, predicted, prompt, output)
        p = self._beh[0].apply(view.now, view.prefill.replicas, want_p)
        d = self._beh[1].apply(view.now, view.decode.replicas, want_d)
        return Target(p, d, note=f"forecast {predicted:.2f} req/s")
