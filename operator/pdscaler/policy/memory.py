"""What the policy keeps from one tick to the next (``PolicyMemory``), and for how long.

Owns: the rate history (``record_rate``: at most ``MAX_RATE_POINTS``, the forecast's
lookback), the pool points (``remember_pools``: this tick's queues and ready counts,
kept for the metrics window plus one interval so the point at the window start proves
the window covered), and ``remember``: the memory a sized tick leaves. Must not: size
anything, read clocks (``now`` is the tick's) or do I/O.

Worked lookbacks for a 2m window and a 15 s interval: pool points 120 + 15 = 135 s;
the forecast's trend max(120, 3 x 15) = 120 s.
"""

from __future__ import annotations

from pdscaler.policy import history, seasonal
from pdscaler.policy.tick import Tick
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, PolicyMemory, Role, TickInput

#: Most points kept in the rate history (the forecast only needs the last few minutes).
MAX_RATE_POINTS = 32


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


def remember_pools(inp: TickInput, snap: MetricsSnapshot) -> tuple[history.Point, ...]:
    """The pool history with this tick's queues and ready counts appended
    (``pool_point``), kept for the metrics window plus one interval (``history_lookback``:
    2m window, 15s interval -> 135 s)."""
    return history.record(
        inp.memory.pool_history, pool_point(inp, snap), history_lookback(inp.spec)
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


def profiled_prior(tick: Tick, role: Role) -> float | None:
    """The prior ``role``'s capacity was refined against this tick, kept only for a
    pool with a profile (its prior moves with the mix). A constant prior is not kept,
    so a learnt capacity is never rescaled when the user edits ``tokensPerSecond``
    (``refine.carry`` then leaves it as it was, bounded by the new prior)."""
    if not tick.inp.spec.pool(role).profile:
        return None
    return tick.priors.get(role)


def remember(tick: Tick, startup: float) -> PolicyMemory:
    """What the next tick starts from: the stabilization window's records, the rate
    history with this tick's rate, the refined capacities and T_s, when the pools last
    grew, the learnt schedulable capacity, the pool points, the burst factor and the
    season with this tick's rate (``seasonal.observe``)."""
    inp = tick.inp
    return PolicyMemory(
        recommendations=tick.window,
        rate_history=record_rate(
            inp.memory.rate_history, inp.now, tick.rate, forecast_lookback(inp.spec)
        ),
        prefill_tps=tick.facts[Role.PREFILL].tps,
        decode_tps=tick.facts[Role.DECODE].tps,
        prefill_prior=profiled_prior(tick, Role.PREFILL),
        decode_prior=profiled_prior(tick, Role.DECODE),
        startup_seconds=startup,
        last_scale_time=inp.now if tick.grown else inp.memory.last_scale_time,
        capacity_gpus=tick.capacity.gpus,
        capacity_time=tick.capacity.since,
        pool_history=tick.pools,
        burst_factor=tick.burst_factor,
        season=seasonal.observe(inp.memory.season, inp.now, tick.rate),
    )
