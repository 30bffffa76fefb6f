"""``support.leftovers.sweep_leftovers`` against the lab: the test namespaces a killed
session left, Active or held Terminating by the tests' finalizer, are deleted; others
are not. Its own label value keeps it away from this session's namespaces."""

from __future__ import annotations

import secrets
from typing import Any

from support.labkit import Kube, not_found, wait_for
from support.leftovers import (
    TEST_HOLD_FINALIZER,
    TEST_NAMESPACE_LABEL,
    namespace_phase,
    sweep_leftovers,
)


def test_sweep_deletes_what_a_killed_session_left_and_nothing_else(kube: Kube) -> None:
    tag = secrets.token_hex(3)
    names = {k: f"t-sweep-{k}-{tag}" for k in ("active", "held", "other")}
    for kind, name in names.items():
        value = tag if kind != "other" else f"{tag}-other"
        body: Any = {"metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: value}}}
        kube.core.create_namespace(body)
    hold: Any = {"metadata": {"name": "hold", "finalizers": [TEST_HOLD_FINALIZER]}}
    kube.core.create_namespaced_config_map(names["held"], hold)
    kube.core.delete_namespace(names["held"])  # a test killed before it released the hold
    try:
        wait_for(
            lambda: namespace_phase(kube, names["held"]) == "Terminating",
            30,
            "the held namespace Terminating",
        )
        swept = sweep_leftovers(kube, f"{TEST_NAMESPACE_LABEL}={tag}")
        assert swept == sorted([names["active"], names["held"]])
        for kind in ("active", "held"):
            name = names[kind]
            wait_for(lambda: not_found(lambda: kube.core.read_namespace(name)), 60, f"{name} gone")  # noqa: B023
        assert namespace_phase(kube, names["other"]) == "Active"
    finally:
        sweep_leftovers(kube, f"{TEST_NAMESPACE_LABEL}={tag}-other")
