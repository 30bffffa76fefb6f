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

Reads of the owned objects come, with ``cache=True`` (``pdscaler run``), from one
``Informer`` per kind and namespace (list + watch of the objects labelled
``pdscaler.io/name``), so a converged tick reads only its PDDeployment. Every request
goes through ``Kube._call``: counted by verb and resource (``request_counts``), and,
except the Lease's, paced by a token bucket (``limiter``) and retried with exponential
backoff and jitter on 429, 5xx and connection errors.

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
import contextlib
import copy
import json
import logging
import os
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
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

log = logging.getLogger("pdscaler.kube")

#: Client-side rate limit of the requests a tick makes (reads and writes; watches and
#: the Lease are not limited): a token bucket of ``DEFAULT_QPS`` tokens a second holding
#: at most ``DEFAULT_BURST``.
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
#: Answers retried with exponential backoff and jitter (besides connection errors).
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_ATTEMPTS = 4  # tries in all, the first included
RETRY_BASE_SECONDS = 0.2
RETRY_CAP_SECONDS = 5.0
#: An informer's backoff between failed list/watch rounds (doubling up to the cap). The
#: cap bounds how long after an API-server outage the caches (and so the ticks, which
#: wait for them) resume: with 30 s, the first tick came 25 s after a 25 s outage ended.
WATCH_BACKOFF_BASE_SECONDS = 0.5
WATCH_BACKOFF_CAP_SECONDS = 4.0
WATCH_TIMEOUT_SECONDS = 240  # the API server ends a watch after this (then re-watched)
#: How long a tick waits for a namespace's caches to hold a first full list.
SYNC_TIMEOUT_SECONDS = 20.0
#: How long a wanted name read as absent (not in the caches, 404 by name) is believed
#: absent without asking again; a CREATE of such a name asks once more first.
ABSENT_TTL_SECONDS = 120.0
#: The kinds a tick reads, cached per namespace by an informer (list + watch of the
#: objects labelled ``pdscaler.io/name``).
CACHED_KINDS = ("Deployment", "Service", "Pod", "ServiceAccount", "Role", "RoleBinding")


def backoff(
    attempt: int, base: float, cap: float, rng: Callable[[], float] = random.random
) -> float:
    """Seconds to wait before try ``attempt + 1`` (``attempt`` >= 1 failures so far):
    ``base * 2**(attempt - 1)``, at most ``cap``, times a jitter in [0.5, 1) so that
    clients failing together do not retry together.

    >>> [backoff(n, 0.2, 5.0, rng=lambda: 1.0) for n in (1, 2, 3, 6, 7)]
    [0.2, 0.4, 0.8, 5.0, 5.0]
    """
    return min(cap, base * 2.0 ** max(attempt - 1, 0)) * (0.5 + rng() / 2)


class TokenBucket:
    """``qps`` tokens a second, at most ``burst`` saved; ``take()`` waits for one.
    Thread-safe. ``qps`` <= 0: unlimited. Example: qps 20, burst 40: 40 requests at
    once, then one every 50 ms."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(int(burst), 1)
        self.clock = clock
        self.sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds spent waiting for tokens, in all

    def take(self) -> float:
        """Take a token, waiting for it if need be; returns the seconds waited."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0  # may go negative: the debt is this caller's wait
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self.waited += wait
        if wait > 0:
            self.sleep(wait)
        return wait


@dataclass
class RequestCounts:
    """API requests sent, by (verb, resource): ``("list", "pods")``, ``("watch",
    "deployments")``, ``("patch", "pddeployments")``... Thread-safe; the operator exports
    them as ``pdscaler_kube_requests_total{verb,resource}``."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, verb: str, resource: str) -> None:
        with self._lock:
            self.counts[(verb, resource)] = self.counts.get((verb, resource), 0) + 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())


def request_kind(method: str, path: str, query: Mapping[str, str] | None) -> tuple[str, str]:
    """(verb, resource) of one request, as the API server's audit names them.

    >>> request_kind("GET", "/api/v1/namespaces/s/pods", {"labelSelector": "a=b"})
    ('list', 'pods')
    >>> request_kind("GET", "/api/v1/namespaces/s/pods", {"watch": "1"})
    ('watch', 'pods')
    >>> request_kind("PATCH", "/apis/apps/v1/namespaces/s/deployments/d/status", None)
    ('patch', 'deployments/status')
    """
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        rest = parts[parts.index("namespaces") + 2 :]
    else:  # cluster-scoped collection: /apis/<group>/<version>/<plural>[/<name>]
        rest = parts[3:] if parts[:1] == ["apis"] else parts[2:]
    resource = rest[0] if rest else "?"
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    item = len(rest) > 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        watch = (query or {}).get("watch") in ("1", "true")
        verb = "watch" if watch else "get" if item else "list"
    return verb, resource


class KubeError(RuntimeError):
    """A non-2xx answer: ``status`` (409, 422, ...), ``reason`` (``AlreadyExists``);
    ``retry_after``: the seconds of a ``Retry-After`` header, when there was one."""

    def __init__(
        self, status: int, reason: str, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class CacheNotSyncedError(KubeError):
    """A namespace's caches hold no full list yet: the tick reads nothing, writes nothing
    and is retried (the next tick waits again)."""

    def __init__(self, what: str) -> None:
        super().__init__(0, "CacheNotSynced", f"{what}: cache not synced yet")


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
        kube: Kube,
        kind: str,
        namespace: str,
        *,
        rng: Callable[[], float] = random.random,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.kube = kube
        self.kind = kind
        self.namespace = namespace
        self.path = _collection(kind, namespace)
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
            items[_name(item)] = item
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
        name = _name(obj)
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
            if _newer_or_same(item, self._items.get(_name(item))):
                self._items[_name(item)] = item

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

    def stop(self) -> None:
        self._stop.set()
        self._ready.set()
        close = self._closer
        if close is not None:
            close()


class Kube:
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
        self.api = api_client if api_client is not None else load_api_client()
        self.audit = audit if audit is not None else WriteAudit()
        self.reads = 0
        self.request_counts = RequestCounts()
        #: client-side rate limit of reads and writes (qps <= 0: none)
        self.limiter = TokenBucket(qps, burst)
        self.retries = 0  # requests sent again after a 429, 5xx or connection error
        self.sleep: Callable[[float], None] = time.sleep
        self.rng: Callable[[], float] = random.random
        #: observe() reads the owned objects from per-namespace informers (else: LISTs)
        self.cache = cache
        self._informers: dict[str, dict[str, Informer]] = {}
        self._informers_lock = threading.Lock()
        #: (namespace, kind, name) -> monotonic time a wanted name was read as absent
        self._absent: dict[tuple[str, str, str], float] = {}
        self.monotonic: Callable[[], float] = time.monotonic

    # ------------------------------------------------------------------ transport

    def _call(
        self,
        method: str,
        path: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        *,
        limited: bool = True,
    ) -> Obj:
        """``_request``, counted in ``request_counts``; when ``limited`` (every request
        but the Lease's), after a token of ``limiter`` and retried on 429, 5xx and
        connection errors: ``RETRY_ATTEMPTS`` tries in all, waiting an exponential
        backoff with jitter (or the answer's Retry-After, at most the backoff's cap)."""
        kind = request_kind(method, path, query)
        attempt = 0
        while True:
            attempt += 1
            if limited:
                self.limiter.take()
            self.request_counts.add(*kind)
            try:
                return self._request(method, path, query, body, content_type)
            except KubeError as err:
                if not limited or err.status not in RETRY_STATUSES or attempt >= RETRY_ATTEMPTS:
                    raise
                wait = backoff(attempt, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS, self.rng)
                if err.retry_after is not None:
                    wait = min(max(err.retry_after, 0.0), RETRY_CAP_SECONDS)
                why = f"{err.status} {err.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as err:
                if not limited or attempt >= RETRY_ATTEMPTS:
                    raise
                wait = backoff(attempt, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS, self.rng)
                why = type(err).__name__
            self.retries += 1
            log.info("%s %s: %s; try %d in %.2fs", method, path, why, attempt + 1, wait)
            self.sleep(wait)

    def _watch(
        self, path: str, query: Mapping[str, str]
    ) -> tuple[Callable[[], None], Iterator[Obj]]:
        """Open a WATCH of ``path``: (a function that closes it, its events). Raises
        ``KubeError`` when the API server refuses it."""
        self.request_counts.add(*request_kind("GET", path, query))
        url = self.api.configuration.host + path + "?" + urlencode(query)
        headers = self._headers("GET", path, {"Accept": JSON})
        timeout = (REQUEST_TIMEOUT[0], float(query.get("timeoutSeconds", "300")) + 30.0)
        response = self.api.call_api("GET", url, header_params=headers, _request_timeout=timeout)
        raw: Any = getattr(response, "response", response)
        if not 200 <= response.status <= 299:
            text = response.read().decode("utf-8", errors="replace")  # type: ignore[no-untyped-call]
            try:
                data = json.loads(text)
            except ValueError:
                data = {"message": text}
            raise KubeError(
                response.status, str(data.get("reason", "")), str(data.get("message", ""))
            )

        def close() -> None:
            stop = getattr(raw, "shutdown", None) or raw.close
            with contextlib.suppress(Exception):  # already closed
                stop()

        def events() -> Iterator[Obj]:
            buffer = b""
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        if isinstance(event, dict):
                            yield event

        return close, events()

    def _headers(
        self, method: str, path: str, headers: dict[str, str], body: Any = None
    ) -> dict[str, str]:
        """``headers`` with the client's default headers and its credentials (the bearer
        token) for ``method path``, as every request and watch sends them."""
        headers.update(self.api.default_headers)
        self.api.update_params_for_auth(headers, None, ["BearerToken"], path, method, body)
        return headers

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
        headers = self._headers(method, path, {"Accept": JSON, "Content-Type": content_type}, body)
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
                response.status,
                str(data.get("reason", "")),
                str(data.get("message", "")),
                retry_after=_retry_after(response),
            )
        return data if isinstance(data, dict) else {}

    def _get(
        self, path: str, query: Mapping[str, str] | None = None, *, limited: bool = True
    ) -> Obj | None:
        self.reads += 1
        try:
            return self._call("GET", path, query, limited=limited)
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
        return self._call(method, path, params, body, content_type)

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
        are read by name), so the planner can refuse a foreign object.

        With ``cache``: read from the namespace's informers (``informers``; waits for
        their first list, ``CacheNotSyncedError`` after ``SYNC_TIMEOUT_SECONDS``); a
        wanted name the caches do not hold (not created yet, or a foreign unlabelled
        object) is read by name, and when it is absent, believed absent for
        ``ABSENT_TTL_SECONDS`` (``execute`` asks again before creating it, so a
        foreign object that appeared meanwhile is never taken over). Without: three
        LISTs and a GET per wanted name."""
        selector = {naming.LABEL_NAME: name}
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
        others: list[Obj] = []
        seen = {("Deployment", _name(d)) for d in deployments}
        seen |= {("Service", _name(s)) for s in services}
        for kind, obj_name in wanted:
            if (kind, obj_name) in seen or kind not in _PATHS:
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
                {"Deployment": deployments, "Service": services}.get(kind, others).append(found)
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
            _item(kind, meta["namespace"], meta["name"]),
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
                _item("Pod", namespace, name),
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
            if action.verb is Verb.CREATE:
                self._check_still_absent(action.kind, namespace, action.name)
            self.apply(action.body, verb=action.verb.value)
        elif action.verb is Verb.ANNOTATE_POD:
            self.annotate_pod(namespace, action.name, action.annotations or {})
        elif action.verb is Verb.RELABEL_POD:
            self.relabel_pod(namespace, action.name, action.labels or {}, action.annotations or {})
        elif action.verb is Verb.DELETE:
            self.delete(action.kind, namespace, action.name, _uid_of(observed, action))

    # ---------------------------------------------------------------------- Lease

    def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease (None when it does not exist)."""
        return self._get(_lease_path(namespace, name), limited=False)

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
        return self._call("POST", _lease_path(namespace), query, body, limited=False)

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
        return self._call("PUT", _lease_path(namespace, name), query, body, limited=False)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _uid_of(observed: Observed, action: Action) -> str | None:
    pool = {"Deployment": observed.deployments, "Service": observed.services}
    for obj in pool.get(action.kind, observed.others):
        if _name(obj) == action.name and obj.get("kind", action.kind) == action.kind:
            uid = obj.get("metadata", {}).get("uid")
            return str(uid) if uid else None
    return None


def _retry_after(response: Any) -> float | None:
    """The seconds of a ``Retry-After: <seconds>`` header (a date: None)."""
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
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
        qps: float = 0.0,
        burst: int = DEFAULT_BURST,
        cache: bool = False,
    ) -> None:
        super().__init__(api_client, audit, qps=qps, burst=burst, cache=cache)
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
