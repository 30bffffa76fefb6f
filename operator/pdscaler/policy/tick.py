"""What one tick of the policy computed, and the per-pool views of its inputs.

Owns: the ``Tick`` record (the rate, forecast, ratio model, pool facts, wants,
stabilized and limited sizes of one tick), which ``decide`` fills step by step and
``explain`` turns into an action and a sentence (one pool of the spec, the
observations or the metrics is ``spec.pool(role)``, ``inp.pool(role)``,
``snap.pool(role)``). Must not: compute anything (the steps live in ``decide`` and the
modules it names), read clocks or do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdscaler.models import DecodeBound, MemoryResult, RatioResult
from pdscaler.policy import history
from pdscaler.policy.limits import Capacity, Split
from pdscaler.policy.sizing import Attribution, DrainPlan, PoolFacts, Want
from pdscaler.policy.stabilize import Record, Stabilized
from pdscaler.types import Flip, Role, TickInput

ROLES = (Role.PREFILL, Role.DECODE)


@dataclass(frozen=True)
class Tick:
    """Everything computed in one tick that the sentence and the memory need."""

    inp: TickInput
    rate: float
    forecast: float
    ratio: RatioResult
    facts: dict[Role, PoolFacts]
    attribution: Attribution
    wants: dict[Role, Want]
    window: tuple[Record, ...]
    stabilized: dict[Role, Stabilized]
    split: Split
    capacity: Capacity
    final: dict[Role, int]
    pools: tuple[history.Point, ...] = ()
    gaps: dict[Role, tuple[str, ...]] = field(default_factory=dict)
    #: the decode memory term at the forecast rate (None: off), and what sizes decode
    memory: MemoryResult | None = None
    decode_bound: DecodeBound = DecodeBound.THROUGHPUT
    #: prefill's burst head-room factor after this tick, and the replicas it asked for
    burst_factor: float = 1.0
    headroom: int = 0
    #: decode replicas its observed KV usage needs (``kvbound.observed_floor``; 0: none)
    kv_floor: int = 0
    #: each pool's capacity prior at this tick's mix (the profile read, or the constant)
    priors: dict[Role, float] = field(default_factory=dict)
    #: ready replicas changing role on this tick (``policy.flips``), counted in ``final``
    flip: Flip | None = None
    #: with flips on and a pool growing by new replicas: why none of the other's flips
    no_flip: str | None = None

    @property
    def headroom_held(self) -> int:
        """Head-room replicas prefill ends with: at most what it asked for, at most what
        the final size holds above the ratio target."""
        return max(0, min(self.headroom, self.final[Role.PREFILL] - self.ratio.prefill_replicas))

    def current(self, role: Role) -> int:
        return self.facts[role].current

    @property
    def grown(self) -> tuple[Role, ...]:
        return tuple(r for r in ROLES if self.final[r] > self.current(r))

    @property
    def shrunk(self) -> tuple[Role, ...]:
        return tuple(r for r in ROLES if self.final[r] < self.current(r))

    def drain(self, role: Role) -> DrainPlan | None:
        return self.wants[role].drain
