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

Pre-roll (``LoopConfig.preroll_s`` = s > 0; off by default, and then nothing changes):
the first s seconds of the trace are a pre-roll, replayed with the controller running
so that a dynamic policy enters the scored span [s, span] in its own steady state
(its replicas, Prometheus windows and memory), not in the warm start; static policies
start at their size as always. ``run`` then returns the scored span as the Run (on the
scored span's clock: its t=0 is the replay's s, so it lines up with
``trace.window(s, span)``, every figure of ``results`` comes from it) and the pre-roll
as ``Run.preroll`` (on the replay's clock). A request belongs to the span it ARRIVES in
(a pre-roll request finishing after s is the pre-roll's); GPU-seconds are split at s
(the pre-roll pays [0, s), the scored span [s, end]); actions, notes, predicted drains
and timeline rows at or after s are the scored span's. Worked example: an hour trace
with 600 s of ``traces.with_preroll`` and ``preroll_s=600``: the Run scores the
hour's requests exactly, t=0 being the hour's start; ``Run.preroll`` has the copy of
its first 10 minutes and the GPU-seconds billed before it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

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
    #: Seconds of the trace's start replayed as a pre-roll, scored apart (module
    #: docstring); 0: none, the whole trace is scored.
    preroll_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.preroll_s >= 0 and math.isfinite(self.preroll_s)):
            raise ValueError(f"preroll_s must be >= 0 seconds, got {self.preroll_s!r}")


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
    #: With a pre-roll: the replay time of this Run's t=0 (``LoopConfig.preroll_s``)
    #: and the pre-roll's own Run (its requests and GPU-seconds, on the replay's
    #: clock); 0 and None without one.
    scored_from: float = 0.0
    preroll: Run | None = None


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
    (static baselines), else the warm start. With ``cfg.preroll_s`` the first seconds
    are a pre-roll (module docstring): the Run is the scored span's.
    """
    if cfg.preroll_s >= trace.span > 0:
        raise ValueError(
            f"the pre-roll ({cfg.preroll_s:g} s) leaves nothing of the {trace.span:g} s trace"
        )
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
    times, end = _billing_end(engine, trace.span, limit)
    whole = Run(
        policy=controller.name,
        trace=trace.name,
        times=times,
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
    if cfg.preroll_s <= 0:
        return whole
    return split(whole, cfg.preroll_s, engine.gpu_seconds(cfg.preroll_s))


def _shift_times(t: RequestTimes, keep: np.ndarray, by: float) -> RequestTimes:
    """The requests ``keep`` selects, their times moved ``by`` seconds earlier."""
    return RequestTimes(
        arrival=t.arrival[keep] - by,
        prompt=t.prompt[keep],
        output=t.output[keep],
        prefill_start=t.prefill_start[keep] - by,
        prefill_end=t.prefill_end[keep] - by,
        decode_admit=t.decode_admit[keep] - by,
        first_token=t.first_token[keep] - by,
        finish=t.finish[keep] - by,
        rejected=None if t.rejected is None else t.rejected[keep],
    )


def _shift_timeline(tl: Timeline, keep: np.ndarray, by: float) -> Timeline:
    return Timeline(
        tl.time[keep] - by,
        tl.prefill_desired[keep],
        tl.prefill_ready[keep],
        tl.decode_desired[keep],
        tl.decode_ready[keep],
        tl.prefill_queue[keep],
        tl.decode_queue[keep],
    )


def split(whole: Run, at: float, billed_before: dict[Role, float]) -> Run:
    """The scored span [``at``, end] of a replay, on its own clock (t - ``at``), with the
    pre-roll [0, ``at``) as its ``preroll`` (module docstring); ``billed_before``: the
    GPU-seconds of each pool up to ``at`` (``Engine.gpu_seconds(at)``). Prefill billed
    2,000 s up to 600 s and 9,000 s to the end: the pre-roll 2,000, the scored 7,000."""
    t, tl = whole.times, whole.timeline
    early = t.arrival < at
    before = tl.time < at
    pre = replace(
        whole,
        times=_shift_times(t, early, 0.0),
        gpu_seconds=dict(billed_before),
        end=at,
        timeline=_shift_timeline(tl, before, 0.0),
        actions=tuple(a for a in whole.actions if a.time < at),
        notes=tuple(n for n in whole.notes if n[0] < at),
        predicted_drains=tuple(d for d in whole.predicted_drains if d[0] < at),
    )
    return replace(
        whole,
        times=_shift_times(t, ~early, at),
        gpu_seconds={r: whole.gpu_seconds[r] - billed_before[r] for r in whole.gpu_seconds},
        end=whole.end - at,
        timeline=_shift_timeline(tl, ~before, at),
        actions=tuple(replace(a, time=a.time - at) for a in whole.actions if a.time >= at),
        notes=tuple((n - at, text) for n, text in whole.notes if n >= at),
        predicted_drains=tuple((d - at, s) for d, s in whole.predicted_drains if d >= at),
        scored_from=at,
        preroll=pre,
    )


def _pools(engine: Engine) -> tuple[PoolObservation, PoolObservation]:
    return pool_observation(engine, Role.PREFILL), pool_observation(engine, Role.DECODE)


def _billing_end(engine: Engine, span: float, limit: float) -> tuple[RequestTimes, float]:
    """The requests' times and the billing horizon: the end of the trace or the last
    request's finish, whichever is later; the limit if some request never finished (the
    engine is run up to it first). ``Engine.times`` is built once when every request
    finished (a day at the diurnal bench's scale is 9.4 million requests)."""
    times = engine.times()
    finish = times.finish
    if np.all(np.isfinite(finish)):
        return times, max(span, float(np.max(finish)) if len(finish) else span)
    engine.run_until(limit)
    return engine.times(), limit
