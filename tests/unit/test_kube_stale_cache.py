"""No shrink for pods that are gone (issue 30, item 5): with the watch caches, an
action that lowers or deletes a Deployment is first checked against the PDDeployment's
pods LISTed at that moment; when they are not what the tick read from the cache (a
half-open watch kept pods that are gone), nothing is written, the tick fails
(``StaleCacheError``) and the pod cache lists again."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pdscaler.kube import StaleCacheError
from pdscaler.plan import Action, Observed, Verb
from support.fakekube import FakeKube

NS, NAME = "serving", "chat"
LABELS = {"pdscaler.io/name": NAME}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "labels": dict(LABELS), "uid": f"u-{name}"},
        "spec": {"replicas": replicas},
    }


def world(kube: FakeKube) -> Observed:
    """Old cell v1 (2 replicas) and new cell v2 with one Ready pod each, as cached."""
    pods = [
        kube.add_pod(NS, "chat-v1-p0", LABELS, ready=True),
        kube.add_pod(NS, "chat-v2-p0", LABELS, ready=True),
    ]
    return Observed(
        deployments=(deployment("chat-v1", 2), deployment("chat-v2", 1)),
        pods=tuple(copy.deepcopy(p) for p in pods),
    )


def shrink_old() -> Action:
    return Action(Verb.SCALE, "Deployment", "chat-v1", body=deployment("chat-v1", 1))


def sent(kube: FakeKube) -> list[str]:
    return [m for m, _, _ in kube.requests if m != "GET"]


def test_a_shrink_on_a_cache_holding_pods_that_are_gone_writes_nothing() -> None:
    kube = FakeKube()
    kube.cache = True
    observed = world(kube)
    del kube.store[f"/api/v1/namespaces/{NS}/pods/chat-v2-p0"]  # gone; the cache has it
    with pytest.raises(StaleCacheError, match="chat-v2-p0"):
        kube.execute(NS, shrink_old(), observed)
    assert sent(kube) == []
    assert kube.audit.count == 0


def test_a_shrink_on_a_current_cache_is_written() -> None:
    kube = FakeKube()
    kube.cache = True
    observed = world(kube)
    kube.execute(NS, shrink_old(), observed)
    assert sent(kube) == ["PATCH"]
    reads = [p for m, p, _ in kube.requests if m == "GET"]
    assert reads == [f"/api/v1/namespaces/{NS}/pods"]  # one LIST, only for the shrink


def test_a_growth_reads_nothing_more() -> None:
    kube = FakeKube()
    kube.cache = True
    observed = world(kube)
    grow = Action(Verb.SCALE, "Deployment", "chat-v2", body=deployment("chat-v2", 2))
    kube.execute(NS, grow, observed)
    assert [m for m, _, _ in kube.requests] == ["PATCH"]


def test_pods_the_cache_has_not_seen_yet_do_not_stop_a_shrink() -> None:
    """A new pod (the cache lags by one event) only adds capacity: written."""
    kube = FakeKube()
    kube.cache = True
    observed = world(kube)
    kube.add_pod(NS, "chat-v2-p1", LABELS, ready=True)
    kube.execute(NS, shrink_old(), observed)
    assert sent(kube) == ["PATCH"]
