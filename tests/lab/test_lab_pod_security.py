"""Router pods pass Pod Security ``restricted`` (issue 30, item 6): in a namespace
labelled ``pod-security.kubernetes.io/enforce=restricted``, the lab's kube-apiserver
admits the router pods of a PDDeployment (their container carries ``router.RESTRICTED``
by default) and refuses those of one whose ``router.securityContext`` is ``{}`` (the
router container as rendered before the default existed). The pools' templates set what
``restricted`` asks of the engine pods themselves (the user's template: pdscaler does
not change the engine container's securityContext)."""

from __future__ import annotations

from typing import Any

from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.types import Role
from support.labkit import Kube, wait_for
from support.opkit import create_pdd, operator_runtime, pdd_manifest, ready_count, ticking

ENFORCE = "pod-security.kubernetes.io/enforce"


def restricted_pools(manifest: dict[str, Any]) -> dict[str, Any]:
    for role in ("prefill", "decode"):
        pod = manifest["spec"][role]["template"]["spec"]
        pod["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        pod["containers"][0]["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        }
    return manifest


def router_pods(kube: Kube, namespace: str, name: str) -> int:
    selector = f"{naming.LABEL_NAME}={name},{naming.LABEL_ROLE}={naming.ROLE_ROUTER}"
    return len(kube.core.list_namespaced_pod(namespace, label_selector=selector).items)


def refusals(kube: Kube, namespace: str) -> list[str]:
    events = kube.core.list_namespaced_event(namespace).items
    return [
        str(e.message)
        for e in events
        if e.reason == "FailedCreate" and "violates PodSecurity" in str(e.message)
    ]


def test_router_pods_are_admitted_where_restricted_is_enforced(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    body: Any = {"metadata": {"labels": {ENFORCE: "restricted"}}}
    kube.core.patch_namespace(namespace, body)
    plain = restricted_pools(pdd_manifest("secure", lab.prometheus_url))
    bare = restricted_pools(pdd_manifest("bare", lab.prometheus_url))
    bare["spec"]["router"] = {"securityContext": {}}
    create_pdd(kube, namespace, plain)
    create_pdd(kube, namespace, bare)
    rt = operator_runtime(lab)
    with ticking(rt, namespace, "secure"), ticking(rt, namespace, "bare"):
        wait_for(
            lambda: all(
                ready_count(kube, namespace, n, r) >= 1
                for n in ("secure", "bare")
                for r in (Role.PREFILL, Role.DECODE)
            ),
            90,
            "both pools Ready in both PDDeployments (restricted engine pods admitted)",
        )
        wait_for(lambda: router_pods(kube, namespace, "secure") >= 1, 60, "a router pod")
        wait_for(
            lambda: any("bare-" in m for m in refusals(kube, namespace)),
            60,
            "the bare router's pods refused by PodSecurity",
        )
    assert router_pods(kube, namespace, "bare") == 0
    assert not [m for m in refusals(kube, namespace) if "secure-" in m]
