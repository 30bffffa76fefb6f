"""The rollout's GPU arithmetic: how many replicas each cell runs this tick.

Owns: the required totals as cells can run them (``runnable``), the GPU cap of the
cells (the required GPUs + maxSurgeGPUs, or one level when the surge is smaller), the
*levels* the new cell grows in, what a level costs, how far the new cell's Ready decode
covers prefill, and the per-step sizing of the new and the old cells (``stable`` with
only the target cell, ``shift`` while old cells are present). Purely computational:
must not read clocks, move phases, write messages or Events (``phases``), or assemble
the step (``step``).

Levels
------
Level k of the new cell is k prefill and ``ceil(D * k / P)`` decode replicas (the
decode share of k prefill). A level is reserved (its decode first) when its GPUs fit
the cap, counting every pod that exists (terminating ones too); its prefill starts only
as far as its READY decode covers (``floor(P * decode_ready / D)``). The old cells keep
``P - k_ready`` prefill, k_ready being the new cell's Ready prefill next to a Ready
decode pod, and each old cell keeps the decode share of the prefill pods it still has
(at least one while any is left). When the new cell's next step does not fit and
nothing of it is pending, the old cells give up capacity first: prefill levels while
prefill stays at its min, then decode replicas (the new cell may then run one prefill
level ahead of its decode).

Worked example: chat at 20 prefill / 18 decode on v1 (1 GPU each, maxSurgeGPUs 8):
cap 38 + 8 = 46. The first step reserves level 4 for v2 (4 prefill + ceil(18*4/20) = 4
decode = 8 GPUs): decode 4, prefill 0 until a v2 decode pod is Ready; then prefill 4;
once those are Ready v1 keeps 16 prefill and, when those pods are gone, decode
ceil(18*16/20) = 15.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pdscaler.rollout.cells import Cell, by_serving
from pdscaler.spec import PDDeploymentSpec, PoolSpec
from pdscaler.types import PerRole, Role, RolloutReason

#: Growth order within a cell: decode first (a prefill pod needs a Ready decode pod).
GROWTH_ORDER = (Role.DECODE, Role.PREFILL)


def pool_specs(spec: PDDeploymentSpec) -> PerRole[PoolSpec]:
    """The spec's pools, one per role."""
    return PerRole(prefill=spec.prefill, decode=spec.decode)


def _cost(gpus: PerRole[int], counts: PerRole[int]) -> int:
    return sum(n * gpus.pool(role) for role, n in counts.items())


@dataclass(frozen=True)
class Totals:
    """The required totals as cells run them, the GPUs per replica and the replica
    minimums of each role, the surge and the GPU cap of all cells together."""

    replicas: PerRole[int]  # decode is at least 1 when prefill > 0
    gpus: PerRole[int]
    minimum: PerRole[int]
    surge: int
    cap: int

    def cost(self, counts: PerRole[int]) -> int:
        """GPUs of ``counts`` replicas (1-GPU prefill, 2-GPU decode: 3 / 2 -> 7)."""
        return _cost(self.gpus, counts)

    def decode_share(self, k: int) -> int:
        """Decode share of k prefill replicas: ceil(D * k / P) (18/20 * 4 -> 4)."""
        p, d = self.replicas.prefill, self.replicas.decode
        if k <= 0 or p <= 0:
            return 0
        return math.ceil(d * k / p - 1e-9)

    @property
    def level_gpus(self) -> int:
        """GPUs a step must be able to hold: one prefill, its ceil(D/P) decode share,
        and one decode of rounding slack (the shares of the two cells round up
        separately). Chat 20 / 18, 1 GPU each: 1 + 1 + 1 = 3."""
        p, d = self.replicas.prefill, self.replicas.decode
        if p <= 0:
            return self.gpus.decode
        return self.cost(PerRole(prefill=1, decode=math.ceil(d / p - 1e-9) + 1))


def runnable(spec: PDDeploymentSpec, required: tuple[int, int]) -> tuple[int, int]:
    """The required (prefill, decode) totals as cells can run them: a prefill replica
    needs a decode replica, so 1 / 0 becomes 1 / 1, with fewer prefill replicas if that
    would not fit maxGPUs (2 x 2-GPU prefill / 0 decode on 4 GPUs -> 1 / 1). Others pass
    unchanged."""
    run = runnable_totals(spec, PerRole(prefill=required[0], decode=required[1]))
    return run.prefill, run.decode


def runnable_totals(spec: PDDeploymentSpec, required: PerRole[int]) -> PerRole[int]:
    """``runnable`` on a per-role record."""
    p, d = max(required.prefill, 0), max(required.decode, 0)
    if p > 0 and d == 0:
        gpus = pool_specs(spec).map(lambda pool: pool.gpus_per_replica)
        p = min(p, max(spec.scaling.max_gpus - gpus.decode, 0) // gpus.prefill)
        d = 1 if p > 0 else 0
    return PerRole(prefill=p, decode=d)


def totals(spec: PDDeploymentSpec, required: PerRole[int]) -> Totals:
    """The totals and the GPU cap of the cells: required GPUs + maxSurgeGPUs; when the
    surge cannot hold one level but the budget has room, up to one level (never beyond
    maxGPUs + maxSurgeGPUs). Chat 20 / 18 (38 GPUs), surge 8 -> cap 46. 2 x 1-GPU
    prefill / 2 x 2-GPU decode (6 GPUs), surge 1, maxGPUs 9: a level is 1 + (1 + 1) x 2
    = 5 GPUs, the budget leaves 9 + 1 - 6 = 4 -> cap 10."""
    pools = pool_specs(spec)
    run = runnable_totals(spec, required)
    gpus = pools.map(lambda pool: pool.gpus_per_replica)
    surge = spec.rollout.max_surge_gpus
    need = min(_cost(gpus, run), spec.scaling.max_gpus)
    out = Totals(
        replicas=run,
        gpus=gpus,
        minimum=pools.map(lambda pool: pool.replicas.min),
        surge=surge,
        cap=need + surge,
    )
    if surge < out.level_gpus:
        step = min(out.level_gpus, spec.scaling.max_gpus + surge - need)
        out = replace(out, surge=max(surge, step), cap=need + max(surge, step))
    return out


@dataclass
class Sizes:
    """Desired replicas per revision, and the notes the message needs."""

    replicas: dict[str, PerRole[int]] = field(default_factory=dict)
    reason: RolloutReason = RolloutReason.SHIFTING
    note: str = ""


def grow(room: int, live: int, want: int, gpus: int) -> tuple[int, int]:
    """``want``, or as far above the ``live`` pods as ``room`` GPUs allow; and the room
    left. Shrinking is free: grow(3, 10, 8, 1) -> (8, 3); grow(3, 10, 16, 2) -> (11, 1)."""
    if want <= live:
        return want, room
    add = min(want - live, max(room, 0) // gpus)
    return live + add, room - add * gpus


def _grow_cell(t: Totals, room: int, cell: Cell, want: PerRole[int]) -> tuple[PerRole[int], int]:
    """``grow`` for every role of one cell in ``GROWTH_ORDER``; and the room left."""
    got: dict[Role, int] = {}
    for role in GROWTH_ORDER:
        got[role], room = grow(room, cell.live.pool(role), want.pool(role), t.gpus.pool(role))
    return PerRole.build(got.__getitem__), room


def stable(t: Totals, new: Cell) -> Sizes:
    """Only the target cell: the required totals (decode first), prefill once decode has
    a Ready pod; growth waits while pods being deleted still hold the GPUs it needs."""
    room = t.cap - t.cost(new.present)
    want = t.replicas if new.pods.decode.ready >= 1 else t.replicas.with_pool(Role.PREFILL, 0)
    got, room = _grow_cell(t, room, new, want)
    started = got.prefill or not t.replicas.prefill
    reason = RolloutReason.STABLE if started else RolloutReason.DECODE_FIRST
    return Sizes(replicas={new.rev: got}, reason=reason)


def _allocate_prefill(olds: list[Cell], need: int) -> dict[str, int]:
    """``need`` prefill replicas over the old cells that have a Ready decode pod their
    Deployment keeps: their Ready pods first (most ready cell first), then their
    starting ones, then growth on the best-serving cell. A Ready decode pod asked away
    (decode 0 asked, 1 Ready: a stopped controller-manager has not removed it yet) does
    not count: the controller-manager may still remove it after this tick asks decode
    back (it replays 1 -> 0 -> 1), and a prefill pod started next to it would be Ready
    without a Ready decode pod of its version (D6, run 8)."""
    eligible = [c for c in by_serving(olds) if min(c.pods.decode.ready, c.replicas.decode) >= 1]
    alloc = {c.rev: 0 for c in olds}
    left = need
    for ready_only in (True, False):
        for c in eligible:
            pods = c.pods.prefill
            limit = pods.ready if ready_only else pods.replicas
            take = min(max(limit - alloc[c.rev], 0), left)
            alloc[c.rev] += take
            left -= take
    if left > 0 and eligible:
        alloc[eligible[0].rev] += left
    return alloc


def _old_decode(
    t: Totals, new: Cell, olds: list[Cell], prefill: dict[str, int], cut: int, settled: bool
) -> dict[str, int]:
    """Each old cell's decode: the share of the prefill pods it still has (desired or
    not yet gone; only the desired ones when ``settled``), at least 1 while it has any,
    less ``cut`` replicas, never below the decode minimum."""
    decode: dict[str, int] = {}
    for c in olds:
        pods = prefill[c.rev] if settled else max(prefill[c.rev], c.pods.prefill.present)
        decode[c.rev] = max(t.decode_share(pods), 1 if pods > 0 else 0)
    _cut_decode(olds, prefill, decode, cut)
    _decode_floor(t, new, olds, decode)
    return decode


def _cut_decode(
    olds: list[Cell], prefill: dict[str, int], decode: dict[str, int], cut: int
) -> None:
    """Remove ``cut`` decode replicas from the old cells (most decode first), keeping one
    in every cell that still has prefill pods, in place."""
    for c in sorted(olds, key=lambda c: (-decode[c.rev], c.rev)):
        keep = 1 if max(prefill[c.rev], c.pods.prefill.present) > 0 else 0
        take = min(cut, decode[c.rev] - keep)
        if take > 0:
            decode[c.rev] -= take
            cut -= take


def _decode_floor(t: Totals, new: Cell, olds: list[Cell], decode: dict[str, int]) -> None:
    """Keep Ready decode at least at min (at the required total when no prefill is
    required), raising old cells towards their Ready pods, in place."""
    floor = t.replicas.decode if t.replicas.prefill == 0 else t.minimum.decode
    kept = new.pods.decode.ready + sum(min(c.pods.decode.ready, decode[c.rev]) for c in olds)
    for c in sorted(olds, key=lambda c: (-c.pods.decode.ready, c.rev)):
        if kept >= floor:
            return
        add = min(c.pods.decode.ready - decode[c.rev], floor - kept)
        if add > 0:
            decode[c.rev] += add
            kept += add


def coverage(t: Totals, new: Cell, lag: int) -> int:
    """Prefill replicas the new cell's Ready decode covers (``lag`` levels ahead)."""
    if t.replicas.prefill <= 0 or new.pods.decode.ready < 1:
        return 0
    return t.replicas.prefill * new.pods.decode.ready // t.replicas.decode + lag


@dataclass(frozen=True)
class _Old:
    """The old cells' sizes for one choice of ``need`` and decode ``cut``."""

    replicas: dict[str, PerRole[int]]
    gpus: int  # GPUs they hold after the step (pods that stay or are still going)
    kept: int  # GPUs of the replicas they keep (once removed pods are gone)

    @property
    def decode(self) -> int:
        """Decode replicas of all old cells."""
        return sum(r.decode for r in self.replicas.values())


def _old_sizes(
    t: Totals, new: Cell, olds: list[Cell], k_ready: int, need: int, cut: int, lag: int
) -> _Old:
    """Old cells serve ``need`` prefill replicas (Ready ones first) with the decode
    share of the prefill pods they still have, less ``cut`` decode replicas, never
    below the decode minimum; growth only into GPUs that are free."""
    room = t.cap - level_cost(t, new, k_ready, lag) - sum(t.cost(c.present) for c in olds)
    prefill = _allocate_prefill(olds, need)
    for c in by_serving(olds):
        prefill[c.rev], room = grow(room, c.pods.prefill.live, prefill[c.rev], t.gpus.prefill)
    decode = _old_decode(t, new, olds, prefill, cut, settled=False)
    for c in by_serving(olds):
        decode[c.rev], room = grow(room, c.pods.decode.live, decode[c.rev], t.gpus.decode)
    replicas = {c.rev: PerRole(prefill=prefill[c.rev], decode=decode[c.rev]) for c in olds}
    gpus = sum(t.cost(c.holding(replicas[c.rev])) for c in olds)
    settled = _old_decode(t, new, olds, prefill, cut, settled=True)
    kept = sum(
        t.cost(PerRole(prefill=prefill[c.rev], decode=min(settled[c.rev], decode[c.rev])))
        for c in olds
    )
    return _Old(replicas, gpus, kept)


def next_step(t: Totals, new: Cell, lag: int) -> int:
    """GPUs the new cell's next step needs beyond the pods it has: one decode replica
    first (a version proves itself on decode), then the next level."""
    present = t.cost(new.present)
    p, d = t.replicas.prefill, t.replicas.decode
    decode_live = new.pods.decode.live
    if p == 0 or decode_live == 0:
        return t.gpus.decode if decode_live < max(d, 1) else 0
    k = min(new.pods.prefill.live, p)
    if k >= p:
        return (
            max(level_cost(t, new, p, lag) + t.gpus.decode * (d - decode_live), present) - present
        )
    return max(level_cost(t, new, k + 1, lag) - present, 0)


def shift(t: Totals, new: Cell, olds: list[Cell]) -> Sizes:
    """The rolling sizes: old cells cover what the new cell's Ready pods do not.

    When the new cell's next step does not fit (surge and budget too small for it) and
    nothing of the new cell is pending, the old cells give up capacity first: prefill
    levels while prefill stays at its min (``give``), then decode replicas (``cut``,
    and the new cell may then run one prefill level ahead of its decode, ``lag``).
    Pending pods of the new cell hold their GPUs, so the old cells cannot grow back
    into them: no flapping."""
    p, d = t.replicas.prefill, t.replicas.decode
    ready = new.pods.map(lambda pods: pods.ready)
    # the new cell's serving prefill: Ready prefill next to a Ready decode pod
    k_ready = min(ready.prefill, p) if ready.decode >= 1 else 0
    floor = max(t.minimum.prefill - k_ready, 0)
    need = max(p - k_ready, floor)
    give = cut = lag = 0
    old = _old_sizes(t, new, olds, k_ready, need, 0, 0)
    pending = any(pods.live > pods.ready for _, pods in new.pods.items())
    present = t.cost(new.present)
    stuck = False
    while not pending and t.cap - old.kept - present < next_step(t, new, lag) > 0:
        if need - give > floor:
            give += 1
        elif cut < old.decode:
            cut, lag = cut + 1, 1
        else:
            stuck = True
            break
        shrunk = _old_sizes(t, new, olds, k_ready, need - give, cut, lag)
        if shrunk.kept >= old.kept and need - give <= floor and cut >= old.decode:
            stuck = True
            break
        old = shrunk
    sizes = Sizes(replicas=dict(old.replicas))
    sizes.replicas[new.rev] = new_level(t, new, k_ready, old.gpus, lag)
    if stuck:
        sizes.reason = RolloutReason.STEP_DOES_NOT_FIT
        sizes.note = (
            f"the next step needs {next_step(t, new, lag)} GPUs, which maxGPUs + "
            "maxSurgeGPUs cannot give without going below the replica minimums: "
            "raise maxSurgeGPUs or maxGPUs"
        )
    elif ready.decode == 0 and p > 0 and not (give or cut):
        sizes.reason = RolloutReason.DECODE_FIRST
    elif give or cut:
        sizes.reason = RolloutReason.SURGE_BELOW_STEP
        sizes.note = (
            f"the next step ({next_step(t, new, lag)} GPUs) does not fit maxGPUs + "
            "maxSurgeGPUs: old cells give up capacity first"
        )
    elif k_ready >= p and ready.decode >= d:
        sizes.reason = RolloutReason.DRAINING
    return sizes


def lagged(t: Totals, k: int, lag: int) -> int:
    """Decode of level k run ``lag`` levels behind; a level with prefill has one."""
    return max(t.decode_share(k - lag), 1 if k >= 1 else 0)


def level(t: Totals, k: int, lag: int = 0) -> PerRole[int]:
    """Level k: k prefill and the decode share of k prefill (``lag`` levels behind)."""
    return PerRole(prefill=k, decode=lagged(t, k, lag))


def level_cost(t: Totals, new: Cell, k: int, lag: int = 0) -> int:
    """GPUs the new cell holds at level k (its decode ``lag`` levels behind), the pods
    it already has included."""
    return t.cost(new.holding(level(t, k, lag)))


def new_level(t: Totals, new: Cell, k_ready: int, used_old: int, lag: int) -> PerRole[int]:
    """The new cell's replicas: the highest level whose GPUs fit the cap (its decode
    first), prefill as far as its Ready decode covers (never fewer than its Ready
    prefill pods), spare GPUs to the decode of the next level."""
    p, d = t.replicas.prefill, t.replicas.decode
    ready = new.pods.map(lambda pods: pods.ready)
    top = k_ready
    for k in range(p, k_ready, -1):
        if used_old + level_cost(t, new, k, lag) <= t.cap:
            top = k
            break
    keep = min(ready.prefill, p) if ready.decode >= 1 else 0
    prefill = min(p, max(min(top, coverage(t, new, lag)), keep))
    floor = max(lagged(t, top, lag), min(ready.decode, d))  # Ready pods stay
    base = max(floor, new.pods.decode.live)  # pods already there are paid for in the cost
    goal = lagged(t, top + 1, lag) if top < p else d
    spare = (t.cap - used_old - level_cost(t, new, top, lag)) // t.gpus.decode
    decode = max(floor, min(goal, base + max(spare, 0)))
    # whatever the level says, growth only into GPUs that are free (decode first)
    room = t.cap - used_old - t.cost(new.present)
    got, _ = _grow_cell(t, room, new, PerRole(prefill=prefill, decode=decode))
    return got
