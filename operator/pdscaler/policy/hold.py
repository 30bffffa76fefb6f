"""The decision when the load shape is unknown (docs/design.md §3, step 1): keep what
runs.

Owns: ``hold_unavailable``: without R (or with R > 0 but L_p/L_d unknown) each pool
stays at what it runs, raised to its min and lowered only to its max and maxGPUs (the
user's explicit bounds, not a guess from missing data); the memory carries on unchanged
but for this tick's recommendation; the action is ``HoldMetricsUnavailable`` and the
sentence names the problems. Pure; must not read clocks.
"""

from __future__ import annotations

import dataclasses

from pdscaler.policy import reasons
from pdscaler.policy.limits import Capacity, bounded, fit
from pdscaler.policy.sanitize import CleanMetrics
from pdscaler.policy.stabilize import prune
from pdscaler.policy.tick import ROLES
from pdscaler.types import Action, Decision, ModelOutputs, Role, TickInput


def hold_unavailable(inp: TickInput, clean: CleanMetrics, startup: float) -> Decision:
    """Keep what runs: raise to min, lower only to the spec's max and maxGPUs."""
    spec = inp.spec
    held = {r: bounded(spec, r, inp.pool(r).replicas) for r in ROLES}
    split = fit(
        spec,
        held[Role.PREFILL],
        held[Role.DECODE],
        float(held[Role.PREFILL]),
        float(held[Role.DECODE]),
        Capacity(gpus=None, pending=0, since=None),
        None,
    )
    final = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    record = (inp.now, final[Role.PREFILL], final[Role.DECODE])
    window = spec.scaling.scale_down_stabilization_seconds
    memory = dataclasses.replace(  # everything kept but the window's record and T_s
        inp.memory,
        recommendations=prune((*inp.memory.recommendations, record), inp.now, window),
        startup_seconds=startup,
    )
    problems = "; ".join(clean.problems) or "request rate or token lengths unknown"
    message = reasons.sentence(
        "Hold",
        reasons.sizes(final[Role.PREFILL], final[Role.DECODE]),
        [f"metrics unavailable ({problems})", "no scale-down until they return"],
    )
    return Decision(
        prefill=final[Role.PREFILL],
        decode=final[Role.DECODE],
        action=Action.HOLD_METRICS_UNAVAILABLE,
        message=message,
        pool=None,
        model=ModelOutputs(
            prefill_tps=inp.memory.prefill_tps or spec.prefill.tokens_per_second,
            decode_tps=inp.memory.decode_tps or spec.decode.tokens_per_second,
            startup_seconds=startup,
        ),
        metrics_available=False,
        capacity_limited=inp.prefill.unschedulable + inp.decode.unschedulable > 0,
        memory=memory,
        data_gaps=clean.problems or ("request rate or token lengths unknown",),
    )
