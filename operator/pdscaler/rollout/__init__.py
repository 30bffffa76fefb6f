"""The same-version rollout (docs/design.md §4) as a pure state machine over revision cells.

Owns: which cells exist and how many replicas of each role each runs, so that the
policy's required totals are served while the engine version moves from one cell to
another, and the rollout's phase, reason, message, Events and persisted state. Must
not: read clocks (``now`` is passed in), talk to Kubernetes, size the totals (the
policy does) or render manifests (``manifests`` does, from ``RolloutStep.targets()``).

The package, along its seams (each module's docstring has its rules):

* ``phases``: the state machine (``RolloutState``, start, retarget, progress, the
  deadline and rollback, ``in_progress``, ``policy_pools``, the active version and
  the message);
* ``restore``: the state of a restarted operator (``state_from_status``, the marks);
* ``levels``: the GPU arithmetic (``runnable``, the cap, levels and their cost, the
  sizing of the new and the old cells);
* ``step``: the step assembly (``step``, ``RolloutStep``, ``CellPlan``);
* ``cells``: the per-cell views (``CellView``, the cells in numbers).

API (what ``reconcile`` calls each tick)::

    state = previous RolloutState (kept by the operator; after a restart
            state_from_status(status.rollout, spec, cells, now, marks): marks are the
            front Service's annotations, ``to_marks(step.state)`` written each tick)
    busy  = in_progress(spec, cells, state)                  # -> TickInput.rollout_in_progress
    prefill_obs, decode_obs = policy_pools(cells, state)     # -> TickInput.prefill/decode
    decision = policy.decide(...)
    step  = step(spec, cells, (decision.prefill, decision.decode), now, state)
    desired = manifests.desired_objects(meta, spec, list(step.targets()))
    status: step.progress (ProgressFacts), step.active_version; Events: step.events
    keep step.state for the next tick

``cells`` maps revision -> a cell view with ``rev``, ``version``, ``created`` and
``prefill``/``decode`` ``PoolObservation``s (``observe.CellObservation`` fits), plus an
optional ``image`` (needed to re-render a cell whose image is not the spec's) and
``config`` (its engine-config fingerprint, part of its revision: ``manifests.kv_config``).

Rules
-----
* The target cell is the spec's revision, or, after a rollback, the cell rolled back to
  while the spec still names the failed one (``phases``).
* Stable (only the target cell): it runs the required totals; its prefill runs only
  once its decode has a Ready pod (decode up before prefill, also on first creation).
* Rolling (old cells present): the new cell grows in *levels* (k prefill and the
  decode share of k prefill), reserved decode first when their GPUs fit the cap; the
  old cells keep what the new cell's Ready pods do not cover, prefill going first, its
  decode following once the prefill pods are gone (``levels``). Old cells without pods
  stay at 0 / 0 (something to roll back to) until the new cell serves alone; then
  they are deleted (Complete). Ready capacity stays at the required totals throughout.
* The cap is the required GPUs + maxSurgeGPUs; when that cannot hold one level (one
  prefill, its decode share and a decode of rounding slack) but maxGPUs has room, one
  level. When the new cell's next step still does not fit and nothing of it is
  pending, the old cells give up capacity first: prefill levels while prefill stays
  at its min, then decode replicas (the new cell may then run one prefill level ahead
  of its decode). Capacity dips, never below the spec's minimums; when even that
  cannot make room (e.g. a 3-GPU prefill replica, 1 GPU of surge, no budget room,
  prefill at its min), the rollout holds with reason StepDoesNotFit, and the progress
  deadline rolls it back.
* Required totals that grow during a rollout go to the cells that can serve them now;
  nothing ever exceeds ``maxGPUs + maxSurgeGPUs`` because of a rollout step.
* No progress for ``rollout.progressDeadline`` -> roll back; the spec's version
  changing again mid-rollout makes the newest revision the target (``phases``).

Worked example: chat at 20 prefill / 18 decode on v1 (1 GPU each, maxSurgeGPUs 8, cap
46), spec now v2: v2 gets decode 4 (level 4 reserved), then prefill 4 once that decode
is Ready; v1 then keeps 16 prefill and, when those pods are gone, decode 15; level by
level until v1 is empty and deleted: Complete (``step.step`` has the ticks).
"""

from pdscaler.rollout.cells import CellView
from pdscaler.rollout.levels import runnable
from pdscaler.rollout.phases import (
    Event,
    RolloutState,
    discount_unobserved,
    in_progress,
    policy_pools,
)
from pdscaler.rollout.restore import state_from_marks, state_from_status, to_marks
from pdscaler.rollout.step import CellPlan, RolloutStep, step

__all__ = [
    "CellPlan",
    "CellView",
    "Event",
    "RolloutState",
    "RolloutStep",
    "discount_unobserved",
    "in_progress",
    "policy_pools",
    "runnable",
    "state_from_marks",
    "state_from_status",
    "step",
    "to_marks",
]
