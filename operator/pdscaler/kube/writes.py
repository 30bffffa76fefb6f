"""The operator's writes (part of ``pdscaler.kube``), each with the field manager
``pdscaler`` (``naming.FIELD_MANAGER``):

* owned Deployments and Services: server-side apply of the WHOLE desired object
  (``application/apply-patch+yaml``, force), for creates, template updates and replica
  changes alike, so the operator owns exactly the fields it builds;
* pod ``controller.kubernetes.io/pod-deletion-cost`` annotations (and a role flip's
  labels): a merge patch;
* deletes: background propagation with a ``uid`` precondition (a replacement object
  of the same name is never deleted by mistake);
* status: a merge patch of the ``/status`` subresource (keys that disappeared are sent
  as ``null`` so they are removed), at the resourceVersion the tick read;
* Events (core/v1) on the PDDeployment, one per action;
* the leader election's Lease (get, create, update at a resourceVersion; not paced,
  not in the audit).

Owns: ``Kube`` (``Reads`` plus the writes), whose every write but the Lease's goes
through ``Kube._write``, which records it in ``Kube.audit`` (``audit.WriteAudit``)
before sending it. Must not: decide anything (the planner and the policy do), or
swallow errors other than NotFound on reads and on deletes.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s_client

from pdscaler import naming
from pdscaler.kube.audit import WriteAudit, WriteRecord
from pdscaler.kube.client import (
    APPLY_PATCH,
    DEFAULT_BURST,
    JSON,
    MERGE_PATCH,
    KubeError,
    Obj,
    collection_path,
    item_path,
    lease_path,
    name_of,
)
from pdscaler.kube.reads import Reads
from pdscaler.observe import is_ready
from pdscaler.plan import POOL_KINDS, Action, Observed, Verb
from pdscaler.spec import GROUP, KIND, VERSION


class Kube(Reads):
    """Reads and writes for one operator process. Thread-safe (kopf runs sync handlers
    in a thread pool); ``audit`` counts the writes."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        audit: WriteAudit | None = None,
        *,
        qps: float = 0.0,
        burst: int = DEFAULT_BURST,
        cache: bool = False,
    ) -> None:
        super().__init__(api_client, qps=qps, burst=burst, cache=cache)
        self.audit = audit if audit is not None else WriteAudit()

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
        return self._call(method, path, params, body, content_type)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """A tick's writes in one leadership term (``FencedKube``; none here)."""
        yield

    # --------------------------------------------------------------------- writes

    def apply(self, obj: Obj, verb: str = "apply") -> Obj:
        """Server-side apply of a whole owned object (create or update)."""
        meta = obj["metadata"]
        kind = str(obj["kind"])
        written = self._write(
            verb,
            kind,
            meta["namespace"],
            meta["name"],
            "PATCH",
            item_path(kind, meta["namespace"], meta["name"]),
            body=obj,
            content_type=APPLY_PATCH,
            query={"force": "true"},
        )
        return self._remember(kind, meta["namespace"], written)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> Obj:
        return self._patch_pod("annotate", namespace, name, {"annotations": dict(annotations)})

    def relabel_pod(
        self,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
    ) -> Obj:
        """A role flip: one merge patch of the pod's labels and annotations."""
        meta = {"labels": dict(labels), "annotations": dict(annotations)}
        return self._patch_pod("relabel", namespace, name, meta)

    def _patch_pod(self, verb: str, namespace: str, name: str, meta: Obj) -> Obj:
        return self._remember(
            "Pod",
            namespace,
            self._write(
                verb,
                "Pod",
                namespace,
                name,
                "PATCH",
                item_path("Pod", namespace, name),
                body={"metadata": meta},
                content_type=MERGE_PATCH,
            ),
        )

    def delete(self, kind: str, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete with background propagation; with ``uid`` only that very object."""
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        body["propagationPolicy"] = "Background"
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._write(
                "delete",
                kind,
                namespace,
                name,
                "DELETE",
                item_path(kind, namespace, name),
                body=body,
            )
        except KubeError as err:
            if err.status not in (404, 409):  # gone already / replaced (uid mismatch)
                raise

    def patch_status(
        self, namespace: str, name: str, status: Obj, previous: Obj | None, read: Obj | None = None
    ) -> Obj:
        """Merge-patch ``status``; keys of ``previous`` absent from ``status`` -> null.
        With ``read`` (the ``metadata`` the tick read), the patch carries its
        ``resourceVersion`` as a precondition: the API server answers 409 Conflict when
        the object was changed since, or deleted and made again under the same name (a
        new object, a new resourceVersion), so a status computed from the old object
        never lands on the new one (the next tick, reading the new one, writes its own).
        A ``uid`` in a merge patch is no precondition: the API server ignores it (seen
        in the lab: a patch with another uid was applied)."""
        body: Obj = dict(status)
        for key in previous or {}:
            body.setdefault(key, None)
        patch: Obj = {"status": body}
        if read and read.get("resourceVersion"):
            patch["metadata"] = {"resourceVersion": read["resourceVersion"]}
        return self._write(
            "status",
            KIND,
            namespace,
            name,
            "PATCH",
            item_path(KIND, namespace, name) + "/status",
            body=patch,
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
            collection_path("Event", meta["namespace"]),
            body=body,
        )

    def execute(self, namespace: str, action: Action, observed: Observed) -> None:
        """Carry out one planned action (WARN is not a write and does nothing here).
        With the caches, an action that lowers or deletes a Deployment is first checked
        against the pods as the API server has them now (``_check_pods_current``)."""
        if self.cache and _lowers(action, observed):
            self._check_pods_current(namespace, observed)
        if action.verb in (Verb.CREATE, Verb.UPDATE, Verb.SCALE):
            assert action.body is not None
            if action.verb is Verb.CREATE:
                self._check_still_absent(action.kind, namespace, action.name)
            self.apply(action.body, verb=action.verb.value)
        elif action.verb is Verb.ANNOTATE_POD:
            self.annotate_pod(namespace, action.name, action.annotations or {})
        elif action.verb is Verb.RELABEL_POD:
            self.relabel_pod(namespace, action.name, action.labels or {}, action.annotations or {})
        elif action.verb is Verb.DELETE:
            self.delete(action.kind, namespace, action.name, _uid_of(observed, action))

    def _check_pods_current(self, namespace: str, observed: Observed) -> None:
        """``StaleCacheError`` (and the namespace's pod cache listed again) when a pod
        of the tick's PDDeployment that it read from the cache as Ready (and not
        terminating) is gone or not Ready in a LIST now: a half-open watch must not
        make the operator shrink a cell for pods that are gone. Pods the cache has not
        seen yet do not count (they only add capacity). One LIST, only on a tick that
        lowers or deletes a Deployment."""
        owners = {
            (o.get("metadata", {}).get("labels") or {}).get(naming.LABEL_NAME)
            for o in (*observed.deployments, *observed.pods)
        } - {None, ""}
        if len(owners) != 1:
            return
        (owner,) = owners
        now = _serving(self.list("Pod", namespace, {naming.LABEL_NAME: str(owner)}))
        gone = sorted(_serving(observed.pods) - now)
        if gone:
            self.resync(namespace, "Pod")
            raise StaleCacheError(
                f"pods of {namespace}/{owner} cached as Ready are gone or not Ready now "
                f"({', '.join(gone[:5])}); not acting on them"
            )

    # ---------------------------------------------------------------------- Lease

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease (None when it does not exist)."""
        return self._get(lease_path(namespace, name), limited=False)

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
        return self._call("POST", lease_path(namespace), query, body, limited=False)

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
        return self._call("PUT", lease_path(namespace, name), query, body, limited=False)


class StaleCacheError(RuntimeError):
    """The cache a tick read disagrees with the API server where a write would act on
    it: the tick fails (nothing more is written) and the next one reads again."""


def _lowers(action: Action, observed: Observed) -> bool:
    """A Deployment deleted, or given fewer replicas than it has."""
    if action.kind not in POOL_KINDS:
        return False
    if action.verb is Verb.DELETE:
        return True
    if action.verb not in (Verb.SCALE, Verb.UPDATE) or action.body is None:
        return False
    want = (action.body.get("spec") or {}).get("replicas")
    for d in observed.deployments:
        if name_of(d) == action.name and want is not None:
            return int(want) < int((d.get("spec") or {}).get("replicas") or 0)
    return False


def _serving(pods: Any) -> set[str]:
    """Names of the Ready pods that are not terminating."""
    return {
        name_of(p)
        for p in pods
        if is_ready(p) and not (p.get("metadata") or {}).get("deletionTimestamp")
    }


def _now_rfc3339() -> str:
    return datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid_of(observed: Observed, action: Action) -> str | None:
    pool = dict.fromkeys(POOL_KINDS, observed.deployments)
    pool["Service"] = observed.services
    for obj in pool.get(action.kind, observed.others):
        if name_of(obj) == action.name and obj.get("kind", action.kind) == action.kind:
            uid = obj.get("metadata", {}).get("uid")
            return str(uid) if uid else None
    return None
