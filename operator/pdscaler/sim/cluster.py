"""A simulated cluster for whole-tick replays: Deployments, Services and pods in memory,
a Deployment controller and pods that turn Ready after a start-up time.

Owns: applying a tick's writes (``tick.TickEffects.writes``: create, update, scale,
annotate, delete) to its objects, and ``advance(now)``: each Deployment gets as many
live pods as its replicas, each controlled by a ReplicaSet ``<deployment>-<pod-template-hash>``
as the real controllers make them (pods it no longer needs go, lowest pod-deletion-cost
first, then the newest, as the ReplicaSet controller picks), and a pod created at t is
Ready from t + ``startup_seconds``. ``observed()`` is what ``kube.observe`` would return.
Must not: decide anything (``tick.compute`` does) or read the clock (``now`` is passed).

Worked example: a create of ``chat-r1-decode`` with 2 replicas at t = 0 and
``startup_seconds = 30``: ``advance(0)`` makes two pods, not Ready; ``advance(30)``
makes both Ready (``lastTransitionTime`` 30 s after their creation).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pdscaler.manifests import DELETION_COST_ANNOTATION
from pdscaler.observe import POD_TEMPLATE_HASH
from pdscaler.plan import Action, Observed, Verb

Obj = dict[str, Any]


def timestamp(t: float) -> str:
    """Epoch seconds as the API server writes them: ``0`` -> ``1970-01-01T00:00:00Z``."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class SimCluster:
    """The objects of one namespace and a Deployment controller (module docstring)."""

    startup_seconds: float = 30.0
    node: str = "gpu-node-0"
    deployments: dict[str, Obj] = field(default_factory=dict)
    services: dict[str, Obj] = field(default_factory=dict)
    pods: dict[str, Obj] = field(default_factory=dict)
    others: dict[tuple[str, str], Obj] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def observed(self) -> Observed:
        return Observed(
            deployments=tuple(copy.deepcopy(list(self.deployments.values()))),
            services=tuple(copy.deepcopy(list(self.services.values()))),
            pods=tuple(copy.deepcopy(list(self.pods.values()))),
            others=tuple(copy.deepcopy(list(self.others.values()))),
        )

    def apply(self, writes: Iterable[Action], now: float) -> None:
        """Carry out a tick's writes as the API server would."""
        for action in writes:
            if action.verb in (Verb.ANNOTATE_POD, Verb.RELABEL_POD):
                self._patch_pod(action)
                continue
            if action.kind not in ("Deployment", "Service"):
                if action.verb is Verb.DELETE:
                    self.others.pop((action.kind, action.name), None)
                elif action.body:
                    self.others[(action.kind, action.name)] = copy.deepcopy(action.body)
                continue
            store = self.services if action.kind == "Service" else self.deployments
            if action.verb in (Verb.CREATE, Verb.UPDATE, Verb.SCALE) and action.body:
                old = store.get(action.name)
                obj = copy.deepcopy(action.body)
                meta = obj["metadata"]
                meta["creationTimestamp"] = (
                    old["metadata"]["creationTimestamp"] if old else timestamp(now)
                )
                meta["uid"] = old["metadata"]["uid"] if old else f"uid-{next(self._ids)}"
                store[action.name] = obj
            elif action.verb is Verb.DELETE:
                store.pop(action.name, None)

    def _patch_pod(self, action: Action) -> None:
        """A merge patch of a pod's annotations and labels (a gone pod: nothing)."""
        if action.name not in self.pods:
            return
        meta = self.pods[action.name]["metadata"]
        meta["annotations"] = {**(meta.get("annotations") or {}), **(action.annotations or {})}
        meta["labels"] = {**(meta.get("labels") or {}), **(action.labels or {})}

    def advance(self, now: float) -> None:
        """Reconcile pods to the Deployments' replicas and make old-enough pods Ready."""
        for name, dep in self.deployments.items():
            mine = sorted(
                (p for p in self.pods.values() if p["metadata"]["ownerName"] == name),
                key=_removal_order,
            )
            want = int(dep["spec"]["replicas"])
            for pod in mine[: max(0, len(mine) - want)]:
                del self.pods[pod["metadata"]["name"]]
            for _ in range(max(0, want - len(mine))):
                pod = _pod(dep, f"{name}-{next(self._ids)}", now, self.node)
                self.pods[pod["metadata"]["name"]] = pod
        for pod_name, pod in list(self.pods.items()):
            if pod["metadata"]["ownerName"] not in self.deployments:
                del self.pods[pod_name]
                continue
            created = pod["metadata"]["createdAt"]
            if now >= created + self.startup_seconds and not _ready(pod):
                pod["status"]["conditions"] = [
                    {
                        "type": "Ready",
                        "status": "True",
                        "lastTransitionTime": timestamp(created + self.startup_seconds),
                    }
                ]

    def ready_pods(self) -> list[Obj]:
        return [p for p in self.pods.values() if _ready(p)]


def _template_hash(template: Obj) -> str:
    """The ``pod-template-hash`` of a template (the Deployment controller's role here)."""
    text = json.dumps(template, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def _pod(dep: Obj, name: str, now: float, node: str) -> Obj:
    """A pod as the Deployment and ReplicaSet controllers make it: the template's labels
    plus ``pod-template-hash``, controlled by the ReplicaSet ``<deployment>-<hash>``."""
    tpl = copy.deepcopy(dep["spec"]["template"])
    meta = tpl.get("metadata") or {}
    template_hash = _template_hash(dep["spec"]["template"])
    owner = dep["metadata"]["name"]
    return {
        "metadata": {
            "name": name,
            "labels": {**(meta.get("labels") or {}), POD_TEMPLATE_HASH: template_hash},
            "annotations": dict(meta.get("annotations") or {}),
            "creationTimestamp": timestamp(now),
            "createdAt": now,
            "ownerName": owner,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{owner}-{template_hash}",
                    "uid": f"rs-{owner}-{template_hash}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {**tpl.get("spec", {}), "nodeName": node},
        "status": {"phase": "Running", "conditions": []},
    }


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod["status"].get("conditions", [])
    )


def _removal_order(pod: Obj) -> tuple[bool, int, float]:
    """Not-Ready first, then the lowest pod-deletion-cost, then the newest."""
    meta = pod["metadata"]
    cost = int((meta.get("annotations") or {}).get(DELETION_COST_ANNOTATION, "0"))
    return (_ready(pod), cost, -float(meta["createdAt"]))
