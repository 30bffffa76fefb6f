"""The action and the sentence of a sized tick (step 7 of ``decide``).

Owns: choosing the one ``types.Action`` a tick carries from what it changed (grown:
``ScaledPrefill``/``ScaledDecode``/``ScaledBoth``; shrunk: ``ScaledDown``, or
``CapacityLimited`` when the limits cut below what stabilization allowed; nothing
changed: ``Hold``, ``HoldAtLimit``, ``HoldStabilizing``, ``HoldRolloutInProgress``), the
pool it names, and the sentence composed from ``reasons``' phrases, e.g.
``Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s``; and the clauses that
make a tick's deadline infeasible. Must not: size anything (the ``Tick`` is final when
it gets here), read clocks or do I/O.
"""

from __future__ import annotations

from pdscaler.models import DecodeBound, ceil_replicas
from pdscaler.policy import reasons
from pdscaler.policy.kvbound import KV_TARGET
from pdscaler.policy.stabilize import HELD_DATA, HELD_ROLLOUT, HELD_WINDOW
from pdscaler.policy.tick import ROLES, Tick
from pdscaler.types import Action, Role


def infeasible(tick: Tick) -> list[str]:
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


def explain(tick: Tick) -> tuple[Action, Role | None, str]:
    """(action, pool, sentence) of the tick."""
    notes = _limit_notes(tick) + infeasible(tick) + _set_aside(tick) + _headroom(tick)
    notes += _kv_floor(tick)
    if tick.flip is not None:
        f = tick.flip
        deadline = tick.inp.spec.slo.recovery_seconds
        notes.append(
            reasons.flipped(f.source, f.target, f.count, f.seconds, f.cold_start_seconds, deadline)
        )
    elif tick.no_flip:
        notes.append(tick.no_flip)
    if tick.grown:
        return _explain_up(tick, notes)
    if tick.shrunk:
        return _explain_down(tick, notes)
    return _explain_hold(tick, notes)


def _headroom(tick: Tick) -> list[str]:
    """The note for the prefill replicas held as burst head-room (docs/models.md §2c)."""
    held = tick.headroom_held
    return [reasons.burst_headroom(held, tick.burst_factor)] if held > 0 else []


def _kv_floor(tick: Tick) -> list[str]:
    """The note when decode's observed KV usage, not its models, sizes it
    (``kvbound.observed_floor`` above the ratio and memory target)."""
    d = tick.facts[Role.DECODE]
    modelled = ceil_replicas(tick.ratio.n_decode)
    if tick.kv_floor <= modelled or d.kv_usage is None:
        return []
    return [reasons.kv_in_use(tick.kv_floor, d.kv_usage, d.ready, KV_TARGET)]


def _set_aside(tick: Tick) -> list[str]:
    """The note for a TTFT breach counted as past (``sizing.ttft_is_past``), unless
    prefill grew anyway on its other signals."""
    f = tick.facts[Role.PREFILL]
    if not tick.attribution.ttft_set_aside or Role.PREFILL in tick.grown:
        return []
    latency, queue = f.latency or 0.0, f.queue or 0.0
    percentile = tick.inp.spec.slo.percentile
    unqueued = tick.attribution.ttft_unqueued
    return [reasons.ttft_set_aside(percentile, latency, f.slo_seconds, queue, f.ready, unqueued)]


def _by_memory(tick: Tick) -> bool:
    """Whether decode's N_D is the KV memory bound's (docs/models.md §2b)."""
    return tick.decode_bound is DecodeBound.MEMORY


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
        kv_demand=f.kv_demand if role is Role.DECODE else None,
    )
    parts = [signals] if signals else []
    drain = want.drain
    if want.proportional:
        parts.append(reasons.proportional(tick.attribution.bottleneck.pressure(role)))
    elif drain is not None and drain.replicas is not None and drain.replicas > want.ratio_target:
        parts.append(reasons.drain_sized(drain.replicas, drain.backlog))
    else:
        n = {Role.PREFILL: tick.ratio.n_prefill, Role.DECODE: tick.ratio.n_decode}[role]
        memory = role is Role.DECODE and _by_memory(tick)
        parts.append(reasons.ratio_sized(role, n, tick.forecast, memory))
    if drain is not None and drain.backlog > 0:
        parts.append(reasons.drain_clause(drain.drain_seconds(tick.final[role]), drain.deadline))
    text = "; ".join(parts)
    return f"{role.value}: {text}" if named else text


def _explain_up(tick: Tick, notes: list[str]) -> tuple[Action, Role | None, str]:
    grown = tick.grown
    moved = grown + tick.shrunk
    primary = tick.attribution.primary
    pool = primary if primary in grown else grown[0]
    action = Action.SCALED_BOTH if len(grown) == 2 else reasons.scaled_action(grown[0])
    why = "; ".join(_why(tick, r, named=len(grown) == 2) for r in grown)
    return action, pool, reasons.sentence("Scaled", _changes(tick, moved), [why, *notes])


def _explain_down(tick: Tick, notes: list[str]) -> tuple[Action, Role | None, str]:
    shrunk = tick.shrunk
    pool = shrunk[0] if len(shrunk) == 1 else None
    limited = any(tick.final[r] < tick.stabilized[r].replicas for r in shrunk)
    window = tick.inp.spec.scaling.scale_down_stabilization_seconds
    if limited:
        action, head, why = Action.CAPACITY_LIMITED, "Limited", ""
    else:
        action, head = Action.SCALED_DOWN, "Scaled down"
        why = reasons.scaled_down(
            window, tick.ratio.n_prefill, tick.ratio.n_decode, tick.forecast, _by_memory(tick)
        )
        steps = [(r, tick.stabilized[r].towards) for r in shrunk]
        why = "; ".join([why, *(reasons.step_down(r, n) for r, n in steps if n is not None)])
    parts = [why, *notes] if why else notes
    return action, pool, reasons.sentence(head, _changes(tick, shrunk), parts)


def _explain_hold(tick: Tick, notes: list[str]) -> tuple[Action, Role | None, str]:
    sizes = reasons.sizes(tick.final[Role.PREFILL], tick.final[Role.DECODE])
    short = tick.attribution.primary
    if short is not None:
        why = _why(tick, short, named=True)
        if tick.wants[short].replicas > tick.final[short]:
            return Action.HOLD_AT_LIMIT, short, reasons.sentence("Hold", sizes, [why, *notes])
        in_flight = tick.facts[short].in_flight
        wait = reasons.waiting(short, in_flight) if in_flight else ""
        return Action.HOLD, short, reasons.sentence("Hold", sizes, [why, wait, *notes])
    held = [s for s in tick.stabilized.values() if s.deferred]
    deferred = [s.deferred for s in held if s.deferred]
    action = Action.HOLD
    if any(s.held_by == HELD_ROLLOUT for s in held):
        action = Action.HOLD_ROLLOUT
    elif any(s.held_by == HELD_DATA for s in held):
        action = Action.HOLD_METRICS_UNAVAILABLE
    elif any(s.held_by == HELD_WINDOW for s in held):
        action = Action.HOLD_STABILIZING
    n_p, n_d = tick.ratio.n_prefill, tick.ratio.n_decode
    if deferred:
        return action, None, reasons.sentence("Hold", sizes, [*deferred, *notes])
    within = reasons.within_targets(n_p, n_d, tick.forecast, _by_memory(tick))
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
        bound = tick.inp.spec.pool(role).replicas.max
        if role in tick.attribution.growing and want >= bound and tick.wants[role].replicas > bound:
            notes.append(reasons.at_max(role, bound, tick.wants[role].replicas))
    return notes
