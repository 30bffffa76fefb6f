"""The closed loop on a simulated clock: engine, Prometheus scrapes and one autoscaler.

Owns: the schedule of one run. Prometheus scrapes every pod every ``scrape_interval_s``
(phase-shifted by half an interval, as scrapes are not aligned with the operator's
timer) and a scrape is queryable ``prom_lag_s`` later; the controller runs every
``spec.scaling.interval`` and sees ``observe.snapshot`` plus the pool observations;
its targets are applied through ``Engine.scale_to`` (new replicas serve after the
engine's TRUE start-up time, removed ones drain). After the trace ends the loop keeps
going until every request is done or ``drain_limit_s`` has passed. It records the
replicas over time, every scale action, the controllers' notes and predicted drains.
Must not: read clocks (``progress`` receives simulated progress), let the controller
see the engine, or write files.

GPU-hours are billed per policy until its last request is done (or the limit): a
policy that finishes its tail later keeps paying for its replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from pdscaler.models.migration import SOFTWARE_PREP_SECONDS
from pdscaler.sim.controllers import Controller, Target, View
from pdscaler.sim.engine import Engine, EngineParams, FloatArray, RequestTimes
from pdscaler.sim.observe import pool_observation, snapshot
from pdscaler.sim.prom import PromView
from pdscaler.sim.setup import warm_start
from pdscaler.sim.traces import Trace
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import FlipOptions, PoolObservation, Role

Progress = Callable[[float], None]


@dataclass(frozen=True)
class LoopConfig:
    """One run's settings. ``startup_s`` is the engine's TRUE mean start-up time (the
    spec's ``startupSeconds`` is the autoscalers' prior). ``initial`` None: the warm
    start of ``setup.warm_start``."""

    spec: PDDeploymentSpec
    params: EngineParams = field(default_factory=EngineParams)
    startup_s: float = 60.0
    scrape_interval_s: float = 15.0
    prom_lag_s: float = 1.0
    drain_limit_s: float = 1800.0
    seed: int = 0
    initial: tuple[int, int] | None = None
    #: Controllers are first consulted once this much simulated time has passed. They
    #: see Prometheus' partial windows at first, as an operator deployed just now would.
    warmup_s: float = 0.0
    #: Length-aware TTFT SLO, for scoring only: a request's TTFT limit is
    #: ``slo.ttftSeconds + ttft_per_token_s * prompt tokens`` (0: the flat limit).
    ttft_per_token_s: float = 0.0
    #: R every controller sees: the routers' arrivals (True: what the live operator reads
    #: where the cells' routers are scraped, its default with a router per cell) or the
    #: prefill pool's completions (False: the fall-back, which a backlog caps at the
    #: pool's throughput).
    arrivals: bool = True
    #: The engine's TRUE role-change time, from a replica empty in one pool to serving
    #: in the other (``Engine.flip``; the model's floor by default), and the role changes
    #: offered to pdscaler, with its own estimate of their cost, which need not be the
    #: truth (None: it only scales, as the live operator does today).
    reconfigure_s: float = SOFTWARE_PREP_SECONDS
    flips: FlipOptions | None = None


@dataclass(frozen=True)
class Action:
    """One applied change of one pool's desired replicas; ``flipped`` of the change are
    replicas changing role (taken from, or given to, the other pool)."""

    time: float
    role: Role
    before: int
    after: int
    flipped: int = 0


@dataclass(frozen=True)
class Timeline:
    """Per controller tick: desired and ready replicas and queue depths per pool."""

    time: FloatArray
    prefill_desired: FloatArray
    prefill_ready: FloatArray
    decode_desired: FloatArray
    decode_ready: FloatArray
    prefill_queue: FloatArray
    decode_queue: FloatArray


@dataclass(frozen=True)
class Run:
    """Everything one policy's run produced (``results.summarize`` condenses it)."""

    policy: str
    trace: str
    times: RequestTimes
    gpu_seconds: dict[Role, float]
    end: float
    timeline: Timeline
    actions: tuple[Action, ...]
    notes: tuple[tuple[float, str], ...]
    #: (time, predicted drain seconds or None) of every tick that scaled a pool up
    predicted_drains: tuple[tuple[float, float | None], ...]
    slo_ttft_s: float
    slo_tpot_s: float
    #: seconds of TTFT allowed per prompt token on top of ``slo_ttft_s`` (0: flat)
    slo_ttft_per_token_s: float = 0.0


class _Recorder:
    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.actions: list[Action] = []
        self.notes: list[tuple[float, str]] = []
        self.drains: list[tuple[float, float | None]] = []

    def row(self, engine: Engine, now: float) -> None:
        self.rows.append(
            (
                now,
                engine.desired(Role.PREFILL),
                engine.ready(Role.PREFILL),
                engine.desired(Role.DECODE),
                engine.ready(Role.DECODE),
                engine.queued(Role.PREFILL),
                engine.queued(Role.DECODE),
            )
        )

    def timeline(self) -> Timeline:
        cols = np.array(self.rows, dtype=np.float64).reshape(-1, 7).T
        return Timeline(*cols)


def _apply(
    engine: Engine, target: Target, now: float, rec: _Recorder, reconfigure_s: float
) -> None:
    """Flips first (their replicas then count in the pool they join), then scales."""
    scaled_up = False
    before = {r: engine.desired(r) for r in (Role.PREFILL, Role.DECODE)}
    moved = {Role.PREFILL: 0, Role.DECODE: 0}
    if target.flip is not None:
        flip = target.flip
        moved[flip.source] = moved[flip.target] = engine.flip(
            flip.source, flip.count, now, reconfigure_s
        )
    for role, want in ((Role.PREFILL, target.prefill), (Role.DECODE, target.decode)):
        have = before[role]
        if want != engine.desired(role):
            engine.scale_to(role, want, now)
        if want != have:
            rec.actions.append(Action(now, role, have, want, moved[role]))
            scaled_up = scaled_up or want > have
    if rec.actions and rec.actions[-1].time == now:
        rec.notes.append((now, target.note))
    if scaled_up:
        rec.drains.append((now, target.drain_seconds))


def run(
    trace: Trace,
    controller: Controller,
    cfg: LoopConfig,
    progress: Progress | None = None,
) -> Run:
    """Replay ``trace`` against ``controller``; deterministic for ``cfg.seed``.

    Replicas at t=0: ``cfg.initial``, else the controller's own ``initial`` attribute
    (static baselines), else the warm start.
    """
    spec = cfg.spec
    own: tuple[int, int] | None = getattr(controller, "initial", None)
    initial = cfg.initial or own or warm_start(trace, spec)
    engine = Engine(
        trace.arrival,
        trace.prompt,
        trace.output,
        cfg.params,
        startup_s=cfg.startup_s,
        initial=initial,
        seed=cfg.seed,
    )
    prom = PromView(lag=cfg.prom_lag_s)
    interval = spec.scaling.interval_seconds
    warmup = cfg.warmup_s
    limit = trace.span + cfg.drain_limit_s
    next_scrape = cfg.scrape_interval_s / 2.0
    next_tick = interval
    rec = _Recorder()
    now = 0.0
    while True:
        now = min(next_scrape, next_tick)
        if now > limit or (now > trace.span and not engine.pending()):
            break
        engine.run_until(now)
        if now == next_scrape:
            prom.scrape(engine.sample(now))
            next_scrape += cfg.scrape_interval_s
        if now == next_tick:
            if now >= warmup:
                view = View(now, snapshot(prom, now, spec, arrivals=cfg.arrivals), *_pools(engine))
                target = controller.tick(view)
                if target is not None:
                    _apply(engine, target, now, rec, cfg.reconfigure_s)
            rec.row(engine, now)
            next_tick += interval
            if progress is not None:
                progress(min(1.0, now / max(trace.span, 1.0)))
    end = _billing_end(engine, trace.span, limit)
    return Run(
        policy=controller.name,
        trace=trace.name,
        times=engine.times(),
        gpu_seconds=engine.gpu_seconds(end),
        end=end,
        timeline=rec.timeline(),
        actions=tuple(rec.actions),
        notes=tuple(rec.notes),
        predicted_drains=tuple(rec.drains),
        slo_ttft_s=spec.slo.ttft_seconds,
        slo_tpot_s=spec.slo.tpot_seconds,
        slo_ttft_per_token_s=cfg.ttft_per_token_s,
    )


def _pools(engine: Engine) -> tuple[PoolObservation, PoolObservation]:
    return pool_observation(engine, Role.PREFILL), pool_observation(engine, Role.DECODE)


def _billing_end(engine: Engine, span: float, limit: float) -> float:
    """The billing horizon: the end of the trace or the last request's finish, whichever
    is later; the limit if some request never finished (the engine is run up to it)."""
    finish = engine.times().finish
    if np.all(np.isfinite(finish)):
        return max(span, float(np.max(finish)) if len(finish) else span)
    engine.run_until(limit)
    return limit
