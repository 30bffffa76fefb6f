"""The P/D router of a revision cell: its Deployment, its least-privilege identity, and
how many replicas it runs (docs/design.md §4).

Owns: the ``<name>-<rev>-router`` Deployment running a REAL router (``vllm-router`` or
``sglang-router``) whose Kubernetes worker discovery is scoped to its own cell (the
PDDeployment's name + the cell's revision + the role), so a request can only pair a
prefill and a decode of the same cell; the ServiceAccount, Role and RoleBinding
``<name>-router`` that let it get/list/watch pods in its namespace and nothing else; and
the replica rule. Must not: read the clock, talk to the API server, or size the GPU
pools (the policy and the rollout do).

The replica rule (``allot``): a cell serves while the rollout keeps both its pools and
it has a Ready prefill AND a Ready decode pod (a router with no worker would fail every
request the front Service sends it); only serving cells run routers. Its weight is
``min(ready prefill, planned prefill)``. One serving cell runs ``ceil(weight /
prefillPerRouter)`` routers within ``router.replicas``. Several serving cells (a
rollout) share ONE total, ``ceil(all weights / prefillPerRouter)`` (at least
``replicas.min``; lowered so that no cell's share passes ``replicas.max``), split in
proportion to the weights by largest remainder, at least 1 router per serving cell
(the per-cell ``replicas.min`` would give a 1-prefill cell as many routers as a
20-prefill one). The front Service spreads connections over the Ready routers of every
cell, so a cell's share of traffic follows its share of prefill capacity. Example
(prefillPerRouter 4, replicas 2..8): cells v1 (20 ready prefill) and v2 (1) share
``ceil(21 / 4)`` = 6 routers: 5 and 1, 83% / 17% of traffic on 95% / 5% of capacity
(per-cell rules would give 5 and 2: 29% of traffic on 5%). The granularity left is one
router: a cell's share is off by at most about one router in the total (docs/design.md
§4.1.1).

When a cell retires, its routers leave the front first: ``hold_prefill`` keeps a
cell's prefill pods while any of its router pods exists (Terminating included), so no
router is left with no prefill to send to; and ``keep_front`` keeps a cell's last
routers until another cell has a Ready one, so the front Service is never empty.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

from pdscaler import groups, naming
from pdscaler.objects import Manifest, Meta, owner_reference, stamp
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

ROUTER_CONTAINER = "router"
#: The executable each router type runs (a real router from PyPI, not pdscaler's).
COMMANDS: dict[str, list[str]] = {
    "vllm-router": ["vllm-router"],
    "sglang-router": ["python3", "-m", "sglang_router.launch_router"],
}
PD_FLAG = {"vllm-router": "--vllm-pd-disaggregation", "sglang-router": "--pd-disaggregation"}
METRICS_PORT = 29000
#: The pod annotation sglang-router's Kubernetes discovery reads a prefill pod's KV
#: bootstrap port from (``bootstrap_port_annotation`` of sglang-router 0.3.2; without
#: it the router sends ``bootstrap_port: null`` and each decode falls back to its OWN
#: ``--disaggregation-bootstrap-port``).
BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"
#: SGLang's flag for the port its prefill server's bootstrap (KV hand-off) server binds.
BOOTSTRAP_FLAG = "--disaggregation-bootstrap-port"
#: ``--disaggregation-bootstrap-port``'s default (SGLang ServerArgs).
DEFAULT_BOOTSTRAP_PORT = 8998


def enabled(spec: PDDeploymentSpec) -> bool:
    """True when pdscaler deploys the routers (``router.type`` is not ``external``)."""
    return spec.router_type != "external"


def router_labels(name: str, rev: str, version: str) -> dict[str, str]:
    return {
        naming.LABEL_NAME: name,
        naming.LABEL_ROLE: naming.ROLE_ROUTER,
        naming.LABEL_VERSION: naming.version_label(version),
        naming.LABEL_REVISION: rev,
    }


def _selector_args(meta: Meta, spec: PDDeploymentSpec, rev: str, role: Role) -> list[str]:
    """A pool's pods the router discovers: a grouped pool's leaders only (``groups``)."""
    selector = naming.pool_selector(meta.name, role, rev)
    selector = groups.leader_selector(selector, groups.shape_of(spec, role))
    return [f"{k}={v}" for k, v in selector.items()]


def router_args(meta: Meta, spec: PDDeploymentSpec, rev: str, engine_port: int) -> list[str]:
    """The router's arguments: P/D mode, discovery of this cell's pods only, bind address.

    >>> from pdscaler.invariants import spec_example
    >>> args = router_args(Meta("chat", "serving", "u"), spec_example(), "v1-abcde", 8000)
    >>> args[args.index("--prefill-selector") + 1 : args.index("--decode-selector")]
    ['pdscaler.io/name=chat', 'pdscaler.io/role=prefill', 'pdscaler.io/revision=v1-abcde']
    """
    kind = spec.router_type
    return [
        PD_FLAG[kind],
        "--service-discovery",
        "--service-discovery-namespace",
        meta.namespace,
        "--service-discovery-port",
        str(engine_port),
        "--prefill-selector",
        *_selector_args(meta, spec, rev, Role.PREFILL),
        "--decode-selector",
        *_selector_args(meta, spec, rev, Role.DECODE),
        "--host",
        "0.0.0.0",
        "--port",
        str(spec.router.port),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(METRICS_PORT),
        *(spec.router.args or []),
    ]


def bootstrap_port(words: Sequence[str]) -> int:
    """The bootstrap port an SGLang engine started with ``words`` (its command + args)
    binds: ``--disaggregation-bootstrap-port N`` or ``=N``, else SGLang's default.

    >>> bootstrap_port(["python3", "-m", "sglang.launch_server", f"{BOOTSTRAP_FLAG}=9001"])
    9001
    >>> bootstrap_port([BOOTSTRAP_FLAG, "9002"]), bootstrap_port(["--port", "30000"])
    (9002, 8998)
    """
    for i, word in enumerate(words):
        value = None
        if word.startswith(BOOTSTRAP_FLAG + "="):
            value = word.split("=", 1)[1]
        elif word == BOOTSTRAP_FLAG and i + 1 < len(words):
            value = words[i + 1]
        if value is not None and value.strip().isdigit():
            return int(value)
    return DEFAULT_BOOTSTRAP_PORT


def prefill_annotations(spec: PDDeploymentSpec, engine: Mapping[str, Any]) -> dict[str, str]:
    """What the cell's router needs on a PREFILL pod: for sglang-router, the
    ``sglang.ai/bootstrap-port`` of the engine container (``engine``: its manifest),
    which its discovery hands to the decode with each request; nothing for the others."""
    if spec.router_type != "sglang-router":
        return {}
    words = [str(w) for w in [*(engine.get("command") or []), *(engine.get("args") or [])]]
    return {BOOTSTRAP_ANNOTATION: str(bootstrap_port(words))}


def account_name(name: str) -> str:
    """``chat-router``: the ServiceAccount, Role and RoleBinding of a PDDeployment's routers."""
    return f"{name}-router"


#: The router container's default securityContext: what Pod Security ``restricted``
#: asks of a container (the router image of deploy/router/Dockerfile runs as user 65532),
#: so a namespace enforcing it admits the router pods. ``router.securityContext``
#: replaces it whole.
RESTRICTED: dict[str, Any] = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def router_deployment(
    meta: Meta, spec: PDDeploymentSpec, rev: str, version: str, replicas: int, engine_port: int
) -> Manifest:
    """``<name>-<rev>-router``: the cell's routers (no GPU; the user's template may add
    nodeSelector, tolerations, labels and annotations)."""
    lab = router_labels(meta.name, rev, version)
    tpl = copy.deepcopy(spec.router.template or {})
    tpl_meta = tpl.setdefault("metadata", {})
    tpl_meta["labels"] = {**(tpl_meta.get("labels") or {}), **lab}
    pod = tpl.setdefault("spec", {})
    pod["serviceAccountName"] = account_name(meta.name)
    pod["automountServiceAccountToken"] = True
    pod["containers"] = [
        {
            "name": ROUTER_CONTAINER,
            "image": spec.router_image,
            "command": COMMANDS[spec.router_type],
            "args": router_args(meta, spec, rev, engine_port),
            "ports": [
                {"name": "http", "containerPort": spec.router.port},
                {"name": "metrics", "containerPort": METRICS_PORT},
            ],
            "resources": copy.deepcopy(spec.router.resources or {}),
            "securityContext": copy.deepcopy(
                RESTRICTED if spec.router.security_context is None else spec.router.security_context
            ),
            # /readiness answers 503 while the router knows no worker of its cell (vllm-router
            # and sglang-router): no traffic reaches a router that could not serve it
            "readinessProbe": {
                "httpGet": {"path": "/readiness", "port": spec.router.port},
                "periodSeconds": 2,
                "failureThreshold": 2,
            },
            "livenessProbe": {
                "httpGet": {"path": "/liveness", "port": spec.router.port},
                "periodSeconds": 10,
            },
        }
    ]
    obj: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": naming.router_name(meta.name, rev),
            "namespace": meta.namespace,
            "labels": lab,
            "annotations": {naming.ANNOTATION_VERSION: version},
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {
                "matchLabels": {
                    naming.LABEL_NAME: meta.name,
                    naming.LABEL_ROLE: naming.ROLE_ROUTER,
                    naming.LABEL_REVISION: rev,
                }
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 2,
            "template": tpl,
        },
    }
    return stamp(obj)


def router_identity(meta: Meta) -> list[Manifest]:
    """ServiceAccount, Role (pods: get, list, watch; in this namespace only) and
    RoleBinding ``<name>-router``: all a router's discovery needs, nothing more."""
    name = account_name(meta.name)
    common: dict[str, Any] = {
        "name": name,
        "namespace": meta.namespace,
        "labels": {naming.LABEL_NAME: meta.name, naming.LABEL_ROLE: naming.ROLE_ROUTER},
        "ownerReferences": [owner_reference(meta)],
    }
    account: Manifest = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": copy.deepcopy(common),
    }
    role: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": copy.deepcopy(common),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding: Manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": copy.deepcopy(common),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": meta.namespace}],
    }
    return [stamp(account), stamp(role), stamp(binding)]


def weight(planned: tuple[int, int], ready: tuple[int, int]) -> int:
    """A cell's claim on routers: ``min(planned, ready)`` prefill while the rollout
    keeps both pools and each has a Ready pod, else 0 (the cell does not serve)."""
    if min(planned) == 0 or min(ready) == 0:
        return 0
    return min(planned[0], ready[0])


def allot(
    spec: PDDeploymentSpec, cells: Sequence[tuple[tuple[int, int], tuple[int, int]]]
) -> list[int]:
    """Routers per cell from each cell's (planned, Ready) (prefill, decode) (module rule).

    >>> from pdscaler.invariants import spec_example
    >>> s = spec_example()  # prefillPerRouter 2, replicas 1..8
    >>> allot(s, [((6, 4), (5, 4))]), allot(s, [((6, 4), (5, 0))])
    ([3], [0])
    >>> allot(s, [((6, 4), (6, 4)), ((2, 2), (2, 2))])
    [3, 1]
    """
    weights = [weight(planned, ready) for planned, ready in cells]
    if not enabled(spec) or not any(weights):
        return [0 for _ in weights]
    bounds = spec.router.replicas
    total_weight = sum(weights)
    total = max(bounds.min, math.ceil(total_weight / spec.router.prefill_per_router))
    # no cell's exact share above replicas.max: the split stays proportional
    total = min(total, bounds.max * total_weight // max(weights))
    return _largest_remainder(total, weights, bounds.max)


def _largest_remainder(total: int, weights: Sequence[int], most: int) -> list[int]:
    """``total`` split in proportion to ``weights``: every positive weight gets at least
    1 (the cells under 1 router take 1 and leave the split), the rest by floor then
    largest remainder (ties to the earlier cell), at most ``most`` each.
    ``_largest_remainder(6, [20, 1], 8)`` -> ``[5, 1]``; ``(5, [3, 3, 3], 8)`` -> ``[2, 2, 1]``."""
    out = [0 for _ in weights]
    live = [i for i, w in enumerate(weights) if w > 0]
    left = total
    while live:
        pool = sum(weights[i] for i in live)
        small = [i for i in live if weights[i] * left < pool]  # exact share under 1
        if not small:
            break
        for i in small:
            out[i] = 1
        left -= len(small)
        live = [i for i in live if i not in small]
    if live:
        pool = sum(weights[i] for i in live)
        for i in live:
            out[i] = weights[i] * left // pool
        rest = left - sum(out[i] for i in live)
        for i in sorted(live, key=lambda i: (-(weights[i] * left % pool), i))[:rest]:
            out[i] += 1
    return [min(most, n) for n in out]


def replicas(spec: PDDeploymentSpec, planned: tuple[int, int], ready: tuple[int, int]) -> int:
    """Routers for a cell that serves alone (``allot`` of one cell):
    ``ceil(min(planned, ready) prefill / prefillPerRouter)`` within ``router.replicas``.

    >>> from pdscaler.invariants import spec_example
    >>> replicas(spec_example(), (6, 4), (5, 4)), replicas(spec_example(), (6, 4), (5, 0))
    (3, 0)
    """
    return allot(spec, [(planned, ready)])[0]


def keep_front(count: int, ready_here: int, ready_elsewhere: int) -> int:
    """A cell's routers may all leave only once another cell has a Ready router: the
    front Service is never left with no endpoint (``keep_front(0, 2, 0)`` -> 2,
    ``keep_front(0, 2, 1)`` -> 0, ``keep_front(3, 2, 0)`` -> 3)."""
    if count == 0 and ready_here > 0 and ready_elsewhere == 0:
        return ready_here
    return count


def hold_prefill(planned_prefill: int, observed_prefill: int, routers_left: int) -> int:
    """A cell's prefill may drop to 0 only once none of its router pods exists (routers
    leave the front Service first, and a terminating router may still hold requests):
    ``hold_prefill(0, 4, 1)`` -> 4, ``(0, 4, 0)`` -> 0."""
    if planned_prefill == 0 and routers_left > 0:
        return observed_prefill
    return planned_prefill
