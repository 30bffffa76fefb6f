"""An in-memory stand-in for the API server under ``pdscaler.kube.Kube``, for unit tests
of ``reconcile_once`` without a cluster.

``FakeKube`` replaces only ``Kube._request`` (the transport), so kube.py's paths, verbs,
content types, field manager and write audit are exercised as in production. It keeps
objects by URL path, answers GET (item or list with an equality ``labelSelector``),
server-side apply (create, or replace the managed content keeping uid, creation time and
status), merge patch (``null`` deletes), DELETE (with the uid precondition) and POST
(Events). It is not a Deployment controller: tests add pods with ``add_pod``.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from pdscaler.kube import APPLY_PATCH, MERGE_PATCH, Kube, KubeError, WriteAudit

Obj = dict[str, Any]
T0 = "2025-01-01T00:00:00Z"
COLLECTIONS = ("deployments", "services", "pods", "events", "pddeployments")


def merge(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


class FakeKube(Kube):
    def __init__(self) -> None:  # no API client: _request is replaced
        self.audit = WriteAudit()
        self.reads = 0
        self.store: dict[str, Obj] = {}
        self.requests: list[tuple[str, str, str]] = []  # (method, path, content type)
        self._ids = itertools.count(1)

    # -------------------------------------------------------------- the transport

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        self.requests.append((method, path, content_type))
        query = dict(query or {})
        if method == "GET":
            return self._get_path(path, query)
        if method == "POST":
            name = body["metadata"]["name"]
            self.store[f"{path}/{name}"] = self._fresh(body)
            return dict(body)
        if method == "DELETE":
            obj = self.store.get(path)
            if obj is None:
                raise KubeError(404, "NotFound", path)
            want_uid = ((body or {}).get("preconditions") or {}).get("uid")
            if want_uid and obj["metadata"]["uid"] != want_uid:
                raise KubeError(409, "Conflict", "uid precondition failed")
            del self.store[path]
            return {}
        assert method == "PATCH"
        if content_type == APPLY_PATCH:
            assert query.get("fieldManager") == "pdscaler"
            old = self.store.get(path)
            new = self._fresh(body) if old is None else self._replace(old, body)
            self.store[path] = new
            return new
        assert content_type == MERGE_PATCH, content_type
        target = path.removesuffix("/status")
        obj = self.store.get(target)
        if obj is None:
            raise KubeError(404, "NotFound", target)
        self.store[target] = merge(obj, body)
        self._bump(self.store[target])
        return self.store[target]

    def _get_path(self, path: str, query: Mapping[str, str]) -> Obj:
        if path in self.store:
            return copy.deepcopy(self.store[path])
        if path.rsplit("/", 1)[-1] not in COLLECTIONS:
            raise KubeError(404, "NotFound", path)
        prefix = path + "/"
        items = [
            copy.deepcopy(o)
            for p, o in self.store.items()
            if p.startswith(prefix) and "/" not in p[len(prefix) :]
        ]
        selector = query.get("labelSelector")
        if selector:
            pairs = dict(kv.split("=", 1) for kv in selector.split(","))
            items = [
                o
                for o in items
                if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in pairs.items())
            ]
        return {"items": items}

    def _fresh(self, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        meta.setdefault("creationTimestamp", T0)
        meta["resourceVersion"] = str(next(self._ids))
        meta.setdefault("generation", 1)
        return obj

    def _replace(self, old: Obj, body: Obj) -> Obj:
        new = copy.deepcopy(body)
        for key in ("uid", "creationTimestamp", "generation"):
            new["metadata"][key] = old["metadata"].get(key)
        if "status" in old:
            new["status"] = old["status"]
        self._bump(new)
        return new

    def _bump(self, obj: Obj) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self._ids))

    # ---------------------------------------------------------------- test helpers

    def put(self, path: str, obj: Obj) -> Obj:
        """Store ``obj`` at ``path`` as if a user created it (no audit)."""
        self.store[path] = self._fresh(obj)
        return self.store[path]

    def objects(self, kind_path: str) -> list[Obj]:
        return [o for p, o in self.store.items() if f"/{kind_path}/" in p]

    def add_pod(self, namespace: str, name: str, labels: Mapping[str, str], ready: bool) -> Obj:
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": "gpu-node-0", "containers": [{"name": "engine"}]},
            "status": {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "lastTransitionTime": "2025-01-01T00:00:05Z",
                    }
                ],
            },
        }
        return self.put(f"/api/v1/namespaces/{namespace}/pods/{name}", pod)
