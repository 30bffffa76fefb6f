"""What the Runtime keeps per PDDeployment is dropped when it is deleted (``forget``) or
replaced by a new object of the same name: policy memory and rollout state, the Events
published once, its lock, its metric series (every family), the Prometheus client no
other PDDeployment uses, the namespace's caches. Each map has its own test: a fleet with
create/delete churn must not grow the operator's memory or /metrics."""

from __future__ import annotations

import contextlib
from typing import Any

from pdscaler.prometheus import MetricsUnavailableError
from pdscaler.reconcile import run_tick
from pdscaler.spec import PDDeploymentSpec
from pdscaler.telemetry import Telemetry
from support.fakekube import FakeKube
from support.reconcile_world import NAME, NS, PDD_PATH, World, manifest


def series_of(w: World, name: str = NAME) -> list[str]:
    return series_in(w.rt.telemetry, name)


def series_in(telemetry: Telemetry, name: str = NAME) -> list[str]:
    text = telemetry.exposition().decode()
    return [
        line
        for line in text.splitlines()
        if not line.startswith("#") and f'name="{name}"' in line and f'namespace="{NS}"' in line
    ]


def uid(w: World) -> str:
    return str(w.pdd()["metadata"]["uid"])


def test_memory_and_rollout_state_are_dropped() -> None:
    w = World()
    w.tick()
    u = uid(w)
    assert u in w.rt.memory
    w.rt.forget(NS, NAME)
    assert u not in w.rt.memory
    assert u not in w.rt.rollouts


def test_events_published_once_are_dropped() -> None:
    """An ``UnknownFields`` Warning is published once per uid and generation: the key
    stays in ``warned`` until the PDDeployment is deleted, not forever."""
    w = World()
    w.kube.store[PDD_PATH]["spec"]["fromTheFuture"] = 1
    w.tick()
    u = uid(w)
    assert any(len(k) > 1 and k[1] == u for k in w.rt.warned)
    w.rt.forget(NS, NAME)
    assert not any(len(k) > 1 and k[1] == u for k in w.rt.warned)


def test_a_replaced_object_drops_the_old_uid() -> None:
    """Deleted and created again while the operator did not see the DELETED event: the
    new uid's first tick drops what the old uid left (memory, warned keys)."""
    w = World()
    w.kube.store[PDD_PATH]["spec"]["fromTheFuture"] = 1
    w.tick()
    old = uid(w)
    del w.kube.store[PDD_PATH]
    w.kube.put(PDD_PATH, manifest())
    w.tick()
    assert uid(w) != old
    assert old not in w.rt.memory
    assert not any(len(k) > 1 and k[1] == old for k in w.rt.warned)


def test_every_metric_series_is_dropped() -> None:
    """Desired/ready/inputs/outputs were dropped before; the duration histogram, the
    decisions and the errors of a deleted PDDeployment stayed on /metrics forever."""
    w = World()
    w.tick()
    w.rt.telemetry.errors.labels(NS, NAME).inc()
    assert any(s.startswith("pdscaler_reconcile_duration_seconds") for s in series_of(w))
    assert any(s.startswith("pdscaler_decisions_total") for s in series_of(w))
    w.rt.forget(NS, NAME)
    assert series_of(w) == []


def test_the_lock_is_dropped() -> None:
    w = World()
    run_tick(w.rt, NS, NAME)
    assert (NS, NAME) in w.rt._locks
    w.rt.forget(NS, NAME)
    assert (NS, NAME) not in w.rt._locks


def spec(url: str) -> PDDeploymentSpec:
    doc: Any = manifest()["spec"]
    doc["metrics"] = {"prometheus": {"url": url}}
    return PDDeploymentSpec.model_validate(doc)


def test_a_prometheus_client_no_one_uses_is_dropped() -> None:
    """One client per URL; the last PDDeployment naming a URL takes its client (and
    its kept-alive connections) along; a URL still used keeps its client."""
    w = World()
    rt = w.rt
    for name, url in (("a", "http://127.0.0.1:9"), ("b", "http://127.0.0.1:9"),
                      ("c", "http://127.0.0.1:7")):  # fmt: skip
        with contextlib.suppress(MetricsUnavailableError):  # nothing listens there
            rt.snapshot(spec(url), NS, name, 0.0)
    assert sorted(rt._clients) == ["http://127.0.0.1:7", "http://127.0.0.1:9"]
    rt.forget(NS, "a")
    assert sorted(rt._clients) == ["http://127.0.0.1:7", "http://127.0.0.1:9"]
    rt.forget(NS, "b")
    rt.forget(NS, "c")
    assert rt._clients == {}
    assert rt.urls == {}


def test_the_namespace_caches_go_with_its_last_pdddeployment() -> None:
    class Recording(FakeKube):
        def __init__(self) -> None:
            super().__init__()
            self.released: list[str] = []

        def release(self, namespace: str) -> None:
            self.released.append(namespace)

    w = World()
    kube = Recording()
    kube.store, kube._ids = w.kube.store, w.kube._ids
    w.kube = w.rt.kube = kube
    w.tick()
    w.rt.uids[(NS, "other")] = "uid-other"
    w.rt.forget(NS, NAME)
    assert kube.released == []  # "other" is still there
    w.rt.forget(NS, "other")
    assert kube.released == [NS]


def test_forget_while_other_ticks_record_series() -> None:
    """Ticks of other PDDeployments add series while one is forgotten (kopf's DELETED
    handler and the tick threads run at once): forget must not fail with "dictionary
    changed size during iteration" (the D14 churn drill saw it, and the PDDeployment's
    series then stayed on /metrics for good). The race is placed, not hoped for: in the
    middle of forget's read of a family's series, another thread records a series of
    another PDDeployment, and forget waits up to 0.1 s for it. With the family's lock
    held over the read, that record waits for the read to end; without it, the record
    lands inside the read and forget raises, every run."""
    import threading
    from collections.abc import Iterator

    tel = Telemetry()
    family = tel.observed["queue"]
    reading, recorded = threading.Event(), threading.Event()
    reads: list[int] = []  # series in the family when a read let the recorder in

    class Children(dict[Any, Any]):
        """The family's series; a read of them lets the other thread record in the
        middle of it."""

        def __iter__(self) -> Iterator[Any]:
            keys = super().__iter__()
            yield next(keys)
            reads.append(len(self))
            reading.set()
            recorded.wait(0.1)
            yield from keys

    def record() -> None:
        reading.wait(5)
        family.labels(NS, "other", "prefill").set(1)
        recorded.set()

    for i in range(3):
        family.labels(NS, f"fleet-{i}", "prefill").set(1)
    family.labels(NS, NAME, "prefill").set(1)
    family._metrics = Children(family._metrics)
    thread = threading.Thread(target=record, daemon=True)
    thread.start()
    raised: list[RuntimeError] = []
    try:
        tel.forget(NS, NAME)
    except RuntimeError as e:  # "dictionary changed size during iteration"
        raised.append(e)
    finally:
        reading.set()
        thread.join(5)
    assert raised == []
    assert reads == [4]  # forget read the family once, past its first series
    assert recorded.is_set()
    assert not thread.is_alive()
    assert series_in(tel) == []
    assert len(series_in(tel, "other")) == 1  # recorded, after the read


def test_a_client_is_dropped_with_a_trailing_slash_and_when_its_user_moves() -> None:
    """``http://x:9/`` and ``http://x:9`` are one client, dropped with its last user;
    a PDDeployment that moves to another URL leaves its old client if no one else
    reads it."""
    w = World()
    rt = w.rt
    for name, url in (("a", "http://127.0.0.1:9/"), ("b", "http://127.0.0.1:9")):
        with contextlib.suppress(MetricsUnavailableError):
            rt.snapshot(spec(url), NS, name, 0.0)
    assert sorted(rt._clients) == ["http://127.0.0.1:9"]
    rt.forget(NS, "a")
    rt.forget(NS, "b")
    assert rt._clients == {}
    with contextlib.suppress(MetricsUnavailableError):
        rt.snapshot(spec("http://127.0.0.1:9"), NS, "c", 0.0)
    with contextlib.suppress(MetricsUnavailableError):
        rt.snapshot(spec("http://127.0.0.1:7"), NS, "c", 0.0)
    assert sorted(rt._clients) == ["http://127.0.0.1:7"]
