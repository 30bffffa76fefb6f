"""The pure scaling policy (docs/design.md §3): ``decide(TickInput) -> Decision``.

Owns: turning one tick's observations and metrics into the desired replicas of both
pools with a machine reason and a sentence. Modules: ``sanitize`` (garbage is unknown),
``refine`` (capacities and T_s learnt online), ``forecast`` (rate over T_s + interval),
``seasonal`` (the day's shape learnt from the rate),
``sizing`` (ratio, drain, bottleneck rule), ``stabilize`` (fast up, slow down),
``limits`` (min/max, maxGPUs, schedulable capacity), ``explain`` (the action and the
sentence), ``reasons`` (the sentence's phrases), ``tick`` (what one tick computed),
``memory`` (what the next tick starts from), ``decide`` (the order of the steps).
Must not: do I/O, read clocks, or import kopf, kubernetes, prometheus_client or HTTP
clients (import-linter enforces it).
"""

from pdscaler.policy import reasons
from pdscaler.policy.decide import decide

__all__ = ["decide", "reasons"]
