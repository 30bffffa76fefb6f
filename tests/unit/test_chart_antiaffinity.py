"""The operator's HA replicas on different nodes (issue 30, item 8): with more than one
replica the chart gives the pods a podAntiAffinity on ``kubernetes.io/hostname`` over
their own selector labels: preferred by default (``podAntiAffinity: soft``, a one-node
cluster still runs them all), required with ``hard``, none with ``none``; a user's
``affinity`` replaces it; one replica gets none (nothing to spread)."""

from __future__ import annotations

from typing import Any

import pytest

from support.chartkit import template

HOSTNAME = "kubernetes.io/hostname"


def pod_spec(*args: str) -> dict[str, Any]:
    (deployment,) = [d for d in template(*args) if d["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["template"]["metadata"]["labels"]  # what the term selects
    return spec


def _selector(*args: str) -> dict[str, str]:
    (deployment,) = [d for d in template(*args) if d["kind"] == "Deployment"]
    labels: dict[str, str] = deployment["spec"]["selector"]["matchLabels"]
    return labels


def test_two_replicas_prefer_different_nodes_by_default() -> None:
    spec = pod_spec("--set", "replicaCount=2")
    (term,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == HOSTNAME
    assert term["podAffinityTerm"]["labelSelector"] == {"matchLabels": _selector()}
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]
    )


def test_hard_requires_different_nodes() -> None:
    spec = pod_spec("--set", "replicaCount=3", "--set", "podAntiAffinity=hard")
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": _selector()}}


@pytest.mark.parametrize(
    "args",
    [
        (),  # one replica
        ("--set", "replicaCount=2", "--set", "podAntiAffinity=none"),
    ],
)
def test_no_anti_affinity_for_one_replica_or_none(args: tuple[str, ...]) -> None:
    assert "affinity" not in pod_spec(*args)


def test_a_given_affinity_replaces_the_default() -> None:
    zone = "topology.kubernetes.io/zone"
    spec = pod_spec(
        "--set", "replicaCount=2",
        "--set", f"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        f".nodeSelectorTerms[0].matchExpressions[0].key={zone}",
        "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    )  # fmt: skip
    assert list(spec["affinity"]) == ["nodeAffinity"]


def test_the_schema_refuses_another_mode() -> None:
    with pytest.raises(AssertionError, match="podAntiAffinity"):
        template("--set", "replicaCount=2", "--set", "podAntiAffinity=sometimes")
