"""kube.py's informers (list + watch caches of the objects labelled ``pdscaler.io/name``)
against FakeKube's watch: what the cache holds after a list, after watch events, after
410 Gone, after the operator's own write; that a tick reads the owned objects from the
cache (1 request a converged tick instead of 4+), waits for the first list and writes
nothing on a cache that never synced; and that a kind whose list RBAC refuses is read
directly."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import kube as kube_module
from pdscaler.kube import CacheNotSyncedError, Informer, KubeError
from pdscaler.reconcile import reconcile_once
from support.fakekube import FakeKube
from support.reconcile_world import NAME, NS, PDD_PATH, World

LABELS = {"pdscaler.io/name": "chat", "pdscaler.io/role": "decode"}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels or dict(LABELS)},
    }


def path(name: str) -> str:
    return f"/api/v1/namespaces/{NS}/pods/{name}"


def drain(inf: Informer) -> None:
    """One watch round against FakeKube (it replays the events since the cache's
    version and ends), as the informer's thread would run it."""
    inf._watch_once()


def test_a_list_fills_the_cache_with_the_labelled_objects_only() -> None:
    kube = FakeKube()
    kube.put(path("a"), pod("a"))
    kube.put(path("b"), pod("b", {"pdscaler.io/name": "other"}))
    kube.put(path("foreign"), pod("foreign", {"app": "x"}))
    inf = Informer(kube, "Pod", NS)
    assert not inf.synced.is_set()
    inf.relist()
    assert inf.synced.is_set()
    assert len(inf) == 2  # "foreign" has no pdscaler.io/name label
    assert [p["metadata"]["name"] for p in inf.select({"pdscaler.io/name": "chat"})] == ["a"]
    assert inf.select({"pdscaler.io/name": "chat"})[0]["kind"] == "Pod"


def test_watch_events_add_change_and_remove() -> None:
    kube = FakeKube()
    kube.put(path("a"), pod("a"))
    inf = Informer(kube, "Pod", NS)
    inf.relist()
    kube.put(path("b"), pod("b"))
    kube._request("PATCH", path("a"), None, {"metadata": {"annotations": {"x": "1"}}},
                  kube_module.MERGE_PATCH)  # fmt: skip
    kube._request("DELETE", path("b"), None, {})
    drain(inf)
    (a,) = inf.select({"pdscaler.io/name": "chat"})
    assert a["metadata"]["annotations"] == {"x": "1"}
    assert inf.get("b") is None


def test_410_gone_lists_again() -> None:
    """Events compacted past the cache's version: the watch answers 410; the cache
    forgets its version (the loop lists again) and the list brings it up to date."""
    kube = FakeKube()
    kube.put(path("a"), pod("a"))
    inf = Informer(kube, "Pod", NS)
    inf.relist()
    kube._request("DELETE", path("a"), None, {})
    kube.put(path("c"), pod("c"))
    kube.compact()
    drain(inf)
    assert inf.resource_version is None
    assert inf.get("a") is not None  # stale until the list
    inf.relist()
    assert inf.get("a") is None
    assert inf.get("c") is not None
    assert inf.relists == 2


def test_an_error_event_other_than_410_fails_the_round() -> None:
    inf = Informer(FakeKube(), "Pod", NS)
    with pytest.raises(KubeError):
        inf.handle({"type": "ERROR", "object": {"code": 500, "reason": "InternalError"}})


def test_an_older_event_does_not_undo_a_newer_write() -> None:
    """The answer to our own write (version 9) is in the cache; a watch event of
    version 5 arriving after it does not put the old object back."""
    inf = Informer(FakeKube(), "Pod", NS)
    inf.relist()
    new = pod("a")
    new["metadata"]["resourceVersion"] = "9"
    new["spec"] = {"replicas": 2}
    inf.store(new)
    old = pod("a")
    old["metadata"]["resourceVersion"] = "5"
    inf.handle({"type": "MODIFIED", "object": old})
    assert inf.get("a")["spec"] == {"replicas": 2}  # type: ignore[index]


def test_the_cache_is_a_copy() -> None:
    """What ``select`` and ``get`` answer is the caller's to change (the reconciler
    edits the objects it reads into its writes): changing an answer, nested fields
    included, leaves the cache's next answers as they were."""
    inf = Informer(FakeKube(), "Pod", NS)
    inf.relist()
    inf.handle({"type": "ADDED", "object": pod("a")})
    original = inf.select({})
    (selected,) = inf.select({})
    selected["metadata"]["name"] = "mutated"
    selected["metadata"]["labels"]["pdscaler.io/role"] = "prefill"
    selected["spec"] = {"replicas": 7}
    assert inf.select({}) == original
    assert inf.select({"pdscaler.io/role": "prefill"}) == []
    got = inf.get("a")
    assert got is not None
    got["metadata"]["labels"].clear()
    assert inf.get("a") == original[0]


class Synchronous(FakeKube):
    """Caches that list at once and are brought up to date by ``catch_up`` (no
    threads); ``never_sync`` leaves them unsynced."""

    never_sync = False

    def _informer(self, kind: str, namespace: str) -> Informer:
        inf = Informer(self, kind, namespace)
        if not self.never_sync:
            inf.relist()
        return inf

    def catch_up(self) -> None:
        for namespace in self.cached_namespaces():
            for inf in self.informers(namespace).values():
                inf._watch_once()


def world(kube: FakeKube) -> World:
    w = World()
    kube.store, kube._ids = w.kube.store, w.kube._ids
    w.kube = kube
    w.rt.kube = kube
    return w


def test_a_converged_tick_reads_from_the_cache() -> None:
    """Without the cache a converged tick sends 1 GET of the PDDeployment and 3 LISTs
    (deployments, services, pods) plus a GET per wanted object not found by label; with
    it, the GET of the PDDeployment only, and the tick decides the same."""
    plain = world(FakeKube())
    plain.tick()
    plain.converge()
    plain.tick()
    before = plain.kube.request_counts.snapshot()
    plain_report = plain.tick()
    plain_counts = {
        k: v - before.get(k, 0)
        for k, v in plain.kube.request_counts.snapshot().items()
        if v - before.get(k, 0)
    }
    assert plain_counts[("list", "pods")] == 1
    assert sum(plain_counts.values()) >= 4

    kube = Synchronous()
    kube.cache = True
    cached = world(kube)
    cached.tick()
    for _ in range(6):  # World.converge, with the watch events delivered
        cached.run_pods()
        kube.catch_up()
        cached.tick()
        kube.catch_up()
    before = kube.request_counts.snapshot()
    report = cached.tick()
    counts = {
        k: v - before.get(k, 0)
        for k, v in kube.request_counts.snapshot().items()
        if v - before.get(k, 0)
    }
    assert counts == {("get", "pddeployments"): 1}
    assert report.writes == plain_report.writes == 0
    d, p = report.decision, plain_report.decision
    assert (d.prefill, d.decode, d.action, d.pool) == (p.prefill, p.decode, p.action, p.pool)


def test_a_cache_that_never_synced_makes_the_tick_write_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a restart the caches list before the first write: a tick whose caches do
    not sync in time fails (logged, retried at the next tick) before any write."""
    monkeypatch.setattr("pdscaler.kube.reads.SYNC_TIMEOUT_SECONDS", 0.05)
    kube = Synchronous()
    kube.cache = True
    kube.never_sync = True
    w = world(kube)
    with pytest.raises(CacheNotSyncedError):
        reconcile_once(w.rt, NS, NAME)
    assert kube.audit.count == 0


def test_a_forbidden_kind_is_read_directly() -> None:
    """A list of ServiceAccounts refused with 403 (RBAC without list/watch): that kind
    is read by name each tick, the others from their caches."""

    class Refusing(FakeKube):
        def _request(self, method: str, path: str, query: Any = None, body: Any = None,
                     content_type: str = "application/json") -> dict[str, Any]:  # fmt: skip
            if method == "GET" and path.endswith("/serviceaccounts"):
                raise KubeError(403, "Forbidden", "cannot list serviceaccounts")
            return super()._request(method, path, query, body, content_type)

    kube = Refusing()
    inf = Informer(kube, "ServiceAccount", NS)
    inf.run()  # returns at once: forbidden
    assert inf.forbidden
    assert inf.wait_ready(0.0)


def tick_counts(w: World, kube: FakeKube) -> dict[tuple[str, str], int]:
    before = kube.request_counts.snapshot()
    w.tick()
    after = kube.request_counts.snapshot()
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def test_absent_wanted_names_are_not_read_every_tick() -> None:
    """Recommend mode creates nothing: the 7 objects its cell would have are read by
    name at the first tick (absent), then believed absent for ABSENT_TTL_SECONDS, then
    read again."""
    clock = [0.0]
    kube = Synchronous()
    kube.cache = True
    kube.monotonic = lambda: clock[0]
    w = world(kube)
    w.kube.store[PDD_PATH]["spec"]["scaling"]["mode"] = "Recommend"
    first = tick_counts(w, kube)
    assert first[("get", "serviceaccounts")] == 1
    assert sum(v for (verb, _), v in first.items() if verb == "get") == 1 + 7
    clock[0] += 60.0
    second = tick_counts(w, kube)
    assert {k: v for k, v in second.items() if k[0] in ("get", "list")} == {
        ("get", "pddeployments"): 1
    }
    clock[0] += kube_module.ABSENT_TTL_SECONDS
    third = tick_counts(w, kube)
    assert sum(v for (verb, _), v in third.items() if verb == "get") == 1 + 7


def test_a_name_taken_meanwhile_is_not_taken_over() -> None:
    """A name believed absent is read again before it is created: a foreign Service
    that appeared meanwhile makes the create fail (409) and stays as it was; the next
    tick sees it (and the planner refuses it)."""
    kube = Synchronous()
    kube.cache = True
    w = world(kube)
    w.kube.store[PDD_PATH]["spec"]["scaling"]["mode"] = "Recommend"
    w.tick()
    svc_path = f"/api/v1/namespaces/{NS}/services/{NAME}"
    foreign = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": NAME, "namespace": NS, "labels": {"app": "theirs"}},
               "spec": {"ports": [{"port": 1}]}}  # fmt: skip
    kube.put(svc_path, foreign)
    w.kube.store[PDD_PATH]["spec"]["scaling"]["mode"] = "Auto"
    w.tick()
    assert kube.store[svc_path]["metadata"]["labels"] == {"app": "theirs"}
    assert kube.store[svc_path]["spec"] == {"ports": [{"port": 1}]}
    assert not any(r.kind == "Service" and r.verb == "create" for r in kube.audit.records)
    w.tick()
    assert kube.store[svc_path]["metadata"]["labels"] == {"app": "theirs"}
