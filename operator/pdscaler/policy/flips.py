"""Role flips: a pool grows by taking ready replicas the other pool does not need,
changing their role, instead of starting new ones (docs/models.md §5a).

Owns: ``consider_flip``, run after the limits on the final sizes. Where the actuator can
flip (``TickInput.flips``), both pools run the same GPUs per replica and no rollout is
in progress, a pool that grows takes up to the other pool's surplus (what it runs above
the highest recommendation of the flip window, ``surplus``), as long as a flipped
replica serves sooner than a new one: its drain plus the reconfiguration
(``flip_seconds``) against the start-up T_s. The grower's size is unchanged (the flipped
replicas count in it, the rest still start cold); the giver ends lower by the flips.
Also the window's record of the giver (``record_flip``), so a replica flipped away is
not given back, or flipped again, before a window of lower recommendations.
Must not: decide how much a pool grows (sizing, stabilization and the limits have),
read clocks or do I/O.

Worked (the docs' example): prefill 10 -> 14 on this tick; decode runs 20 (all Ready),
its recommendations over the last 60 s were 16, 17 and 16; T_s 90 s. A decode replica
drains its sequences in about L_d x TPOT = 250 x 40 ms = 10 s, and serves prefill 9 s
later: 19 s against 90 s, so it flips. Decode's surplus is 20 - 17 = 3: 3 decode
replicas flip, prefill ends at 14 (3 flipped, 1 new), decode at 17. The GPUs do not
change (the 1 new one is the only added GPU).
"""

from __future__ import annotations

from pdscaler.models.migration import SOFTWARE_PREP_SECONDS
from pdscaler.policy import reasons
from pdscaler.policy.sizing import PoolFacts
from pdscaler.policy.stabilize import MAX_DOWN_FRACTION, Record, prune
from pdscaler.policy.tick import ROLES
from pdscaler.types import Flip, FlipOptions, Role, TickInput

_COLUMN = {Role.PREFILL: 1, Role.DECODE: 2}


def flip_seconds(facts: PoolFacts, tpot: float, reconfigure: float) -> float:
    """From leaving ``facts``' pool until serving the other: the replica's drain (decode:
    its sequences' remaining output, about L_d x TPOT; prefill: its batch, about one
    prompt's L_p / P_prefill) plus ``reconfigure``. Decode at L_d 250 and 40 ms: 10 + 9 =
    19 s; prefill at L_p 2,000 and 8,000 tokens/s: 0.25 + 9 = 9.25 s."""
    if facts.role is Role.DECODE:
        drain = facts.tokens * tpot
    else:
        drain = facts.tokens / facts.tps if facts.tps > 0 else 0.0
    return drain + reconfigure


def surplus(
    role: Role, current: int, records: tuple[Record, ...], now: float, window: float
) -> int:
    """Replicas ``role`` runs above the highest recommendation of the last ``window``
    seconds (the records are a step function: the newest at or before the window start
    holds into it). 0 until the records cover the window. Decode at 20, records 16, 17,
    16 over 60 s: 3."""
    kept = prune(records, now, window)
    if not kept or kept[0][0] > now - window:
        return 0
    return max(0, current - max(int(r[_COLUMN[role]]) for r in kept))


def consider_flip(
    inp: TickInput,
    facts: dict[Role, PoolFacts],
    records: tuple[Record, ...],
    final: dict[Role, int],
    startup: float,
    tpot: float,
    gaps: dict[Role, tuple[str, ...]] | None = None,
) -> tuple[Flip | None, str | None]:
    """The flip of this tick, if any (module docstring): at most one direction, the
    growing pool's. None when the actuator cannot flip, the pools' GPUs per replica
    differ, a rollout is in progress, no pool grows while the other holds a surplus (a
    pool with ``gaps`` in its data gives nothing: it must not shrink), or a flip would
    not serve sooner than a new replica. With flips on and a pool growing by new
    replicas, the second value says why none of the other pool's changes role
    (``reasons.no_flip``): prefill 1 -> 3 with decode's data gapped -> (None, "no decode
    replica changes role: decode's data has a gap (decode queue depth unknown)")."""
    opts: FlipOptions | None = inp.flips
    spec = inp.spec
    if opts is None:
        return None, None
    growing = [r for r in ROLES if final[r] > facts[r].current]
    if len(growing) != 1:
        return None, None  # nothing grows, or both do: no pool to give
    target = growing[0]
    source = target.other
    if inp.rollout_in_progress:
        return None, reasons.no_flip(source, "a rollout is in progress")
    if spec.prefill.gpus_per_replica != spec.decode.gpus_per_replica:
        return None, reasons.no_flip(source, "the pools' replicas have different GPUs")
    gapped = (gaps or {}).get(source)
    if gapped:
        return None, reasons.no_flip(source, f"{source}'s data has a gap ({gapped[0]})")
    window = min(opts.window_seconds, spec.scaling.scale_down_stabilization_seconds)
    reconfigure = opts.reconfigure_seconds
    if reconfigure is None:
        reconfigure = SOFTWARE_PREP_SECONDS
    have = facts[source].current
    raw = surplus(source, have, records, inp.now, window)
    spare = min(raw, int(have * MAX_DOWN_FRACTION))
    count = min(final[target] - facts[target].current, spare, facts[source].ready)
    seconds = flip_seconds(facts[source], tpot, reconfigure)
    if count <= 0:
        if raw <= 0:
            why = f"its recommendations of the last {window:g}s ask for all {have}"
            why += " (or do not cover them)"
        elif spare <= 0:
            why = f"a third of its {have} replicas rounds to 0"
        else:
            why = "no replica of it is ready"
        return None, reasons.no_flip(source, why)
    if seconds >= startup:
        why = f"one would serve {target} in ~{seconds:.0f}s, a new one in ~{startup:.0f}s"
        return None, reasons.no_flip(source, why)
    return Flip(source, count, seconds, startup), None


def after_flip(
    final: dict[Role, int], current: dict[Role, int], flip: Flip | None
) -> dict[Role, int]:
    """The final sizes with ``flip`` taken from its source: the source ends at most at
    what it runs less the flipped replicas (14 / 20 with 3 decode flips -> 14 / 17)."""
    if flip is None:
        return final
    out = dict(final)
    out[flip.source] = min(final[flip.source], current[flip.source] - flip.count)
    return out


def record_flip(
    records: tuple[Record, ...], final: dict[Role, int], flip: Flip | None
) -> tuple[Record, ...]:
    """The window with this tick's record holding the source's size after the flip when
    that is higher than its recommendation (as a scale-down records the size it left,
    ``stabilize.window_record``): the next flip or scale-down from it waits a window."""
    if flip is None or not records:
        return records
    now, *values = records[-1]
    column = _COLUMN[flip.source] - 1
    values[column] = max(int(values[column]), final[flip.source])
    return (*records[:-1], (now, int(values[0]), int(values[1])))
