"""Synthetic loads: piecewise-constant Poisson arrivals with a request mix per segment,
and seeded variants of a recorded trace for the bench's seeds and held-out cases.

Owns: ``synthetic`` (segments of (seconds, req/s, mean prompt tokens, mean output
tokens) -> a ``Trace``), the step-load scenario of the bench (docs/models.md §3: a sudden
rate increase the pools must absorb and drain), and the demo's mix shift (chat, then
long documents, then a burst). Lengths are drawn from a gamma distribution with shape
``LENGTH_SHAPE`` around the segment's mean (heavy enough that p99 is ~3.5x the mean,
like the Azure conversation trace: mean 1,155, p99 4,142). Deterministic for a seed.
``jitter`` (seed > 0: every arrival moved by a seeded uniform offset of at most
``JITTER_S``, the order re-sorted; seed 0 is the trace itself) gives the bench its
seeds at any rate scale; ``long_context`` maps prompts onto 8k-16k tokens for the
held-out cases. Must not: read files or clocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pdscaler.sim.traces import Trace

#: Largest arrival offset of ``jitter``, seconds.
JITTER_S = 2.0
#: Prompt range of ``long_context``, tokens.
LONG_CONTEXT = (8192, 16384)
#: Gamma shape of the token lengths (1 = exponential; 1.5: p99 ~ 3.6x the mean).
LENGTH_SHAPE = 1.5


@dataclass(frozen=True)
class Segment:
    """``seconds`` of Poisson arrivals at ``rate`` req/s with the given mean lengths."""

    seconds: float
    rate: float
    prompt_tokens: float
    output_tokens: float


def _lengths(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    if mean <= 0:
        return np.zeros(n, dtype=np.int64)
    draws = rng.gamma(LENGTH_SHAPE, mean / LENGTH_SHAPE, n)
    return np.maximum(1, np.rint(draws)).astype(np.int64)


def synthetic(name: str, segments: Sequence[Segment], seed: int = 0) -> Trace:
    """One trace from consecutive segments; the span is their total length.

    ``[Segment(600, 20, 1000, 200)]`` gives about 12,000 requests over 600 s.
    """
    if not segments:
        raise ValueError("a scenario needs at least one segment")
    rng = np.random.default_rng(seed)
    arrival, prompt, output = [], [], []
    start = 0.0
    for seg in segments:
        if seg.seconds <= 0 or seg.rate < 0:
            raise ValueError(f"bad segment {seg}: seconds must be > 0 and rate >= 0")
        n = int(rng.poisson(seg.rate * seg.seconds))
        arrival.append(start + np.sort(rng.uniform(0.0, seg.seconds, n)))
        prompt.append(_lengths(rng, seg.prompt_tokens, n))
        output.append(_lengths(rng, seg.output_tokens, n))
        start += seg.seconds
    return Trace(
        name,
        np.concatenate(arrival),
        np.concatenate(prompt),
        np.concatenate(output),
        start,
    )


def step_load(
    *,
    base_rate: float = 20.0,
    factor: float = 2.0,
    before_s: float = 600.0,
    after_s: float = 900.0,
    prompt_tokens: float = 1500.0,
    output_tokens: float = 200.0,
    seed: int = 0,
) -> Trace:
    """A steady load that jumps to ``factor`` times its rate at ``before_s``: the
    transient of docs/models.md §3. 20 -> 40 req/s of 1,500-token prompts is 30k -> 60k
    prompt tokens/s: about 3.8 -> 7.5 prefill replicas of ~8,000 tokens/s at full load
    (8,370 less the attention of these gamma-distributed prompts)."""
    return synthetic(
        f"step-{base_rate:g}x{factor:g}",
        [
            Segment(before_s, base_rate, prompt_tokens, output_tokens),
            Segment(after_s, base_rate * factor, prompt_tokens, output_tokens),
        ],
        seed,
    )


def mix_shift(rate: float = 20.0, minutes: float = 3.0, seed: int = 0) -> Trace:
    """The demo's story: a chat mix (1,000 in / 250 out: P:D near 1:1 with the
    simulator's priors), then long documents (6,000 in / 60 out: the token ratio swings
    ~25x towards prefill), then a burst of chat at twice the rate."""
    seg = minutes * 60.0
    return synthetic(
        "mix-shift",
        [
            Segment(seg, rate, 1000.0, 250.0),
            Segment(seg, rate / 2.0, 6000.0, 60.0),
            Segment(seg, 2.0 * rate, 1000.0, 250.0),
        ],
        seed,
    )


def jitter(trace: Trace, seed: int, jitter_s: float = JITTER_S) -> Trace:
    """Seed 0: ``trace`` unchanged. Otherwise every arrival moves by U(-jitter_s,
    jitter_s) (kept inside [0, span]) and the requests are re-sorted: the same load,
    a different sample of its sub-second bursts. Deterministic for a seed."""
    if seed == 0 or len(trace) == 0:
        return trace
    rng = np.random.default_rng(seed)
    arr = np.clip(trace.arrival + rng.uniform(-jitter_s, jitter_s, len(trace)), 0.0, trace.span)
    order = np.argsort(arr, kind="stable")
    return Trace(
        f"{trace.name}~{seed}", arr[order], trace.prompt[order], trace.output[order], trace.span
    )


def long_context(trace: Trace, low: int = LONG_CONTEXT[0], high: int = LONG_CONTEXT[1]) -> Trace:
    """The same arrivals and outputs with prompts mapped by rank onto [low, high]
    tokens (the shortest prompt -> ``low``, the longest -> ``high``, order kept): the
    conversation trace's 1,155-token mean becomes ~12,300."""
    n = len(trace)
    if n == 0:
        return trace
    rank = np.argsort(np.argsort(trace.prompt, kind="stable"), kind="stable")
    prompt = np.rint(low + (high - low) * rank / max(1, n - 1)).astype(np.int64)
    return Trace(f"{trace.name}-long", trace.arrival, prompt, trace.output, trace.span)
