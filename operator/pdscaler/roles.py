"""The live role flip: which pods change role and what each pool Deployment then runs.

Owns: carrying out the policy's ``Flip`` in a role-flip cell (``scaling.roleFlips``,
whose Deployments select on ``pdscaler.io/pool`` so a pod's ``pdscaler.io/role`` may
change): choosing the pods to relabel, relabelling flipped pods back home when their
serving pool shrinks below them, and turning each cell's SERVING sizes (what the policy
and the rollout decided) into its Deployments' replicas. A pod keeps its Deployment (and
its revision: the same-version rule holds) when it changes role; the routers discover by
the role label and the metrics carry it, so both follow the flip. A flipped pod carries
a high ``pod-deletion-cost``: its Deployment, scaling down, removes its own pool's pods
first. Must not: decide how many replicas flip (``policy.flips``), talk to Kubernetes.

In a cell that serves P prefill and D decode with X pods made by decode serving prefill
and Y made by prefill serving decode, the prefill Deployment runs P - X + Y and the
decode Deployment D - Y + X. Worked (tests/unit/test_roles.py): decode runs 4 Ready pods
with running 5, 0, 9, 1 and prefill 1; the policy flips 1 decode replica to prefill and
sizes prefill 3, decode 3: the pod running 0 is relabelled ``prefill`` (cost 1000000),
X = 1, so prefill's Deployment goes 1 -> 2 (one new pod starts cold) and decode's stays
at 4 (3 serving decode + the flipped one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from pdscaler import naming
from pdscaler.manifests import DELETION_COST_ANNOTATION, CellTarget
from pdscaler.observe import CellObservation, PoolPod, is_ready
from pdscaler.plan import Action, Verb
from pdscaler.types import Flip, Role

#: The pod-deletion-cost of a flipped pod: its Deployment removes every pod of its own
#: pool (costs are their running requests, ``plan.deletion_costs``) before it.
FLIPPED_COST = "1000000"
#: The cost a pod flipped back home gets: its pool's lowest.
HOME_COST = "0"


def relabel(pod: PoolPod, to: Role) -> Action:
    """The pod patch that makes ``pod`` serve ``to``: its role label, and the deletion
    cost of a pod away from (``FLIPPED_COST``) or back in (``HOME_COST``) its own pool."""
    cost = HOME_COST if to is pod.owner else FLIPPED_COST
    return Action(
        Verb.RELABEL_POD,
        "Pod",
        pod.name,
        labels={naming.LABEL_ROLE: to.value},
        annotations={DELETION_COST_ANNOTATION: cost},
        message=f"{pod.serves.value}->{to.value}",
    )


def _pick(
    pods: Sequence[PoolPod], source: Role, count: int, running: Mapping[str, float]
) -> list[PoolPod]:
    """``count`` Ready pods (of the live ``pods``) serving ``source`` to flip away: first
    those that came from the other pool (flipped home), then the least busy (decode:
    fewest running), by name."""
    ready = [p for p in pods if p.serves is source and is_ready(p.pod)]
    ready.sort(key=lambda p: (p.owner is source, running.get(p.name, 0.0), p.name))
    return ready[: max(0, count)]


def carry_out(
    target: CellTarget,
    cell: CellObservation | None,
    flip: Flip | None,
    running: Mapping[str, float],
) -> tuple[CellTarget, list[Action]]:
    """``target`` with its Deployments' replicas (module docstring) and the pod patches
    of this tick: ``flip`` (None: none here) relabels the cell's pods, and a pool serving
    fewer than the pods flipped into it sends the rest home, so neither Deployment goes
    below 0. A cell without flipped pods and no flip, or going to 0 (its pods go as they
    are), keeps ``target`` as it is."""
    if cell is None or (flip is None and not cell.flipped):
        return target, []
    if not (target.prefill or target.decode):  # a retiring cell: its pods go as they are
        return target, []
    pods = [p for p in cell.pods if p.live]
    serves = {p.name: p.serves for p in pods}
    actions: list[Action] = []
    if flip is not None:
        for pod in _pick(pods, flip.source, flip.count, running):
            serves[pod.name] = flip.target
            actions.append(relabel(pod, flip.target))

    def flipped_into(role: Role) -> list[PoolPod]:
        """Pods made by the other pool serving ``role``, not Ready first."""
        into = [p for p in pods if p.owner is not role and serves[p.name] is role]
        return sorted(into, key=lambda p: (is_ready(p.pod), p.name))

    for role in Role:
        extra = flipped_into(role)
        for pod in extra[: max(0, len(extra) - target.replicas(role))]:
            serves[pod.name] = pod.owner
            actions.append(relabel(pod, pod.owner))
    into = {role: len(flipped_into(role)) for role in Role}
    prefill = target.prefill - into[Role.PREFILL] + into[Role.DECODE]
    decode = target.decode - into[Role.DECODE] + into[Role.PREFILL]
    return dataclasses.replace(target, prefill=prefill, decode=decode), actions
