"""An operator fed exact snapshots, and a sampler of its pools' replicas, for the
drills that need garbage or gaps in each field of the snapshot (D8, and the missing-data
and poison-write drills; no tests here). The values come through the operator's
``metrics_source`` hook (``runtime.Runtime``), not the exporter: Prometheus would
already have turned NaN and Inf into "no data".

    rt, feed = fed_runtime(lab)                  # R = 4 req/s of the chat mix
    feed.set(IDLE_LOW)                           # the next tick reads R = 1
    feed.hold(3.0, reads=2)                      # >= 3 s and >= 2 ticks read R = 1
    with Sampler(kube, ns, name) as sampler: ... # sampler.low / sampler.high per role
    sampler.check(at_least=50)                   # sampled along, few failed reads
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pdlab.cluster.lab import Lab
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, Role
from support.background import Sampling
from support.builders import snapshot
from support.labkit import Kube, wait_for
from support.opkit import operator_runtime, pdd_manifest, total

MAX_REPLICAS = 12
STABILIZATION = "4s"

Source = Callable[[PDDeploymentSpec, str, str, float], MetricsSnapshot]


class Feed:
    """The snapshot the operator reads next (``source`` is the Runtime's hook), and how
    many ticks read it since ``set`` (``reads``)."""

    def __init__(self, first: MetricsSnapshot) -> None:
        self._snap = first
        self._lock = threading.Lock()
        self.reads = 0

    def set(self, snap: MetricsSnapshot) -> None:
        with self._lock:
            self._snap = snap
            self.reads = 0

    def source(self, spec: PDDeploymentSpec, ns: str, name: str, now: float) -> MetricsSnapshot:
        with self._lock:
            self.reads += 1
            return replace(self._snap, time=now)

    def hold(self, seconds: float, reads: int) -> None:
        """Keep the snapshot ``seconds`` AND until ``reads`` ticks have read it, however
        slowly a loaded machine ticks (60 s more at most). One tick reads once, so with
        ``reads`` >= 2 the first tick that read it has also finished (its decision and
        status written). At 1 tick/s (ticks of ~0.2 s): 3 s -> 2 reads, 8 s -> 6."""
        time.sleep(seconds)
        wait_for(lambda: self.reads >= reads or None, 60, f"{reads} ticks on the snapshot")


@dataclass
class Sampler(Sampling):
    """Both pools' Deployment replicas every 0.2 s: the lowest and highest seen since
    ``reset``. A sample whose reads fail is counted in ``failed`` and kept in ``errors``
    (``Sampling``), and sampling goes on: the drill's ``check`` sees it."""

    kube: Kube
    namespace: str
    name: str
    low: dict[Role, int] = field(default_factory=dict)
    high: dict[Role, int] = field(default_factory=dict)

    def reset(self) -> None:
        self.low, self.high = {}, {}

    def sample(self) -> None:
        seen = {role: total(self.kube, self.namespace, self.name, role) for role in Role}
        for role, n in seen.items():
            self.low[role] = min(self.low.get(role, n), n)
            self.high[role] = max(self.high.get(role, n), n)


def errors(rt: Runtime, namespace: str, name: str) -> float:
    """The operator's reconcile error counter of this PDDeployment."""
    value = rt.telemetry.errors.labels(namespace, name)._value.get()
    return float(value)


def fed_runtime(lab: Lab) -> tuple[Runtime, Feed]:
    """An operator Runtime on the lab whose metrics come from a Feed, at R = 4 req/s."""
    feed = Feed(snapshot(4.0, ttft=0.3, tpot=0.02, running=0.0))
    rt = operator_runtime(lab)
    rt.metrics_source = feed.source
    return rt, feed


def manifest(name: str, lab: Lab) -> dict[str, object]:
    return pdd_manifest(
        name, lab.prometheus_url, interval="1s", stabilization=STABILIZATION,
        max_replicas=MAX_REPLICAS, max_gpus=32,
    )  # fmt: skip


IDLE_LOW = snapshot(1.0, ttft=0.3, tpot=0.02, running=0.0)  # complete: wants 1 / 1
