"""Traffic scenarios for the live engine simulator and the demo: phases of Poisson
arrivals with a request mix, generated deterministically for a seed.

Owns: the built-in scenarios (``chat``, ``long-docs``, ``burst`` and ``demo``: a
warm-up ramp from 4 to 21 req/s, then the three in a row and a cool-down; and
``demo-http``, the same phases at the scale of real HTTP requests, which ``make demo``
replays with aiperf: 1 -> 3 req/s, chat 3, long documents 2.5, burst 5.4), their
sizing against the demo PDDeployment (``deploy/demo/demo.yaml``), shortening a
scenario for a quick run (``scaled``), turning a scenario into a
:class:`pdscaler.sim.traces.Trace`, and loading a real trace window for replay
(``from_trace``). Must not: start processes, talk to Kubernetes or Prometheus, or read
clocks (time is scenario seconds from the first arrival).

Sizing (the ratio model of docs/models.md §2 with the demo manifest's priors: prefill
7,500 prompt tokens/s, decode 1,600 output tokens/s, both planned at 70% utilisation;
the simulated engine's TRUE capacities are ``EngineParams()``'s, ~8,500 and ~1,900 at
the chat mix, so the priors are 12-20% pessimistic on purpose):

* chat: R = 21 req/s, L_p = 1,000, L_d = 200 ->
  N_P = 21*1000/(7500*0.7) = 4.0 -> 4, N_D = 21*200/(1600*0.7) = 3.75 -> 4  (P:D 1:1).
* long-docs: R = 14 req/s, L_p = 4,000, L_d = 50 ->
  N_P = 14*4000/5250 = 10.7 -> 11, N_D = 14*50/1120 = 0.63 -> 1  (P:D ~11:1; the true
  decode pool needs ~2 because every 4k-token sequence holds KV: the decode queue
  says so).
* burst: the chat mix at 2.2x (R = 46): N_P = 8.8 -> 9, N_D = 8.2 -> 9 (18 GPUs).

So the whole demo stays within 24 GPUs (maxGPUs of the demo manifest) of the lab's
4 nodes x 8 GPUs. Token counts are log-normal around the phase means (clipped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pdscaler.sim.traces import Trace, load_trace, scale_rate


@dataclass(frozen=True)
class Mix:
    """A request shape: log-normal prompt/output tokens with these means and log-space
    standard deviations, clipped to [lo, hi]."""

    prompt_mean: float
    output_mean: float
    prompt_sigma: float = 0.5
    output_sigma: float = 0.6
    prompt_range: tuple[int, int] = (16, 8000)
    output_range: tuple[int, int] = (1, 2000)


CHAT = Mix(prompt_mean=1000.0, output_mean=200.0)
LONG_DOCS = Mix(
    prompt_mean=4000.0,
    output_mean=50.0,
    prompt_sigma=0.25,
    output_sigma=0.5,
    prompt_range=(1000, 7800),
    output_range=(1, 400),
)


@dataclass(frozen=True)
class Phase:
    """``duration_s`` seconds of Poisson arrivals with ``mix``: at ``rate`` req/s, or
    ramping linearly from ``rate_from`` at the phase's start to ``rate`` at its end."""

    name: str
    duration_s: float
    rate: float
    mix: Mix
    rate_from: float | None = None

    def rate_at(self, t: float) -> float:
        """Req/s ``t`` seconds into the phase: a 4 -> 21 ramp over 30 s gives 12.5 at 15 s."""
        if self.rate_from is None or self.duration_s <= 0:
            return self.rate
        frac = min(1.0, max(0.0, t / self.duration_s))
        return self.rate_from + (self.rate - self.rate_from) * frac


@dataclass(frozen=True)
class Scenario:
    """Phases played back to back."""

    name: str
    phases: tuple[Phase, ...]

    @property
    def duration_s(self) -> float:
        return sum(p.duration_s for p in self.phases)

    def boundaries(self) -> list[tuple[str, float, float]]:
        """(phase name, start, end) in scenario seconds: demo -> warm-up 0-30, chat
        30-105, long-docs 105-210, burst 210-270, cool-down 270-300."""
        out: list[tuple[str, float, float]] = []
        t = 0.0
        for p in self.phases:
            out.append((p.name, t, t + p.duration_s))
            t += p.duration_s
        return out

    def phase_at(self, t: float) -> str | None:
        """The phase playing at scenario second ``t`` (None before 0 and after the end)."""
        for name, start, end in self.boundaries():
            if start <= t < end:
                return name
        return None


CHAT_RATE = 21.0
#: The demo's pools start at their minimum (1 + 1): the load ramps up from what one
#: replica of each serves instead of arriving as a backlog.
WARM_UP_RATE = 4.0
LONG_DOCS_RATE = 14.0
BURST_FACTOR = 2.2

#: The demo over real HTTP (client -> front Service -> router -> engines): every output
#: token is one SSE chunk through the router, so the scale is a few req/s and outputs of
#: tens of tokens on two cores. Tokens here are aiperf's (its BPE); the simulated engines
#: count whitespace words, about 0.75 of them (``deploy/demo/demo.yaml`` is sized in
#: words). Chat ~1:1, long documents prefill-heavy, as in ``demo``.
HTTP_CHAT = Mix(
    prompt_mean=160.0,
    output_mean=16.0,
    prompt_sigma=0.4,
    output_sigma=0.4,
    prompt_range=(24, 480),
    output_range=(4, 48),
)
HTTP_LONG_DOCS = Mix(
    prompt_mean=480.0,
    output_mean=4.0,
    prompt_sigma=0.2,
    output_sigma=0.3,
    prompt_range=(240, 900),
    output_range=(2, 10),
)
HTTP_CHAT_RATE = 3.0
HTTP_WARM_UP_RATE = 1.0
HTTP_LONG_DOCS_RATE = 2.5
HTTP_BURST_FACTOR = 1.8

SCENARIOS: dict[str, Scenario] = {
    "chat": Scenario("chat", (Phase("chat", 300.0, CHAT_RATE, CHAT),)),
    "long-docs": Scenario("long-docs", (Phase("long-docs", 300.0, LONG_DOCS_RATE, LONG_DOCS),)),
    "burst": Scenario(
        "burst",
        (
            Phase("chat", 60.0, CHAT_RATE, CHAT),
            Phase("burst", 60.0, CHAT_RATE * BURST_FACTOR, CHAT),
            Phase("chat", 60.0, CHAT_RATE, CHAT),
        ),
    ),
    "demo": Scenario(
        "demo",
        (
            Phase("warm-up", 30.0, CHAT_RATE, CHAT, rate_from=WARM_UP_RATE),
            Phase("chat", 75.0, CHAT_RATE, CHAT),
            Phase("long-docs", 105.0, LONG_DOCS_RATE, LONG_DOCS),
            Phase("burst", 60.0, CHAT_RATE * BURST_FACTOR, CHAT),
            Phase("cool-down", 30.0, CHAT_RATE, CHAT),
        ),
    ),
    "demo-http": Scenario(
        "demo-http",
        (
            # a slower ramp than demo's: a replica here takes ~10x longer per request,
            # so a backlog built while the pools grow takes longer to drain
            Phase("warm-up", 45.0, HTTP_CHAT_RATE, HTTP_CHAT, rate_from=HTTP_WARM_UP_RATE),
            Phase("chat", 75.0, HTTP_CHAT_RATE, HTTP_CHAT),
            Phase("long-docs", 90.0, HTTP_LONG_DOCS_RATE, HTTP_LONG_DOCS),
            Phase("burst", 60.0, HTTP_CHAT_RATE * HTTP_BURST_FACTOR, HTTP_CHAT),
            Phase("cool-down", 30.0, HTTP_CHAT_RATE, HTTP_CHAT),
        ),
    ),
}


def get(name: str) -> Scenario:
    """A built-in scenario by name; ValueError listing the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(
            f"unknown scenario {name!r} (known: {', '.join(sorted(SCENARIOS))})"
        ) from None


def scaled(scenario: Scenario, duration_s: float) -> Scenario:
    """The same phases, each shortened (or stretched) in proportion so the whole lasts
    ``duration_s``; rates and mixes are unchanged. demo (300 s) to 150 s: warm-up 15 s,
    chat 37.5 s, long-docs 52.5 s, burst 30 s, cool-down 15 s."""
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f"duration must be a positive number of seconds, got {duration_s}")
    k = duration_s / scenario.duration_s
    return Scenario(
        scenario.name, tuple(replace(p, duration_s=p.duration_s * k) for p in scenario.phases)
    )


def _tokens(
    rng: np.random.Generator, n: int, mean: float, sigma: float, bounds: Sequence[int]
) -> np.ndarray:
    """n log-normal token counts whose (unclipped) mean is ``mean``:
    mu = ln(mean) - sigma^2/2."""
    mu = math.log(mean) - sigma * sigma / 2.0
    raw = rng.lognormal(mu, sigma, n) if sigma > 0 else np.full(n, mean)
    return np.clip(np.rint(raw), bounds[0], bounds[1]).astype(np.int64)


def generate(scenario: Scenario, seed: int = 0) -> Trace:
    """The scenario's requests: per phase, Poisson arrivals (exponential gaps at the
    phase's rate) and log-normal tokens. Deterministic for a seed. 300 s of chat at
    21 req/s gives ~6,300 requests with mean prompt ~1,000 tokens."""
    rng = np.random.default_rng(seed)
    arrivals: list[np.ndarray] = []
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    for phase, (_, start, end) in zip(scenario.phases, scenario.boundaries(), strict=True):
        peak = max(phase.rate, phase.rate_from or 0.0)
        if peak <= 0:
            continue
        expected = peak * phase.duration_s
        gaps = rng.exponential(1.0 / peak, int(expected + 10 * math.sqrt(expected) + 20))
        t = start + np.cumsum(gaps)
        t = t[t < end]
        if phase.rate_from is not None:  # thinning: keep with probability rate(t)/peak
            keep = rng.random(len(t)) * peak < np.array([phase.rate_at(x - start) for x in t])
            t = t[keep]
        arrivals.append(t)
        m = phase.mix
        prompts.append(_tokens(rng, len(t), m.prompt_mean, m.prompt_sigma, m.prompt_range))
        outputs.append(_tokens(rng, len(t), m.output_mean, m.output_sigma, m.output_range))
    return Trace(
        scenario.name,
        np.concatenate(arrivals) if arrivals else np.zeros(0),
        np.concatenate(prompts).astype(np.int64) if prompts else np.zeros(0, np.int64),
        np.concatenate(outputs).astype(np.int64) if outputs else np.zeros(0, np.int64),
        scenario.duration_s,
    )


def from_trace(
    path: Path,
    rate_scale: float = 1.0,
    start_s: float = 0.0,
    duration_s: float | None = None,
    seed: int = 0,
) -> tuple[Trace, Scenario]:
    """A real trace (Azure CSV or Mooncake JSONL) for replay, optionally a window of it
    and rate-scaled (the time axis is kept), plus a one-phase scenario describing it."""
    trace = load_trace(path)
    if start_s > 0 or duration_s is not None:
        # [start, end): without a duration, end just past the last request (kept)
        end = trace.span + 1e-6 if duration_s is None else start_s + duration_s
        trace = trace.window(start_s, end)
    if rate_scale != 1.0:
        trace = scale_rate(trace, rate_scale, seed)
    n = len(trace)
    mix = Mix(float(trace.prompt.mean()) if n else 0.0, float(trace.output.mean()) if n else 0.0)
    phase = Phase(path.stem, trace.span, trace.mean_rate, mix)
    return trace, Scenario(path.stem, (phase,))
