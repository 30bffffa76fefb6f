"""The API client under the operator's reads and writes: one request, paced, retried,
counted (part of ``pdscaler.kube``, the only package that talks to the API server).

Owns: ``load_api_client`` (the kubeconfig or in-cluster ``ApiClient``), the paths of the
kinds the operator reads and writes, and ``Client``, the transport every request goes
through: ``_call`` counts it by verb and resource (``request_counts``, ``request_kind``)
and, except the Lease's, paces it by a token bucket (``limiter``, ``TokenBucket``) and
retries it with exponential backoff and jitter (``backoff``) when that is safe
(``retry_reason``: a read on 429, 5xx and connection errors; a write only when it
provably did not reach the server: 429, or no connection), within ``RETRY_ATTEMPTS``
tries and ``RETRY_BUDGET_SECONDS``, each retry counted in ``retry_counts``
(``pdscaler_kube_retries_total``); ``_watch`` opens a WATCH stream for the caches
(``cache.Informer``). The client library's own silent retries are off (``send_once``):
urllib3 re-sent each request up to 3 more times inside one try, after the fence's
check, PUT and DELETE included (16 sends for one read of a tick). A non-2xx answer is
a ``KubeError``. Must not: know what is read or written (``reads`` and ``writes`` do),
or keep any object.

    backoff(3, 0.2, 5.0, rng=lambda: 1.0)   # 0.8: the third try waits 0.2 * 2**2
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from pdscaler.groups import LWS_API_VERSION, LWS_KIND, LWS_PLURAL
from pdscaler.spec import GROUP, KIND, PLURAL, VERSION

Obj = dict[str, Any]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
#: connect, read timeouts of one try of a tick's request (the watch has its own)
REQUEST_TIMEOUT = (5.0, 15.0)
#: one try of a Lease request: the elector's round (GET + PUT) stays inside the 10 s
#: renew deadline, and a stuck API server costs a round, not the fence's whole term
LEASE_TIMEOUT = (2.0, 4.0)
#: A watch that delivered no byte for its timeoutSeconds plus this is given up on (a
#: half-open connection: ``cache.WATCH_TIMEOUT_SECONDS``).
WATCH_READ_SLACK_SECONDS = 10.0

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
#: No try starts this many seconds after the first did: one request of a tick takes at
#: most the budget plus one try's timeouts (15 + 20 s) instead of 4 x 35 s + backoffs.
RETRY_BUDGET_SECONDS = 15.0
#: Methods a failed answer or a broken connection may re-send: only reads. A write is
#: re-sent only when it provably was not processed (429, or no connection made).
IDEMPOTENT_METHODS = frozenset({"GET"})


def retry_reason(method: str, err: BaseException) -> str | None:
    """Why ``method`` may be sent again after ``err`` (the ``reason`` label of
    ``pdscaler_kube_retries_total``), None when it must not be.

    >>> retry_reason("GET", KubeError(503, "ServiceUnavailable", ""))
    '503'
    >>> retry_reason("PUT", KubeError(503, "ServiceUnavailable", "")) is None
    True
    >>> retry_reason("DELETE", KubeError(429, "TooManyRequests", ""))
    '429'
    >>> retry_reason("PATCH", urllib3.exceptions.NewConnectionError(None, "refused"))
    'connect'
    >>> retry_reason("PUT", urllib3.exceptions.ProtocolError("reset")) is None
    True
    """
    if isinstance(err, KubeError):
        if err.status == 429 or (err.status in RETRY_STATUSES and method in IDEMPOTENT_METHODS):
            return str(err.status)
        return None
    connect = (
        urllib3.exceptions.NewConnectionError,
        urllib3.exceptions.ConnectTimeoutError,
        ConnectionRefusedError,
    )
    if isinstance(err, connect):
        return "connect"  # nothing reached the server: any method may try again
    if isinstance(err, urllib3.exceptions.HTTPError | OSError) and method in IDEMPOTENT_METHODS:
        return "read"
    return None


def send_once(api: Any) -> None:
    """Turn off the client library's silent retries on ``api`` (an ``ApiClient``): each
    ``pool_manager.request`` sends the request once (``retries=False``), so every
    re-send is ``Client._call``'s: bounded, counted and, for a fenced write, checked
    against the fence again. Idempotent; a stand-in without a pool is left alone."""
    rest = getattr(api, "rest_client", None)
    pool = getattr(rest, "pool_manager", None)
    if pool is None or getattr(pool, "_pdscaler_send_once", False):
        return
    send = pool.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        kwargs["retries"] = False
        return send(method, url, *args, **kwargs)

    pool.request = request
    pool._pdscaler_send_once = True


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
    configuration.retries = False  # Client._call retries, bounded and counted
    api = k8s_client.ApiClient(configuration)
    send_once(api)
    return api


PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Pod": "/api/v1/namespaces/{ns}/pods",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "Event": "/api/v1/namespaces/{ns}/events",
    "Secret": "/api/v1/namespaces/{ns}/secrets",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    LWS_KIND: f"/apis/{LWS_API_VERSION}/namespaces/{{ns}}/{LWS_PLURAL}",
    KIND: f"/apis/{GROUP}/{VERSION}/namespaces/{{ns}}/{PLURAL}",
}


def collection_path(kind: str, namespace: str) -> str:
    return PATHS[kind].format(ns=quote(namespace, safe=""))


def item_path(kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(kind, namespace)}/{quote(name, safe='')}"


def lease_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return f"{path}/{quote(name, safe='')}" if name is not None else path


def name_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _retry_after(response: Any) -> float | None:
    """The seconds of a ``Retry-After: <seconds>`` header (a date: None)."""
    headers = getattr(response, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Client:
    """The transport of one operator process (thread-safe): ``api`` (the client
    library's ``ApiClient``: host, TLS, credentials), ``limiter``, ``request_counts``,
    ``retries`` (and ``retry_counts`` by verb, resource and reason) and ``reads`` (GETs
    and LISTs sent). ``request_timeout`` and ``lease_timeout`` are one try's (connect,
    read) timeouts."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        *,
        qps: float = 0.0,
        burst: int = DEFAULT_BURST,
    ) -> None:
        self.api = api_client if api_client is not None else load_api_client()
        self.reads = 0
        self.request_counts = RequestCounts()
        #: client-side rate limit of reads and writes (qps <= 0: none)
        self.limiter = TokenBucket(qps, burst)
        self.retries = 0  # requests sent again after a 429, 5xx or connection error
        #: (verb, resource, reason) -> requests sent again (pdscaler_kube_retries_total)
        self.retry_counts: dict[tuple[str, str, str], int] = {}
        self._retry_lock = threading.Lock()
        self.request_timeout = REQUEST_TIMEOUT
        self.lease_timeout = LEASE_TIMEOUT
        self.watch_read_slack = WATCH_READ_SLACK_SECONDS
        self.sleep: Callable[[float], None] = time.sleep
        self.rng: Callable[[], float] = random.random
        self.monotonic: Callable[[], float] = time.monotonic
        send_once(self.api)

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
        but the Lease's), after a token of ``limiter`` and, when ``retry_reason`` says it
        is safe, retried: ``RETRY_ATTEMPTS`` tries in all, none started more than
        ``RETRY_BUDGET_SECONDS`` after the first, waiting an exponential backoff with
        jitter (or the answer's Retry-After, at most the backoff's cap) in between."""
        kind = request_kind(method, path, query)
        attempt = 0
        first = self.monotonic()
        while True:
            attempt += 1
            if limited:
                self.limiter.take()
            self.request_counts.add(*kind)
            try:
                return self._request(method, path, query, body, content_type)
            except (KubeError, urllib3.exceptions.HTTPError, OSError) as err:
                reason = retry_reason(method, err) if limited else None
                if reason is None or attempt >= RETRY_ATTEMPTS:
                    raise
                wait = backoff(attempt, RETRY_BASE_SECONDS, RETRY_CAP_SECONDS, self.rng)
                after = err.retry_after if isinstance(err, KubeError) else None
                if after is not None:
                    wait = min(max(after, 0.0), RETRY_CAP_SECONDS)
                if self.monotonic() + wait - first > RETRY_BUDGET_SECONDS:
                    raise
                why = (
                    f"{err.status} {err.reason}"
                    if isinstance(err, KubeError)
                    else type(err).__name__
                )
            self._count_retry(kind, reason)
            log.info("%s %s: %s; try %d in %.2fs", method, path, why, attempt + 1, wait)
            self.sleep(wait)

    def _count_retry(self, kind: tuple[str, str], reason: str) -> None:
        with self._retry_lock:
            self.retries += 1
            key = (*kind, reason)
            self.retry_counts[key] = self.retry_counts.get(key, 0) + 1

    def retry_snapshot(self) -> dict[tuple[str, str, str], int]:
        """``retry_counts`` now (a copy; ``pdscaler_kube_retries_total``)."""
        with self._retry_lock:
            return dict(self.retry_counts)

    def _watch(
        self, path: str, query: Mapping[str, str]
    ) -> tuple[Callable[[], None], Iterator[Obj]]:
        """Open a WATCH of ``path``: (a function that closes it, its events); reading
        it raises a timeout once no byte came for ``timeoutSeconds`` +
        ``watch_read_slack`` s. Raises ``KubeError`` when the API server refuses it."""
        self.request_counts.add(*request_kind("GET", path, query))
        url = self.api.configuration.host + path + "?" + urlencode(query)
        headers = self._headers("GET", path, {"Accept": JSON})
        # no byte for the server's timeout plus the slack: a half-open connection
        timeout = (
            REQUEST_TIMEOUT[0],
            float(query.get("timeoutSeconds", "300")) + self.watch_read_slack,
        )
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
        timeout = self.lease_timeout if "/coordination.k8s.io/" in path else self.request_timeout
        response = self.api.call_api(
            method, url, header_params=headers, body=body, _request_timeout=timeout
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
