"""``decide(TickInput) -> Decision``: one tick of the policy (docs/design.md §3).

Owns: the order of the steps and the memory carried to the next tick. Pure and
deterministic: the same input gives the same Decision; ``now`` is passed in, never read.
Must not: do I/O, touch Kubernetes or Prometheus objects, or hold state outside
``PolicyMemory``.

The steps, each in its own module:

1. ``sanitize``: None/NaN/negative measurements are unknown. Without R (or with R > 0
   but L_p/L_d unknown) the policy holds what runs: ``HoldMetricsUnavailable``,
   ``metrics_available=False``, no scale-down (a pool below its min is still raised,
   and a pool above the spec's max or a total above maxGPUs is still lowered: those are
   the user's explicit bounds, not a guess from missing data).
2. ``refine``: P_prefill / P_decode from observed tokens/s per replica (ready count
   averaged over the window, ``history``): raised by what was served, lowered only by
   what the saturated share of the window proves (EWMA, within [0.5x, 1.5x] of the
   spec); T_s from observed pod start times (p90, within [0.5x, 3x]).
3. ``forecast``: R over T_s + interval (rising trend extrapolated over at most the
   metrics window, at most 2x; never below the current rate). R itself is the arrival
   rate: prefill completions corrected by the prefill queue's change (``arrival_rate``).
4. ``sizing``: steady-state targets (ratio model, ceil, at the forecast rate), the
   bottleneck rule (only the bottleneck pool, and a pool short by its own load, grow),
   the drain-sized scale-up; the proportional fallback only where more replicas relieve
   the pressure (``sizing.may_grow_proportionally``).
5. ``stabilize``: up at once; down only to the highest recommendation of the
   ``scaleDownStabilization`` window, once the window is covered, outside the 10%
   tolerance, never during a rollout, at most a third of the pool per window.
6. ``limits``: [min, max] per pool, maxGPUs and the schedulable capacity re-split in
   favour of the bottleneck pool.
7. ``reasons``: one machine action and one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdscaler.models import RatioResult, ratio_model
from pdscaler.policy import history, reasons
from pdscaler.policy.forecast import forecast_rate
from pdscaler.policy.limits import Capacity, Split, capacity, clamp, fit
from pdscaler.policy.refine import refine_startup, refine_tps
from pdscaler.policy.sanitize import CleanMetrics, sanitize
from pdscaler.policy.sizing import (
    Attribution,
    DrainPlan,
    PoolFacts,
    Want,
    attribute,
    finite_or_none,
    grow,
    growth_pressure,
    may_grow_proportionally,
    plan_drain,
    ratio_targets,
)
from pdscaler.policy.stabilize import (
    HELD_ROLLOUT,
    HELD_WINDOW,
    Stabilized,
    prune,
    stabilize,
    window_record,
)
from pdscaler.spec import PDDeploymentSpec, PoolSpec
from pdscaler.types import (
    Decision,
    MetricsSnapshot,
    ModelOutputs,
    PolicyMemory,
    PoolMetrics,
    PoolObservation,
    Role,
    TickInput,
)

ROLES = (Role.PREFILL, Role.DECODE)
#: Most points kept in the rate history (the forecast only needs the last few minutes).
MAX_RATE_POINTS = 32


def pool_spec(spec: PDDeploymentSpec, role: Role) -> PoolSpec:
    return spec.prefill if role is Role.PREFILL else spec.decode


def observation(inp: TickInput, role: Role) -> PoolObservation:
    return inp.prefill if role is Role.PREFILL else inp.decode


def pool_metrics(snap: MetricsSnapshot, role: Role) -> PoolMetrics:
    return snap.prefill if role is Role.PREFILL else snap.decode


def startup_seconds(inp: TickInput) -> float:
    """T_s from the pod start times of both pools (they load the same weights)."""
    samples = inp.prefill.startup_samples + inp.decode.startup_samples
    return refine_startup(inp.spec.startup_seconds, inp.memory.startup_seconds, samples)


def record_rate(
    history: tuple[tuple[float, float], ...], now: float, rate: float, lookback: float
) -> tuple[tuple[float, float], ...]:
    """History with (now, rate) appended, points older than ``lookback`` (or in the
    future, after a clock jump) dropped, at most MAX_RATE_POINTS kept."""
    kept = [(t, r) for t, r in history if now - lookback <= t < now]
    return (*kept, (now, rate))[-MAX_RATE_POINTS:]


def history_lookback(spec: PDDeploymentSpec) -> float:
    """How long pool points are kept: the metrics window plus one interval (the point at
    the window start must survive to prove the window covered)."""
    return spec.metrics.window_seconds + spec.scaling.interval_seconds


def forecast_lookback(spec: PDDeploymentSpec) -> float:
    """How far back the trend looks: the metrics window, at least 3 intervals
    (2m window, 15s interval -> 120 s)."""
    return max(spec.metrics.window_seconds, 3 * spec.scaling.interval_seconds)


# ------------------------------------------------------------------- the tick


@dataclass(frozen=True)
class Tick:
    """Everything computed in one tick that the sentence and the memory need."""

    inp: TickInput
    rate: float
    forecast: float
    ratio: RatioResult
    facts: dict[Role, PoolFacts]
    attribution: Attribution
    wants: dict[Role, Want]
    window: tuple[tuple[float, int, int], ...]
    stabilized: dict[Role, Stabilized]
    split: Split
    capacity: Capacity
    final: dict[Role, int]
    pools: tuple[history.Point, ...] = ()

    def current(self, role: Role) -> int:
        return self.facts[role].current

    @property
    def grown(self) -> tuple[Role, ...]:
        return tuple(r for r in ROLES if self.final[r] > self.current(r))

    @property
    def shrunk(self) -> tuple[Role, ...]:
        return tuple(r for r in ROLES if self.final[r] < self.current(r))

    def drain(self, role: Role) -> DrainPlan | None:
        return self.wants[role].drain


def decide(inp: TickInput) -> Decision:
    """The desired replicas of both pools for this tick, with the reason.

    Golden chat example (docs/models.md §2): R = 20 req/s, L_p = 2000, L_d = 500,
    P_prefill = 3000, P_decode = 800, u = 0.7, both pools at 1 replica with TTFT and
    TPOT over their SLOs -> prefill 20, decode 18 (N_P 19.05, N_D 17.86),
    ``ScaledBoth``.
    """
    startup = startup_seconds(inp)
    clean = sanitize(inp.metrics)
    if not clean.usable or clean.snapshot is None:
        return _hold_unavailable(inp, clean, startup)
    tick = _size(inp, clean.snapshot, startup)
    action, pool, message = _explain(tick)
    return Decision(
        prefill=tick.final[Role.PREFILL],
        decode=tick.final[Role.DECODE],
        action=action,
        message=message,
        pool=pool,
        model=_model_outputs(tick, startup),
        metrics_available=True,
        capacity_limited=tick.split.capacity_limited,
        deadline_infeasible=bool(_infeasible(tick)),
        memory=_memory(tick, startup),
    )


def pool_point(inp: TickInput, snap: MetricsSnapshot) -> history.Point:
    """This tick's queues and ready counts, for ``PolicyMemory.pool_history``."""
    return (
        inp.now,
        snap.prefill.queue_depth,
        snap.decode.queue_depth,
        inp.prefill.ready,
        inp.decode.ready,
    )


def arrival_rate(completions: float, points: tuple[history.Point, ...]) -> float:
    """Requests/s ARRIVING: the rate is read as prefill completions, which run above
    arrivals while a backlog drains and below them while one builds, by the prefill
    queue's change over the window (``history.queue_slope``): 50 req/s completed while
    the queue fell 600 -> 0 over 120 s -> 45 req/s; never below 0."""
    return max(completions + history.queue_slope(points, Role.PREFILL), 0.0)


def _size(inp: TickInput, snap: MetricsSnapshot, startup: float) -> Tick:
    spec, mem, now = inp.spec, inp.memory, inp.now
    window_s, interval = spec.metrics.window_seconds, spec.scaling.interval_seconds
    pools = history.record(mem.pool_history, pool_point(inp, snap), history_lookback(spec))
    recent = history.in_window(pools, now, window_s)
    rate = arrival_rate(snap.request_rate or 0.0, recent)
    tokens = {Role.PREFILL: snap.prompt_tokens or 0.0, Role.DECODE: snap.output_tokens or 0.0}
    priors = {r: pool_spec(spec, r).tokens_per_second for r in ROLES}
    previous = {Role.PREFILL: mem.prefill_tps, Role.DECODE: mem.decode_tps}
    tps = {
        r: refine_tps(
            priors[r],
            previous[r],
            pool_metrics(snap, r).tokens_per_second,
            history.mean_ready(recent, r, observation(inp, r).ready),
            min(history.saturated_seconds(recent, r, interval) / window_s, 1.0),
        )
        for r in ROLES
    }
    rates = record_rate(mem.rate_history, now, rate, forecast_lookback(spec))
    forecast = forecast_rate(rate, rates, startup + interval, window_s)
    ratio = ratio_model(
        forecast,
        tokens[Role.PREFILL],
        tokens[Role.DECODE],
        tps[Role.PREFILL],
        tps[Role.DECODE],
        spec.prefill.target_utilization,
        spec.decode.target_utilization,
    )
    facts = {r: _facts(inp, snap, r, tps[r], tokens[r]) for r in ROLES}
    attribution = attribute(
        facts[Role.PREFILL],
        facts[Role.DECODE],
        rate,
        prefill_drained=history.drained_since_rise(recent, Role.PREFILL),
    )
    targets = ratio_targets(ratio.n_prefill, ratio.n_decode)
    since = now - mem.last_scale_time if mem.last_scale_time is not None else None
    wants: dict[Role, Want] = {}
    for r in ROLES:
        drain = plan_drain(facts[r], forecast, startup, spec.slo.recovery_seconds, since)
        if r in attribution.growing:
            pressure = attribution.bottleneck.pressure(r)
            if r is Role.PREFILL:
                pressure = growth_pressure(facts[r], rate)
            fallback = may_grow_proportionally(
                facts[r],
                history.queue_falling(recent, r),
                just_came_up=history.ready_rose(recent[-3:], r),
            )
            primary = r == attribution.primary
            wants[r] = grow(facts[r], targets[r], drain, pressure, primary, fallback)
        else:
            wants[r] = Want(min(targets[r], facts[r].current), targets[r], drain)
    recommended = {r: _bounded(spec, r, wants[r].replicas) for r in ROLES}
    record = (now, recommended[Role.PREFILL], recommended[Role.DECODE])
    window = prune(
        (*mem.recommendations, record), now, spec.scaling.scale_down_stabilization_seconds
    )
    stabilized = _stabilize(inp, recommended, window)
    applied = window_record(
        now,
        (recommended[Role.PREFILL], recommended[Role.DECODE]),
        (facts[Role.PREFILL].current, facts[Role.DECODE].current),
        (stabilized[Role.PREFILL].replicas, stabilized[Role.DECODE].replicas),
    )
    window = (*window[:-1], applied)
    bounded = {r: _bounded(spec, r, stabilized[r].replicas) for r in ROLES}
    loads = {
        Role.PREFILL: ratio.n_prefill,
        Role.DECODE: ratio.n_decode,
    }
    for r in attribution.growing:
        loads[r] = max(loads[r], float(wants[r].replicas))
    cap = capacity(
        spec,
        inp.prefill,
        inp.decode,
        mem.capacity_gpus,
        mem.capacity_time,
        now,
        spec.scaling.scale_down_stabilization_seconds,
    )
    split = fit(
        spec,
        bounded[Role.PREFILL],
        bounded[Role.DECODE],
        loads[Role.PREFILL],
        loads[Role.DECODE],
        cap,
        attribution.primary,
    )
    final = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    return Tick(
        inp=inp,
        rate=rate,
        forecast=forecast,
        ratio=ratio,
        facts=facts,
        attribution=attribution,
        wants=wants,
        window=window,
        stabilized=stabilized,
        split=split,
        capacity=cap,
        final=final,
        pools=pools,
    )


def _facts(
    inp: TickInput, snap: MetricsSnapshot, role: Role, tps: float, tokens: float
) -> PoolFacts:
    obs = observation(inp, role)
    metrics = pool_metrics(snap, role)
    slo = inp.spec.slo
    return PoolFacts(
        role=role,
        current=obs.replicas,
        ready=obs.ready,
        in_flight=max(obs.replicas - obs.ready - obs.unschedulable, 0),
        tps=tps,
        tokens=tokens,
        target_utilization=pool_spec(inp.spec, role).target_utilization,
        slo_seconds=slo.ttft_seconds if role is Role.PREFILL else slo.tpot_seconds,
        latency=metrics.latency_seconds,
        queue=metrics.queue_depth,
        kv_usage=metrics.kv_usage,
    )


def _bounded(spec: PDDeploymentSpec, role: Role, replicas: int) -> int:
    bounds = pool_spec(spec, role).replicas
    return clamp(replicas, bounds.min, bounds.max)


def _stabilize(
    inp: TickInput, recommended: dict[Role, int], records: tuple[tuple[float, int, int], ...]
) -> dict[Role, Stabilized]:
    """Stabilize each pool against ``records``: the window's recommendations (this tick's
    included, and the anchor at or before the window start that proves it covered)."""
    window = inp.spec.scaling.scale_down_stabilization_seconds
    covered = records[0][0] <= inp.now - window
    out: dict[Role, Stabilized] = {}
    for index, role in enumerate(ROLES, start=1):
        out[role] = stabilize(
            current=observation(inp, role).replicas,
            recommended=recommended[role],
            window_values=[int(rec[index]) for rec in records],
            covered=covered,
            window_seconds=window,
            frozen=inp.rollout_in_progress,
        )
    return out


def _infeasible(tick: Tick) -> list[str]:
    """One clause per growing pool whose backlog cannot drain by the deadline."""
    out: list[str] = []
    for role in tick.attribution.growing:
        drain = tick.drain(role)
        if drain is None or drain.backlog <= 0:
            continue
        final = tick.final[role]
        if not drain.feasible:
            out.append(
                reasons.startup_exceeds_deadline(role, drain.startup_seconds, drain.deadline)
            )
        elif drain.replicas is not None and final < drain.replicas:
            out.append(
                reasons.drain_short(
                    role, drain.drain_seconds(final), drain.deadline, final, drain.replicas
                )
            )
    return out


def _memory(tick: Tick, startup: float) -> PolicyMemory:
    inp = tick.inp
    return PolicyMemory(
        recommendations=tick.window,
        rate_history=record_rate(
            inp.memory.rate_history, inp.now, tick.rate, forecast_lookback(inp.spec)
        ),
        prefill_tps=tick.facts[Role.PREFILL].tps,
        decode_tps=tick.facts[Role.DECODE].tps,
        startup_seconds=startup,
        last_scale_time=inp.now if tick.grown else inp.memory.last_scale_time,
        capacity_gpus=tick.capacity.gpus,
        capacity_time=tick.capacity.since,
        pool_history=tick.pools,
    )


def _model_outputs(tick: Tick, startup: float) -> ModelOutputs:
    lead = tick.attribution.primary or Role.PREFILL
    drain = tick.drain(lead)
    drain_seconds = None
    if drain is not None and drain.backlog > 0:
        drain_seconds = drain.drain_seconds(tick.final[lead])
    return ModelOutputs(
        n_prefill=tick.ratio.n_prefill,
        n_decode=tick.ratio.n_decode,
        ratio=finite_or_none(tick.ratio.ratio),
        drain_seconds=drain_seconds,
        prefill_tps=tick.facts[Role.PREFILL].tps,
        decode_tps=tick.facts[Role.DECODE].tps,
        startup_seconds=startup,
        forecast_rate=tick.forecast,
    )


# ---------------------------------------------------------------- the sentence


def _explain(tick: Tick) -> tuple[str, Role | None, str]:
    """(action, pool, sentence) of the tick."""
    notes = _limit_notes(tick) + _infeasible(tick) + _set_aside(tick)
    if tick.grown:
        return _explain_up(tick, notes)
    if tick.shrunk:
        return _explain_down(tick, notes)
    return _explain_hold(tick, notes)


def _set_aside(tick: Tick) -> list[str]:
    """The note for a TTFT breach counted as past (``sizing.ttft_is_past``), unless
    prefill grew anyway on its other signals."""
    f = tick.facts[Role.PREFILL]
    if not tick.attribution.ttft_set_aside or Role.PREFILL in tick.grown:
        return []
    latency, queue = f.latency or 0.0, f.queue or 0.0
    percentile = tick.inp.spec.slo.percentile
    return [reasons.ttft_set_aside(percentile, latency, f.slo_seconds, queue, f.ready)]


def _changes(tick: Tick, roles: tuple[Role, ...]) -> str:
    return ", ".join(reasons.change(r, tick.current(r), tick.final[r]) for r in roles)


def _why(tick: Tick, role: Role, named: bool) -> str:
    """The signals that make ``role`` short, and what sized it."""
    f = tick.facts[role]
    want = tick.wants[role]
    signals = reasons.pool_signals(
        role,
        tick.inp.spec.slo.percentile,
        f.latency,
        f.slo_seconds,
        f.queue,
        f.utilization(tick.rate),
        f.target_utilization,
        f.kv_usage if role is Role.DECODE else None,
    )
    parts = [signals] if signals else []
    drain = want.drain
    if want.proportional:
        parts.append(reasons.proportional(tick.attribution.bottleneck.pressure(role)))
    elif drain is not None and drain.replicas is not None and drain.replicas > want.ratio_target:
        parts.append(reasons.drain_sized(drain.replicas, drain.backlog))
    else:
        n = tick.ratio.n_prefill if role is Role.PREFILL else tick.ratio.n_decode
        parts.append(reasons.ratio_sized(role, n, tick.forecast))
    if drain is not None and drain.backlog > 0:
        parts.append(reasons.drain_clause(drain.drain_seconds(tick.final[role]), drain.deadline))
    text = "; ".join(parts)
    return f"{role.value}: {text}" if named else text


def _explain_up(tick: Tick, notes: list[str]) -> tuple[str, Role | None, str]:
    grown = tick.grown
    moved = grown + tick.shrunk
    primary = tick.attribution.primary
    pool = primary if primary in grown else grown[0]
    action = reasons.SCALED_BOTH if len(grown) == 2 else reasons.scaled_action(grown[0])
    why = "; ".join(_why(tick, r, named=len(grown) == 2) for r in grown)
    return action, pool, reasons.sentence("Scaled", _changes(tick, moved), [why, *notes])


def _explain_down(tick: Tick, notes: list[str]) -> tuple[str, Role | None, str]:
    shrunk = tick.shrunk
    pool = shrunk[0] if len(shrunk) == 1 else None
    limited = any(tick.final[r] < tick.stabilized[r].replicas for r in shrunk)
    window = tick.inp.spec.scaling.scale_down_stabilization_seconds
    if limited:
        action, head, why = reasons.CAPACITY_LIMITED, "Limited", ""
    else:
        action, head = reasons.SCALED_DOWN, "Scaled down"
        why = reasons.scaled_down(window, tick.ratio.n_prefill, tick.ratio.n_decode, tick.forecast)
        steps = [(r, tick.stabilized[r].towards) for r in shrunk]
        why = "; ".join([why, *(reasons.step_down(r, n) for r, n in steps if n is not None)])
    parts = [why, *notes] if why else notes
    return action, pool, reasons.sentence(head, _changes(tick, shrunk), parts)


def _explain_hold(tick: Tick, notes: list[str]) -> tuple[str, Role | None, str]:
    sizes = reasons.sizes(tick.final[Role.PREFILL], tick.final[Role.DECODE])
    short = tick.attribution.primary
    if short is not None:
        why = _why(tick, short, named=True)
        if tick.wants[short].replicas > tick.final[short]:
            return reasons.HOLD_AT_LIMIT, short, reasons.sentence("Hold", sizes, [why, *notes])
        in_flight = tick.facts[short].in_flight
        wait = reasons.waiting(short, in_flight) if in_flight else ""
        return reasons.HOLD, short, reasons.sentence("Hold", sizes, [why, wait, *notes])
    held = [s for s in tick.stabilized.values() if s.deferred]
    deferred = [s.deferred for s in held if s.deferred]
    action = reasons.HOLD
    if any(s.held_by == HELD_ROLLOUT for s in held):
        action = reasons.HOLD_ROLLOUT
    elif any(s.held_by == HELD_WINDOW for s in held):
        action = reasons.HOLD_STABILIZING
    n_p, n_d = tick.ratio.n_prefill, tick.ratio.n_decode
    if deferred:
        return action, None, reasons.sentence("Hold", sizes, [*deferred, *notes])
    within = reasons.within_targets(n_p, n_d, tick.forecast)
    return action, None, reasons.sentence("Hold", sizes, [within, *notes])


def _limit_notes(tick: Tick) -> list[str]:
    split = tick.split
    notes: list[str] = []
    if split.capacity_limited:
        notes.append(
            reasons.capacity_note(
                split.budget_gpus, tick.capacity.pending, tick.attribution.primary
            )
        )
    elif split.budget_limited:
        notes.append(reasons.budget_note(split.budget_gpus, tick.attribution.primary))
    for role in ROLES:
        want = tick.stabilized[role].replicas
        bound = pool_spec(tick.inp.spec, role).replicas.max
        if role in tick.attribution.growing and want >= bound and tick.wants[role].replicas > bound:
            notes.append(reasons.at_max(role, bound, tick.wants[role].replicas))
    return notes


# --------------------------------------------------------------- metrics missing


def _hold_unavailable(inp: TickInput, clean: CleanMetrics, startup: float) -> Decision:
    """Keep what runs: raise to min, lower only to the spec's max and maxGPUs."""
    spec = inp.spec
    held = {r: _bounded(spec, r, observation(inp, r).replicas) for r in ROLES}
    split = fit(
        spec,
        held[Role.PREFILL],
        held[Role.DECODE],
        float(held[Role.PREFILL]),
        float(held[Role.DECODE]),
        Capacity(gpus=None, pending=0, since=None),
        None,
    )
    final = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    record = (inp.now, final[Role.PREFILL], final[Role.DECODE])
    window = spec.scaling.scale_down_stabilization_seconds
    memory = PolicyMemory(
        recommendations=prune((*inp.memory.recommendations, record), inp.now, window),
        rate_history=inp.memory.rate_history,
        prefill_tps=inp.memory.prefill_tps,
        decode_tps=inp.memory.decode_tps,
        startup_seconds=startup,
        last_scale_time=inp.memory.last_scale_time,
        capacity_gpus=inp.memory.capacity_gpus,
        capacity_time=inp.memory.capacity_time,
        pool_history=inp.memory.pool_history,
    )
    problems = "; ".join(clean.problems) or "request rate or token lengths unknown"
    message = reasons.sentence(
        "Hold",
        reasons.sizes(final[Role.PREFILL], final[Role.DECODE]),
        [f"metrics unavailable ({problems})", "no scale-down until they return"],
    )
    return Decision(
        prefill=final[Role.PREFILL],
        decode=final[Role.DECODE],
        action=reasons.HOLD_METRICS_UNAVAILABLE,
        message=message,
        pool=None,
        model=ModelOutputs(
            prefill_tps=inp.memory.prefill_tps or spec.prefill.tokens_per_second,
            decode_tps=inp.memory.decode_tps or spec.decode.tokens_per_second,
            startup_seconds=startup,
        ),
        metrics_available=False,
        capacity_limited=inp.prefill.unschedulable + inp.decode.unschedulable > 0,
        memory=memory,
    )
