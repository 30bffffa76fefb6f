"""The hard limits a decision must obey: per-pool [min, max], ``maxGPUs`` shared by both
pools, and the GPUs the cluster can actually schedule (docs/design.md §3 step 5).

Owns: clamping, learning the schedulable capacity from Pending pods (and remembering
it for one stabilization window, so the operator does not re-request pods the cluster
just refused and flap), the budget split between the pools (``models.split_budget``:
minimise the worse pool's utilisation, ties to the bottleneck), and the policy's step 6
that applies them all (``apply_limits``, then ``keep_gapped``). Purely computational;
must not compute what the pools want (``sizing``) or read clocks.

Capacity rule. Pods Pending for lack of GPUs (``unschedulable``) mean the cluster gives
at most ``sum((replicas - unschedulable) * gpusPerReplica)`` GPUs: prefill asks 20 x 1
with 0 pending, decode 18 x 1 with 6 pending -> 32 GPUs. The budget becomes
``min(maxGPUs, 32)`` and is re-split so the bottleneck pool gets the GPUs first (decode
the bottleneck: 16 prefill / 16 decode at the chat loads 19.05 / 17.86, rather than
20 / 12 where 6 decode pods would wait forever). The learnt capacity is kept while
younger than the window and rises with every tick that shows more GPUs scheduled;
after the window the full wants are tried again (the cluster may have grown).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pdscaler.models import BudgetSplit, RatioResult, split_budget
from pdscaler.policy.sizing import Attribution, Want
from pdscaler.policy.stabilize import Stabilized
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import PoolObservation, Role, TickInput


def clamp(value: int, low: int, high: int) -> int:
    """``value`` within ``[low, high]``: clamp(40, 1, 32) -> 32."""
    return min(max(value, low), high)


@dataclass(frozen=True)
class Capacity:
    """The GPUs the cluster can schedule for this PDDeployment (None: no known limit),
    whether pods are Pending for lack of GPUs right now, and since when it is known."""

    gpus: int | None
    pending: int
    since: float | None


def scheduled_gpus(
    spec: PDDeploymentSpec, prefill: PoolObservation, decode: PoolObservation
) -> int:
    """GPUs of the replicas that did get scheduled: (20-0)*1 + (18-6)*1 = 32."""
    p = max(prefill.replicas - prefill.unschedulable, 0) * spec.prefill.gpus_per_replica
    d = max(decode.replicas - decode.unschedulable, 0) * spec.decode.gpus_per_replica
    return p + d


def capacity(
    spec: PDDeploymentSpec,
    prefill: PoolObservation,
    decode: PoolObservation,
    remembered_gpus: int | None,
    remembered_at: float | None,
    now: float,
    window_seconds: float,
) -> Capacity:
    """The schedulable capacity this tick.

    Pending pods now -> what got scheduled (32 above), learnt at ``now``. None pending
    and a capacity learnt less than ``window_seconds`` ago -> that capacity, raised to
    what is scheduled now (all asked replicas run). Otherwise -> no limit.
    """
    pending = prefill.unschedulable + decode.unschedulable
    scheduled = scheduled_gpus(spec, prefill, decode)
    if pending > 0:
        return Capacity(gpus=scheduled, pending=pending, since=now)
    fresh = remembered_at is not None and now - remembered_at < window_seconds
    if fresh and remembered_gpus is not None:
        return Capacity(gpus=max(remembered_gpus, scheduled), pending=0, since=remembered_at)
    return Capacity(gpus=None, pending=0, since=None)


@dataclass(frozen=True)
class Split:
    """Replicas after the budget, and why they are below the wants (if they are)."""

    prefill: int
    decode: int
    budget_gpus: int
    budget_limited: bool
    capacity_limited: bool


def fit(
    spec: PDDeploymentSpec,
    want_prefill: int,
    want_decode: int,
    load_prefill: float,
    load_decode: float,
    cap: Capacity,
    prefer: Role | None,
) -> Split:
    """Bounded wants split within ``min(maxGPUs, schedulable GPUs)``.

    Chat wants 20 / 18 with loads 19.05 / 17.86: maxGPUs 64 -> 20 / 18; maxGPUs 32 ->
    17 / 15 (16 / 16 with ``prefer=DECODE``), budget-limited. When the schedulable
    capacity is below both minimums, the minimums still stand (the spec's floor is not
    the policy's to break; the pods simply wait).
    """
    p, d = spec.prefill, spec.decode
    budget = spec.scaling.max_gpus
    capacity_binds = cap.gpus is not None and cap.gpus < budget
    if cap.gpus is not None:
        floor = p.replicas.min * p.gpus_per_replica + d.replicas.min * d.gpus_per_replica
        budget = max(min(budget, cap.gpus), floor)
    split: BudgetSplit = split_budget(
        max_gpus=budget,
        want_prefill=want_prefill,
        want_decode=want_decode,
        prefill_gpus_per_replica=p.gpus_per_replica,
        decode_gpus_per_replica=d.gpus_per_replica,
        prefill_min=p.replicas.min,
        prefill_max=p.replicas.max,
        decode_min=d.replicas.min,
        decode_max=d.replicas.max,
        prefill_load_replicas=load_prefill,
        decode_load_replicas=load_decode,
        prefer=prefer,
    )
    return Split(
        prefill=split.prefill,
        decode=split.decode,
        budget_gpus=budget,
        budget_limited=split.limited and not capacity_binds,
        capacity_limited=cap.pending > 0 or (split.limited and capacity_binds),
    )


# ------------------------------------------------------------ step 6, limits


def keep_gapped(inp: TickInput, split: Split, gaps: dict[Role, tuple[str, ...]]) -> Split:
    """A pool with a data gap ends at least at what it runs (within its [min, max]),
    even when the budget split would give its GPUs to the other pool; the other pool
    then grows only into what is left, never below what it runs (nor its min). Budget
    32, decode gapped at 16, prefill wanting 20 from 14 (split 17 / 15) -> 16 / 16.
    When even that exceeds the budget (a pool runs above maxGPUs or below its min), the
    split stands: the spec's bounds are explicit."""
    spec = inp.spec
    out = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    for role in Role:
        if not gaps.get(role):
            continue
        floor = bounded(spec, role, inp.pool(role).replicas)
        if out[role] >= floor:
            continue
        out[role] = floor
        other = role.other
        room = split.budget_gpus - floor * spec.pool(role).gpus_per_replica
        fits = room // spec.pool(other).gpus_per_replica
        held = max(
            min(inp.pool(other).replicas, out[other]),
            spec.pool(other).replicas.min,
        )
        out[other] = max(min(out[other], fits), held)
    used = sum(out[r] * spec.pool(r).gpus_per_replica for r in Role)
    if used > split.budget_gpus:
        return split
    return Split(
        prefill=out[Role.PREFILL],
        decode=out[Role.DECODE],
        budget_gpus=split.budget_gpus,
        budget_limited=split.budget_limited,
        capacity_limited=split.capacity_limited,
    )


def apply_limits(
    inp: TickInput,
    ratio: RatioResult,
    attribution: Attribution,
    wants: dict[Role, Want],
    stabilized: dict[Role, Stabilized],
    headroom: int = 0,
) -> tuple[Capacity, Split]:
    """Step 6, ``limits``: the stabilized sizes within [min, max], then within maxGPUs and
    the schedulable capacity, split by load (the ratio model's, raised to a growing
    pool's want) in favour of the bottleneck; prefill's burst ``headroom`` only from what
    that leaves (``add_headroom``). Chat wants 20 / 18 at loads 19.05 / 17.86:
    maxGPUs 64 -> 20 / 18; maxGPUs 32 -> 17 / 15, or 16 / 16 with decode the
    bottleneck."""
    spec, mem = inp.spec, inp.memory
    within = {r: bounded(spec, r, stabilized[r].replicas) for r in Role}
    loads = {Role.PREFILL: ratio.n_prefill, Role.DECODE: ratio.n_decode}
    for r in attribution.growing:
        loads[r] = max(loads[r], float(wants[r].replicas))
    cap = capacity(
        spec,
        inp.prefill,
        inp.decode,
        mem.capacity_gpus,
        mem.capacity_time,
        inp.now,
        spec.scaling.scale_down_stabilization_seconds,
    )
    room = min(headroom, max(within[Role.PREFILL] - ratio.prefill_replicas, 0))
    split = fit(
        spec,
        within[Role.PREFILL] - room,
        within[Role.DECODE],
        loads[Role.PREFILL],
        loads[Role.DECODE],
        cap,
        attribution.primary,
    )
    return cap, add_headroom(spec, split, room)


def add_headroom(spec: PDDeploymentSpec, split: Split, room: int) -> Split:
    """Prefill's burst head-room from the GPUs the split left over, never from what
    either pool's load needs (docs/models.md §2c): budget 40, split 20 / 18, 10
    head-room replicas asked -> 22 / 18."""
    if room <= 0:
        return split
    per = spec.prefill.gpus_per_replica
    used = split.prefill * per + split.decode * spec.decode.gpus_per_replica
    fits = max(split.budget_gpus - used, 0) // per
    extra = min(room, fits, max(spec.prefill.replicas.max - split.prefill, 0))
    return dataclasses.replace(split, prefill=split.prefill + extra)


def bounded(spec: PDDeploymentSpec, role: Role, replicas: int) -> int:
    """``replicas`` within ``role``'s [min, max]."""
    bounds = spec.pool(role).replicas
    return clamp(replicas, bounds.min, bounds.max)
