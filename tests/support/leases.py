"""A fake Lease API with the API server's optimistic concurrency, a settable clock and
a pair of electors on them: the harness of the leader-election unit tests
(test_lease.py, test_lease_term.py)."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime
from typing import Any

from pdscaler.kube import KubeError
from pdscaler.leader import Elector
from pdscaler.lease import Timings

T = Timings()
WALL = datetime(2026, 1, 1, tzinfo=UTC)


class FakeLeases:
    """One Lease store with the API server's optimistic concurrency."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = itertools.count(1)
        self.writes: list[tuple[str, str]] = []  # (verb, holder)

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.obj)

    def create_lease(self, namespace: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        if self.obj is not None:
            raise KubeError(409, "AlreadyExists", "exists")
        self.obj = {"metadata": {"resourceVersion": str(next(self.rv))}, "spec": dict(spec)}
        self.writes.append(("create", spec["holderIdentity"]))
        return copy.deepcopy(self.obj)

    def update_lease(
        self, namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        assert self.obj is not None
        if self.obj["metadata"]["resourceVersion"] != resource_version:
            raise KubeError(409, "Conflict", "the object has been modified")
        self.obj = {"metadata": {"resourceVersion": str(next(self.rv))}, "spec": dict(spec)}
        self.writes.append(("update", spec["holderIdentity"]))
        return copy.deepcopy(self.obj)


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def electors(timings: Timings = T) -> tuple[FakeLeases, Clock, Elector, Elector]:
    api, clock = FakeLeases(), Clock(100.0)
    a = Elector(api, "ops", "pdscaler-leader", "a", timings, clock=clock, wall=lambda: WALL)  # type: ignore[arg-type]
    b = Elector(api, "ops", "pdscaler-leader", "b", timings, clock=clock, wall=lambda: WALL)  # type: ignore[arg-type]
    return api, clock, a, b
