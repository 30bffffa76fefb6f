"""The operator's reads (part of ``pdscaler.kube``): a PDDeployment, the objects it owns
(``observe``: its Deployments, Services and pods, from the watch caches with
``cache=True``, else by LIST), the one Secret a PDDeployment's Prometheus
credentials name (``read_secret``: ``get`` only, never list or watch; its values are
returned decoded and never logged or kept) and the ConfigMaps its pool templates read
(``read_configmaps``: ``get`` by name, each tick; their contents are hashed into the
cell's identity, ``pdscaler.identity``).

Owns: ``Reads``, the ``Client`` with the per-namespace informers (started on first use,
stopped by ``release``), what a wanted name read as absent is believed to be for
``ABSENT_TTL_SECONDS``, and the write-through of a write's answer into the caches
(``_remember``). Must not: write (``writes.Kube`` does).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kubernetes import client as k8s_client

from pdscaler import naming
from pdscaler.groups import LWS_KIND
from pdscaler.kube.cache import Informer
from pdscaler.kube.client import (
    DEFAULT_BURST,
    PATHS,
    Client,
    KubeError,
    Obj,
    collection_path,
    item_path,
    name_of,
)
from pdscaler.plan import Observed
from pdscaler.spec import GROUP, KIND, PLURAL, VERSION

#: How long a tick waits for a namespace's caches to hold a first full list.
SYNC_TIMEOUT_SECONDS = 20.0
#: How long a wanted name read as absent (not in the caches, 404 by name) is believed
#: absent without asking again; a CREATE of such a name asks once more first.
ABSENT_TTL_SECONDS = 120.0
#: The kinds a tick reads, cached per namespace by an informer (list + watch of the
#: objects labelled ``pdscaler.io/name``).
CACHED_KINDS = ("Deployment", "Service", "Pod", "ServiceAccount", "Role", "RoleBinding")


class CacheNotSyncedError(KubeError):
    """A namespace's caches hold no full list yet: the tick reads nothing, writes nothing
    and is retried (the next tick waits again)."""

    def __init__(self, what: str) -> None:
        super().__init__(0, "CacheNotSynced", f"{what}: cache not synced yet")


class Reads(Client):
    """A ``Client`` with the operator's reads; ``cache``: ``observe`` reads the owned
    objects from per-namespace informers (else: LISTs)."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        *,
        qps: float = 0.0,
        burst: int = DEFAULT_BURST,
        cache: bool = False,
    ) -> None:
        super().__init__(api_client, qps=qps, burst=burst)
        #: observe() reads the owned objects from per-namespace informers (else: LISTs)
        self.cache = cache
        self._informers: dict[str, dict[str, Informer]] = {}
        self._informers_lock = threading.Lock()
        #: (namespace, kind, name) -> monotonic time a wanted name was read as absent
        self._absent: dict[tuple[str, str, str], float] = {}
        self.monotonic: Callable[[], float] = time.monotonic

    # ---------------------------------------------------------------------- reads

    def get_pdd(self, namespace: str, name: str) -> Obj | None:
        return self._get(item_path(KIND, namespace, name))

    def list_pdds(self, namespace: str | None = None) -> list[Obj]:
        path = (
            collection_path(KIND, namespace) if namespace else f"/apis/{GROUP}/{VERSION}/{PLURAL}"
        )
        data = self._get(path) or {}
        return list(data.get("items") or [])

    def get(self, kind: str, namespace: str, name: str) -> Obj | None:
        return self._get(item_path(kind, namespace, name))

    def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """The data of Secret ``namespace/name``, each value base64-decoded; None when it
        does not exist. Raises ``KubeError`` for any other refusal (403 when the operator
        may not get it). A value that is not valid base64 is left out (the caller reports
        its key as missing). Only ``data`` is read: ``stringData`` is write-only."""
        obj = self._get(item_path("Secret", namespace, name))
        if obj is None:
            return None
        out: dict[str, bytes] = {}
        for key, value in (obj.get("data") or {}).items():
            try:
                out[str(key)] = base64.b64decode(str(value), validate=True)
            except (ValueError, TypeError):
                continue
        return out

    def read_configmaps(self, namespace: str, names: Iterable[str]) -> dict[str, Obj | None]:
        """ConfigMaps ``namespace/<name>`` by name (``get`` each: no list, no watch), None
        for one that does not exist. Raises ``KubeError`` for any other refusal (403 when
        the chart grants no ``configmaps get``): the tick fails rather than name a cell
        without its configuration."""
        return {name: self.get("ConfigMap", namespace, name) for name in names}

    def list(self, kind: str, namespace: str, selector: Mapping[str, str]) -> list[Obj]:
        """Objects of ``kind`` whose labels match ``selector`` exactly."""
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(selector.items()))}
        data = self._get(collection_path(kind, namespace), query) or {}
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
        are read by name), so the planner can refuse a foreign object.

        With ``cache``: read from the namespace's informers (``informers``; waits for
        their first list, ``CacheNotSyncedError`` after ``SYNC_TIMEOUT_SECONDS``); a
        wanted name the caches do not hold (not created yet, or a foreign unlabelled
        object) is read by name, and when it is absent, believed absent for
        ``ABSENT_TTL_SECONDS`` (``execute`` asks again before creating it, so a
        foreign object that appeared meanwhile is never taken over). Without: three
        LISTs and a GET per wanted name."""
        selector = {naming.LABEL_NAME: name}
        wanted = list(wanted)
        caches = self.informers(namespace) if self.cache else {}
        for kind, inf in caches.items():
            if not inf.wait_ready(SYNC_TIMEOUT_SECONDS):
                raise CacheNotSyncedError(f"{kind} in {namespace}")

        def read(kind: str) -> list[Obj]:
            inf = caches.get(kind)
            if inf is not None and not inf.forbidden:
                return inf.select(selector)
            return self.list(kind, namespace, selector)

        deployments, services, pods = read("Deployment"), read("Service"), read("Pod")
        if any(kind == LWS_KIND for kind, _ in wanted):  # grouped pools: one LIST, not cached
            deployments = [*deployments, *self.list(LWS_KIND, namespace, selector)]
        others: list[Obj] = []
        seen = {(str(d.get("kind") or "Deployment"), name_of(d)) for d in deployments}
        seen |= {("Service", name_of(s)) for s in services}
        for kind, obj_name in wanted:
            if (kind, obj_name) in seen or kind not in PATHS:
                continue
            cached = caches.get(kind)
            usable = cached is not None and not cached.forbidden
            found = cached.get(obj_name) if cached is not None and usable else None
            if found is None:
                key = (namespace, kind, obj_name)
                if usable and self._believed_absent(key):
                    continue
                found = self.get(kind, namespace, obj_name)
                if usable:
                    self._note_absent(key, found is None)
            if found is not None:
                found.setdefault("kind", kind)
                pools = {"Deployment": deployments, LWS_KIND: deployments, "Service": services}
                pools.get(kind, others).append(found)
        return Observed(tuple(deployments), tuple(services), tuple(pods), tuple(others))

    # --------------------------------------------------------------------- caches

    def informers(self, namespace: str) -> dict[str, Informer]:
        """The namespace's informers, one per ``CACHED_KINDS``, started on first use."""
        with self._informers_lock:
            found = self._informers.get(namespace)
            if found is None:
                found = {kind: self._informer(kind, namespace) for kind in CACHED_KINDS}
                self._informers[namespace] = found
            return found

    def _informer(self, kind: str, namespace: str) -> Informer:
        return Informer(self, kind, namespace, rng=self.rng).start()

    def _believed_absent(self, key: tuple[str, str, str]) -> bool:
        with self._informers_lock:
            since = self._absent.get(key)
        return since is not None and self.monotonic() - since < ABSENT_TTL_SECONDS

    def _note_absent(self, key: tuple[str, str, str], absent: bool) -> None:
        now = self.monotonic()
        with self._informers_lock:
            if not absent:
                self._absent.pop(key, None)
                return
            self._absent[key] = now
            if len(self._absent) > 4096:  # churn: drop what expired
                self._absent = {
                    k: t for k, t in self._absent.items() if now - t < ABSENT_TTL_SECONDS
                }

    def _check_still_absent(self, kind: str, namespace: str, name: str) -> None:
        """Before creating a name last read as absent: read it again; ``KubeError`` 409
        AlreadyExists if an object holds it now (the next tick sees it and refuses it)."""
        key = (namespace, kind, name)
        with self._informers_lock:
            believed = self._absent.pop(key, None) is not None
        if believed and self.get(kind, namespace, name) is not None:
            raise KubeError(
                409, "AlreadyExists", f'{kind} "{name}" was created by someone else meanwhile'
            )

    def resync(self, namespace: str, kind: str) -> None:
        """Make the namespace's cache of ``kind`` list again (its watch is dropped)."""
        with self._informers_lock:
            inf = self._informers.get(namespace, {}).get(kind)
        if inf is not None:
            inf.resync()

    def release(self, namespace: str) -> None:
        """Stop and drop the namespace's informers (no PDDeployment is left there)."""
        with self._informers_lock:
            gone = self._informers.pop(namespace, None)
            self._absent = {k: t for k, t in self._absent.items() if k[0] != namespace}
        for inf in (gone or {}).values():
            inf.stop()

    def cached_namespaces(self) -> tuple[str, ...]:
        with self._informers_lock:
            return tuple(sorted(self._informers))

    def stop_caches(self) -> None:
        for namespace in self.cached_namespaces():
            self.release(namespace)

    def _remember(self, kind: str, namespace: str, written: Obj) -> Obj:
        """Write-through: the API's answer to our write goes into the kind's cache."""
        with self._informers_lock:
            inf = self._informers.get(namespace, {}).get(kind)
        if inf is not None and written.get("metadata"):
            inf.store(written)
        return written
