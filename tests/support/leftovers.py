"""What test sessions that died before their teardown left in a shared lab.

Owns: the test namespaces' label, the finalizer tests hold objects with, and
``sweep_leftovers``, which the ``lab`` fixture runs when it is the lab's only user.

A test's ``namespace`` fixture deletes its namespace at teardown; a session killed mid-test
(a Ctrl-C, a session's time running out, ``kill`` of pytest) never gets there, and the lab
keeps its etcd across ``pdlab down``/``up``. The pods of those namespaces keep their GPUs:
CI at 75ccce1 failed D14 (it needs 28 of the lab's 32 GPUs) on 6 GPUs held by two
namespaces 55 minutes and 12 hours old, both Active, from runs killed on the same machine.
"""

from __future__ import annotations

from typing import Any

from pdlab.cluster.kubeclient import Kube, if_found

#: Every namespace a test creates carries it (``namespace`` fixture, the exporter's
#: namespaces, the Terminating-namespace test): what ``sweep_leftovers`` may delete.
TEST_NAMESPACE_LABEL = "pdlab.pdscaler.io/test"
TEST_SELECTOR = f"{TEST_NAMESPACE_LABEL}=true"
#: The finalizer a test holds a namespace's deletion with (tests/lab/test_lab_namespace.py).
TEST_HOLD_FINALIZER = "pdscaler.io/test-hold"


def labelled_namespace(name: str) -> dict[str, Any]:
    """A namespace ``sweep_leftovers`` will delete if its test never does."""
    return {"metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}}}


def delete_namespace(kube: Kube, name: str) -> None:
    """Delete ``name`` in the background; already gone is fine."""
    if_found(lambda: kube.core.delete_namespace(name, propagation_policy="Background"))


def namespace_phase(kube: Kube, name: str) -> str | None:
    """``Active`` or ``Terminating`` (None if the API server reports no phase)."""
    status = kube.core.read_namespace(name).status
    return status.phase if status is not None else None


def sweep_leftovers(kube: Kube, selector: str = TEST_SELECTOR) -> list[str]:
    """Delete (in the background) the namespaces ``selector`` matches and release the
    ConfigMaps in them that ``TEST_HOLD_FINALIZER`` holds; returns the namespaces swept,
    sorted. Only for a lab no other live session uses: their namespaces match too."""
    swept: list[str] = []
    namespaces: list[Any] = kube.core.list_namespace(label_selector=selector).items
    for ns in namespaces:
        name: str = ns.metadata.name
        if ns.metadata.deletion_timestamp is None:
            delete_namespace(kube, name)
        config_maps: list[Any] = kube.core.list_namespaced_config_map(name).items
        for cm in config_maps:
            held: list[str] = cm.metadata.finalizers or []
            if TEST_HOLD_FINALIZER in held:
                rest = [f for f in held if f != TEST_HOLD_FINALIZER]
                kube.core.patch_namespaced_config_map(
                    cm.metadata.name, name, {"metadata": {"finalizers": rest or None}}
                )
        swept.append(name)
    return sorted(swept)
