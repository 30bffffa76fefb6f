"""pdlab.engine.pods.LingeringPods: a deleted (or un-Ready) pod stays served for its own
preStop sleep, as a kubelet keeps its container running through the hook; a pod without
one leaves at once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pdlab.engine.pods import LingeringPods, PodInfo
from pdscaler.types import Role


class Listing:
    def __init__(self) -> None:
        self.pods: list[PodInfo] = []

    def list(self) -> list[PodInfo]:
        return list(self.pods)


def pod(name: str, prestop: float) -> PodInfo:
    return PodInfo("ns", name, "chat", Role.DECODE, "v1", True, ip="127.64.0.9",
                   prestop_s=prestop)  # fmt: skip


def test_a_deleted_pod_is_served_for_its_own_prestop_sleep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("pdlab.engine.pods.time.monotonic", lambda: now[0])
    src = Listing()
    src.pods = [pod("d0", 9.0), pod("d1", 0.0), pod("d2", 9.0)]
    lingering = LingeringPods(src)
    assert [p.name for p in lingering.list()] == ["d0", "d1", "d2"]
    # d0 deleted (gone from the listing), d1 deleted, d2 un-Ready (terminating)
    src.pods = [replace(pod("d2", 9.0), ready=False)]
    got = {p.name: p.ready for p in lingering.list()}
    assert got == {"d2": True, "d0": True}  # d1 had no hook: gone at once
    now[0] = 108.9
    assert {p.name for p in lingering.list() if p.ready} == {"d0", "d2"}
    now[0] = 109.0
    got = {p.name: p.ready for p in lingering.list()}
    assert got == {"d2": False}  # listed as the source lists it, no longer served
