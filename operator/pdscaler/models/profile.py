"""Capacity as a function of the workload (docs/models.md §2d): a measured profile.

Owns: reading one replica's tokens/s off a small measured table, over the prompt length
for prefill (attention grows with the context, so long prompts are served slower) and
over the mean context per sequence (``L_p + L_d / 2``) for decode (a step reads every
resident token, so long contexts decode slower), the way NVIDIA Dynamo's planner
interpolates its pre-deployment profiles. Must not: read metrics, clocks or the spec
(the caller passes the points and the tokens).

Linear in tokens between two points, flat beyond the first and the last (a profile says
nothing outside what was measured, and extrapolating a falling line could reach 0).
Without points the capacity is the constant ``default`` (the spec's
``tokensPerSecond``): the model of docs/models.md §2 exactly.

Golden (prefill of the default simulated engine, docs/models.md §2d): points
(1,024: 8,200), (8,192: 7,300), (16,384: 6,500): 1,155 tokens -> 8,200 - 131/7,168 x 900
= 8,184 tok/s; 12,000 -> 7,300 - 3,808/8,192 x 800 = 6,928; 500 -> 8,200 (flat);
131,072 -> 6,500 (flat).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

#: (tokens, tokens/s): one measured point of a profile.
Point = tuple[int, float]


def capacity_at(default: float, points: Sequence[Point], tokens: float) -> float:
    """One replica's tokens/s at ``tokens`` (prompt length for prefill, mean context per
    sequence for decode): ``points`` sorted by tokens, interpolated linearly, flat beyond
    the ends; no points, or ``tokens`` unknown (not finite or <= 0): ``default``.

    (1,024: 8,200), (8,192: 7,300) at 4,608 tokens -> 7,750; at 12,000 -> 7,300; no
    points -> ``default``."""
    if not points or not math.isfinite(tokens) or tokens <= 0:
        return default
    xs = [x for x, _ in points]
    i = bisect.bisect_left(xs, tokens)
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (tokens - x0) / (x1 - x0) * (y1 - y0)


def decode_context(prompt_tokens: float, output_tokens: float) -> float:
    """The mean context a decode sequence holds while it runs, the x of a decode
    profile: ``L_p + L_d / 2``. 1,155 + 211 -> 1,260.5."""
    return prompt_tokens + output_tokens / 2.0


def prompt_for_context(context_tokens: float, output_tokens: float) -> float:
    """The prompt whose sequences hold a mean decode context of ``context_tokens``, the
    inverse of ``decode_context``: ``context - L_d / 2``. 1,260.5 with 211 output
    tokens -> 1,155."""
    return context_tokens - output_tokens / 2.0
