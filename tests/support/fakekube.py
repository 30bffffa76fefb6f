"""An in-memory stand-in for the API server under ``pdscaler.kube.Kube``, for unit tests
of ``reconcile_once`` without a cluster.

``FakeKube`` replaces only ``Kube._request`` (the transport), so kube.py's paths, verbs,
content types, field manager and write audit are exercised as in production. It keeps
objects by URL path, answers GET (item or list with an equality ``labelSelector``),
server-side apply (create, or replace the managed content keeping uid, creation time and
status), merge patch (``null`` deletes; a ``metadata.resourceVersion`` in the patch is
a precondition: 409 Conflict when it differs; a uid there is ignored, as the lab's API
server ignores it), DELETE (with the uid precondition) and POST (Events). It is not a
Deployment controller: tests add pods with ``add_pod`` (owned by a Deployment's
ReplicaSet as the real controllers do, or bare).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pdscaler.kube import APPLY_PATCH, MERGE_PATCH, Kube, KubeError
from pdscaler.observe import POD_TEMPLATE_HASH

Obj = dict[str, Any]
T0 = "2025-01-01T00:00:00Z"
#: the pod-template-hash of every pod ``add_pod`` makes for a Deployment
TEMPLATE_HASH = "5d8f7c9b6"
COLLECTIONS = (
    "deployments",
    "services",
    "pods",
    "events",
    "pddeployments",
    "serviceaccounts",
    "roles",
    "rolebindings",
)


def _selected(obj: Obj, selector: str | None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in (selector or "").split(","):
        if not term:
            continue
        key, eq, value = term.partition("=")
        if (key not in labels) if not eq else labels.get(key) != value:
            return False
    return True


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
        super().__init__(api_client=object())  # type: ignore[arg-type]
        self.log: list[tuple[int, str, str, Obj]] = []  # (version, type, path, object)
        self.compacted = 0
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
            self._event("DELETED", path, obj)
            return {}
        assert method == "PATCH"
        if content_type == APPLY_PATCH:
            assert query.get("fieldManager") == "pdscaler"
            old = self.store.get(path)
            new = self._fresh(body) if old is None else self._replace(old, body)
            self.store[path] = new
            self._event("ADDED" if old is None else "MODIFIED", path, new)
            return copy.deepcopy(new)
        assert content_type == MERGE_PATCH, content_type
        target = path.removesuffix("/status")
        obj = self.store.get(target)
        if obj is None:
            raise KubeError(404, "NotFound", target)
        want = ((body or {}).get("metadata") or {}).get("resourceVersion")
        if want and want != obj["metadata"].get("resourceVersion"):  # as the API server
            raise KubeError(409, "Conflict", "the object has been modified")
        self.store[target] = merge(obj, body)
        self._bump(self.store[target])
        self._event("MODIFIED", target, self.store[target])
        return copy.deepcopy(self.store[target])

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
        items = [o for o in items if _selected(o, query.get("labelSelector"))]
        return {"metadata": {"resourceVersion": str(self._version())}, "items": items}

    # ------------------------------------------------------------------ watches

    def _event(self, type_: str, path: str, obj: Obj) -> None:
        version = int(obj["metadata"].get("resourceVersion") or 0)
        if type_ == "DELETED":
            version = next(self._ids)
        self.log.append((version, type_, path, copy.deepcopy(obj)))

    def _version(self) -> int:
        return max([v for v, *_ in self.log] + [self.compacted], default=0)

    def compact(self) -> None:
        """Forget the events so far: a watch from an older version gets 410 Gone."""
        self.compacted = self._version()
        self.log.clear()

    def _watch(self, path: str, query: Mapping[str, str]) -> tuple[Any, Iterator[Obj]]:
        self.request_counts.add("watch", path.rsplit("/", 1)[-1])
        self.requests.append(("WATCH", path, ""))
        since = int(query.get("resourceVersion") or 0)
        if since < self.compacted:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            return (lambda: None), iter([{"type": "ERROR", "object": gone}])
        prefix = path + "/"
        events = [
            {"type": t, "object": copy.deepcopy(o)}
            for v, t, p, o in self.log
            if v > since
            and p.startswith(prefix)
            and "/" not in p[len(prefix) :]
            and _selected(o, query.get("labelSelector"))
        ]
        return (lambda: None), iter(events)

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
        self._event("ADDED", path, self.store[path])
        return self.store[path]

    def objects(self, kind_path: str) -> list[Obj]:
        return [o for p, o in self.store.items() if f"/{kind_path}/" in p]

    def add_pod(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        ready: bool,
        deployment: str | None = None,
    ) -> Obj:
        """A pod; with ``deployment``, as the Deployment and ReplicaSet controllers make
        it (a ``pod-template-hash`` label, controlled by the ReplicaSet
        ``<deployment>-<hash>``); without, a bare pod (one made by hand)."""
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels)}
        if deployment is not None:
            meta["labels"][POD_TEMPLATE_HASH] = TEMPLATE_HASH
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{deployment}-{TEMPLATE_HASH}",
                    "uid": f"rs-{deployment}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
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


class RefusingKube(FakeKube):
    """FakeKube that answers ``refuse(method, path)`` (when not None) with that error
    (an admission policy, a quota, an API server hiccup); every request's body is kept
    in ``bodies`` as (method, path, body)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: Callable[[str, str], KubeError | None] = lambda method, path: None
        self.bodies: list[tuple[str, str, Any]] = []

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        self.bodies.append((method, path, body))
        error = self.refuse(method, path)
        if error is not None:
            self.requests.append((method, path, content_type))
            raise error
        return super()._request(method, path, query, body, content_type)
