"""The watch caches the operator's reads come from with ``cache=True`` (part of
``pdscaler.kube``): one ``Informer`` per kind and namespace, list + watch of the objects
labelled ``pdscaler.io/name``, so a converged tick reads only its PDDeployment.

Owns: the informer's loop (LIST, WATCH from the list's resourceVersion, re-watch,
re-list on 410 Gone, backoff after a failed round, ``forbidden`` on 403), its store
(newer resourceVersions win; the operator's own writes are written through) and its
selections (deep copies). Must not: decide when a namespace is cached or forgotten
(``reads.Reads`` does), or write.
"""

from __future__ import annotations

import copy
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any

from pdscaler import naming
from pdscaler.kube.client import Client, KubeError, Obj, backoff, collection_path, name_of

log = logging.getLogger("pdscaler.kube")

#: An informer's backoff between failed list/watch rounds (doubling up to the cap). The
#: cap bounds how long after an API-server outage the caches (and so the ticks, which
#: wait for them) resume: with 30 s, the first tick came 25 s after a 25 s outage ended.
WATCH_BACKOFF_BASE_SECONDS = 0.5
WATCH_BACKOFF_CAP_SECONDS = 4.0
#: The API server ends each watch after this (then it is re-watched from the last
#: resourceVersion: cheap, no list), and the client gives up on a watch that delivered
#: no byte for this plus ``client.WATCH_READ_SLACK_SECONDS`` (10 s): a half-open connection (open,
#: delivering nothing: a proxy or a network path that stopped forwarding) is found
#: within 40 s and the cache is listed again, where 240 + 30 s let ticks act on a cache
#: 270 s stale (pods long gone read as Ready). Costs one WATCH per kind and namespace
#: every 30 s (6 kinds: 0.2 requests a second per namespace).
WATCH_TIMEOUT_SECONDS = 30


def _newer_or_same(obj: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    """``obj`` is not older than ``than`` by resourceVersion (etcd revisions compare as
    integers; anything else counts as newer, the watch's order then decides)."""
    if than is None:
        return True
    mine = str(obj.get("metadata", {}).get("resourceVersion") or "")
    theirs = str(than.get("metadata", {}).get("resourceVersion") or "")
    if mine.isdigit() and theirs.isdigit():
        return int(mine) >= int(theirs)
    return True


def _as_listed(obj: Obj, kind: str) -> Obj:
    """``obj`` as a LIST item reads after ``Kube.list``: ``kind`` set, no ``apiVersion``
    (a watch event's or a write's object carries both), so a tick's observations are the
    same from the cache as from LISTs."""
    obj.pop("apiVersion", None)
    obj.setdefault("kind", kind)
    return obj


class Informer:
    """A cache of one kind's objects labelled ``pdscaler.io/name`` in one namespace, kept
    by list + watch in its own thread (client-go's reflector, reduced): a full LIST
    (``synced`` is set once it is stored), then a WATCH from the list's resourceVersion
    (bookmarks on), re-watched when the server ends it, re-listed on 410 Gone; a failed
    round clears ``synced`` (a tick then waits rather than read a cache that may miss
    changes) and is retried after an exponential backoff with jitter. A list refused
    with 403 (RBAC without list/watch of the kind) sets ``forbidden``: the tick then
    reads that kind directly. ``store`` takes the API's answer to the operator's own
    write, so the next tick does not see the object as it was before that write.

    The loop's steps (``relist``, ``handle``) are callable on their own (unit tests)::

        inf = Informer(kube, "Pod", "serving")
        inf.relist()                               # synced, 3 pods
        inf.handle({"type": "DELETED", "object": pod})
        inf.select({"pdscaler.io/name": "chat"})   # 2 pods (deep copies)
    """

    def __init__(
        self,
        kube: Client,
        kind: str,
        namespace: str,
        *,
        rng: Callable[[], float] = random.random,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.path = collection_path(kind, namespace)
        self.selector = naming.LABEL_NAME  # the label exists, whatever its value
        self.rng = rng
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self.forbidden = False
        self.resource_version: str | None = None
        self.relists = 0
        self.failures = 0
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()  # synced or forbidden: a waiting tick may go on
        self._thread: threading.Thread | None = None
        self._closer: Callable[[], None] | None = None

    # ---------------------------------------------------------------- the steps

    def relist(self) -> None:
        """LIST the kind and replace the cache with the answer; synced."""
        data = self.kube._call("GET", self.path, {"labelSelector": self.selector})
        items: dict[str, Obj] = {}
        for item in data.get("items") or []:
            item.setdefault("kind", self.kind)  # list items carry no kind
            items[name_of(item)] = item
        version = str((data.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self._items = items
            self.resource_version = version or None
        self.relists += 1
        self._set_synced()

    def handle(self, event: Mapping[str, Any]) -> bool:
        """Apply one watch event to the cache; False when the watch must end and the
        cache be listed again (410 Gone: the version is too old); raises ``KubeError``
        for any other error event."""
        type_ = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            return True
        if type_ == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                with self._lock:
                    self.resource_version = None
                return False
            raise KubeError(code, str(obj.get("reason", "")), str(obj.get("message", "")))
        version = str(obj.get("metadata", {}).get("resourceVersion") or "")
        name = name_of(obj)
        with self._lock:
            if type_ in ("ADDED", "MODIFIED"):
                _as_listed(obj, self.kind)
                if _newer_or_same(obj, self._items.get(name)):
                    self._items[name] = obj
            elif type_ == "DELETED":
                self._items.pop(name, None)
            if version:
                self.resource_version = version
        return True

    def store(self, obj: Mapping[str, Any]) -> None:
        """Write-through of the answer to the operator's own write of ``obj``."""
        labels = obj.get("metadata", {}).get("labels") or {}
        if self.selector not in labels or not self.synced.is_set():
            return
        item = _as_listed(copy.deepcopy(dict(obj)), self.kind)
        with self._lock:
            if _newer_or_same(item, self._items.get(name_of(item))):
                self._items[name_of(item)] = item

    def select(self, labels: Mapping[str, str]) -> list[Obj]:
        """Deep copies of the cached objects whose labels include ``labels``."""
        with self._lock:
            found = [
                o
                for o in self._items.values()
                if all(
                    (o.get("metadata", {}).get("labels") or {}).get(k) == v
                    for k, v in labels.items()
                )
            ]
        return copy.deepcopy(found)

    def get(self, name: str) -> Obj | None:
        with self._lock:
            found = self._items.get(name)
        return copy.deepcopy(found) if found is not None else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    # ----------------------------------------------------------------- the loop

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the cache is synced (or the kind turned out forbidden)."""
        return self._ready.wait(timeout) and (self.synced.is_set() or self.forbidden)

    def _set_synced(self) -> None:
        self.synced.set()
        self._ready.set()

    def _watch_once(self) -> None:
        query = {
            "watch": "1",
            "labelSelector": self.selector,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        if self.resource_version:
            query["resourceVersion"] = self.resource_version
        close, events = self.kube._watch(self.path, query)
        self._closer = close
        try:
            self._set_synced()  # the watch is open from our version: caught up from here
            for event in events:
                if self._stop.is_set() or not self.handle(event):
                    return
        finally:
            self._closer = None
            close()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self._watch_once()
                self.failures = 0
            except KubeError as err:
                if err.status == 410:
                    self.resource_version = None
                    continue
                if err.status == 403:
                    log.warning(
                        "%s in %s: list/watch refused (%s); reading it directly each tick",
                        self.kind,
                        self.namespace,
                        err.message,
                    )
                    self.forbidden = True
                    self._ready.set()
                    return
                self._failed(err)
            except Exception as err:  # connection errors, a broken stream
                if self._stop.is_set():
                    return
                self._failed(err)

    def _failed(self, err: BaseException) -> None:
        self.failures += 1
        self.synced.clear()
        self._ready.clear()
        wait = backoff(
            self.failures, WATCH_BACKOFF_BASE_SECONDS, WATCH_BACKOFF_CAP_SECONDS, self.rng
        )
        log.warning(
            "watch of %s in %s failed (%s); again in %.1fs", self.kind, self.namespace, err, wait
        )
        self._stop.wait(wait)

    def start(self) -> Informer:
        self._thread = threading.Thread(
            target=self.run, name=f"pdscaler-watch-{self.kind}-{self.namespace}", daemon=True
        )
        self._thread.start()
        return self

    def resync(self) -> None:
        """Drop the watch and list again (the cache disagreed with a direct read)."""
        with self._lock:
            self.resource_version = None
        close = self._closer
        if close is not None:
            close()

    def stop(self) -> None:
        self._stop.set()
        self._ready.set()
        close = self._closer
        if close is not None:
            close()
