"""``pdlab.cluster.kubeclient.ensure_namespace`` against the lab: a namespace still being
deleted (Terminating, held by a finalizer on an object in it) is waited for and
created again, so a second ``make demo`` right after the first, whose namespace the
API server is still emptying, does not fail with "unable to create new content in
namespace ... because it is being terminated" (it did, from a fresh clone here)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from pdlab.cluster.kubeclient import ensure_namespace
from support.labkit import Kube, wait_for
from support.leftovers import TEST_HOLD_FINALIZER, labelled_namespace, namespace_phase


def test_a_terminating_namespace_is_waited_for_and_created_again(kube: Kube) -> None:
    name = f"t-terminating-{secrets.token_hex(3)}"
    kube.core.create_namespace(labelled_namespace(name))  # type: ignore[arg-type]
    hold: Any = {"metadata": {"name": "hold", "finalizers": [TEST_HOLD_FINALIZER]}}
    kube.core.create_namespaced_config_map(name, hold)
    kube.core.delete_namespace(name)
    wait_for(
        lambda: namespace_phase(kube, name) == "Terminating",
        30,
        f"namespace {name} Terminating",
    )

    def release() -> None:
        time.sleep(3.0)
        kube.core.patch_namespaced_config_map("hold", name, {"metadata": {"finalizers": None}})

    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    try:
        started = time.monotonic()
        assert ensure_namespace(kube, name, timeout=60.0) is True
        assert time.monotonic() - started >= 2.5  # it waited for the old one to go
        assert namespace_phase(kube, name) == "Active"
    finally:
        releaser.join(10)
        kube.core.delete_namespace(name)
