"""What one tick writes lands on the object it read, and only once it landed does the
operator count it done (issue 30, item 8):

* the status patch carries the resourceVersion the tick read (the API server ignores a
  uid in a patch): a PDDeployment deleted and made again under the same name while a
  tick ran does not get the old one's status (409 Conflict; the next tick writes the
  new one's);
* a keyed Warning (at most once per process) is marked sent only after the API server
  took its Event: a refused POST is tried again on the next tick;
* a tick that reads its PDDeployment gone (404: a DELETED the watch missed) drops it
  from the tick loop: no ghost ticks every interval, unless it was seen again meanwhile.

The world is test_reconcile_unit_tick's (support.reconcile_world: chat at 1 req/s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pdscaler import handlers
from pdscaler.kube import KubeError
from pdscaler.liveness import Health
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot
from support.fakekube import FakeKube, RefusingKube
from support.manual_pool import ManualPool
from support.reconcile_world import NAME, NS, PDD_PATH, World, manifest, snapshot


def test_a_pdd_made_again_mid_tick_does_not_get_the_old_ones_status() -> None:
    """The tick reads chat (uid A); while it reads Prometheus, chat is deleted and made
    again (uid B, no status). The status computed from A is refused (409), B stays
    without a status; B's own tick then writes B's status."""
    w = World()
    w.tick()
    w.converge()
    old_uid = w.pdd()["metadata"]["uid"]
    assert w.pdd()["status"]["observedGeneration"] == 1

    def recreate(spec: PDDeploymentSpec, ns: str, name: str, now: float) -> MetricsSnapshot:
        del w.kube.store[PDD_PATH]
        again = manifest()
        again["metadata"]["generation"] = 1
        w.kube.put(PDD_PATH, again)
        w.rt.metrics_source = w.source
        return w.source(spec, ns, name, now)

    w.rt.metrics_source = recreate
    w.metrics = snapshot(6.0)  # the old object's tick would want a new size: a status change
    w.tick()
    new = w.pdd()
    assert new["metadata"]["uid"] != old_uid
    assert "status" not in new, new.get("status")
    w.tick()
    assert w.pdd()["status"]["observedGeneration"] == 1


def _world(spec_extra: Mapping[str, Any] | None = None) -> tuple[World, RefusingKube]:
    """chat (``spec.scaling`` plus ``spec_extra``) on a RefusingKube."""
    w = World()
    kube = RefusingKube()
    doc = manifest()
    doc["spec"]["scaling"].update(spec_extra or {})
    kube.put(PDD_PATH, doc)
    w.kube = kube
    w.rt.kube = kube
    return w, kube


def _events_refused(method: str, path: str) -> KubeError | None:
    if method == "POST" and "/events" in path:
        return KubeError(503, "ServiceUnavailable", "etcd leader changed")
    return None


def _events(kube: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.objects("events") if e["reason"] == reason]


def test_a_keyed_warning_refused_once_is_sent_on_the_next_tick() -> None:
    """A spec with a field this operator does not know: its UnknownFields Warning (once
    per generation) is refused on the first tick, sent on the second, not again on the
    third. Before: marked sent before the POST, so never sent at all."""
    w, kube = _world({"futureKnob": 3})
    kube.refuse = _events_refused
    w.tick()
    assert _events(kube, "UnknownFields") == []
    kube.refuse = lambda method, path: None
    w.tick()
    w.tick()
    assert len(_events(kube, "UnknownFields")) == 1


def test_the_status_patch_names_the_resource_version_it_read() -> None:
    w, kube = _world()
    w.tick()
    read = w.pdd()["metadata"]
    w.metrics = snapshot(6.0)
    w.tick()
    (body,) = [b for m, p, b in kube.bodies if m == "PATCH" and p.endswith("/status")][-1:]
    assert body["metadata"] == {"resourceVersion": read["resourceVersion"]}


def _loop(tick: Any) -> tuple[handlers.TickLoop, ManualPool]:
    pool = ManualPool()
    loop = handlers.TickLoop(
        tick=tick,
        interval=lambda ns, n: 15.0,
        leader=lambda: True,
        health=Health(),
        pool=pool,  # type: ignore[arg-type]
        clock=lambda: 0.0,
    )
    return loop, pool


def test_a_tick_that_reads_its_pdd_gone_stops_the_ghost_ticks() -> None:
    """chat's DELETED was missed: its tick reads 404 (``handlers._tick`` says GONE), the
    loop drops it, and 10 minutes later nothing is ticked. Before: a tick (a GET) every
    interval for as long as the process lives."""
    w = World()
    w.tick()
    handlers.install(w.rt)
    try:
        del w.kube.store[PDD_PATH]
        assert handlers._tick(NS, NAME) == handlers.GONE
    finally:
        handlers.install(None)
    ticks: list[tuple[str, str]] = []

    def gone(ns: str, name: str) -> str:
        ticks.append((ns, name))
        return handlers.GONE

    loop, pool = _loop(gone)
    loop.notice(NS, NAME, 1)
    assert loop.run_once(0.0) == [(NS, NAME)]
    pool.drain()
    assert [loop.run_once(t) for t in (15.0, 100.0, 600.0)] == [[], [], []]
    assert ticks == [(NS, NAME)]
    assert loop.table == {}


def test_a_pdd_seen_again_during_the_tick_that_read_it_gone_stays() -> None:
    """Deleted and made again under the same name (same generation 1) while the tick
    that read 404 ran: the watch's ADDED came in meanwhile, so the loop keeps it."""
    loop: handlers.TickLoop

    def gone_then_back(ns: str, name: str) -> str:
        loop.notice(ns, name, 1)  # the new object's ADDED, while this tick runs
        return handlers.GONE

    loop, pool = _loop(gone_then_back)
    loop.notice(NS, NAME, 1)
    loop.run_once(0.0)
    pool.drain()
    assert (NS, NAME) in loop.table
    assert loop.run_once(15.0) == [(NS, NAME)]
