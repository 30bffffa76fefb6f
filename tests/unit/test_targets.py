"""targets (pure): the checks, the hold and the /scale plan of pools pdscaler does not
own (docs/design.md §1.1). Pods, /scale objects and autoscalers as the API returns them."""

from __future__ import annotations

from typing import Any

from pdscaler import status as st
from pdscaler import targets
from pdscaler.spec import ScaleTargetRef
from pdscaler.types import Action, ConditionReason, Decision, Role
from support.status_inputs import inp

Obj = dict[str, Any]
P_REF = ScaleTargetRef(api_version="apps/v1", kind="Deployment", name="llm-prefill")
D_REF = ScaleTargetRef(api_version="apps/v1", kind="Deployment", name="llm-decode")


def pod(
    name: str,
    role: str,
    image: str = "vllm:v1",
    args: tuple[str, ...] = (),
    *,
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> Obj:
    return {
        "metadata": {
            "name": name,
            "labels": {"pdscaler.io/name": "chat", "pdscaler.io/role": role, **(labels or {})},
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"containers": [{"name": "engine", "image": image, "args": list(args)}]},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": "2026-01-01T00:01:00Z",
                }
            ]
        },
    }


def scale(replicas: int, selector: str | None = "app=x") -> Obj:
    out: Obj = {"kind": "Scale", "spec": {"replicas": replicas}, "status": {"replicas": replicas}}
    if selector is not None:
        out["status"]["selector"] = selector
    return out


def reads(
    prefill: list[Obj], decode: list[Obj], p: int = 2, d: int = 2
) -> list[targets.TargetRead]:
    return [
        targets.TargetRead(Role.PREFILL, P_REF, scale(p), tuple(prefill)),
        targets.TargetRead(Role.DECODE, D_REF, scale(d), tuple(decode)),
    ]


PAIR = reads(
    [
        pod("p1", "prefill", args=("--kv-role=producer",)),
        pod("p2", "prefill", args=("--kv-role=producer",)),
    ],
    [
        pod("d1", "decode", args=("--kv-role=consumer",)),
        pod("d2", "decode", args=("--kv-role=consumer",)),
    ],
)
WANT = Decision(prefill=2, decode=4, action=Action.SCALED_DECODE, message="Scaled decode 2->4")


def test_one_version_pair_is_not_mixed_though_the_pools_args_differ() -> None:
    verdict = targets.check("chat", PAIR, [], None)
    assert not verdict.blocked
    assert verdict.versions == ("vllm:v1",)
    assert [w.describe() for w in targets.plan(WANT, PAIR, verdict)] == [
        "scale Deployment/llm-decode 2->4"
    ]


def test_a_pool_with_two_configurations_is_mixed_and_nothing_is_written() -> None:
    pair = reads(
        [pod("p1", "prefill")],
        [pod("d1", "decode"), pod("d2", "decode", args=("--max-num-seqs=64",))],
    )
    verdict = targets.check("chat", pair, [], None)
    assert verdict.mixed is not None
    assert verdict.mixed.startswith("decode runs 2 engine configurations")
    assert targets.plan(WANT, pair, verdict) == []
    held = targets.held(WANT, pair, verdict.mixed)
    assert (held.prefill, held.decode, held.action) == (2, 2, Action.HOLD)
    assert "the policy wanted prefill 2, decode 4" in held.message


def test_pools_of_different_versions_are_mixed_by_image_or_by_label() -> None:
    pair = reads([pod("p1", "prefill", "vllm:v2")], [pod("d1", "decode", "vllm:v1")])
    assert targets.mixed(pair[0].pods, pair[1].pods, None) == (
        "prefill runs vllm:v2, decode vllm:v1 (by the first container's image and args)"
    )
    label = "app.kubernetes.io/version"
    same_image = reads(
        [pod("p1", "prefill", labels={label: "2"})], [pod("d1", "decode", labels={label: "1"})]
    )
    assert targets.mixed(same_image[0].pods, same_image[1].pods, label) == (
        f"prefill runs 2, decode 1 (by label {label})"
    )


def test_pods_not_ready_do_not_make_a_pair_mixed() -> None:
    pair = reads(
        [pod("p1", "prefill"), pod("p2", "prefill", "vllm:v2", ready=False)],
        [pod("d1", "decode")],
    )
    assert targets.check("chat", pair, [], None).mixed is None


def test_an_hpa_or_a_scaled_object_on_the_same_object_is_a_conflict() -> None:
    hpa = {
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm-decode"}
        },
    }
    keda = {
        "kind": "ScaledObject",
        "metadata": {"name": "k"},
        "spec": {"scaleTargetRef": {"name": "llm-prefill"}},
    }  # KEDA's defaults: apps/v1 Deployment
    other = {
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "o"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "llm-decode"}
        },
    }
    assert targets.drivers(D_REF, [hpa, keda, other]) == ["HorizontalPodAutoscaler h"]
    assert targets.drivers(P_REF, [hpa, keda, other]) == ["ScaledObject k"]
    verdict = targets.check("chat", PAIR, [hpa], None)
    assert verdict.refused is not None
    assert verdict.refused[0] == ConditionReason.SCALE_TARGET_CONFLICT
    assert "already driven by HorizontalPodAutoscaler h" in verdict.refused[1]
    assert targets.plan(WANT, PAIR, verdict) == []


def test_a_missing_target_no_selector_or_unlabelled_pods_are_refused_first() -> None:
    missing = [targets.TargetRead(Role.PREFILL, P_REF, None, error="not found"), PAIR[1]]
    no_selector = [targets.TargetRead(Role.PREFILL, P_REF, scale(2, None)), PAIR[1]]
    bare = pod("p9", "prefill")
    bare["metadata"]["labels"] = {"app": "x"}
    unlabelled = reads([bare], list(PAIR[1].pods))
    for case, phrase in (
        (missing, "not found"),
        (no_selector, "no status.selector"),
        (unlabelled, "pods p9 lack the labels pdscaler.io/name=chat and pdscaler.io/role=prefill"),
    ):
        verdict = targets.check("chat", case, [], None)
        assert verdict.refused is not None
        assert verdict.refused[0] == ConditionReason.SCALE_TARGET_INVALID
        assert phrase in verdict.refused[1]


def test_the_conditions_say_why_and_stalled_is_never_reconciling() -> None:
    built = st.build_status(inp())
    refused = targets.Check(refused=(ConditionReason.SCALE_TARGET_CONFLICT, "driven by h"))
    out = {c.type: c for c in targets.with_check(built, refused, 1000.0, 3, None).conditions or []}
    assert (out["Stalled"].status, out["Stalled"].reason) == ("True", "ScaleTargetConflict")
    assert (out["Reconciling"].status, out["Reconciling"].reason) == ("False", "Blocked")
    mixed = targets.with_check(built, targets.Check(mixed="decode runs 2"), 1000.0, 3, None)
    progressing = next(c for c in mixed.conditions or [] if c.type == "Progressing")
    assert (progressing.status, progressing.reason) == ("True", "MixedVersions")
    assert progressing.message.startswith("decode runs 2: pdscaler holds both pools")
    assert targets.with_check(built, targets.Check(), 1000.0, 3, None) == built
