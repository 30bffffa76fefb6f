"""How many replicas each pool needs this tick, before bounds, budget and stabilization.

Owns: the per-pool signals handed to the bottleneck model, the rule that says which
pools may grow, and the size of a growth (ratio model, drain-time model, proportional
fallback). Purely computational; must not apply min/max, the GPU budget, the
stabilization window (``limits`` and ``stabilize`` do), read clocks or do I/O.

Which pools may grow (the bottleneck rule, docs/models.md §4)
--------------------------------------------------------
A pool's *load signals* are its own: token utilisation (load / capacity of its ready
replicas vs ``targetUtilization``), its queue (more than one waiting request per ready
replica) and, for decode, KV-cache usage (> 90%; with ``kvCacheTokens``, the larger of
the usage observed and the share of the ready replicas' KV the load implies,
docs/models.md §2b, so a memory shortage shows before the cache fills). Its *latency*
(TTFT, TPOT) can be inherited from the other pool: a decode pool that cannot admit holds
first tokens back, so TTFT rises although prefill is idle. Hence:

1. The *primary* bottleneck is the pool with the larger pressure among the pools whose
   load signals exceed their limits; when no pool is short by load, the pool whose
   latency is over its SLO (``models.locate_bottleneck``, ties to prefill).
2. The primary grows. The other pool grows on the same tick only when its OWN load
   signals say it is short (then both are bottlenecks: ``ScaledBoth``). A pool that is
   not short never gains GPUs, whatever the ratio model's steady-state target says.

So longer prompts raise prefill utilisation only and scale prefill; longer outputs
raise decode utilisation only and scale decode; a rate increase scales each pool whose
utilisation crosses its target (decode alone when prefill still has head-room).

How much a pool grows
---------------------
``want = max(ratio target, drain target)`` where the ratio target is
``ceil(R_forecast * L / (P * u))`` (for decode with ``kvCacheTokens``, the larger of that
and the memory bound, docs/models.md §2b) and the drain target the fewest replicas that drain
the backlog by ``slo.recoverySeconds`` (``models.replicas_for_deadline``):

* per-replica service rate ``r = P / L`` req/s (P = refined tokens/s, L = tokens per
  request of the pool: L_p for prefill, L_d for decode; for decode with
  ``kvCacheTokens``, at most what its KV holds, ``kvbound.memory_rate``), arrivals
  ``lambda = R_forecast``;
* backlog ``B = Q_0 + (lambda - mu_0) * T_s`` (``models.backlog``), where ``mu_0`` is
  what the current replicas serve during T_s: the ready ones all along, the in-flight
  ones (requested earlier, not ready yet) from when they come up
  (``T_s - (now - last scale-up)`` from now; all T_s when unknown);
* only when ``B > 0``, and giving the new capacity at least one scaling interval to
  drain (a deadline a second after T_s would otherwise ask for hundreds of replicas).
  When ``slo.recoverySeconds <= T_s`` no size can meet the deadline: the pool is sized
  to drain the backlog ``recoverySeconds`` after the new capacity is up (deadline
  ``T_s + recoverySeconds``), and the deadline is reported infeasible.

Worked numbers (prefill, r = 1300/2000 = 0.65 req/s per replica): R = 3.5 req/s,
T_s = 10 s, deadline 60 s, 100 requests queued, 5 ready replicas (mu_0 = 3.25):
B = 100 + 0.25 * 10 = 102.5; mu_min = 3.5 + 102.5/50 = 5.55 req/s -> ceil(8.54) = 9
replicas (ratio target at u = 0.7: ceil(7.69) = 8), drained at 10 + 102.5/2.35 = 53.6 s.

When a pool is short, no replica of it is still starting, and the models see no
shortfall (the priors overrate the replicas; refinement lowers them only once a queue
has persisted over a whole window), the primary grows like the HPA:
``ceil(ready * min(pressure, 2))``, at least one replica more than it runs, but only
when its pressure is one more replicas relieve (``may_grow_proportionally``):

* decode's TPOT is a step time that grows with the batch per replica: more replicas
  shorten it, queue or not;
* prefill's TTFT is queueing plus the prompt's own service time. With fewer requests
  waiting than replicas, TTFT over the SLO is service time (a 7,400-token prompt takes
  0.9 s on a replica, plus up to one batch of waiting for a busy one) or the tail of a
  backlog that has already drained (the p99 covers the whole 2-minute window): no
  replica added shortens either. So prefill grows this way only with at least one
  request waiting per ready replica, and its TTFT does not make it a bottleneck at all
  when replicas came up inside the latency window and the queue has stayed below that
  at every tick since (``ttft_is_past``: the percentile still counts the requests that
  queued before them), nor when the queue stayed below that at every tick of the whole
  window (``history.unqueued_throughout``: no request waited for a prefill replica);
* a queue that fell since the last tick is draining with the capacity there is: 40
  then 25 waiting grows nothing (the drain model, which sees the queue, still may);
* on the two ticks after a pool's new replicas first show ready, its queue and latency
  may have been measured before they served (a scrape interval plus Prometheus' lag can
  outlast a short tick): 2 -> 5 ready with 38 waiting does not double to 10 on either
  of those ticks (the queue may already be empty).

Prefill's proportional step is sized by ``growth_pressure``: its queue counts as the
time the ready replicas need to serve it, over the TTFT SLO, not as requests per
replica. 29 waiting on 14 ready replicas is 2.07 per replica (a doubling to 28), but
at 8 req/s per replica it is served in 0.26 s, 0.13x of a 2 s SLO; with TTFT p99
2.3 s (1.15x) the pool grows to ceil(14 x 1.15) = 17.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdscaler.models import (
    Bottleneck,
    PoolSignals,
    ceil_replicas,
    drain_time,
    locate_bottleneck,
    pool_pressure,
    replicas_for_deadline,
)
from pdscaler.models import backlog as backlog_of
from pdscaler.models.bottleneck import PRESSURE_LIMIT
from pdscaler.policy.history import backlogged
from pdscaler.types import Role

#: The proportional fallback grows a pool at most this many times its ready replicas
#: per tick (the HPA's default scale-up policy allows +100% per period).
MAX_PROPORTIONAL_STEP = 2.0
#: Per-replica service rates above this (req/s) mean a pool has no per-request work to
#: size a drain for: a mean prompt of 1e-305 tokens would otherwise overflow to inf.
MAX_SERVICE_RATE = 1e9


@dataclass(frozen=True)
class PoolFacts:
    """One pool as sizing sees it. ``tps`` is the refined per-replica tokens/s,
    ``tokens`` the pool's tokens per request (L_p or L_d), ``in_flight`` replicas asked
    for that are neither ready nor unschedulable (still starting)."""

    role: Role
    current: int
    ready: int
    in_flight: int
    tps: float
    tokens: float
    target_utilization: float
    slo_seconds: float
    latency: float | None
    queue: float | None
    kv_usage: float | None
    #: decode with ``kvCacheTokens``: the share of the ready replicas' KV the load holds
    #: (``kvbound.kv_demand``), and a replica's req/s when its KV binds
    kv_demand: float | None = None
    memory_rate: float | None = None

    def kv_signal(self) -> float | None:
        """Decode's KV signal: the larger of the cache usage observed and the share of
        the ready replicas' KV the load implies (0.62 observed, 2.24 implied -> 2.24)."""
        known = [v for v in (self.kv_usage, self.kv_demand) if v is not None]
        return max(known) if known else None

    def load_tps(self, rate: float) -> float:
        """Tokens/s this pool must process at ``rate`` req/s."""
        return rate * self.tokens

    def utilization(self, rate: float) -> float:
        """Load over the capacity of the READY replicas (one replica when none is ready,
        so a starved pool shows as loaded): 24 req/s x 2000 / (20 x 3000) = 0.8."""
        return self.load_tps(rate) / (max(self.ready, 1) * self.tps)

    def signals(self, rate: float, with_latency: bool = True) -> PoolSignals:
        """The bottleneck model's view; the queue limit is one request per ready replica."""
        return PoolSignals(
            latency_seconds=self.latency if with_latency else None,
            slo_seconds=self.slo_seconds,
            queue_depth=self.queue,
            utilization=self.utilization(rate),
            kv_usage=self.kv_signal() if self.role is Role.DECODE else None,
            target_utilization=self.target_utilization,
            queue_limit=max(1.0, float(self.ready)),
        )


@dataclass(frozen=True)
class Attribution:
    """Which pools may grow: ``primary`` (the bottleneck, None when no pool is under
    pressure) and ``growing`` (the primary plus a pool short by its own load);
    ``ttft_set_aside``: prefill's TTFT was over its SLO but counted as past
    (``ttft_is_past``), so the decision can say why it did not act on it;
    ``ttft_unqueued``: why: nothing waited for a prefill replica at any tick of the
    window (else: replicas added inside it drained the queue)."""

    primary: Role | None
    growing: tuple[Role, ...]
    bottleneck: Bottleneck
    load_pressure: dict[Role, float]
    ttft_set_aside: bool = False
    ttft_unqueued: bool = False


def ttft_is_past(prefill: PoolFacts, drained_since_rise: bool) -> bool:
    """Whether prefill's TTFT breach is the memory of a backlog already drained (module
    docstring): replicas came up inside the latency window and the queue has stayed below
    one per ready replica at every tick since (``history.drained_since_rise``), and still
    is. 5 ready (2 a tick before), queues 0 and 1 since: past. Queue 23 on 9 replicas
    after they were all up: present (the percentile is a standing shortage)."""
    return (
        drained_since_rise
        and prefill.queue is not None
        and not backlogged(prefill.queue, prefill.ready)
    )


def attribute(
    prefill: PoolFacts,
    decode: PoolFacts,
    rate: float,
    prefill_drained: bool = False,
    prefill_unqueued: bool = False,
) -> Attribution:
    """Apply the bottleneck rule of the module docstring at the measured ``rate``.

    Chat pools at 20 prefill / 18 decode ready, R = 24 (+20%): prefill utilisation
    48000/60000 = 0.80 (1.14x of 0.7), decode 12000/14400 = 0.83 (1.19x): primary
    decode, both growing. With 24 prefill ready, prefill is at 0.67 (0.95x): decode only.

    Prefill's TTFT does not count once the replicas added inside the window have
    drained the queue (``ttft_is_past``, ``prefill_drained``): after a warm-up backlog
    drains, 4 ready (1 a window ago) with queue 1 and TTFT p95 4.7 s grow nothing, where
    the ratio model at a forecast 26 req/s would have asked for 6. Nor does it when
    nothing waited for a prefill replica at any tick of the whole window
    (``prefill_unqueued``, ``history.unqueued_throughout``): 46 ready at 3.6 req/s with
    TTFT p99 2.5 s of 2 s, queues below 46 all window, is not held at 46 by it (the code
    trace at 4x held 46 replicas for 45 minutes on such breaches, N_P 1-20).
    """
    past = ttft_is_past(prefill, prefill_drained or prefill_unqueued)
    full = locate_bottleneck(prefill.signals(rate, with_latency=not past), decode.signals(rate))
    load = {
        f.role: pool_pressure(f.role, f.signals(rate, with_latency=False))[0]
        for f in (prefill, decode)
    }
    short = [r for r in (Role.PREFILL, Role.DECODE) if load[r] > PRESSURE_LIMIT]
    primary: Role | None
    if short:
        primary = max(short, key=lambda r: (full.pressure(r), r is Role.PREFILL))
    else:
        primary = full.pool
    growing = tuple(r for r in (Role.PREFILL, Role.DECODE) if r == primary or r in short)
    breached = prefill.latency is not None and prefill.latency > prefill.slo_seconds
    return Attribution(
        primary=primary,
        growing=growing,
        bottleneck=full,
        load_pressure=load,
        ttft_set_aside=past and breached,
        ttft_unqueued=past and breached and not prefill_drained,
    )


@dataclass(frozen=True)
class DrainPlan:
    """The drain-time view of one pool: the backlog when new capacity is up, the
    replicas that drain it by the deadline (None: none needed, ``B = 0``), whether the
    deadline is reachable at all (``slo.recoverySeconds > T_s``), and the numbers a
    message needs."""

    backlog: float
    replicas: int | None
    feasible: bool
    arrival_rate: float
    per_replica_rate: float
    startup_seconds: float
    deadline: float

    def drain_seconds(self, replicas: int) -> float | None:
        """When the backlog is gone with ``replicas`` up (None: never)."""
        return drain_time(
            self.arrival_rate, replicas * self.per_replica_rate, self.startup_seconds, self.backlog
        ).drain_seconds


def plan_drain(
    facts: PoolFacts,
    arrival_rate: float,
    startup_seconds: float,
    deadline: float,
    since_last_scale: float | None,
    min_slack: float = 0.0,
) -> DrainPlan | None:
    """The drain sizing of one pool; None when the pool has no per-request work
    (``tokens`` 0 or so small that the service rate is infinite). See the module
    docstring for the numbers. ``min_slack``: the new capacity gets at least this long
    to drain (the policy passes one scaling interval): with T_s refined to 59.5 s and a
    60 s deadline, 139 queued would otherwise need mu_min = lambda + 139 / 0.5 s."""
    per_replica = facts.tps / facts.tokens if facts.tokens > 0 else math.inf
    if facts.memory_rate is not None:  # a decode replica whose KV binds serves fewer
        per_replica = min(per_replica, facts.memory_rate)
    if per_replica > MAX_SERVICE_RATE:  # no per-request work to speak of (or overflow)
        return None
    if since_last_scale is None:
        remaining = startup_seconds
    else:
        remaining = min(max(startup_seconds - since_last_scale, 0.0), startup_seconds)
    served = facts.ready * per_replica * startup_seconds
    served += facts.in_flight * per_replica * (startup_seconds - remaining)
    mu_0 = served / startup_seconds if startup_seconds > 0 else 0.0
    b = backlog_of(arrival_rate, startup_seconds, facts.queue or 0.0, mu_0)
    feasible = deadline > startup_seconds
    effective = (
        max(deadline, startup_seconds + min_slack) if feasible else startup_seconds + deadline
    )
    replicas = None
    if b > 0:
        replicas = replicas_for_deadline(arrival_rate, b, startup_seconds, effective, per_replica)
    return DrainPlan(
        backlog=b,
        replicas=replicas,
        feasible=feasible,
        arrival_rate=arrival_rate,
        per_replica_rate=per_replica,
        startup_seconds=startup_seconds,
        deadline=deadline,
    )


@dataclass(frozen=True)
class Want:
    """What one pool asks for: ``replicas`` (unbounded), and where it came from."""

    replicas: int
    ratio_target: int
    drain: DrainPlan | None
    proportional: bool = False


def may_grow_proportionally(
    facts: PoolFacts, queue_falling: bool, just_came_up: bool = False
) -> bool:
    """Whether the pool's pressure is one more replicas relieve (module docstring):
    never with a falling queue, nor within two ticks of its new replicas first showing
    ready (``just_came_up``: the queue and latency may predate them);
    decode always; prefill with at least one request waiting per ready replica
    (10 ready: queue 10 yes, queue 3 or unknown no)."""
    if queue_falling or just_came_up:
        return False
    if facts.role is Role.DECODE:
        return True
    return backlogged(facts.queue, facts.ready)


def grow(
    facts: PoolFacts,
    ratio_target: int,
    drain: DrainPlan | None,
    pressure: float,
    primary: bool,
    proportional: bool = True,
) -> Want:
    """The size of a growing pool: ``max(ratio, drain)``; for the primary, when that is
    not above what it runs, no replica is still starting (those may be all it needs)
    and ``proportional`` (``may_grow_proportionally``) allows it,
    ``max(current, ceil(ready * min(pressure, 2)))`` and at least ``ready + 1``
    (4 ready at pressure 1.24 -> ceil(4.96) = 5)."""
    drain_target = drain.replicas if drain is not None and drain.replicas is not None else 0
    model = max(ratio_target, drain_target)
    if model > facts.current or not primary or facts.in_flight > 0 or not proportional:
        return Want(max(model, facts.current), ratio_target, drain)
    step = ceil_replicas(facts.ready * min(pressure, MAX_PROPORTIONAL_STEP))
    replicas = max(facts.current, step, facts.ready + 1)
    return Want(replicas, ratio_target, drain, proportional=replicas > facts.current)


def ratio_targets(n_prefill: float, n_decode: float) -> dict[Role, int]:
    """Ceilings of the fractional ratio-model replicas (19.05 -> 20, 17.86 -> 18)."""
    return {Role.PREFILL: ceil_replicas(n_prefill), Role.DECODE: ceil_replicas(n_decode)}


def finite_or_none(value: float | None) -> float | None:
    """``value`` unless it is NaN or infinite (those are not published)."""
    return value if value is not None and math.isfinite(value) else None


def growth_pressure(facts: PoolFacts, rate: float) -> float:
    """Prefill's pressure for the proportional step (module docstring): the largest of
    latency / SLO, utilisation / target, and the time the ready replicas take to serve
    the queue / SLO. 14 ready at 10,000 tok/s, 1,240-token prompts (8.06 req/s each),
    queue 29, TTFT 2.3 s vs 2 s, 50 req/s: max(1.15, 0.63, 29 / (14 x 8.06 x 2) = 0.13)
    = 1.15."""
    parts = [facts.utilization(rate) / facts.target_utilization]
    if facts.latency is not None:
        parts.append(facts.latency / facts.slo_seconds)
    if facts.queue is not None and facts.tokens > 0 and facts.tps > 0:
        per_replica = facts.tps / facts.tokens
        served = max(facts.ready, 1) * per_replica * facts.slo_seconds
        parts.append(facts.queue / served)
    return max(parts)
