"""The step-load scenario (docs/models.md §3): does the measured recovery match the
drain-time model's prediction?

Owns: two experiments on the same step (20 -> 40 req/s of ~1,500-token prompts at
t = 600 s: 30k -> 60k prompt tokens/s, decode kept roomy so prefill is the only
bottleneck) and their report ``bench/results/step.md`` + ``step.png``:

A. The model itself: at the step a scripted controller raises prefill from 5 replicas
   to n1 (no policy); prediction ``T_s + B / (mu - lambda)`` in tokens/s with the TRUE
   numbers (lambda = prompt tokens/s that arrived during the drain, mu = n1 x the replica's
   full-batch tokens/s at the trace's prompts, ``replica_tps``: 8,370 less each prompt's
   attention, ~8,000; B = (lambda - mu_0) x T_s). Measured: from the step until
   arriving requests stop queueing once the new replicas are up (``cleared_at``).
B. pdscaler in the closed loop: at its first PREFILL scale-up after the step that
   carries a drain prediction (else its first prefill scale-up), the drain time it
   predicted (``Decision.model.drain_seconds``, with its own estimates) against the
   measured time from that decision until the backlog was gone; and when the SLO was
   back (the first minute after the step from which every minute met >= 99%).

Must not: fit anything to the measurement.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench import provenance
from bench.markdown import table
from pdscaler.cli.common import percent as pct
from pdscaler.models import backlog, drain_time
from pdscaler.sim.controllers import PdscalerController, Target, View
from pdscaler.sim.engine import EngineParams, RequestTimes
from pdscaler.sim.loop import LoopConfig, Run, run
from pdscaler.sim.results import attainment_over_time
from pdscaler.sim.scenarios import step_load
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import Trace
from pdscaler.types import Role

STEP_AT = 600.0
#: Seconds of the doubled load (long enough for the slowest drain of experiment A).
AFTER_S = 1200.0
BASE_RATE = 20.0
FACTOR = 2.0
PROMPT = 1500.0
OUTPUT = 200.0
N0 = 5
DECODE = 12
#: A request "was in the backlog" when it queued for prefill longer than this.
WAIT_S = 1.0
#: New replicas come up from this fraction of T_s after the order (the engine's +-10%).
EARLIEST = 0.9


def scenario(seed: int = 0) -> Trace:
    return step_load(
        base_rate=BASE_RATE,
        factor=FACTOR,
        before_s=STEP_AT,
        after_s=AFTER_S,
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        seed=seed,
    )


def cleared_at(times: RequestTimes, since: float) -> float | None:
    """When the backlog standing at ``since`` was gone: the arrival time of the first
    request that did not queue (prefill started within WAIT_S) after the first one, from
    ``since`` on, that did. ``since`` is when the new capacity comes up (0.9 T_s after
    the order: the earliest jittered start-up), so a short queue right after the step
    is not mistaken for the backlog. None: nobody arriving after ``since`` queued; inf:
    the queue never emptied. Arrivals 601 (waited 0.2 s), 602 (30 s), 610 (20 s), 640
    (0.3 s) -> 640."""
    after = np.flatnonzero(times.arrival >= since)
    order = after[np.argsort(times.arrival[after], kind="stable")]
    wait = np.nan_to_num(times.prefill_start[order] - times.arrival[order], nan=math.inf)
    late = np.flatnonzero(wait > WAIT_S)
    if len(late) == 0:
        return None
    clean = np.flatnonzero(wait[late[0] :] <= WAIT_S)
    if len(clean) == 0:
        return math.inf
    return float(times.arrival[order[late[0] + clean[0]]])


@dataclass
class Scripted:
    """Holds the initial replicas, then at ``at`` asks for ``prefill`` replicas."""

    at: float
    prefill: int
    name: str = "scripted"

    def tick(self, view: View) -> Target | None:
        if view.now < self.at:
            return None
        return Target(self.prefill, view.decode.replicas, note="scripted step response")


@dataclass(frozen=True)
class ModelRow:
    startup_s: float
    n1: int
    predicted_s: float | None
    measured_s: float | None
    #: The prediction with the scenario's NOMINAL post-step rate (known beforehand),
    #: where ``predicted_s`` uses the rate that actually arrived during the drain.
    predicted_prior_s: float | None = None

    @property
    def error(self) -> float | None:
        return _error(self.predicted_s, self.measured_s)

    @property
    def error_prior(self) -> float | None:
        return _error(self.predicted_prior_s, self.measured_s)


def _error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None:
        return None
    if math.isinf(measured) or measured == 0:
        return None
    return predicted / measured - 1.0


def to_json(rows: Sequence[ModelRow], stamp: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Experiment A's rows with both errors (``bench/results/step.json``) and, when
    given, where they were measured (``bench.provenance``)."""
    return {
        **({provenance.KEY: dict(stamp)} if stamp else {}),
        "model_rows": [
            {
                "startup_s": r.startup_s,
                "n1": r.n1,
                "predicted_s": r.predicted_s,
                "predicted_prior_s": r.predicted_prior_s,
                "measured_s": r.measured_s
                if r.measured_s is None or math.isfinite(r.measured_s)
                else None,
                "error": r.error,
                "error_prior": r.error_prior,
            }
            for r in rows
        ],
    }


def arrival_tps(trace: Trace, start: float, end: float) -> float:
    """Prompt tokens/s that arrived in [start, end)."""
    sel = (trace.arrival >= start) & (trace.arrival < end)
    return float(trace.prompt[sel].sum()) / max(end - start, 1e-9)


def replica_tps(trace: Trace, params: EngineParams) -> float:
    """Prompt tokens/s of one prefill replica serving the trace's prompts in full batches:
    tokens / (tokens / ``prefill_batch_tps`` + their attention). The step's gamma prompts
    (mean ~1,500, mean square ~3.8M): 8,370 -> ~8,000 tokens/s."""
    prompt = trace.prompt.astype(np.float64)
    tokens = float(prompt.sum())
    if tokens <= 0:
        return params.prefill_batch_tps()
    return tokens / params.prefill_work_s(tokens, float(np.sum(prompt * prompt)))


def predicted_drain(trace: Trace, startup: float, mu_0: float, mu: float) -> float | None:
    """``T_s + B / (mu - lambda)`` from the step, in tokens/s, with lambda the rate that
    actually arrived during the drain (a fixed point: lambda over [step, step + drain],
    three rounds from the whole post-step rate): Poisson noise in a 30 s start-up moves
    the backlog by ~10%, and the prediction should not be blamed for the dice."""
    lam = arrival_tps(trace, STEP_AT, trace.span)
    predicted = None
    for _ in range(3):
        b = backlog(lam, startup, 0.0, mu_0)
        predicted = drain_time(lam, mu, startup, b).drain_seconds
        if predicted is None:
            return None
        lam = arrival_tps(trace, STEP_AT, min(trace.span, STEP_AT + predicted))
    return predicted


def model_check(trace: Trace, startup: float, n1: int, seed: int = 0) -> ModelRow:
    """Experiment A for one (T_s, n1)."""
    params = EngineParams()
    cfg = LoopConfig(
        spec=sim_spec(startup_s=startup),
        params=params,
        startup_s=startup,
        seed=seed,
        initial=(N0, DECODE),
    )
    result = run(trace, Scripted(STEP_AT, n1), cfg)
    per = replica_tps(trace, params)
    predicted = predicted_drain(trace, startup, N0 * per, n1 * per)
    lam = BASE_RATE * FACTOR * PROMPT
    prior = drain_time(lam, n1 * per, startup, backlog(lam, startup, 0.0, N0 * per))
    done = cleared_at(result.times, STEP_AT + EARLIEST * startup)
    return ModelRow(
        startup, n1, predicted, None if done is None else done - STEP_AT, prior.drain_seconds
    )


@dataclass(frozen=True)
class LoopRow:
    startup_s: float
    decided_at: float | None
    predicted_s: float | None
    measured_s: float | None
    first_target: int | None
    peak_prefill: int
    slo_back_after_s: float | None
    attainment_after: float
    run: Run


def closed_loop(trace: Trace, startup: float, seed: int = 0) -> LoopRow:
    """Experiment B for one T_s."""
    spec = sim_spec(startup_s=startup)
    cfg = LoopConfig(spec=spec, startup_s=startup, seed=seed)
    ctrl = PdscalerController(spec)
    result = run(trace, ctrl, cfg)
    prefill_up = {
        a.time: a.after
        for a in result.actions
        if a.role is Role.PREFILL and a.after > a.before and a.time >= STEP_AT
    }
    ups = [(t, d) for t, d in result.predicted_drains if t in prefill_up]
    with_model = [(t, d) for t, d in ups if d is not None]
    decided, predicted = (with_model or ups or [(None, None)])[0]
    first = None if decided is None else prefill_up[decided]
    done = None if decided is None else cleared_at(result.times, decided + EARLIEST * startup)
    measured = None if done is None or decided is None else done - decided
    starts, frac = attainment_over_time(result, 60.0)
    post = starts >= STEP_AT
    back = _slo_back(starts[post], frac[post])
    ok = np.nan_to_num(frac[post], nan=1.0)
    tl = result.timeline
    return LoopRow(
        startup,
        decided,
        predicted,
        measured,
        first,
        int(tl.prefill_desired.max()),
        None if back is None else back - STEP_AT,
        float(np.mean(ok)) if len(ok) else 1.0,
        result,
    )


def _slo_back(starts: np.ndarray, frac: np.ndarray) -> float | None:
    """Start of the first minute from which every later minute met >= 99%."""
    good = np.nan_to_num(frac, nan=1.0) >= 0.99
    for k in range(len(good)):
        if np.all(good[k:]):
            return float(starts[k])
    return None


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else f"{value:.1f} s"


def plot(rows: Sequence[LoopRow]) -> bytes:
    fig = Figure(figsize=(10, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for row in rows:
        tl = row.run.timeline
        (line,) = ax.plot(tl.time, tl.prefill_queue, lw=1.2, label=f"T_s {row.startup_s:g} s")
        if row.decided_at is not None and row.predicted_s is not None:
            ax.axvline(row.decided_at + row.predicted_s, color=line.get_color(), ls="--", lw=1)
    ax.axvline(STEP_AT, color="black", lw=1)
    ax.set_xlabel("seconds (step at 600 s; dashed: pdscaler's predicted drain)")
    ax.set_ylabel("prefill queue (requests)")
    ax.set_xlim(STEP_AT - 120, STEP_AT + 720)
    ax.legend()
    ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def run_step(
    startups: Sequence[float], seed: int = 0, log: Callable[[str], None] = print
) -> tuple[list[ModelRow], list[LoopRow]]:
    trace = scenario(seed)
    model_rows = []
    for startup in startups:
        for n1 in (8, 9, 11):
            model_rows.append(model_check(trace, startup, n1, seed))
        log(f"bench step: model check at T_s {startup:g} s done")
    loop_rows = []
    for startup in startups:
        loop_rows.append(closed_loop(trace, startup, seed))
        log(f"bench step: pdscaler closed loop at T_s {startup:g} s done")
    return model_rows, loop_rows


def report(
    model_rows: Sequence[ModelRow],
    loop_rows: Sequence[LoopRow],
    command: str,
    stamp: Mapping[str, str] | None = None,
) -> str:
    per = replica_tps(scenario(), EngineParams())  # the seeds' prompts are alike: seed 0's
    a = table(
        [
            "T_s",
            "prefill 5 ->",
            "predicted drain",
            "measured drain",
            "prediction error",
            "predicted a priori",
            "a priori error",
        ],
        [
            [
                f"{r.startup_s:g} s",
                str(r.n1),
                _s(r.predicted_s),
                _s(r.measured_s),
                "-" if r.error is None else f"{r.error:+.0%}",
                _s(r.predicted_prior_s),
                "-" if r.error_prior is None else f"{r.error_prior:+.0%}",
            ]
            for r in model_rows
        ],
    )
    b = table(
        [
            "T_s",
            "scale-up at",
            "to (prefill)",
            "peak prefill",
            "predicted drain",
            "measured drain",
            "SLO back after step",
            "SLO met after step",
        ],
        [
            [
                f"{r.startup_s:g} s",
                "-" if r.decided_at is None else f"{r.decided_at - STEP_AT:+.0f} s",
                "-" if r.first_target is None else str(r.first_target),
                str(r.peak_prefill),
                _s(r.predicted_s),
                _s(r.measured_s),
                _s(r.slo_back_after_s),
                pct(r.attainment_after),
            ]
            for r in loop_rows
        ],
    )
    return "\n".join(
        [
            "# Step load: measured recovery vs the drain-time model",
            "",
            provenance.line(stamp),
            "",
            f"Generated by `{command}`. Poisson arrivals at {BASE_RATE:g} req/s, x{FACTOR:g} "
            f"at t = {STEP_AT:g} s (prompts ~{PROMPT:g} tokens, outputs ~{OUTPUT:g}; gamma "
            "lengths): 30k -> 60k prompt tokens/s. Drain = from the step (A) or the scale-up "
            "decision (B) until arriving requests stop queueing: the first arrival whose "
            f"prefill starts within {WAIT_S:g} s, after the backlog formed.",
            "",
            "## A. The model with the true numbers (scripted scale-up at the step)",
            "",
            f"Prefill {N0} -> n1 replicas at the step, decode fixed at {DECODE}. Predicted "
            "`T_s + B / (mu - lambda)` with lambda the prompt tokens/s that arrived during "
            "the drain (measured AFTER the fact: the model is given the dice it rolled), "
            f"mu = n1 x {per:,.0f} tokens/s (full batches of these prompts: 8,370 less "
            f"each prompt's attention), B = (lambda - 5 x {per:,.0f}) x T_s. "
            "`predicted a priori` uses the scenario's nominal rate instead (40 req/s x "
            "1,500 tokens = 60,000 tokens/s), as an operator would have to. "
            "Start-up times jitter +-10% around T_s in the engine. The model is the fluid "
            "(mean) behaviour: with a short T_s and a small margin the queue can empty "
            "earlier than the mean by a Poisson lull, so the measured drain is a first "
            "passage and short cases scatter more.",
            "",
            a,
            "",
            "## B. pdscaler in the closed loop",
            "",
            "Predicted = `Decision.model.drain_seconds` of its first prefill scale-up after the "
            "step that has one (its own refined capacities, forecast and T_s; `-` when no "
            "scale-up predicted a drain); measured from that decision.",
            "",
            b,
            "",
            "Plot: [step.png](step.png) (prefill queue; dashed = predicted drain).",
            "",
        ]
    )
