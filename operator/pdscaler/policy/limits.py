"""The hard limits a decision must obey: per-pool [min, max], ``maxGPUs`` shared by both
pools, and the GPUs the cluster can actually schedule (docs/design.md §3 step 5).

Owns: clamping, learning the schedulable capacity from Pending pods (and remembering
it for one stabilization window, so the operator does not re-request pods the cluster
just refused and flap), and the budget split between the pools (``models.split_budget``:
minimise the worse pool's utilisation, ties to the bottleneck). Purely computational;
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

from dataclasses import dataclass

from pdscaler.models import BudgetSplit, split_budget
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import PoolObservation, Role


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
