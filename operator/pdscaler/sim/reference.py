"""An online reference: an idealised REACTIVE autoscaler, so that every target has
something an online policy can reach beside the clairvoyant oracle.

Owns: ``ReferenceController`` (``online-reference``), what it sees (``Signals``) and how
it sizes (``reference_sizes``), and ``reference_config`` (the loop settings it runs
under). Must not: read the future (every signal is of requests that have ARRIVED by
the tick, or of the engine's last second), read clocks or do I/O.

What it sees, perfectly and at once (no Prometheus window, lag or completion delay):

* the true arrival rate: the requests that arrived in the last ``window_s`` seconds
  (one scaling interval by default; down to 1 s: a 1-second count at 5 req/s is a
  Poisson draw of +/-45%, so the interval is the default) read off the trace's arrival
  log up to the tick, never after it;
* their mean prompt and output tokens (the output lengths of requests already arrived:
  a real router knows the prompt at once and the output only at the end, an idealised
  reactive one is granted both);
* each pool's queue of the past second: the loop scrapes every second with no lag
  under ``reference_config`` (what ``View.metrics`` then holds is the engine's own
  waiting counts at most a second old).

How it sizes, with the same models as pdscaler (docs/models.md §2, §2b, §2d, §3): each
pool's per-replica tokens/s read off its measured profile at the mix (the constant
``tokensPerSecond`` without one); the ratio target ``ceil(R * L / (P * u))``, decode the
larger of that and the KV bound when M is known; the drain target, the fewest replicas
that drain ``B = Q + (R - mu_0) * T_s`` by pdscaler's deadline (``drain_deadline``;
``models.replicas_for_deadline``; mu_0 = what the current replicas serve over T_s: the
ready ones all along, those still starting from when they are up); the larger of the
two, inside the spec's bounds, held up for ``scaleDownStabilization`` (the highest want
of that window, as pdscaler and the HPA do). No forecast, no learning, no bottleneck
rule: both pools follow the load.

Worked numbers (``tests/unit/test_reference.py``): 10 req/s of 1,500 + 150 tokens, the
default engine's measured profile (prefill 8,145 tokens/s at 1,500 tokens: 5.43 req/s
a replica), u 0.7: prefill ceil(15,000 / 5,702) = ceil(2.63) = 3 with 3 ready and
nothing queued; with 60 queued and 1 ready, T_s 30 s, deadline 60 s: B = 60 + (10 -
5.43) x 30 = 197, mu_min = 10 + 197 / 30 = 16.6 req/s -> 4 replicas.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from pdscaler.models import backlog, decode_memory, memory_service_rate, replicas_for_deadline
from pdscaler.policy.refine import capacity_priors
from pdscaler.sim.controllers import Target, View
from pdscaler.sim.loop import LoopConfig
from pdscaler.sim.setup import clamp
from pdscaler.sim.traces import Trace
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

#: The reference's name in a comparison.
REFERENCE = "online-reference"


def reference_config(cfg: LoopConfig) -> LoopConfig:
    """``cfg`` with a scrape every second and no Prometheus lag: the queues the
    reference sees are the engine's of the past second."""
    return replace(cfg, scrape_interval_s=1.0, prom_lag_s=0.0)


@dataclass(frozen=True)
class Signals:
    """What the reference reads at a tick: req/s arrived over its window, their mean
    prompt and output tokens (NaN when none arrived), each pool's waiting requests,
    ready replicas, replicas still starting, and the seconds until those are up (its
    own last scale-up of the pool plus T_s; T_s when it never scaled the pool up)."""

    rate: float
    prompt: float
    output: float
    prefill_queue: float
    decode_queue: float
    prefill_ready: int
    decode_ready: int
    prefill_starting: int = 0
    decode_starting: int = 0
    prefill_up_in: float = math.inf
    decode_up_in: float = math.inf


class ArrivalLog:
    """A trace's arrivals, answered only up to the time asked: ``window(now, w)`` counts
    the requests that arrived in ``[now - w, now)``, and their token sums."""

    def __init__(self, trace: Trace) -> None:
        self._t = trace.arrival
        self._p = np.concatenate(([0.0], np.cumsum(trace.prompt, dtype=np.float64)))
        self._o = np.concatenate(([0.0], np.cumsum(trace.output, dtype=np.float64)))

    def window(self, now: float, seconds: float) -> tuple[int, float, float]:
        """(requests, prompt tokens, output tokens) that arrived in [now - seconds, now)."""
        lo = int(np.searchsorted(self._t, now - seconds, side="left"))
        hi = int(np.searchsorted(self._t, now, side="left"))
        return hi - lo, float(self._p[hi] - self._p[lo]), float(self._o[hi] - self._o[lo])


@dataclass(frozen=True)
class Sizes:
    """Unbounded wants per pool and where they came from."""

    prefill: int
    decode: int
    prefill_ratio: float
    decode_ratio: float
    prefill_drain: int | None
    decode_drain: int | None


def drain_deadline(spec: PDDeploymentSpec, startup_s: float) -> float:
    """When the backlog must be drained, counted from now, as pdscaler's drain plan
    has it (``policy.sizing.plan_drain``): ``recoverySeconds``, but at least one
    interval after the new replicas are up; when ``recoverySeconds <= T_s`` (no size
    meets it) ``recoverySeconds`` after they are up. Recovery 60 s, interval 15 s: T_s
    30 s -> 60; 50 s -> 65; 90 s -> 150."""
    recovery = spec.slo.recovery_seconds
    if recovery > startup_s:
        return max(recovery, startup_s + spec.scaling.interval_seconds)
    return startup_s + recovery


def reference_sizes(
    spec: PDDeploymentSpec, s: Signals, kv_tokens: float | None, startup_s: float
) -> Sizes:
    """The ratio and drain targets of both pools for the signals (module docstring)."""
    if not s.rate > 0:
        return Sizes(0, 0, 0.0, 0.0, None, None)
    cap = capacity_priors(spec, {Role.PREFILL: s.prompt, Role.DECODE: s.output})
    tpot = spec.slo.tpot_seconds
    n_p = s.rate * s.prompt / (cap[Role.PREFILL] * spec.prefill.target_utilization)
    n_d = s.rate * s.output / (cap[Role.DECODE] * spec.decode.target_utilization)
    per_p = cap[Role.PREFILL] / s.prompt if s.prompt > 0 else math.inf
    per_d = cap[Role.DECODE] / s.output if s.output > 0 else math.inf
    if kv_tokens is not None:
        n_d = max(n_d, decode_memory(s.rate, s.prompt, s.output, tpot, kv_tokens).n_decode)
        per_d = min(per_d, memory_service_rate(s.prompt, s.output, tpot, kv_tokens))
    deadline = drain_deadline(spec, startup_s)
    drains = []
    for per, queue, ready in (
        (per_p, s.prefill_queue, s.prefill_ready),
        (per_d, s.decode_queue, s.decode_ready),
    ):
        b = backlog(s.rate, startup_s, queue, ready * per) if math.isfinite(per) else 0.0
        drains.append(replicas_for_deadline(s.rate, b, startup_s, deadline, per) if b > 0 else None)
    want_p = max(math.ceil(n_p - 1e-9), drains[0] or 0)
    want_d = max(math.ceil(n_d - 1e-9), drains[1] or 0)
    return Sizes(want_p, want_d, n_p, n_d, drains[0], drains[1])


class ReferenceController:
    """The idealised reactive autoscaler (module docstring); the controller interface
    of every policy. ``trace`` is read through ``ArrivalLog`` only up to each tick."""

    name = REFERENCE

    def __init__(
        self,
        spec: PDDeploymentSpec,
        trace: Trace,
        kv_tokens: float | None = None,
        window_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.kv_tokens = kv_tokens
        self.window_s = window_s if window_s is not None else spec.scaling.interval_seconds
        if not self.window_s > 0:
            raise ValueError(f"the reference's window must be > 0 s, got {self.window_s}")
        self._log = ArrivalLog(trace)
        self._wants: deque[tuple[float, int, int]] = deque()
        self._last_up: list[float | None] = [None, None]

    def signals(self, view: View) -> Signals:
        n, p, o = self._log.window(view.now, self.window_s)
        m = view.metrics
        pq = m.prefill.queue_depth if m is not None else None
        dq = m.decode.queue_depth if m is not None else None
        t_s = self.spec.startup_seconds
        up_in = [t_s if t is None else max(0.0, t + t_s - view.now) for t in self._last_up]
        return Signals(
            n / self.window_s,
            p / n if n else math.nan,
            o / n if n else math.nan,
            pq or 0.0,
            dq or 0.0,
            view.prefill.ready,
            view.decode.ready,
            max(0, view.prefill.replicas - view.prefill.ready),
            max(0, view.decode.replicas - view.decode.ready),
            up_in[0],
            up_in[1],
        )

    def tick(self, view: View) -> Target:
        s = self.signals(view)
        sizes = reference_sizes(self.spec, s, self.kv_tokens, self.spec.startup_seconds)
        pool_p, pool_d = self.spec.prefill, self.spec.decode
        want_p = clamp(sizes.prefill, pool_p.replicas.min, pool_p.replicas.max)
        want_d = clamp(sizes.decode, pool_d.replicas.min, pool_d.replicas.max)
        if not self._wants:
            # a reference that had been running has the window's history: nothing
            # shrinks before a whole window has seen less (as the HPA's first sync)
            self._wants.append((view.now, view.prefill.replicas, view.decode.replicas))
        self._wants.append((view.now, want_p, want_d))
        window = self.spec.scaling.scale_down_stabilization_seconds
        while self._wants[0][0] <= view.now - window:
            self._wants.popleft()
        held_p = max(w[1] for w in self._wants)
        held_d = max(w[2] for w in self._wants)
        for k, (held, pool) in enumerate(((held_p, view.prefill), (held_d, view.decode))):
            if held > pool.replicas:
                self._last_up[k] = view.now
        return Target(
            held_p,
            held_d,
            note=(
                f"reference: {s.rate:.2f} req/s, queues {s.prefill_queue:g}/{s.decode_queue:g}"
                f" -> want {want_p}P/{want_d}D, held {held_p}P/{held_d}D"
            ),
        )
