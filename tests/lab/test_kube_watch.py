"""kube.py's watch caches against the lab's real API server: a labelled object appears
in the cache, changes and disappears with it; an unlabelled one never enters it; a watch
the server ends (a short ``timeoutSeconds``) is opened again from where it was, without
a new list; ``observe`` from the caches equals ``observe`` by LISTs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.kube import Informer, Kube, load_api_client
from support.labkit import Kube as LabKube
from support.labkit import wait_for


def service(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"ports": [{"port": 80}]},
    }


@pytest.fixture
def cached(lab: Lab) -> Iterator[Kube]:
    kube = Kube(load_api_client(str(lab.kubeconfig)), cache=True)
    try:
        yield kube
    finally:
        kube.stop_caches()


@pytest.mark.lab
@pytest.mark.timeout(90)
def test_the_cache_follows_the_api_server(
    lab: Lab, kube: LabKube, namespace: str, cached: Kube
) -> None:
    ours = {naming.LABEL_NAME: "chat"}
    kube.core.create_namespaced_service(namespace, cast(Any, service("before", ours)))
    inf = cached.informers(namespace)["Service"]
    assert inf.wait_ready(20)
    assert inf.get("before") is not None  # from the list
    kube.core.create_namespaced_service(namespace, cast(Any, service("after", ours)))
    kube.core.create_namespaced_service(namespace, cast(Any, service("foreign", {"app": "x"})))
    wait_for(lambda: inf.get("after") is not None, 10, "the watch delivers ADDED")
    kube.core.patch_namespaced_service(
        "after", namespace, {"metadata": {"annotations": {"seen": "yes"}}}
    )
    wait_for(
        lambda: (
            ((inf.get("after") or {}).get("metadata", {}).get("annotations") or {}).get("seen")
            == "yes"
        ),
        10,
        "the watch delivers MODIFIED",
    )
    kube.core.delete_namespaced_service("before", namespace)
    wait_for(lambda: inf.get("before") is None, 10, "the watch delivers DELETED")
    assert inf.get("foreign") is None
    plain = Kube(load_api_client(str(lab.kubeconfig)))
    assert cached.observe(namespace, "chat") == plain.observe(namespace, "chat")


@pytest.mark.lab
@pytest.mark.timeout(60)
def test_a_watch_the_server_ends_is_opened_again_without_a_list(
    lab: Lab, kube: LabKube, namespace: str
) -> None:
    api = Kube(load_api_client(str(lab.kubeconfig)))
    inf = Informer(api, "Service", namespace, watch_timeout=1).start()
    try:
        assert inf.wait_ready(20)
        for i in range(3):
            kube.core.create_namespaced_service(
                namespace, cast(Any, service(f"s{i}", {naming.LABEL_NAME: "chat"}))
            )

            def in_cache(i: int = i) -> bool:
                return inf.get(f"s{i}") is not None

            def watched_again(i: int = i) -> bool:
                return api.request_counts.snapshot().get(("watch", "services"), 0) >= i + 2

            wait_for(in_cache, 10, f"s{i} in the cache")
            wait_for(watched_again, 10, "the watch ended by the server and opened again")
        assert inf.relists == 1
        assert inf.failures == 0
    finally:
        inf.stop()
