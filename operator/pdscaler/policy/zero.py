"""Scale to and from zero (issue 29, item 3; docs/design.md §3): the decisions the
holding proxy's gauges (``types.HolderReading``, from ``pdscaler.holder``) make before
the load models run, since a cell at zero has no engine to measure.

Owns: ``zero_decision``, which ``decide`` asks first (None: the models decide):

* **wake**: both pools at zero replicas and requests held -> both pools from zero in
  the same decision (decode with prefill), the first replicas sized from the held queue
  (``wake_sizes``), ``ScaledFromZero``;
* **still waking**: requests held and a pool without a Ready replica -> at least the
  wake sizes (``Hold``, or ``ScaledFromZero`` when it raises one): the models, seeing no
  engine or a rate of 0, would stop the cell before it serves;
* **stay**: both pools at zero, both ``replicas.min`` 0, the holder read and nothing
  held -> 0 / 0, ``HoldAtZero``, the sentence saying for how long nothing arrived;
* **sleep**: ``scaleToZero.idleSeconds`` set, nothing held and nothing in flight at the
  holder, the pools' own queues and running requests 0 where known, no rollout, and
  the holder idle for at least ``idleSeconds`` -> 0 / 0, ``ScaledToZero``. An unknown
  holder (no proxy answered) never sleeps: unknown is never 0.

Pure; must not read clocks. The memory carries on as ``hold`` keeps it, with this
tick's recommendation recorded (so the stabilization window sees the wake or the
sleep).
"""

from __future__ import annotations

import math

from pdscaler.models import ratio_model
from pdscaler.policy import reasons
from pdscaler.policy.hold import fit_sizes, prior_outputs, window_memory
from pdscaler.policy.limits import bounded
from pdscaler.policy.tick import ROLES
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Action, Decision, HolderReading, Role, TickInput


def at_zero(inp: TickInput) -> bool:
    """Both pools asked for zero replicas and none is left Ready."""
    return all(inp.pool(r).replicas == 0 and inp.pool(r).ready == 0 for r in ROLES)


def holder_reading(inp: TickInput) -> HolderReading | None:
    """The holder's gauges of this tick's snapshot (None: no snapshot, no holder)."""
    return inp.metrics.holder if inp.metrics is not None else None


def wake_sizes(
    spec: PDDeploymentSpec, held: float, prompt: float, output: float
) -> dict[Role, int]:
    """The first replicas of each pool from the held queue: ``held`` requests with
    ``prompt`` / ``output`` estimated tokens in all, drained within
    ``slo.recovery`` once up, i.e. the ratio model at R = held / recovery, at least one
    replica each, within [min, max]. Chat: 600 held, 2000 / 500 tokens each, P 3000 /
    800 tok/s, u 0.7, recovery 60 s -> R 10 req/s, N_P 9.52, N_D 8.93 -> 10 / 9; 3 held
    -> 1 / 1; tokens unknown (0) -> 1 / 1."""
    if held <= 0 or prompt <= 0 or output <= 0:
        return {r: bounded(spec, r, 1) for r in ROLES}
    result = ratio_model(
        held / spec.slo.recovery_seconds,
        prompt / held,
        output / held,
        spec.prefill.tokens_per_second,
        spec.decode.tokens_per_second,
        spec.prefill.target_utilization,
        spec.decode.target_utilization,
    )
    sizes = {Role.PREFILL: result.n_prefill, Role.DECODE: result.n_decode}
    return {r: bounded(spec, r, max(math.ceil(sizes[r] - 1e-9), 1)) for r in ROLES}


def may_sleep(inp: TickInput, holder: HolderReading | None) -> str | None:
    """Why both pools may stop now (the sentence's reason), or None. Needs
    ``scaleToZero``, both mins 0, no rollout, the holder read with nothing held or in
    flight, the pools' queues and running requests 0 where known, and the holder idle
    for ``idleSeconds``: idle 312 s of 300 -> "nothing held or in flight for 312s
    (scaleToZero.idleSeconds 300)"; idle 120 s -> None."""
    spec = inp.spec
    s2z = spec.scale_to_zero
    if s2z is None or inp.rollout_in_progress or holder is None:
        return None
    if any(spec.pool(r).replicas.min != 0 for r in ROLES):
        return None
    if holder.held != 0 or holder.in_flight != 0 or holder.idle_seconds is None:
        return None
    if inp.metrics is not None:
        for r in ROLES:
            pool = inp.metrics.pool(r)
            if (pool.queue_depth or 0) > 0 or (pool.running or 0) > 0:
                return None
    if holder.idle_seconds < s2z.idle_seconds:
        return None
    idle = reasons.seconds(holder.idle_seconds)
    return f"nothing held or in flight for {idle} (scaleToZero.idleSeconds {s2z.idle_seconds:g})"


def zero_decision(inp: TickInput, startup: float) -> Decision | None:
    """The wake, stay or sleep decision of this tick, or None when the models decide
    (module docstring). Both pools at zero with 3 requests held -> ``ScaledFromZero``
    1 / 1; at zero with none held -> ``HoldAtZero`` 0 / 0; 2 / 2 running, idle past
    ``idleSeconds`` -> ``ScaledToZero`` 0 / 0."""
    holder = holder_reading(inp)
    spec = inp.spec
    if at_zero(inp):
        if holder is not None and (holder.held or 0) > 0:
            held = holder.held or 0.0
            sizes = wake_sizes(
                spec, held, holder.held_prompt_tokens or 0.0, holder.held_output_tokens or 0.0
            )
            why = f"{held:g} requests held at zero replicas"
            return _decision(inp, startup, sizes, Action.SCALED_FROM_ZERO, "Scaled from zero", why)
        if (
            holder is not None
            and holder.held == 0
            and all(spec.pool(r).replicas.min == 0 for r in ROLES)
        ):
            idle = reasons.seconds(holder.idle_seconds)
            why = f"no request held; idle for {idle}"
            zero = dict.fromkeys(ROLES, 0)
            return _decision(inp, startup, zero, Action.HOLD_AT_ZERO, "Held at zero", why)
        return None
    if holder is not None and (holder.held or 0) > 0 and not all(inp.pool(r).ready for r in ROLES):
        return _still_waking(inp, startup, holder)
    why_sleep = may_sleep(inp, holder)
    if why_sleep is None:
        return None
    zero = dict.fromkeys(ROLES, 0)
    return _decision(inp, startup, zero, Action.SCALED_TO_ZERO, "Scaled to zero", why_sleep)


def _still_waking(inp: TickInput, startup: float, holder: HolderReading) -> Decision:
    """Requests still held and a pool with no Ready replica yet (the wake in progress):
    at least the wake sizes, whatever the models would say of a cell without engines or
    with a rate of 0 (they would stop it before it serves). 1 held, decode 1 asked and
    starting, prefill 0 (the rollout starts decode first) -> 1 / 1."""
    held = holder.held or 0.0
    wake = wake_sizes(
        inp.spec, held, holder.held_prompt_tokens or 0.0, holder.held_output_tokens or 0.0
    )
    sizes = {r: max(inp.pool(r).replicas, wake[r]) for r in ROLES}
    changed = any(sizes[r] != inp.pool(r).replicas for r in ROLES)
    action = Action.SCALED_FROM_ZERO if changed else Action.HOLD
    ready = ", ".join(f"{r.value} {inp.pool(r).ready}/{inp.pool(r).replicas} ready" for r in ROLES)
    why = f"{held:g} requests held while the pools start ({ready})"
    verb = "Scaled from zero" if changed else "Held"
    return _decision(inp, startup, sizes, action, verb, why)


def _decision(
    inp: TickInput,
    startup: float,
    sizes: dict[Role, int],
    action: Action,
    verb: str,
    why: str,
) -> Decision:
    """``sizes`` within maxGPUs as a Decision, the memory as ``hold`` keeps it."""
    split = fit_sizes(inp.spec, sizes, Role.DECODE)
    last = inp.now if not action.holds else inp.memory.last_scale_time
    return Decision(
        prefill=split.prefill,
        decode=split.decode,
        action=action,
        message=reasons.sentence(verb, reasons.sizes(split.prefill, split.decode), [why]),
        pool=None,
        model=prior_outputs(inp, startup),
        metrics_available=True,
        memory=window_memory(inp, split, startup, last_scale_time=last),
    )
