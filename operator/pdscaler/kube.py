"""The ONLY module that talks to the Kubernetes API server.

Owns: reading a PDDeployment and the objects it owns (Deployments, Services and the
pods of its pools), and every write the operator makes, each with the field manager
``pdscaler`` (``naming.FIELD_MANAGER``):

* owned Deployments and Services: server-side apply of the WHOLE desired object
  (``application/apply-patch+yaml``, force), for creates, template updates and replica
  changes alike, so the operator owns exactly the fields it builds;
* pod ``controller.kubernetes.io/pod-deletion-cost`` annotations: a merge patch;
* deletes: background propagation with a ``uid`` precondition (a replacement object
  of the same name is never deleted by mistake);
* status: a merge patch of the ``/status`` subresource (keys that disappeared are sent
  as ``null`` so they are removed);
* Events (core/v1) on the PDDeployment, one per action.

One read of a Secret (``read_secret``: ``get`` only, never list or watch), for the
Prometheus credentials a PDDeployment names (``metrics.prometheus.auth``); its values are
returned decoded and are never logged, counted by name in ``Kube.audit`` or kept here.

Every write goes through ``Kube._write``, which records it in ``Kube.audit`` (a
``WriteAudit``): the lab tests count writes there to prove a converged tick makes
none. Must not: decide anything (the planner and the policy do), or swallow errors
other than NotFound on reads.

Built on the ``kubernetes`` client's ``ApiClient`` (its kubeconfig / in-cluster
loading, TLS and auth) with plain-dict bodies, so custom resources, apply patches and
Events go through one small path. Example::

    kube = Kube(load_api_client())
    pdd = kube.get_pdd("serving", "chat")      # None when it does not exist
    before = kube.audit.count
    ...                                         # one converged tick
    assert kube.audit.since(before) == []       # it wrote nothing
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from pdscaler import naming
from pdscaler.plan import Action, Observed, Verb
from pdscaler.spec import GROUP, KIND, PLURAL, VERSION

Obj = dict[str, Any]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read


class KubeError(RuntimeError):
    """A non-2xx answer: ``status`` (409, 422, ...), ``reason`` (``AlreadyExists``)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class WriteRecord:
    """One write sent to the API server: ``apply Deployment serving/chat-v1-abcde-decode``."""

    time: float
    verb: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.verb} {self.kind} {self.namespace}/{self.name}"


@dataclass
class WriteAudit:
    """Counts every write (thread-safe); keeps the last ``keep`` records."""

    count: int = 0
    keep: int = 2000
    records: deque[WriteRecord] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, record: WriteRecord) -> None:
        with self._lock:
            self.count += 1
            self.records.append(record)
            while len(self.records) > self.keep:
                self.records.popleft()

    def since(self, count: int) -> list[WriteRecord]:
        """The records written after the audit showed ``count`` (as far as kept)."""
        with self._lock:
            n = self.count - count
            return list(self.records)[-n:] if n > 0 else []

    def for_namespace(self, namespace: str) -> list[WriteRecord]:
        with self._lock:
            return [r for r in self.records if r.namespace == namespace]


def load_api_client(
    kubeconfig: str | None = None, context: str | None = None
) -> k8s_client.ApiClient:
    """In-cluster config inside a pod (``KUBERNETES_SERVICE_HOST`` set and no explicit
    kubeconfig or context), else ``kubeconfig`` / ``$KUBECONFIG`` / ``~/.kube/config``
    with ``context`` (default: its current-context)."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = k8s_client.Configuration()
    if path is None and context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path, context=context, client_configuration=configuration
        )
    # one connection per concurrent tick, plus kopf's handlers: the default of 10 makes
    # urllib3 drop connections ("Connection pool is full") under a fleet's load
    configuration.connection_pool_maxsize = 32
    return k8s_client.ApiClient(configuration)


_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Event": "/api/v1/namespaces/{ns}/events",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    KIND: f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}",
}


def _collection(kind: str, namespace: str) -> str:
    return _PATHS[kind].format(ns=quote(namespace, safe=""))


def _item(kind: str, namespace: str, name: str) -> str:
    return f"{_collection(kind, namespace)}/{quote(name, safe='')}"


def _now_rfc3339() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kube:
    """Reads and writes for one operator process. Thread-safe (kopf runs sync handlers
    in a thread pool); ``audit`` counts the writes."""

    def __init__(
        self, api_client: k8s_client.ApiClient | None = None, audit: WriteAudit | None = None
    ) -> None:
        self.api = api_client if api_client is not None else load_api_client()
        self.audit = audit if audit is not None else WriteAudit()
        self.reads = 0

    # ------------------------------------------------------------------ transport

    def _request(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
    ) -> Obj:
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        headers = {"Accept": JSON, "Content-Type": content_type}
        headers.update(self.api.default_headers)
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        response = self.api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=REQUEST_TIMEOUT
        )
        raw = response.read()  # type: ignore[no-untyped-call]
        text = raw.decode("utf-8", errors="replace") if raw else ""
        try:
            data: Any = json.loads(text) if text else {}
        except ValueError:
            data = {"message": text}
        if not 200 <= response.status <= 299:
            if not isinstance(data, dict):
                data = {"message": str(data)}
            raise KubeError(
                response.status, str(data.get("reason", "")), str(data.get("message", ""))
            )
        return data if isinstance(data, dict) else {}

    def _get(self, path: str, query: Mapping[str, str] | None = None) -> Obj | None:
        self.reads += 1
        try:
            return self._request("GET", path, query)
        except KubeError as err:
            if err.status == 404:
                return None
            raise

    def _write(
        self,
        verb: str,
        kind: str,
        namespace: str,
        name: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: Mapping[str, str] | None = None,
    ) -> Obj:
        params = {"fieldManager": naming.FIELD_MANAGER, **(query or {})}
        if method == "DELETE":
            params.pop("fieldManager")
        self.audit.add(WriteRecord(time.time(), verb, kind, namespace, name))
        return self._request(method, path, params, body, content_type)

    # ---------------------------------------------------------------------- reads

    def get_pdd(self, namespace: str, name: str) -> Obj | None:
        return self._get(_item(KIND, namespace, name))

    def list_pdds(self, namespace: str | None = None) -> list[Obj]:
        path = _collection(KIND, namespace) if namespace else f"/apis/{GROUP}/{VERSION}/{PLURAL}"
        data = self._get(path) or {}
        return list(data.get("items") or [])

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._get(_item(kind, namespace, name))

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The data of Secret ``namespace/name``, each value base64-decoded; None when it
        does not exist. Raises ``KubeError`` for any other refusal (403 when the operator
        may not get it). A value that is not valid base64 is left out (the caller reports
        its key as missing). Only ``data`` is read: ``stringData`` is write-only."""
        obj = self._get(_item("Secret", namespace, name))
        if obj is None:
            return None
        out: dict[str, bytes] = {}
        for key, value in (obj.get("data") or {}).items():
            try:
                out[str(key)] = base64.b64decode(str(value), validate=True)
            except (ValueError, TypeError):
                continue
        return out

    def list(self, kind: str, namespace: str, selector: Mapping[str, str]) -> list[Obj]:
        """Objects of ``kind`` whose labels match ``selector`` exactly."""
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))}
        data = self._get(_collection(kind, namespace), query) or {}
        items = list(data.get("items") or [])
        for item in items:  # list items carry no kind
            item.setdefault("kind", kind)
        return items

    def observe(
        self, namespace: str, name: str, wanted: Iterable[tuple[str, str]] = ()
    ) -> Observed:
        """The Deployments, Services and pods labelled ``pdscaler.io/name=<name>``, plus
        any object (ours or not) holding one of the ``wanted`` (kind, name) pairs the
        label query did not return (the routers' ServiceAccount, Role and RoleBinding
        are read by name), so the planner can refuse a foreign object."""
        selector = {naming.LABEL_NAME: name}
        deployments = self.list("Deployment", namespace, selector)
        services = self.list("Service", namespace, selector)
        pods = self.list("Pod", namespace, selector)
        others: list[Obj] = []
        seen = {("Deployment", _name(d)) for d in deployments}
        seen |= {("Service", _name(s)) for s in services}
        for kind, obj_name in wanted:
            if (kind, obj_name) in seen or kind not in _PATHS:
                continue
            found = self.get(kind, namespace, obj_name)
            if found is not None:
                found.setdefault("kind", kind)
                {"Deployment": deployments, "Service": services}.get(kind, others).append(found)
        return Observed(tuple(deployments), tuple(services), tuple(pods), tuple(others))

    # --------------------------------------------------------------------- writes

    def apply(self, obj: Obj, verb: str = "apply") -> Obj:
        """Server-side apply of a whole owned object (create or update)."""
        meta = obj["metadata"]
        kind = str(obj["kind"])
        return self._write(
            verb,
            kind,
            meta["namespace"],
            meta["name"],
            "PATCH",
            _item(kind, meta["namespace"], meta["name"]),
            body=obj,
            content_type=APPLY_PATCH,
            query={"force": "true"},
        )

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> Obj:
        return self._write(
            "annotate",
            "Pod",
            namespace,
            name,
            "PATCH",
            _item("Pod", namespace, name),
            body={"metadata": {"annotations": dict(annotations)}},
            content_type=MERGE_PATCH,
        )

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete with background propagation; with ``uid`` only that very object."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        body["propagationPolicy"] = "Background"
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._write(
                "delete", kind, namespace, name, "DELETE", _item(kind, namespace, name), body=body
            )
        except KubeError as err:
            if err.status not in (404, 409):  # gone already / replaced (uid mismatch)
                raise

    def patch_status(self, namespace: str, name: str, status: Obj, previous: Obj | None) -> Obj:
        """Merge-patch ``status``; keys of ``previous`` absent from ``status`` -> null."""
        body: Obj = dict(status)
        for key in previous or {}:
            body.setdefault(key, None)
        return self._write(
            "status",
            KIND,
            namespace,
            name,
            "PATCH",
            _item(KIND, namespace, name) + "/status",
            body={"status": body},
            content_type=MERGE_PATCH,
        )

    def event(
        self, pdd: Obj, reason: str, message: str, type_: str = "Normal", action: str = ""
    ) -> Obj:
        """A core/v1 Event on the PDDeployment (what ``kubectl describe pdd`` shows)."""
        meta = pdd["metadata"]
        now = _now_rfc3339()
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason[:128],
            "message": message[:1024],
            "type": type_,
            "action": (action or reason)[:128],
            "source": {"component": naming.FIELD_MANAGER},
            "reportingComponent": naming.FIELD_MANAGER,
            "reportingInstance": naming.FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self._write(
            "event",
            "Event",
            meta["namespace"],
            meta["name"],
            "POST",
            _collection("Event", meta["namespace"]),
            body=body,
        )

    def execute(self, namespace: str, action: Action, observed: Observed) -> None:
        """Carry out one planned action (WARN is not a write and does nothing here)."""
        if action.verb in (Verb.CREATE, Verb.UPDATE, Verb.SCALE):
            assert action.body is not None
            self.apply(action.body, verb=action.verb.value)
        elif action.verb is Verb.ANNOTATE_POD:
            self.annotate_pod(namespace, action.name, action.annotations or {})
        elif action.verb is Verb.DELETE:
            self.delete(action.kind, namespace, action.name, _uid_of(observed, action))

    # ---------------------------------------------------------------------- Lease

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease (None when it does not exist)."""
        return self._get(_lease_path(namespace, name))

    def create_lease(self, namespace: str, name: str, spec: Obj) -> Obj:
        """POST a Lease; ``KubeError`` 409 AlreadyExists when another replica was first.
        Lease writes are the elector's, not a tick's: they are not in ``audit``."""
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        query = {"fieldManager": naming.FIELD_MANAGER}
        return self._request("POST", _lease_path(namespace), query, body)

    def update_lease(self, namespace: str, name: str, spec: Obj, resource_version: str) -> Obj:
        """PUT the Lease's spec at ``resource_version`` (optimistic concurrency):
        ``KubeError`` 409 Conflict when anyone wrote it since that version."""
        body: Obj = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": resource_version,
            },
            "spec": spec,
        }
        query = {"fieldManager": naming.FIELD_MANAGER}
        return self._request("PUT", _lease_path(namespace, name), query, body)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _uid_of(observed: Observed, action: Action) -> str | None:
    pool = {"Deployment": observed.deployments, "Service": observed.services}
    for obj in pool.get(action.kind, observed.others):
        if _name(obj) == action.name and obj.get("kind", action.kind) == action.kind:
            uid = obj.get("metadata", {}).get("uid")
            return str(uid) if uid else None
    return None


def _lease_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


class FencedError(KubeError):
    """A write refused by the fence: this replica does not hold the Lease (now)."""

    def __init__(self, what: str) -> None:
        super().__init__(0, "Fenced", f"{what}: not the leader, write refused")


class FencedKube(Kube):
    """A ``Kube`` whose writes (Deployments, Services, pods, status, Events: everything
    through ``_write``) happen only while ``fence()`` is True, checked right before each
    request; a refused write raises ``FencedError`` and reaches neither the API server
    nor ``audit``. Its Events carry ``instance`` (the Lease holder identity) as
    ``reportingInstance``, so who wrote an Event can be told. Example::

        kube = FencedKube(load_api_client(), fence=elector.may_write, instance="pod-a")
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        audit: WriteAudit | None = None,
        *,
        fence: Callable[[], bool],
        instance: str,
    ) -> None:
        super().__init__(api_client, audit)
        self.fence = fence
        self.instance = instance
        self._guard = threading.local()
        _guard_sends(self.api, self._guard)

    def _write(
        self,
        verb: str,
        kind: str,
        namespace: str,
        name: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: Mapping[str, str] | None = None,
    ) -> Obj:
        what = f"{verb} {kind} {namespace}/{name}"
        if not self.fence():
            raise FencedError(what)
        if kind == "Event" and method == "POST" and isinstance(body, dict):
            body = {**body, "reportingInstance": self.instance[:128]}
            body["source"] = {**(body.get("source") or {}), "host": self.instance}
        self._guard.check = (self.fence, what)  # checked again once the body is encoded
        try:
            return super()._write(
                verb,
                kind,
                namespace,
                name,
                method,
                path,
                body=body,
                content_type=content_type,
                query=query,
            )
        finally:
            self._guard.check = None


def _guard_sends(api: Any, guard: threading.local) -> None:
    """Check the fence a second time as late as the client library allows: when the
    request is encoded and handed to the connection pool (the serialising in between
    can take milliseconds on a loaded host, and a process stopped there would send a
    stale write when continued). The Lease calls set no check and pass through."""
    rest = getattr(api, "rest_client", None)
    pool = getattr(rest, "pool_manager", None)
    if pool is None:
        return
    send = pool.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        check = getattr(guard, "check", None)
        if check is not None and not check[0]():
            raise FencedError(check[1])
        return send(method, url, *args, **kwargs)

    pool.request = request
