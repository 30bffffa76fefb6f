"""The chart's RBAC for pools pdscaler does not own (``scaleTargets.kinds``): each kind
listed gets get/update/patch on its ``/scale`` and reads of itself, plus reads of HPAs
and KEDA ScaledObjects (the coexistence check); nothing on a target's template, and
nothing at all without a kind listed."""

from __future__ import annotations

from typing import Any

from support.chartkit import grants, template

KINDS = (
    "--set", "scaleTargets.kinds[0].apiGroup=apps",
    "--set", "scaleTargets.kinds[0].resource=statefulsets",
    "--set", "scaleTargets.kinds[1].apiGroup=nvidia.com",
    "--set", "scaleTargets.kinds[1].resource=dynamographdeploymentscalingadapters",
)  # fmt: skip


def operator_grants(*args: str) -> dict[tuple[str, str], set[str]]:
    docs: list[dict[str, Any]] = template("-s", "templates/rbac.yaml", *args)
    role = next(
        d
        for d in docs
        if d["kind"] == "ClusterRole" and not d["metadata"]["name"].endswith("-discovery")
    )
    return grants(role["rules"])


def test_listed_kinds_get_scale_and_reads_only() -> None:
    got = operator_grants(*KINDS)
    assert got[("apps", "statefulsets/scale")] == {"get", "update", "patch"}
    assert got[("apps", "statefulsets")] == {"get", "list", "watch"}
    dgdsa = "dynamographdeploymentscalingadapters"
    assert got[("nvidia.com", f"{dgdsa}/scale")] == {"get", "update", "patch"}
    assert got[("nvidia.com", dgdsa)] == {"get", "list", "watch"}
    assert got[("autoscaling", "horizontalpodautoscalers")] == {"get", "list", "watch"}
    assert got[("keda.sh", "scaledobjects")] == {"get", "list", "watch"}


def test_nothing_without_a_kind() -> None:
    got = operator_grants()
    assert not [key for key in got if key[1].endswith("/scale")]
    assert ("autoscaling", "horizontalpodautoscalers") not in got
    assert ("keda.sh", "scaledobjects") not in got
