"""The actions and the human sentences of the policy's decisions.

Owns: which ``types.Action`` a scale-up carries (``scaled_action``; the actions become
the ``reason`` of Kubernetes Events and of ``status.lastDecision``) and small pure
functions that format numbers into the sentence a person reads, e.g.
``Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s``.
Must not: decide anything (no replica arithmetic, no model calls) or do I/O.
"""

from __future__ import annotations

import math

from pdscaler.types import Action, Role

#: Every action a Decision can carry, in the order ``types.Action`` declares them.
ACTIONS = tuple(Action)

#: per role: the action of its scale-up, the latency it answers for, its model symbol
_SCALED = {Role.PREFILL: Action.SCALED_PREFILL, Role.DECODE: Action.SCALED_DECODE}
_LATENCY = {Role.PREFILL: "TTFT", Role.DECODE: "TPOT"}
_SYMBOL = {Role.PREFILL: "N_P", Role.DECODE: "N_D"}


def scaled_action(role: Role) -> Action:
    """``ScaledPrefill`` / ``ScaledDecode``: the action of a scale-up of ``role``."""
    return _SCALED[role]


def percentile_label(percentile: float) -> str:
    """``0.95`` -> ``p95``, ``0.99`` -> ``p99``, ``0.999`` -> ``p99.9``."""
    return f"p{round(percentile * 100, 3):g}"


def seconds(value: float | None) -> str:
    """A duration for a sentence: ``0.062`` -> ``62ms``, ``2.0`` -> ``2s``,
    ``38.24`` -> ``38s``, ``3.14`` -> ``3.1s``, ``None`` -> ``never``."""
    if value is None or math.isinf(value):
        return "never"
    if value < 1:
        return f"{value * 1000:.0f}ms"
    if value < 10:
        return f"{value:.2g}s" if value != int(value) else f"{value:.0f}s"
    return f"{value:.0f}s"


def percent(value: float, other: float) -> str:
    """``value`` as a percentage, with a decimal when whole percents would not tell it
    from ``other``: (0.91, 0.7) -> ``91%``; (0.7049, 0.7) -> ``70.5%``."""
    whole = f"{value:.0%}"
    return whole if whole != f"{other:.0%}" else f"{value:.1%}"


def latency_name(role: Role) -> str:
    """The latency a pool answers for: TTFT (prefill), TPOT (decode)."""
    return _LATENCY[role]


def pool_signals(
    role: Role,
    percentile: float,
    latency: float | None,
    slo: float,
    queue: float | None,
    utilization: float | None,
    target_utilization: float,
    kv_usage: float | None = None,
    kv_limit: float = 0.9,
    kv_demand: float | None = None,
) -> str:
    """Why a pool is under pressure, strongest-first, only the signals over their limit.

    ``pool_signals(Role.DECODE, 0.95, 0.062, 0.05, 0, 0.5, 0.7)`` ->
    ``"TPOT p95 62ms > 50ms SLO"``; a prefill queue of 12 and utilisation 0.91 of 0.7 ->
    ``"queue 12; utilization 91% > 70% target"``; decode whose load implies 2.24 of its
    ready replicas' KV (``kv_demand``, docs/models.md §2b) -> ``"load needs 224% of the
    ready KV cache > 90%"``. Empty when nothing is over.
    """
    parts: list[str] = []
    if latency is not None and latency > slo:
        parts.append(
            f"{latency_name(role)} {percentile_label(percentile)} "
            f"{seconds(latency)} > {seconds(slo)} SLO"
        )
    if queue is not None and queue > 0:
        parts.append(f"queue {queue:g}")
    if utilization is not None and utilization > target_utilization:
        shown = percent(utilization, target_utilization)
        parts.append(f"utilization {shown} > {target_utilization:.0%} target")
    if kv_usage is not None and kv_usage > kv_limit:
        parts.append(f"KV cache {kv_usage:.0%} > {kv_limit:.0%}")
    if kv_demand is not None and kv_demand > kv_limit and kv_demand > (kv_usage or 0.0):
        parts.append(f"load needs {kv_demand:.0%} of the ready KV cache > {kv_limit:.0%}")
    return "; ".join(parts)


def change(role: Role, before: int, after: int) -> str:
    """``decode 4->6``."""
    return f"{role.value} {before}->{after}"


def sizes(prefill: int, decode: int) -> str:
    """``prefill 20, decode 18``."""
    return f"prefill {prefill}, decode {decode}"


def sentence(head: str, what: str, parts: list[str]) -> str:
    """``Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s``: the head,
    what changed, then the non-empty parts joined by ``"; "``."""
    body = "; ".join(p for p in parts if p)
    return f"{head} {what}: {body}" if body else f"{head} {what}"


def drain_clause(drain_seconds: float | None, deadline: float) -> str:
    """``drain 38s <= 60s``, ``drain 95s > 60s``, ``drain never > 60s``."""
    meets = drain_seconds is not None and drain_seconds <= deadline * (1 + 1e-6)
    return f"drain {seconds(drain_seconds)} {'<=' if meets else '>'} {seconds(deadline)}"


def ratio_sized(role: Role, fractional: float, rate: float, memory: bool = False) -> str:
    """``ratio model N_D 22.86 at 32 req/s``; sized by the KV memory bound
    (docs/models.md §2b): ``KV memory bound N_D 4.97 at 3.5 req/s``."""
    symbol = _SYMBOL[role]
    model = "KV memory bound" if memory else "ratio model"
    return f"{model} {symbol} {fractional:.2f} at {rate:.3g} req/s"


def drain_sized(replicas: int, backlog: float) -> str:
    """``drain model needs 9 for a backlog of 102 requests``."""
    return f"drain model needs {replicas} for a backlog of {backlog:.0f} requests"


def proportional(pressure: float) -> str:
    """``models see no shortfall; grown with the signals' pressure 1.24x``."""
    return f"models see no shortfall; grown with the signals' pressure {pressure:.2f}x"


def startup_exceeds_deadline(role: Role, startup: float, deadline: float) -> str:
    """The deadline cannot be met by any size: new capacity arrives too late."""
    return (
        f"deadline infeasible: {role.value} startup {seconds(startup)} >= recovery "
        f"{seconds(deadline)}, sized to drain {seconds(deadline)} after new replicas are up"
    )


def drain_short(
    role: Role, drain_seconds: float | None, deadline: float, replicas: int, needed: int
) -> str:
    """``deadline infeasible: decode drain 95s > 60s at 32 replicas (needs 41)``."""
    return (
        f"deadline infeasible: {role.value} drain {seconds(drain_seconds)} > "
        f"{seconds(deadline)} at {replicas} replicas (needs {needed})"
    )


def scaled_down(
    window: float, n_prefill: float, n_decode: float, rate: float, memory: bool = False
) -> str:
    """Why a scale-down applies now."""
    return (
        f"recommendations lower for the whole {window:g}s stabilization window "
        f"(N_P {n_prefill:.2f}, N_D {n_decode:.2f}{memory_note(memory)} at {rate:.3g} req/s)"
    )


def memory_note(memory: bool) -> str:
    """`` by KV memory`` after an N_D that the memory bound sized (docs/models.md §2b)."""
    return " by KV memory" if memory else ""


def step_down(role: Role, towards: int) -> str:
    """``prefill towards 11, a third at a time (one step per window)``."""
    return f"{role.value} towards {towards}, a third at a time (one step per window)"


def within_targets(n_prefill: float, n_decode: float, rate: float, memory: bool = False) -> str:
    """``within targets (N_P 19.05, N_D 17.86 at 20 req/s)``; with decode sized by its
    KV: ``within targets (N_P 5.20, N_D 4.97 by KV memory at 3.5 req/s)``."""
    return (
        f"within targets (N_P {n_prefill:.2f}, N_D {n_decode:.2f}{memory_note(memory)} "
        f"at {rate:.3g} req/s)"
    )


def ttft_set_aside(
    percentile: float, latency: float, slo: float, queue: float, ready: int, unqueued: bool
) -> str:
    """Why a TTFT breach grew nothing: ``TTFT p95 4.7s > 2s SLO set aside: replicas
    added inside the metrics window drained the queue (1 waiting, 6 ready)``; with
    ``unqueued``: ``... set aside: fewer requests waited than prefill replicas were ready
    at every tick of the metrics window (2 waiting, 46 ready)``."""
    why = (
        "fewer requests waited than prefill replicas were ready at every tick of the metrics window"
        if unqueued
        else "replicas added inside the metrics window drained the queue"
    )
    return (
        f"TTFT {percentile_label(percentile)} {seconds(latency)} > {seconds(slo)} SLO set "
        f"aside: {why} ({queue:g} waiting, {ready} ready)"
    )


def waiting(role: Role, in_flight: int) -> str:
    """``waiting for 3 decode replicas starting``."""
    return f"waiting for {in_flight} {role.value} replicas starting"


def capacity_note(gpus: int, pending: int, bottleneck: Role | None) -> str:
    """``capacity limited: the cluster schedules 38 GPUs (6 pods pending), decode first``;
    without pending pods (a capacity learnt earlier): ``... schedules at most 38 GPUs``."""
    first = f", {bottleneck.value} first" if bottleneck is not None else ""
    if pending:
        return (
            f"capacity limited: the cluster schedules {gpus} GPUs ({pending} pods pending){first}"
        )
    return f"capacity limited: the cluster schedules at most {gpus} GPUs{first}"


def budget_note(gpus: int, bottleneck: Role | None) -> str:
    """``maxGPUs 32 reached, decode first``."""
    first = f", {bottleneck.value} first" if bottleneck is not None else ""
    return f"maxGPUs {gpus} reached{first}"


def at_max(role: Role, bound: int, wanted: int) -> str:
    """``decode at its max 32 (wants 41)``."""
    return f"{role.value} at its max {bound} (wants {wanted})"


def burst_headroom(replicas: int, factor: float) -> str:
    """``burst head-room +10 prefill (x1.55 for TTFT breaches the mean load does not
    explain)``."""
    return (
        f"burst head-room +{replicas} prefill (x{factor:.2f} for TTFT breaches the mean "
        f"load does not explain)"
    )


def kv_in_use(replicas: int, usage: float, ready: int, target: float) -> str:
    """``KV in use holds decode at 12 (90% of 8 ready replicas' cache, target 60%)``."""
    return (
        f"KV in use holds decode at {replicas} ({usage:.0%} of {ready} ready replicas' "
        f"cache, target {target:.0%})"
    )


def no_flip(source: Role, why: str) -> str:
    """Why a growing pool takes new replicas and not ``source``'s ready ones:
    ``no decode replica changes role: decode's data has a gap (decode queue depth
    unknown)``."""
    return f"no {source.value} replica changes role: {why}"


def flipped(
    source: Role, target: Role, count: int, seconds: float, startup: float, deadline: float
) -> str:
    """``3 decode replicas change role to prefill: serving in ~19s (a new one in ~90s),
    within the 60s drain deadline`` (``1 decode replica changes role ...``); ``past``
    when even the flip is later than it."""
    many = "replicas change" if count != 1 else "replica changes"
    where = "within" if seconds <= deadline else "past"
    return (
        f"{count} {source.value} {many} role to {target.value}: serving in "
        f"~{seconds:.0f}s (a new one in ~{startup:.0f}s), {where} the {deadline:.0f}s "
        "drain deadline"
    )
