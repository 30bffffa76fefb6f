"""The holding proxy's objects for a PDDeployment with ``scaleToZero`` (issue 29, item
3): where ``pdscaler.holder`` runs and how the request path goes through it.

Owns: ``<name>-holder`` (a Deployment of the operator's image running
``python -m pdscaler.holder``, labelled ``pdscaler.io/role: holder`` so Prometheus scrapes
its ``metrics`` port as the routers' and ``metricsql.answers.read_holder`` reads it),
``<name>-routers``
(a Service selecting every cell's Ready routers: the holder's upstream) and the front
Service ``<name>`` turned to the holder (``front_to_holder``). The request path with
``scaleToZero``::

    client -> Service <name> -> holder pod -> Service <name>-routers -> router -> P/D

Without ``scaleToZero`` nothing here is rendered and the front Service selects the
routers as before. Must not: read the clock or talk to the API server.

Worked example: ``chat`` in ``serving``, router port 8000 -> ``chat-holder`` runs
``python -m pdscaler.holder --upstream chat-routers.serving.svc:8000 --port 8000
--metrics-port 29100``; ``chat`` selects ``{pdscaler.io/name: chat, pdscaler.io/role:
holder}``.
"""

from __future__ import annotations

import copy
from typing import Any

from pdscaler import naming
from pdscaler.holder import Limits
from pdscaler.objects import Manifest, Meta, owner_reference, stamp
from pdscaler.spec import PDDeploymentSpec

#: The role label of the holder's pods (``metricsql.queries.HOLDER_ROLE``).
ROLE_HOLDER = "holder"
HOLDER_CONTAINER = "holder"
HOLDER_METRICS_PORT = 29100
#: The operator's image (the holder ships in it): the chart's default repository.
DEFAULT_HOLDER_IMAGE = "pdscaler/pdscaler:0.1.0"
_RESTRICTED: dict[str, Any] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def holder_name(name: str) -> str:
    """``chat-holder``."""
    return f"{name}-holder"


def routers_service_name(name: str) -> str:
    """``chat-routers``: the holder's upstream."""
    return f"{name}-routers"


def holder_labels(name: str) -> dict[str, str]:
    return {naming.LABEL_NAME: name, naming.LABEL_ROLE: ROLE_HOLDER}


def holder_args(meta: Meta, spec: PDDeploymentSpec, limits: Limits) -> list[str]:
    """The holder's flags: its upstream (the routers' Service), its ports and limits."""
    port = spec.router.port
    upstream = f"{routers_service_name(meta.name)}.{meta.namespace}.svc:{port}"
    return [
        "--upstream",
        upstream,
        "--port",
        str(port),
        "--metrics-port",
        str(HOLDER_METRICS_PORT),
        "--max-held",
        str(limits.max_held),
        "--max-wait",
        f"{limits.max_wait:g}",
    ]


def holder_deployment(
    meta: Meta, spec: PDDeploymentSpec, image: str = DEFAULT_HOLDER_IMAGE
) -> Manifest:
    """``<name>-holder``: one holder (its queue is the demand signal; one pod keeps the
    idle clock single). The routers' template's nodeSelector and tolerations apply (it
    runs where the routers may)."""
    labels = holder_labels(meta.name)
    router_pod = (spec.router.template or {}).get("spec") or {}
    pod: dict[str, Any] = {
        key: copy.deepcopy(router_pod[key])
        for key in ("nodeSelector", "tolerations")
        if key in router_pod
    }
    pod["automountServiceAccountToken"] = False
    pod["containers"] = [
        {
            "name": HOLDER_CONTAINER,
            "image": image,
            "command": ["python", "-m", "pdscaler.holder"],
            "args": holder_args(meta, spec, Limits()),
            "ports": [
                {"name": "http", "containerPort": spec.router.port},
                {"name": "metrics", "containerPort": HOLDER_METRICS_PORT},
            ],
            "securityContext": copy.deepcopy(_RESTRICTED),
            "readinessProbe": {
                "httpGet": {"path": "/healthz", "port": HOLDER_METRICS_PORT},
                "periodSeconds": 5,
            },
        }
    ]
    obj: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": holder_name(meta.name),
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    return stamp(obj)


def routers_service(meta: Meta, port: int) -> Manifest:
    """``<name>-routers``: every cell's Ready routers, the holder's upstream."""
    selector = {naming.LABEL_NAME: meta.name, naming.LABEL_ROLE: naming.ROLE_ROUTER}
    obj: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": routers_service_name(meta.name),
            "namespace": meta.namespace,
            "labels": {naming.LABEL_NAME: meta.name},
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return stamp(obj)


def front_to_holder(front: Manifest) -> Manifest:
    """The front Service ``<name>`` selecting the holder instead of the routers."""
    out = copy.deepcopy(front)
    out["spec"]["selector"] = {**out["spec"]["selector"], naming.LABEL_ROLE: ROLE_HOLDER}
    return stamp(out)


def holding_objects(
    meta: Meta, spec: PDDeploymentSpec, front: Manifest, image: str = DEFAULT_HOLDER_IMAGE
) -> list[Manifest]:
    """With ``scaleToZero``: the holder (of ``scaleToZero.image``, else ``image``), the
    routers' Service and the front Service turned to the holder; without it: the front
    Service as given."""
    if spec.scale_to_zero is None:
        return [front]
    return [
        holder_deployment(meta, spec, spec.scale_to_zero.image or image),
        routers_service(meta, spec.router.port),
        front_to_holder(front),
    ]
