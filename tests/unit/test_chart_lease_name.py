"""The Lease name per chart release (issue 30, item 4): two releases in one namespace
never share the leader election's Lease (the second was silently idle, a follower of
the first's), the release named pdscaler keeps the name every release used before
(an upgrade keeps its Lease), and the Role grants exactly the Lease the operator
uses."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from support.chartkit import CHART, KUBE, helm


def lease_of(release: str, *args: str) -> tuple[str, list[str]]:
    """(the operator's --lease-name, the leader Role's resourceNames for get/update)."""
    text = helm("template", release, str(CHART), "-n", "ops", "--kube-version", KUBE, *args)
    docs: list[dict[str, Any]] = [d for d in yaml.safe_load_all(text) if d]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    argv = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    (name,) = [a.split("=", 1)[1] for a in argv if a.startswith("--lease-name=")]
    names = [
        n
        for d in docs
        if d["kind"] == "Role"
        for rule in d["rules"]
        if "leases" in rule.get("resources", []) and "update" in rule.get("verbs", [])
        for n in rule.get("resourceNames", [])
    ]
    return name, names


def test_two_releases_in_one_namespace_use_two_leases() -> None:
    a, a_granted = lease_of("team-a")
    b, b_granted = lease_of("team-b")
    assert (a, b) == ("team-a-pdscaler-leader", "team-b-pdscaler-leader")
    assert a_granted == [a]
    assert b_granted == [b]


def test_the_release_named_pdscaler_keeps_its_lease() -> None:
    assert lease_of("pdscaler") == ("pdscaler-leader", ["pdscaler-leader"])


@pytest.mark.parametrize("name", ["shared-leader"])
def test_a_name_set_in_the_values_is_used(name: str) -> None:
    assert lease_of("team-a", "--set", f"leaderElection.leaseName={name}") == (name, [name])
