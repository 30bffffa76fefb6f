"""The drain-time model (docs/models.md §3): does a scale-up recover before the deadline?

Owns: the backlog that forms while new replicas start (B), the time to drain it
(T_s + B/(mu - lambda), or never), and the inverse (the smallest service rate / replica
count that drains by a deadline D, or infeasible when D <= T_s). Purely computational;
must not read metrics or clocks. Rates in req/s, times in seconds, backlog in requests.

Golden (docs/models.md): lambda = 3.5 req/s, T_s = 10 s, D = 60 s -> B = 35 requests;
mu = 4.55 -> 43.3 s (meets); 4.17 -> 62.2 s (misses); 3.02 -> never.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdscaler.models._checks import at_most, ceil_replicas, non_negative, positive


def backlog(
    arrival_rate: float,
    startup_seconds: float,
    queued: float = 0.0,
    current_service_rate: float = 0.0,
) -> float:
    """Requests waiting when the new capacity is up: ``Q_0 + (lambda - mu_0) * T_s``,
    never below 0 (the current capacity cannot serve more than is there).

    3.5 req/s for 10 s with nothing queued and no current capacity -> 35. With 12
    queued and 2 req/s served meanwhile: 12 + (3.5 - 2) * 10 = 27. With 5 queued and
    4 req/s served: 5 - 5 = 0 (the current pool keeps up; nothing to drain).
    """
    arrival_rate = non_negative("arrival_rate", arrival_rate)
    startup_seconds = non_negative("startup_seconds", startup_seconds)
    queued = non_negative("queued", queued)
    current_service_rate = non_negative("current_service_rate", current_service_rate)
    return max(0.0, queued + (arrival_rate - current_service_rate) * startup_seconds)


@dataclass(frozen=True)
class DrainResult:
    """When the backlog is gone, counted from the scale-up decision.

    ``drain_seconds`` = T_s + B / margin, ``None`` = never (margin <= 0);
    ``margin`` = mu - lambda in req/s (negative when the pool falls further behind).
    """

    backlog: float
    drain_seconds: float | None
    margin: float

    def meets(self, deadline: float) -> bool:
        """True when drained by ``deadline`` seconds (43.3 s meets 60 s; never does not).
        A drain time equal to the deadline up to float rounding meets it."""
        return self.drain_seconds is not None and at_most(self.drain_seconds, deadline)


def drain_time(
    arrival_rate: float,
    service_rate: float,
    startup_seconds: float,
    backlog: float,
) -> DrainResult:
    """Drain time of ``backlog`` requests once a pool serving ``service_rate`` is up.

    ``T_drain = T_s + B / (mu - lambda)`` when mu > lambda, else never (None), also for
    B = 0: a pool that only matches the arrival rate has no margin for any burst.
    3.5 req/s, mu 4.55, T_s 10, B 35 -> 10 + 35/1.05 = 43.3 s.
    """
    arrival_rate = non_negative("arrival_rate", arrival_rate)
    service_rate = non_negative("service_rate", service_rate)
    startup_seconds = non_negative("startup_seconds", startup_seconds)
    backlog = non_negative("backlog", backlog)
    margin = service_rate - arrival_rate
    seconds = startup_seconds + backlog / margin if margin > 0 else None
    return DrainResult(backlog=backlog, drain_seconds=seconds, margin=margin)


def min_service_rate(
    arrival_rate: float,
    backlog: float,
    startup_seconds: float,
    deadline: float,
) -> float | None:
    """Smallest service rate that drains ``backlog`` by ``deadline``:
    ``mu_min = lambda + B / (D - T_s)``; ``None`` (infeasible) when D <= T_s.

    3.5 + 35 / (60 - 10) = 4.2 req/s. With B = 0 it is lambda itself, the infimum: any
    rate above it drains at once (``drain_time`` needs mu > lambda strictly).
    """
    arrival_rate = non_negative("arrival_rate", arrival_rate)
    backlog = non_negative("backlog", backlog)
    startup_seconds = non_negative("startup_seconds", startup_seconds)
    deadline = positive("deadline", deadline)
    if deadline <= startup_seconds:
        return None
    return arrival_rate + backlog / (deadline - startup_seconds)


def replicas_for_deadline(
    arrival_rate: float,
    backlog: float,
    startup_seconds: float,
    deadline: float,
    per_replica_rate: float,
) -> int | None:
    """Fewest replicas of ``per_replica_rate`` req/s each whose total rate drains
    ``backlog`` by ``deadline`` (and exceeds ``arrival_rate``); ``None`` when D <= T_s.

    mu_min = 4.2 req/s at 0.65 req/s per replica -> ceil(6.46) = 7 replicas (4.55 req/s,
    drained at 43.3 s). When mu_min is an exact multiple of the per-replica rate and
    B = 0, one more replica is added so the margin is positive.
    """
    per_replica_rate = positive("per_replica_rate", per_replica_rate)
    mu_min = min_service_rate(arrival_rate, backlog, startup_seconds, deadline)
    if mu_min is None:
        return None
    replicas = ceil_replicas(mu_min / per_replica_rate)
    if replicas * per_replica_rate <= arrival_rate:
        replicas = math.floor(arrival_rate / per_replica_rate) + 1
    # ceil_replicas forgives float noise in mu_min / rate, but the drain time
    # B / (mu - lambda) magnifies it when mu - lambda is small: one more replica then.
    if not drain_time(arrival_rate, replicas * per_replica_rate, startup_seconds, backlog).meets(
        deadline
    ):
        replicas += 1
    return replicas
