"""The ``/scale`` I/O of pools pdscaler does not own (``targets``, docs/design.md §1.1).

Owns: finding a target's resource (its plural, by API discovery, cached per process), a
target's ``/scale`` and the pods its ``status.selector`` selects, the autoscalers that
may already drive it (autoscaling/v2 HorizontalPodAutoscalers; KEDA ScaledObjects when
their CRD is installed), and the one write this mode makes: a merge patch of
``spec.replicas`` on ``/scale`` with the field manager ``pdscaler``, counted in
``Kube.audit`` as every write. Never reads or writes a target's template. Must not
decide anything (``targets`` does).

    read = read_target(kube, "serving", Role.DECODE, ref)   # TargetRead, never raises 404
    patch_scale(kube, "serving", ref, 4)                    # spec.replicas only
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote

from pdscaler.kube.client import MERGE_PATCH, KubeError, collection_path
from pdscaler.kube.writes import Kube
from pdscaler.pools import Role
from pdscaler.spec import ScaleTargetRef
from pdscaler.targets import TargetRead

Obj = dict[str, Any]

#: The autoscalers whose ``spec.scaleTargetRef`` pdscaler checks before it drives an
#: object: (API path prefix, kind). A 404 (KEDA not installed) means none.
AUTOSCALERS = (
    ("/apis/autoscaling/v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"),
    ("/apis/keda.sh/v1alpha1", "scaledobjects", "ScaledObject"),
)

_plurals: dict[tuple[str, str], str | None] = {}
_lock = threading.Lock()


def _group_path(api_version: str) -> str:
    """``/apis/apps/v1`` for ``apps/v1``, ``/api/v1`` for the core ``v1``."""
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def plural(kube: Kube, ref: ScaleTargetRef) -> str | None:
    """The resource (plural) of ``ref``'s kind, from discovery (cached; None when the
    API server serves no such kind in that group version)."""
    key = (ref.api_version, ref.kind)
    with _lock:
        if key in _plurals:
            return _plurals[key]
    found = kube._get(_group_path(ref.api_version)) or {}
    name = next(
        (
            str(r["name"])
            for r in found.get("resources") or []
            if r.get("kind") == ref.kind and "/" not in str(r.get("name", ""))
        ),
        None,
    )
    with _lock:
        _plurals[key] = name
    return name


def scale_path(ref: ScaleTargetRef, resource: str, namespace: str) -> str:
    """``/apis/apps/v1/namespaces/serving/deployments/chat-decode/scale``."""
    ns, name = quote(namespace, safe=""), quote(ref.name, safe="")
    return f"{_group_path(ref.api_version)}/namespaces/{ns}/{resource}/{name}/scale"


def read_target(kube: Kube, namespace: str, role: Role, ref: ScaleTargetRef) -> TargetRead:
    """``ref``'s ``/scale`` and the pods of its selector; ``error`` says why not (no such
    kind, the object is missing or has no ``/scale``, the API's refusal)."""
    try:
        resource = plural(kube, ref)
        if resource is None:
            return TargetRead(
                role, ref, None, error=f"the API serves no {ref.kind} in {ref.api_version}"
            )
        scale = kube._get(scale_path(ref, resource, namespace))
        if scale is None:
            return TargetRead(role, ref, None, error="not found, or it has no /scale subresource")
        selector = ((scale.get("status") or {}).get("selector")) or None
        pods: list[Obj] = []
        if selector:
            listing = kube._get(collection_path("Pod", namespace), {"labelSelector": str(selector)})
            pods = list((listing or {}).get("items") or [])
    except KubeError as err:
        return TargetRead(role, ref, None, error=f"{err.status} {err.reason}: {err.message}")
    return TargetRead(role, ref, scale, tuple(pods))


def autoscalers(kube: Kube, namespace: str) -> list[Obj]:
    """The namespace's HPAs and KEDA ScaledObjects (none of a kind whose API is absent),
    each with its ``kind`` set."""
    out: list[Obj] = []
    for prefix, resource, kind in AUTOSCALERS:
        path = f"{prefix}/namespaces/{quote(namespace, safe='')}/{resource}"
        for item in (kube._get(path) or {}).get("items") or []:
            item.setdefault("kind", kind)
            out.append(item)
    return out


def patch_scale(kube: Kube, namespace: str, ref: ScaleTargetRef, replicas: int) -> Obj:
    """Set ``spec.replicas`` of ``ref``'s ``/scale`` (a merge patch, field manager
    ``pdscaler``: the object's managedFields then show pdscaler on spec.replicas only,
    through the scale subresource)."""
    resource = plural(kube, ref)
    if resource is None:
        raise KubeError(404, "NotFound", f"the API serves no {ref.kind} in {ref.api_version}")
    return kube._write(
        "scale",
        ref.kind,
        namespace,
        ref.name,
        "PATCH",
        scale_path(ref, resource, namespace),
        body={"spec": {"replicas": replicas}},
        content_type=MERGE_PATCH,
    )
