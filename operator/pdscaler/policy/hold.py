"""The decision when the load shape is unknown (docs/design.md §3, step 1): keep what
runs.

Owns: ``hold_unavailable``: without R (or with R > 0 but L_p/L_d unknown) each pool
stays at what it runs, raised to its min and lowered only to its max and maxGPUs (the
user's explicit bounds, not a guess from missing data); the memory carries on unchanged
but for this tick's recommendation; the action is ``HoldMetricsUnavailable`` and the
sentence names the problems; and the pieces every decision the models did not size
shares (``fit_sizes``, ``window_memory``, ``prior_outputs``: ``zero`` uses them too).
Pure; must not read clocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pdscaler.policy import reasons
from pdscaler.policy.limits import Capacity, Split, bounded, fit
from pdscaler.policy.sanitize import CleanMetrics
from pdscaler.policy.stabilize import prune
from pdscaler.policy.tick import ROLES
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Action, Decision, ModelOutputs, PolicyMemory, Role, TickInput


def fit_sizes(spec: PDDeploymentSpec, sizes: dict[Role, int], favour: Role | None) -> Split:
    """``sizes`` within maxGPUs, with no knowledge of the schedulable capacity: the split
    of a decision made without the models' sizing (this hold, ``zero``'s wake and
    sleep). ``favour``: the pool kept whole when maxGPUs cuts (None: both in proportion)."""
    return fit(
        spec,
        sizes[Role.PREFILL],
        sizes[Role.DECODE],
        float(sizes[Role.PREFILL]),
        float(sizes[Role.DECODE]),
        Capacity(gpus=None, pending=0, since=None),
        favour,
    )


def window_memory(inp: TickInput, split: Split, startup: float, **changes: Any) -> PolicyMemory:
    """The memory with everything kept but this tick's record in the stabilization
    window (``split``'s sizes), T_s and ``changes``."""
    record = (inp.now, split.prefill, split.decode)
    window = inp.spec.scaling.scale_down_stabilization_seconds
    return dataclasses.replace(
        inp.memory,
        recommendations=prune((*inp.memory.recommendations, record), inp.now, window),
        startup_seconds=startup,
        **changes,
    )


def prior_outputs(inp: TickInput, startup: float) -> ModelOutputs:
    """The model outputs of a decision the models did not size: the capacities as
    learnt (else the spec's priors) and T_s."""
    return ModelOutputs(
        prefill_tps=inp.memory.prefill_tps or inp.spec.prefill.tokens_per_second,
        decode_tps=inp.memory.decode_tps or inp.spec.decode.tokens_per_second,
        startup_seconds=startup,
    )


def hold_unavailable(inp: TickInput, clean: CleanMetrics, startup: float) -> Decision:
    """Keep what runs: raise to min, lower only to the spec's max and maxGPUs."""
    spec = inp.spec
    split = fit_sizes(spec, {r: bounded(spec, r, inp.pool(r).replicas) for r in ROLES}, None)
    final = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    memory = window_memory(inp, split, startup)  # all kept but the window's record and T_s
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
        model=prior_outputs(inp, startup),
        metrics_available=False,
        capacity_limited=inp.prefill.unschedulable + inp.decode.unschedulable > 0,
        memory=memory,
        data_gaps=clean.problems or ("request rate or token lengths unknown",),
    )
