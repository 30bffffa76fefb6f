"""``decide(TickInput) -> Decision``: one tick of the policy (docs/design.md §3).

Owns: the order of the steps (what they leave for the next tick is ``memory``'s).
Pure and deterministic: the same input gives the same Decision; ``now`` is passed in, never read.
Must not: do I/O, touch Kubernetes or Prometheus objects, or hold state outside
``PolicyMemory``.

The steps, each in its own module:

0. ``zero``: at zero replicas, or idle past ``scaleToZero.idleSeconds``, the holding
   proxy's gauges decide (wake from the held queue, stay, or stop both pools).
1. ``sanitize``: None/NaN/negative measurements, and finite ones beyond the spec's
   bounds (``sanitize.Bounds``), are unknown. Without R (or with R > 0 but L_p/L_d
   unknown, or R = 0 beside queued or running requests) the policy holds what runs
   (``hold``): ``HoldMetricsUnavailable``, ``metrics_available=False``, no scale-down (a pool below
   its min is still raised, and a pool above the spec's max or a total above maxGPUs is
   still lowered: those are the user's explicit bounds, not a guess from missing data).
   With a usable load, each pool whose own data has a gap (``sanitize.down_gaps``:
   targets down, queue or latency unknown, a garbage signal) still grows but does not
   shrink, and the decision names the gap (``Decision.data_gaps``). A model that
   overflows on finite but huge input holds the same way, saying so.
2. ``refine``: P_prefill / P_decode from observed tokens/s per replica (ready count
   averaged over the window, ``history``): raised by what was served, lowered only by
   what the saturated share of the window proves (EWMA, within [0.5x, 1.5x] of the
   prior); the prior is the pool's measured profile at this tick's mix, or the
   constant ``tokensPerSecond`` (``capacity_priors``, docs/models.md §2d); T_s from
   observed pod start times (p90, within [0.5x, 3x]).
3. ``forecast``: R over T_s + interval (rising trend extrapolated over at most the
   metrics window, at most 2x; never below the current rate). R itself is the arrival
   rate: the routers' arrivals as read, or prefill completions corrected by the prefill
   queue's change (``arrival_rate``, by ``MetricsSnapshot.rate_source``).
4. ``sizing``: steady-state targets (ratio model, ceil, at the forecast rate; decode
   the larger of that and its KV memory bound with ``kvCacheTokens``, ``kvbound``), the
   bottleneck rule (only the bottleneck pool, and a pool short by its own load, grow),
   the drain-sized scale-up; the proportional fallback only where more replicas relieve
   the pressure (``sizing.may_grow_proportionally``); with ``scaling.burstHeadroom``,
   prefill held at its burst head-room (``headroom``).
5. ``stabilize``: up at once; down only to the highest recommendation of the
   ``scaleDownStabilization`` window, once the window is covered, outside the 10%
   tolerance, never during a rollout, at most a third of the pool per window.
6. ``limits``: [min, max] per pool, maxGPUs and the schedulable capacity re-split in
   favour of the bottleneck pool.
6b. ``flips``: where the actuator can change a replica's role (``TickInput.flips``), a
   growing pool takes ready replicas the other pool's recent recommendations do not
   need, when their drain plus the reconfiguration beats a cold start.
7. ``explain``: one machine action (``types.Action``) and one sentence, from
   ``reasons``' phrases.

Steps 2-6b are ``size``: one function per step, each named for it, filling the ``Tick``
record (module ``tick``) that the sentence and the memory are made from.
"""

from __future__ import annotations

import dataclasses

from pdscaler.models import DecodeBound, RatioResult, ratio_model
from pdscaler.policy import history, seasonal
from pdscaler.policy.explain import explain, infeasible
from pdscaler.policy.flips import after_flip, consider_flip, record_flip
from pdscaler.policy.forecast import forecast_rate
from pdscaler.policy.headroom import headroom_target, learn_factor
from pdscaler.policy.hold import hold_unavailable
from pdscaler.policy.kvbound import (
    decode_tpot,
    kv_cache_tokens,
    kv_demand,
    memory_rate,
    memory_sizes,
    observed_floor,
    with_memory,
)
from pdscaler.policy.limits import (
    apply_limits,
    bounded,
    keep_gapped,
)
from pdscaler.policy.memory import forecast_lookback, record_rate, remember, remember_pools
from pdscaler.policy.reach import bursts_beyond_headroom, prefill_short
from pdscaler.policy.refine import capacity_priors, carry, refine_startup, refine_tps
from pdscaler.policy.sanitize import CleanMetrics, down_gaps, sanitize
from pdscaler.policy.sizing import (
    Attribution,
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
from pdscaler.policy.stabilize import Record, Stabilized, prune, stabilize, window_record
from pdscaler.policy.tick import ROLES, Tick
from pdscaler.policy.zero import zero_decision
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import (
    Decision,
    MetricsSnapshot,
    ModelOutputs,
    RateSource,
    Role,
    TickInput,
)


def startup_seconds(inp: TickInput) -> float:
    """T_s from the pod start times of both pools (they load the same weights)."""
    samples = inp.prefill.startup_samples + inp.decode.startup_samples
    return refine_startup(inp.spec.startup_seconds, inp.memory.startup_seconds, samples)


def decide(inp: TickInput) -> Decision:
    """The desired replicas of both pools for this tick, with the reason.

    Golden chat example (docs/models.md §2): R = 20 req/s, L_p = 2000, L_d = 500,
    P_prefill = 3000, P_decode = 800, u = 0.7, both pools at 1 replica with TTFT and
    TPOT over their SLOs -> prefill 20, decode 18 (N_P 19.05, N_D 17.86),
    ``ScaledBoth``.
    """
    startup = startup_seconds(inp)
    woken = zero_decision(inp, startup)  # at zero, or idle past scaleToZero (``zero``)
    if woken is not None:
        return woken
    clean = sanitize(inp.metrics, inp.spec)
    if not clean.usable or clean.snapshot is None:
        return hold_unavailable(inp, clean, startup)
    gaps = down_gaps(clean.snapshot, inp.prefill, inp.decode)
    try:
        tick = size(inp, clean.snapshot, startup, gaps)
        action, pool, message = explain(tick)
    except (ArithmeticError, ValueError) as err:
        why = f"the models cannot size this load ({type(err).__name__}: {err})"
        return hold_unavailable(inp, CleanMetrics(clean.snapshot, (why,)), startup)
    named = tuple(dict.fromkeys(g for r in ROLES for g in gaps[r]))
    return Decision(
        prefill=tick.final[Role.PREFILL],
        decode=tick.final[Role.DECODE],
        action=action,
        message=message,
        pool=pool,
        model=_model_outputs(tick, startup),
        metrics_available=True,
        capacity_limited=tick.split.capacity_limited,
        deadline_infeasible=bool(infeasible(tick)),
        slo_unreachable=bursts_beyond_headroom(tick),
        memory=remember(tick, startup),
        data_gaps=named,
        flip=tick.flip,
    )


# ------------------------------------------------------------------- the steps


def size(
    inp: TickInput,
    snap: MetricsSnapshot,
    startup: float,
    gaps: dict[Role, tuple[str, ...]] | None = None,
) -> Tick:
    """Steps 2-6 on usable metrics, in order, each one function below. The golden chat
    tick (R 20 req/s, pools at 14 / 13 ready, no tokens/s observed, no trend) keeps the
    priors, forecasts 20 req/s, sizes N_P 19.05 / N_D 17.86, lets both pools grow (both
    over their target utilisation) and nothing stabilizes or limits them: 20 / 18.
    A pool with ``gaps`` (``sanitize.down_gaps``) never ends below what it runs."""
    gaps = gaps or {}
    pools = remember_pools(inp, snap)
    recent = history.in_window(pools, inp.now, inp.spec.metrics.window_seconds)
    rate = arrival_rate(snap.request_rate or 0.0, recent, snap.rate_source)
    tokens = {Role.PREFILL: snap.prompt_tokens or 0.0, Role.DECODE: snap.output_tokens or 0.0}
    priors = capacity_priors(inp.spec, tokens)
    tps = refine_capacities(inp, snap, recent, priors)
    forecast = forecast_arrivals(inp, rate, startup)
    tpot = decode_tpot(inp.spec, snap)
    m = kv_cache_tokens(inp.spec, snap)
    memory = memory_sizes(m, forecast, tokens[Role.PREFILL], tokens[Role.DECODE], tpot)
    ratio, bound = with_memory(ratio_sizes(inp.spec, forecast, tokens, tps), memory)
    facts = {r: pool_facts(inp, snap, r, tps[r], tokens[r]) for r in ROLES}
    facts[Role.DECODE] = memory_facts(m, facts[Role.DECODE], rate, tokens, tpot)
    attribution = attribute(
        facts[Role.PREFILL],
        facts[Role.DECODE],
        rate,
        prefill_drained=history.drained_since_rise(recent, Role.PREFILL),
        prefill_unqueued=history.unqueued_throughout(
            recent,
            Role.PREFILL,
            inp.spec.metrics.window_seconds - inp.spec.scaling.interval_seconds,
        ),
    )
    burst = burst_factor(inp, facts[Role.PREFILL], attribution)
    room, headroom = headroom_target(ratio.n_prefill, burst)
    held = room if headroom > 0 else None  # no head-room: sizing is exactly as without it
    kv_floor = observed_floor(facts[Role.DECODE].kv_usage, facts[Role.DECODE].ready)
    wants = size_pools(
        inp, facts, attribution, ratio, recent, rate, forecast, startup, held, kv_floor
    )
    window, stabilized = stabilize_pools(inp, facts, wants, gaps)
    cap, split = apply_limits(inp, ratio, attribution, wants, stabilized, headroom)
    split = keep_gapped(inp, split, gaps)
    final = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    flip, no_flip = consider_flip(inp, facts, window, final, startup, tpot, gaps)
    final = after_flip(final, {r: facts[r].current for r in ROLES}, flip)
    return Tick(
        inp=inp,
        rate=rate,
        forecast=forecast,
        ratio=ratio,
        facts=facts,
        attribution=attribution,
        wants=wants,
        window=record_flip(window, final, flip),
        stabilized=stabilized,
        split=split,
        capacity=cap,
        final=final,
        pools=pools,
        gaps=gaps,
        memory=memory,
        decode_bound=bound,
        burst_factor=burst,
        headroom=headroom,
        kv_floor=kv_floor,
        priors=priors,
        flip=flip,
        no_flip=no_flip,
    )


def arrival_rate(
    rate: float,
    points: tuple[history.Point, ...],
    source: RateSource = RateSource.COMPLETIONS,
) -> float:
    """Requests/s ARRIVING. Read as the routers' arrivals (``RateSource.ARRIVALS``), the
    rate is that already: 50 -> 50. Read as prefill completions, which run above
    arrivals while a backlog drains and below them while one builds, it is corrected by
    the prefill queue's change over the window (``history.queue_slope``): 50 req/s
    completed while the queue fell 600 -> 0 over 120 s -> 45 req/s; never below 0."""
    if source is RateSource.ARRIVALS:
        return max(rate, 0.0)
    return max(rate + history.queue_slope(points, Role.PREFILL), 0.0)


def refine_capacities(
    inp: TickInput,
    snap: MetricsSnapshot,
    recent: tuple[history.Point, ...],
    priors: dict[Role, float],
) -> dict[Role, float]:
    """Step 2b, ``refine``: each pool's per-replica tokens/s, from what its ready
    replicas (averaged over the window) served, learnt only over the saturated share of
    the window, around this tick's prior (``capacity_priors``), the correction learnt
    against the last tick's prior carried over (``refine.carry``). Prior 3000, nothing
    learnt, 4 ready: 14,400 tok/s while saturated -> 0.3 x 3600 + 0.7 x 3000 = 3180;
    8,000 tok/s saturated the whole window -> 2700; never saturated -> 3000 (a pool at
    67% says nothing about its limit)."""
    spec = inp.spec
    window_s, interval = spec.metrics.window_seconds, spec.scaling.interval_seconds
    mem = inp.memory
    previous = {
        Role.PREFILL: carry(mem.prefill_tps, mem.prefill_prior, priors[Role.PREFILL]),
        Role.DECODE: carry(mem.decode_tps, mem.decode_prior, priors[Role.DECODE]),
    }
    return {
        r: refine_tps(
            priors[r],
            previous[r],
            snap.pool(r).tokens_per_second,
            history.mean_ready(recent, r, inp.pool(r).ready),
            min(history.saturated_seconds(recent, r, interval) / window_s, 1.0),
        )
        for r in ROLES
    }


def forecast_arrivals(inp: TickInput, rate: float, startup: float) -> float:
    """Step 3, ``forecast``: the arrival rate when capacity started now is up, T_s plus
    one interval ahead, a rising trend extrapolated over at most the metrics window.
    12 req/s rising 1/15 req/s per s, T_s 60 + interval 15 = 75 s -> 12 + 5 = 17 req/s;
    a falling trend -> 12. With a trusted season (``seasonal``: a day of history, the
    last hour within 1.5x of its shape) the larger of that and the day's profile there
    times the last hour's level: rising 4 -> 6 req/s at 10:00 yesterday, level 1.1 ->
    up to 6.6 before the rise shows in the trend; a trough never lowers it (falling is
    the stabilization window's job)."""
    spec = inp.spec
    rates = record_rate(inp.memory.rate_history, inp.now, rate, forecast_lookback(spec))
    horizon = startup + spec.scaling.interval_seconds
    trend = forecast_rate(rate, rates, horizon, spec.metrics.window_seconds)
    season = seasonal.forecast(seasonal.observe(inp.memory.season, inp.now, rate), inp.now, horizon)
    return trend if season is None else max(trend, season)


def ratio_sizes(
    spec: PDDeploymentSpec, forecast: float, tokens: dict[Role, float], tps: dict[Role, float]
) -> RatioResult:
    """Step 4a, ``sizing``: the steady-state replicas of the ratio model at the forecast
    rate. Golden chat: R 20, L_p 2000, L_d 500, P 3000 / 800 tok/s, u 0.7 ->
    N_P = 40000/2100 = 19.05, N_D = 10000/560 = 17.86."""
    return ratio_model(
        forecast,
        tokens[Role.PREFILL],
        tokens[Role.DECODE],
        tps[Role.PREFILL],
        tps[Role.DECODE],
        spec.prefill.target_utilization,
        spec.decode.target_utilization,
    )


def pool_facts(
    inp: TickInput, snap: MetricsSnapshot, role: Role, tps: float, tokens: float
) -> PoolFacts:
    """Step 4b, ``sizing``: one pool as sizing sees it (replicas asked for, ready, still
    starting, refined tokens/s, tokens per request, SLO and signals), e.g. decode
    4 asked, 3 ready, 0 unschedulable -> 1 in flight."""
    obs = inp.pool(role)
    metrics = snap.pool(role)
    slo = inp.spec.slo
    return PoolFacts(
        role=role,
        current=obs.replicas,
        ready=obs.ready,
        in_flight=max(obs.replicas - obs.ready - obs.unschedulable, 0),
        tps=tps,
        tokens=tokens,
        target_utilization=inp.spec.pool(role).target_utilization,
        slo_seconds=slo.latency_seconds(role),
        latency=metrics.latency_seconds,
        queue=metrics.queue_depth,
        kv_usage=metrics.kv_usage,
    )


def memory_facts(
    m: float | None, decode: PoolFacts, rate: float, tokens: dict[Role, float], tpot: float
) -> PoolFacts:
    """Step 4b for decode with a known M (``kvbound.kv_cache_tokens``: the spec's
    ``kvCacheTokens``, else the engine's report; docs/models.md §2b): the share of the
    ready replicas' KV the load at the arrival ``rate`` holds, and a replica's req/s when
    its KV binds. Long-context chat at 3.5 req/s on 2 ready: 2.24 of their KV, 0.704 req/s
    each. Unchanged when the term is off."""
    prompt, output = tokens[Role.PREFILL], tokens[Role.DECODE]
    at_rate = memory_sizes(m, rate, prompt, output, tpot)
    if at_rate is None:
        return decode
    return dataclasses.replace(
        decode,
        kv_demand=kv_demand(at_rate, m, decode.ready),
        memory_rate=memory_rate(m, prompt, output, tpot),
    )


def burst_factor(inp: TickInput, prefill: PoolFacts, attribution: Attribution) -> float:
    """Step 4c, ``headroom``: prefill's burst factor after this tick (docs/models.md §2c),
    learnt from a TTFT breach while prefill is not short by its load (utilisation within
    target, fewer than one request waiting per ready replica, no replica still
    starting); 1 with
    ``scaling.burstHeadroom`` off. 1.0, TTFT 3 s of 2 s, prefill at 67% with no queue
    -> 1.05."""
    if not inp.spec.scaling.burst_headroom:
        return 1.0
    short = prefill_short(attribution, prefill)
    return learn_factor(inp.memory.burst_factor, prefill.latency, prefill.slo_seconds, short)


def size_pools(
    inp: TickInput,
    facts: dict[Role, PoolFacts],
    attribution: Attribution,
    ratio: RatioResult,
    recent: tuple[history.Point, ...],
    rate: float,
    forecast: float,
    startup: float,
    prefill_room: int | None = None,
    kv_floor: int = 0,
) -> dict[Role, Want]:
    """Step 4c, ``sizing``: what each pool asks for, unbounded, at the arrival ``rate``
    (the proportional step's pressure) and the ``forecast`` (the drain). A pool the
    bottleneck rule lets grow (``attribution``) asks ``max(ratio target, drain target)``,
    or the proportional step when the models see no shortfall (``sizing.grow``); any
    other pool its ratio target, never more than it runs. Prefill at r = 0.65 req/s per
    replica, R 3.5, T_s 10 s, deadline 60 s, 100 queued on 5 ready: backlog 102.5 ->
    9 replicas (ratio target at u 0.7: 8). ``prefill_room``: prefill's target with its
    burst head-room (``headroom.headroom_target``), which it grows to even when not
    short (19.05 at h 1.55 -> 30 from 20). ``kv_floor``: decode's target is at least the
    replicas its observed KV usage needs (``kvbound.observed_floor``: 8 ready at 90% ->
    12 where the ratio model asks 5)."""
    spec, mem = inp.spec, inp.memory
    targets = ratio_targets(ratio.n_prefill, ratio.n_decode)
    targets[Role.DECODE] = max(targets[Role.DECODE], kv_floor)
    if prefill_room is not None:
        targets[Role.PREFILL] = max(targets[Role.PREFILL], prefill_room)
    since = inp.now - mem.last_scale_time if mem.last_scale_time is not None else None
    wants: dict[Role, Want] = {}
    for r in ROLES:
        drain = plan_drain(
            facts[r],
            forecast,
            startup,
            spec.slo.recovery_seconds,
            since,
            min_slack=spec.scaling.interval_seconds,
        )
        if r not in attribution.growing:
            keep = min(targets[r], facts[r].current)
            if r is Role.PREFILL and prefill_room is not None:
                keep = max(keep, prefill_room)  # burst head-room: grown to even if not short
            wants[r] = Want(keep, targets[r], drain)
            continue
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
    return wants


def stabilize_pools(
    inp: TickInput,
    facts: dict[Role, PoolFacts],
    wants: dict[Role, Want],
    gaps: dict[Role, tuple[str, ...]] | None = None,
) -> tuple[tuple[Record, ...], dict[Role, Stabilized]]:
    """Step 5, ``stabilize``: the wants within [min, max] are this tick's
    recommendation; up applies at once, down only to the highest recommendation of the
    window once it is covered, a third of the pool at a time, and a pool left above its
    recommendation records that size (``window_record``). Returns the window to keep and
    each pool's stabilized size. 4 -> 6: 6; 6 -> 4 with [6, 5, 4] in the window: 6;
    22 -> 8 with [8, 9] covered: 15, recorded as 15; 6 -> 4 with a gap in the pool's
    data: 6, recorded as 6 (the window holds no low it did not see)."""
    spec, now = inp.spec, inp.now
    recommended = {r: bounded(spec, r, wants[r].replicas) for r in ROLES}
    record = (now, recommended[Role.PREFILL], recommended[Role.DECODE])
    window = prune(
        (*inp.memory.recommendations, record), now, spec.scaling.scale_down_stabilization_seconds
    )
    stabilized = _stabilize(inp, recommended, window, gaps or {})
    applied = window_record(
        now,
        (recommended[Role.PREFILL], recommended[Role.DECODE]),
        (facts[Role.PREFILL].current, facts[Role.DECODE].current),
        (stabilized[Role.PREFILL].replicas, stabilized[Role.DECODE].replicas),
    )
    return (*window[:-1], applied), stabilized


def _stabilize(
    inp: TickInput,
    recommended: dict[Role, int],
    records: tuple[Record, ...],
    gaps: dict[Role, tuple[str, ...]],
) -> dict[Role, Stabilized]:
    """Stabilize each pool against ``records``: the window's recommendations (this tick's
    included, and the anchor at or before the window start that proves it covered)."""
    window = inp.spec.scaling.scale_down_stabilization_seconds
    covered = records[0][0] <= inp.now - window
    out: dict[Role, Stabilized] = {}
    for index, role in enumerate(ROLES, start=1):
        out[role] = stabilize(
            current=inp.pool(role).replicas,
            recommended=recommended[role],
            window_values=[int(rec[index]) for rec in records],
            covered=covered,
            window_seconds=window,
            frozen=inp.rollout_in_progress,
            blocked="; ".join(gaps.get(role, ())) or None,
        )
    return out


# ------------------------------------------------------------------ the outputs


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
        decode_bound=("memory" if tick.decode_bound is DecodeBound.MEMORY else "throughput")
        if tick.memory is not None
        else None,
        n_decode_memory=tick.memory.n_decode if tick.memory is not None else None,
        burst_headroom_replicas=(
            tick.headroom_held if tick.inp.spec.scaling.burst_headroom else None
        ),
    )
