"""Router pods pass Pod Security ``restricted`` by default (issue 30, item 6): the router
container carries ``router.RESTRICTED`` (runAsNonRoot, allowPrivilegeEscalation false,
capabilities drop ALL, seccompProfile RuntimeDefault) unless ``router.securityContext``
replaces it. The lab test (tests/lab/test_lab_pod_security.py) shows a namespace that
enforces ``restricted`` admitting them."""

from __future__ import annotations

from typing import Any

from pdscaler import manifests, router
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec

OWNER = Meta("chat", "serving", "u-1")


def _spec(**router_fields: Any) -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000},
            "decode": {"tokensPerSecond": 800},
            "scaling": {"maxGPUs": 16},
            "router": {"type": "vllm-router", **router_fields},
        }
    )


def _container(spec: PDDeploymentSpec) -> dict[str, Any]:
    dep = router.router_deployment(OWNER, spec, "v1-abcde", "v1", 1, 8000)
    container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return container


def restricted_ok(ctx: dict[str, Any]) -> bool:
    """What Pod Security ``restricted`` checks on a container (the pod sets none)."""
    return (
        ctx.get("runAsNonRoot") is True
        and ctx.get("allowPrivilegeEscalation") is False
        and "ALL" in (ctx.get("capabilities") or {}).get("drop", [])
        and not (ctx.get("capabilities") or {}).get("add")
        and (ctx.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
        and not ctx.get("privileged")
    )


def test_the_router_container_is_restricted_by_default() -> None:
    ctx = _container(_spec())["securityContext"]
    assert restricted_ok(ctx)
    assert ctx == router.RESTRICTED
    ctx["runAsNonRoot"] = False  # a copy: the default is not shared
    assert router.RESTRICTED["runAsNonRoot"] is True


def test_router_security_context_replaces_the_default() -> None:
    mine = {"runAsUser": 1000, "readOnlyRootFilesystem": True}
    assert _container(_spec(securityContext=mine))["securityContext"] == mine
    assert _container(_spec(securityContext={}))["securityContext"] == {}  # none at all


def test_setting_it_changes_only_the_routers_rendering_inputs() -> None:
    """A securityContext edit is an in-place router change (its rendered-from moves), not
    a new cell."""
    plain, hardened = _spec(), _spec(securityContext={"runAsUser": 1000})
    assert manifests.spec_revision(plain) == manifests.spec_revision(hardened)
    assert manifests.rendered_from(plain, None) != manifests.rendered_from(hardened, None)
