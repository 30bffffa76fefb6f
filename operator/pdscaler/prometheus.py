"""The only module that talks to Prometheus: instant queries over its HTTP API, and one
``MetricsSnapshot`` per tick for one PDDeployment.

Owns: the HTTP exchange (POST ``/api/v1/query``, the queries of a snapshot run
concurrently), its limits, which the URL's server cannot stretch: a total deadline per
query (connect, send, headers and body together, not per read), a cap on the body, no
redirects; which URLs the operator may contact at all (``url_allowed``, the operator's
allow-list); and the translation of every way it can fail into one typed error,
``MetricsUnavailableError``, with a machine ``reason`` and a sentence that never holds
the server's body or reason phrase (only the status code, its standard phrase, or the
``errorType: error`` of a Prometheus API error document, cut at 200 characters). What to
ask and how to read the answers is ``metricsql``'s (pure); what to do when metrics are
unavailable is the policy's (hold, never scale down) and the status' (condition
MetricsAvailable=False with the reason). Must not: decide anything, cache answers,
read the clock for ``now`` (it is passed in) or return 0 for "no data".

Also owns the connection's credentials (``metrics.prometheus.auth``, KEDA's bearer,
basic, TLS and custom headers): ``credentials_from`` assembles them from Secret values
``kube.read_secret`` read (``SecretCache`` keeps those a while), ``Credentials`` sends
them (``Authorization``, custom headers, CA, client certificate), and no value ever
reaches a message, a ``repr`` or a log. A 401/403 answer is ``PrometheusUnauthorized``;
a missing Secret, key or an unusable value ``SecretNotFound``, ``SecretKeyNotFound``,
``InvalidSecret``; a Secret the operator may not get ``SecretForbidden``. Redirects stay
unfollowed, so credentials go to the allowed URL only.

Two kinds of "not known", kept apart on purpose (KEDA's rule):

* Prometheus could not answer (connection refused, deadline, HTTP 3xx/4xx/5xx, not
  JSON, a body over the cap, a query Prometheus rejects, a custom template refused
  before sending, a URL the operator does not allow): ``read_snapshot`` raises
  ``MetricsUnavailableError``. The caller passes ``metrics=None`` to the policy.
* Prometheus answered, but without a usable number (empty, NaN, +Inf, several series,
  a stale pool): the snapshot holds ``None`` for those values and says why in
  ``problems``.

Worked example (the lab, 2 s scrapes)::

    client = PrometheusClient("http://127.0.0.1:29090", timeout=3.0)
    try:
        snap = read_snapshot(client, spec, "serving", "chat", now=time.time())
    except MetricsUnavailableError as err:
        snap = None          # err.reason == "PrometheusUnreachable",
                             # err.message == "cannot connect to http://127.0.0.1:29090:
                             #               connection refused"

A server dripping one byte every second ends the same way after 3 s (``no answer
within 3s``); one answering ``302`` gives ``http://...: HTTP 302: redirects are not
followed`` and its target is never contacted; a 1 GiB answer stops after the cap
(``answer larger than 4194304 bytes``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http
import http.client
import io
import json
import os
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pdscaler.metricsql import (
    DEFAULT_MAX_AGE_SECONDS,
    InvalidQueryError,
    Key,
    Query,
    assemble,
    build_queries,
)
from pdscaler.spec import PDDeploymentSpec, PrometheusSpec
from pdscaler.types import ConditionReason, MetricsErrorReason, MetricsSnapshot

DEFAULT_TIMEOUT_SECONDS = 3.0
#: The largest answer read (an instant query of pdscaler's reads a few series: a per-pod
#: vector of 10 000 pods is under 1 MiB); larger ones are refused, not read.
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
#: The Prometheus an unconfigured operator may query (the CRD's default URL).
DEFAULT_ALLOWED_URLS = ("http://prometheus.monitoring:9090",)

_API_ERROR_CHARS = 200
_ERROR_DOC_BYTES = 65536  # a non-200 body larger than this is not read as an error document
_READ_CHUNK = 65536
#: Idle kept-alive connections per Prometheus URL, and how long one is kept idle.
KEEP_IDLE_CONNECTIONS = 128
KEEP_IDLE_SECONDS = 30.0


class MetricsUnavailableError(Exception):
    """Prometheus could not give a snapshot. ``reason``: a ``MetricsErrorReason`` (its
    value, e.g. ``"QueryFailed"``, is accepted); ``message``: a sentence for the
    condition and the Event, e.g. ``QueryFailed`` /
    ``request_rate: bad_data: 1:6: parse error: unexpected "}"``."""

    def __init__(
        self, reason: MetricsErrorReason | str, message: str, *, timed_out: bool = False
    ) -> None:
        self.reason = MetricsErrorReason(reason)
        super().__init__(f"{self.reason}: {message}")
        self.message = message
        #: The query ran into its deadline: the server held a connection the whole time.
        self.timed_out = timed_out

    @property
    def condition_reason(self) -> ConditionReason:
        """The reason of the MetricsAvailable=False condition this error gives."""
        return self.reason.condition_reason


def _printable(text: str, limit: int) -> str:
    """``text`` on one line, control characters dropped, at most ``limit`` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text).strip()
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _api_error(doc: Any) -> str | None:
    """``"<errorType>: <error>"`` of a Prometheus API error document, else None."""
    if isinstance(doc, Mapping) and doc.get("status") == "error":
        text = f"{doc.get('errorType', 'error')}: {doc.get('error', 'no reason given')}"
        return _printable(text, _API_ERROR_CHARS)
    return None


def _load_json(body: bytes) -> Any:
    """The JSON document in ``body``; ValueError for anything else (including nesting
    deeper than the parser's recursion limit)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _connection_problem(err: BaseException) -> str:
    """``connection refused``, ``no answer in time``, ``name not resolved``..."""
    if isinstance(err, TimeoutError):
        return "no answer in time"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"name not resolved ({err.strerror})"
    if isinstance(err, ssl.SSLError):
        return f"TLS failed ({err.reason or type(err).__name__})"
    if isinstance(err, ConnectionError):
        return "connection closed"
    if isinstance(err, http.client.HTTPException):
        return "not an HTTP answer"
    return type(err).__name__


def shown_url(url: str) -> str:
    """``url`` as errors show it: without user information (``http://u:pw@h:1/p`` ->
    ``http://h:1/p``) and without a trailing slash."""
    parts = urllib.parse.urlsplit(url.rstrip("/"))
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# --------------------------------------------------------------------- the allow-list


def _origin(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path without trailing slash) of an http(s) URL with no user
    information, query or fragment; None for anything else."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    if "@" in parts.netloc or parts.query or parts.fragment or "\\" in url:
        return None
    if port is None:
        port = 443 if scheme == "https" else 80
    return scheme, parts.hostname.lower().rstrip("."), port, parts.path.rstrip("/")


def url_allowed(url: str, allowed: Sequence[str]) -> bool:
    """True when ``url`` is one of the ``allowed`` prefixes or below one: same scheme,
    host and port (80/443 when absent), and the path equal to or under the prefix's path,
    on a ``/`` boundary. A URL with user information, a query or a fragment is never
    allowed. Pure.

    >>> allowed = ["http://prometheus.monitoring:9090", "https://thanos.obs/prom"]
    >>> url_allowed("http://prometheus.monitoring:9090/", allowed)
    True
    >>> url_allowed("https://thanos.obs:443/prom/tenant-a", allowed)
    True
    >>> url_allowed("http://prometheus.monitoring:9090.evil.example", allowed)
    False
    >>> url_allowed("https://thanos.obs/prometheus", allowed)
    False
    >>> url_allowed("http://user@prometheus.monitoring:9090", allowed)
    False
    """
    want = _origin(url)
    if want is None:
        return False
    for prefix in allowed:
        have = _origin(prefix)
        if have is None or have[:3] != want[:3]:
            continue
        if want[3] == have[3] or want[3].startswith(have[3] + "/"):
            return True
    return False


def parse_allowed_urls(text: str) -> tuple[str, ...]:
    """The allow-list from its comma-separated form (blank items dropped):
    ``"http://a:9090, https://b/prom"`` -> ``("http://a:9090", "https://b/prom")``."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


# ------------------------------------------------------------------------ credentials


@dataclass(frozen=True, repr=False)
class Credentials:
    """What a client sends to authenticate, assembled from Secret values
    (``credentials_from``). Its ``repr`` names what is set, never a value:
    ``Credentials(basic, ca, client certificate, headers X-Scope-OrgID)``."""

    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    ca: bytes | None = None  # PEM bundle verifying the server
    cert: bytes | None = None  # PEM client certificate ...
    key: bytes | None = None  # ... and its private key
    headers: tuple[tuple[str, str], ...] = ()
    insecure_skip_verify: bool = False

    def __repr__(self) -> str:
        parts = [
            label
            for label, on in (
                ("bearer", self.bearer_token is not None),
                ("basic", self.username is not None),
                ("ca", self.ca is not None),
                ("client certificate", self.cert is not None),
                ("insecureSkipVerify", self.insecure_skip_verify),
            )
            if on
        ]
        if self.headers:
            parts.append("headers " + ", ".join(name for name, _ in self.headers))
        return f"Credentials({', '.join(parts)})"

    __str__ = __repr__

    def fingerprint(self) -> str:
        """A digest of every value (to key clients by; never shown)."""
        digest = hashlib.sha256()
        for part in (
            self.bearer_token,
            self.username,
            self.password,
            self.ca,
            self.cert,
            self.key,
            repr(self.headers) if self.headers else None,
            "insecure" if self.insecure_skip_verify else None,
        ):
            raw = part.encode() if isinstance(part, str) else part
            digest.update(b"\x00" if raw is None else b"\x01" + len(raw).to_bytes(8, "big") + raw)
        return digest.hexdigest()

    def request_headers(self) -> dict[str, str]:
        """The headers sent with every query: ``Authorization`` (Bearer or Basic) and
        the custom ones.

        >>> Credentials(username="u", password="p", headers=(("X-Scope-OrgID", "t1"),)
        ...             ).request_headers()
        {'X-Scope-OrgID': 't1', 'Authorization': 'Basic dTpw'}
        """
        out = dict(self.headers)
        if self.bearer_token is not None:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return out


#: Secret name -> its data (None: the Secret does not exist).
SecretData = Mapping[str, Mapping[str, bytes] | None]


def _text_value(value: bytes, where: str) -> str:
    """A token, user name, password or header value: UTF-8, surrounding whitespace
    removed (a Secret made with ``echo`` ends in a newline), not empty, no control
    characters (a header cannot carry them)."""
    try:
        text = value.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET, f"{where}: not UTF-8 text"
        ) from None
    if not text:
        raise MetricsUnavailableError(MetricsErrorReason.INVALID_SECRET, f"{where}: empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET, f"{where}: holds a line break or control character"
        )
    return text


def credentials_from(prom: PrometheusSpec, secrets: SecretData, namespace: str) -> Credentials:
    """The credentials ``prom.auth`` names, from the Secrets' data already read. Pure.

    Raises ``MetricsUnavailableError``: ``SecretNotFound`` (``secrets[name]`` is None),
    ``SecretKeyNotFound`` or ``InvalidSecret``, each naming the field, the Secret and the
    key, never a value: ``metrics.prometheus.auth.password: Secret serving/prom-creds
    has no key "pasword"``."""
    auth = prom.auth
    if auth is None:
        return Credentials(insecure_skip_verify=prom.insecure_skip_verify)

    def value(field_name: str, secret: str, key: str) -> bytes:
        where = f"metrics.prometheus.auth.{field_name}"
        data = secrets.get(secret)
        if data is None:
            raise MetricsUnavailableError(
                MetricsErrorReason.SECRET_NOT_FOUND,
                f"{where}: Secret {namespace}/{secret} not found",
            )
        if key not in data:
            raise MetricsUnavailableError(
                MetricsErrorReason.SECRET_KEY_NOT_FOUND,
                f"{where}: Secret {namespace}/{secret} has no key {key!r}",
            )
        return data[key]

    def text(field_name: str, ref: Any) -> str | None:
        if ref is None:
            return None
        raw = value(field_name, ref.name, ref.key)
        return _text_value(raw, f"metrics.prometheus.auth.{field_name} ({ref.name}/{ref.key})")

    def pem(field_name: str, ref: Any) -> bytes | None:
        if ref is None:
            return None
        raw = value(field_name, ref.name, ref.key)
        if b"-----BEGIN " not in raw:
            raise MetricsUnavailableError(
                MetricsErrorReason.INVALID_SECRET,
                f"metrics.prometheus.auth.{field_name} ({ref.name}/{ref.key}): not PEM",
            )
        return raw

    headers = tuple(
        (h.header, _text_value(value("customHeaders", h.name, h.key), f"header {h.header}"))
        for h in auth.custom_headers
    )
    return Credentials(
        bearer_token=text("bearerToken", auth.bearer_token),
        username=text("username", auth.username),
        password=text("password", auth.password),
        ca=pem("ca", auth.ca),
        cert=pem("cert", auth.cert),
        key=pem("key", auth.key),
        headers=headers,
        insecure_skip_verify=prom.insecure_skip_verify,
    )


@contextlib.contextmanager
def _pem_paths(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Paths ``ssl.load_cert_chain`` can read the client certificate and key from (it
    takes files only): anonymous in-memory files on Linux (``memfd``, nothing written
    to disk, readable only by this process), else private temporary files removed at
    once."""
    fds: list[int] = []
    if hasattr(os, "memfd_create"):
        try:
            for label, data in (("cert", cert), ("key", key)):
                fd = os.memfd_create(f"pdscaler-{label}", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
            return
        finally:
            for fd in fds:
                os.close(fd)
    with tempfile.TemporaryDirectory(prefix="pdscaler-tls-") as tmp:  # pragma: no cover
        paths = []
        for label, data in (("cert", cert), ("key", key)):
            path = os.path.join(tmp, label)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
                out.write(data)
            paths.append(path)
        yield paths[0], paths[1]


def tls_context(creds: Credentials | None) -> ssl.SSLContext:
    """The TLS context of an https client: the system CAs, or ``creds.ca`` only; the
    client certificate if given; verification off only with ``insecure_skip_verify``.
    Raises ``MetricsUnavailableError`` (``InvalidSecret``) for unusable PEM."""
    if creds is None:
        return ssl.create_default_context()
    try:
        if creds.ca is not None:
            ctx = ssl.create_default_context(cadata=creds.ca.decode("ascii", errors="replace"))
        else:
            ctx = ssl.create_default_context()
    except (ssl.SSLError, ValueError):
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET,
            "metrics.prometheus.auth.ca: no usable PEM certificate",
        ) from None
    if creds.cert is not None and creds.key is not None:
        try:
            with _pem_paths(creds.cert, creds.key) as (cert_path, key_path):
                ctx.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError, ValueError):
            raise MetricsUnavailableError(
                MetricsErrorReason.INVALID_SECRET,
                "metrics.prometheus.auth.cert/key: not a usable PEM certificate and key pair",
            ) from None
    if creds.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


#: How long a Secret read is used before it is read again.
DEFAULT_SECRET_TTL_SECONDS = 60.0


class SecretUnreadableError(Exception):
    """The API server refused a Secret read (not a 404): ``status``, ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


@dataclass
class _Cached:
    data: Mapping[str, bytes]
    read_at: float


@dataclass
class SecretCache:
    """The Secrets PDDeployments name, read through ``read`` (``kube.read_secret``,
    raising ``SecretUnreadableError`` for a refusal) and kept ``ttl`` seconds: each is
    read at most once per ``ttl`` however many PDDeployments and ticks use it, read
    again at once after Prometheus refused its credentials (``refresh``: a rotated
    password is picked up on the next tick), and dropped when no PDDeployment names it
    any more (``use``/``forget``). A missing Secret is not cached (read each tick until
    it appears). Thread-safe. Holds the values in memory only; never logs them.

    >>> cache = SecretCache(lambda ns, name: {"token": b"t0k3n"})
    >>> dict(cache.read("serving", ["prom-creds"], user=("serving", "chat")))
    {'prom-creds': {'token': b't0k3n'}}
    """

    read_secret: Callable[[str, str], Mapping[str, bytes] | None]
    ttl: float = DEFAULT_SECRET_TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _cache: dict[tuple[str, str], _Cached] = field(default_factory=dict)
    _users: dict[tuple[str, str], frozenset[tuple[str, str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    reads: int = 0  # API reads so far (tests)

    def read(
        self, namespace: str, names: Sequence[str], *, user: tuple[str, str]
    ) -> dict[str, Mapping[str, bytes] | None]:
        """The data of each Secret ``names`` in ``namespace`` (None: not found), as used
        by PDDeployment ``user``. Raises ``MetricsUnavailableError``
        (``SecretForbidden``, or ``PrometheusUnreachable`` for another API failure)."""
        keys = frozenset((namespace, n) for n in names)
        with self._lock:
            self._users[user] = keys
            self._prune()
        out: dict[str, Mapping[str, bytes] | None] = {}
        for name in names:
            out[name] = self._one(namespace, name)
        return out

    def _one(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        now = self.clock()
        with self._lock:
            hit = self._cache.get((namespace, name))
            if hit is not None and now - hit.read_at < self.ttl:
                return hit.data
        try:
            self.reads += 1
            data = self.read_secret(namespace, name)
        except SecretUnreadableError as err:
            if err.status == 403:
                raise MetricsUnavailableError(
                    MetricsErrorReason.SECRET_FORBIDDEN,
                    f"the operator may not get Secret {namespace}/{name} (403 {err.reason});"
                    " grant it get on secrets in this namespace (the chart's RBAC)",
                ) from None
            raise MetricsUnavailableError(
                MetricsErrorReason.UNREACHABLE, f"Secret {namespace}/{name} not read: {err}"
            ) from None
        with self._lock:
            if data is None:
                self._cache.pop((namespace, name), None)
            elif (namespace, name) in set().union(*self._users.values()):
                self._cache[(namespace, name)] = _Cached(data, now)
        return data

    def refresh(self, namespace: str, names: Sequence[str]) -> None:
        """Read these Secrets again on their next use (their credentials were refused)."""
        with self._lock:
            for name in names:
                self._cache.pop((namespace, name), None)

    def forget(self, user: tuple[str, str]) -> None:
        """PDDeployment ``user`` is gone: drop the Secrets no one else names."""
        with self._lock:
            self._users.pop(user, None)
            self._prune()

    def _prune(self) -> None:
        used: set[tuple[str, str]] = set().union(*self._users.values())
        for key in [k for k in self._cache if k not in used]:
            del self._cache[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)


# ------------------------------------------------------------------------ the exchange


class _DeadlineReader(io.RawIOBase):
    """Reads a socket with each ``recv`` bounded by the time left to one deadline, so a
    server sending a byte now and then cannot stretch the exchange past it. Holds the
    socket through its own ``makefile`` (the socket's file descriptor stays open while
    the reader is, as with ``http.client``'s own reader)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline passed")
        self._sock.settimeout(left)
        return self._raw.readinto(buffer) or 0

    def close(self) -> None:
        self._raw.close()
        super().close()


class _DeadlineSocket:
    """What ``http.client.HTTPResponse`` needs of a socket (``makefile``), reading
    through ``_DeadlineReader``."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


def _deadline_response(deadline: float) -> Any:
    """An ``HTTPConnection.response_class`` reading its socket within ``deadline``."""

    def make(sock: socket.socket, *args: Any, **kwargs: Any) -> http.client.HTTPResponse:
        return http.client.HTTPResponse(
            _DeadlineSocket(sock, deadline),  # type: ignore[arg-type]
            *args,
            **kwargs,
        )

    return make


class _TooLargeError(Exception):
    pass


def _read_capped(resp: http.client.HTTPResponse, cap: int) -> bytes:
    """The body, or ``_TooLargeError`` as soon as it is known to exceed ``cap`` bytes
    (an announced Content-Length is checked before reading anything)."""
    if resp.length is not None and resp.length > cap:
        raise _TooLargeError
    chunks: list[bytes] = []
    size = 0
    while chunk := resp.read(_READ_CHUNK):
        size += len(chunk)
        if size > cap:
            raise _TooLargeError
        chunks.append(chunk)
    return b"".join(chunks)


def _phrase(code: int) -> str:
    """The standard phrase of an HTTP status (never the server's own words)."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "non-standard status"


class PrometheusStats:
    """Queries sent and connections opened, summed over the clients sharing it
    (thread-safe; the operator exports them as ``pdscaler_prometheus_requests_total``
    and ``pdscaler_prometheus_connections_total``)."""

    def __init__(self) -> None:
        self.queries = 0
        self.connections = 0
        self._lock = threading.Lock()

    def query_sent(self) -> None:
        with self._lock:
            self.queries += 1

    def connection_opened(self) -> None:
        with self._lock:
            self.connections += 1


class PrometheusClient:
    """Instant queries against one Prometheus (``url`` may carry a path prefix, e.g.
    ``http://gateway/prometheus``). ``timeout`` is the total deadline of one query;
    ``max_body_bytes`` the largest answer read; ``credentials`` the Authorization and
    custom headers sent with every query and, for https, the CA, client certificate and
    verification (``tls_context``). Its only state besides its settings is up to
    ``KEEP_IDLE_CONNECTIONS`` idle kept-alive connections, under a lock: safe to share
    between threads and ticks; ``close`` closes them."""

    def __init__(
        self,
        url: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        credentials: Credentials | None = None,
        stats: PrometheusStats | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.stats = stats if stats is not None else PrometheusStats()
        self.shown = shown_url(self.url)
        self.timeout = timeout
        self.max_body_bytes = max_body_bytes
        parts = urllib.parse.urlsplit(self.url)
        self._https = parts.scheme.lower() == "https"
        self._host = parts.hostname or ""
        try:
            self._port = parts.port or (443 if self._https else 80)
        except ValueError:
            self._port = 0
        self._path = parts.path.rstrip("/") + "/api/v1/query"
        self.credentials = credentials
        self._headers = credentials.request_headers() if credentials is not None else {}
        # raises MetricsUnavailableError (InvalidSecret) for unusable PEM
        self._tls = tls_context(credentials) if self._https else None
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []
        self._idle_lock = threading.Lock()

    def query(self, promql: str, at: float | None = None) -> dict[str, Any]:
        """The JSON answer of an instant query (``status`` is ``success``), evaluated at
        ``at`` (seconds since the epoch; None: Prometheus' now). Sent as a form POST (no
        URL length limit), with Prometheus' own ``timeout`` set to ours so a slow query is
        abandoned on both sides. Raises ``MetricsUnavailableError``."""
        form = {"query": promql, "timeout": f"{self.timeout:g}s"}
        if at is not None:
            form["time"] = f"{at:.3f}"
        deadline = time.monotonic() + self.timeout
        self.stats.query_sent()
        try:
            code, body = self._post(urllib.parse.urlencode(form).encode(), deadline)
        except _TooLargeError:
            raise MetricsUnavailableError(
                MetricsErrorReason.BAD_ANSWER,
                f"{self.shown}: answer larger than {self.max_body_bytes} bytes",
            ) from None
        except (OSError, ValueError, http.client.HTTPException) as err:  # refused, timeout...
            problem = _connection_problem(err)
            timed_out = problem == "no answer in time"
            if timed_out:
                problem = f"no answer within {self.timeout:g}s"
            raise MetricsUnavailableError(
                MetricsErrorReason.UNREACHABLE,
                f"cannot connect to {self.shown}: {problem}",
                timed_out=timed_out,
            ) from None
        if code != 200:
            raise self._http_error(code, body)
        try:
            doc = _load_json(body or b"")
        except ValueError:
            raise MetricsUnavailableError(
                MetricsErrorReason.BAD_ANSWER, f"{self.shown}: answered 200 with no JSON"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            api = _api_error(doc)
            if api is None:
                raise MetricsUnavailableError(
                    MetricsErrorReason.BAD_ANSWER, f"{self.shown}: not a Prometheus API answer"
                )
            raise MetricsUnavailableError(MetricsErrorReason.QUERY_FAILED, api)
        return doc

    def _post(self, form: bytes, deadline: float) -> tuple[int, bytes | None]:
        """(status, body) of one POST; the body of a non-200 only if it is small
        (``None`` otherwise); every step within ``deadline``. Redirects are answers like
        any other status: never followed. Sent on an idle kept-alive connection when
        there is one (``_acquire``); a kept connection the server has closed meanwhile
        is replaced by a new one once."""
        reused, conn = self._acquire(deadline)
        try:
            return self._exchange(conn, form, deadline)
        except (ConnectionError, http.client.BadStatusLine):  # (not TimeoutError: no retry)
            if not reused:
                raise
            conn.close()
            _, conn = self._connect(deadline)  # a stale kept-alive connection: once more
            return self._exchange(conn, form, deadline)

    def _connect(self, deadline: float) -> tuple[bool, http.client.HTTPConnection]:
        left = deadline - time.monotonic()
        conn: http.client.HTTPConnection
        if self._tls is not None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=left, context=self._tls
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=left)
        self.stats.connection_opened()
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        return False, conn

    def _acquire(self, deadline: float) -> tuple[bool, http.client.HTTPConnection]:
        """(reused, a connected connection): an idle one kept from an earlier query (not
        idle for longer than ``KEEP_IDLE_SECONDS``), else a new one."""
        now = time.monotonic()
        with self._idle_lock:
            while self._idle:
                since, conn = self._idle.pop()
                if now - since < KEEP_IDLE_SECONDS and conn.sock is not None:
                    return True, conn
                conn.close()
        return self._connect(deadline)

    def _release(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        """Keep ``conn`` for the next query if its answer was read to the end and the
        server keeps it open; else close it."""
        if resp.isclosed() and not resp.will_close and conn.sock is not None:
            with self._idle_lock:
                if len(self._idle) < KEEP_IDLE_CONNECTIONS:
                    self._idle.append((time.monotonic(), conn))
                    return
        conn.close()

    def close(self) -> None:
        """Close the kept-alive connections (the client stays usable)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for _, conn in idle:
            conn.close()

    def _exchange(
        self, conn: http.client.HTTPConnection, form: bytes, deadline: float
    ) -> tuple[int, bytes | None]:
        resp: http.client.HTTPResponse | None = None
        try:
            if conn.sock is None:  # pragma: no cover (connect sets it or raises)
                raise ConnectionError("no socket")
            conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            conn.request(
                "POST",
                self._path,
                body=form,
                headers={
                    **self._headers,
                    "Content-Type": "application/x-www-form-urlencoded",
                },
            )
            conn.response_class = _deadline_response(deadline)
            resp = conn.getresponse()
            if resp.status == 200:
                return 200, _read_capped(resp, self.max_body_bytes)
            if 300 <= resp.status < 400:
                return resp.status, None
            try:
                return resp.status, _read_capped(resp, _ERROR_DOC_BYTES)
            except _TooLargeError:
                return resp.status, None
        finally:
            if resp is not None:
                self._release(conn, resp)
                resp.close()
            else:
                conn.close()

    def _http_error(self, code: int, body: bytes | None) -> MetricsUnavailableError:
        """400 (bad_data) and 422 (execution) with Prometheus' error document are the
        query's fault; anything else (3xx: not followed, 404: not a Prometheus API, 5xx)
        the server's, named by its status only."""
        if 300 <= code < 400:
            return MetricsUnavailableError(
                MetricsErrorReason.HTTP_ERROR,
                f"{self.shown}: HTTP {code}: redirects are not followed",
            )
        if code in (401, 403):
            sent = (
                "the credentials of metrics.prometheus.auth were refused"
                if self._headers or (self.credentials and self.credentials.cert)
                else "the server wants credentials (metrics.prometheus.auth)"
            )
            return MetricsUnavailableError(
                MetricsErrorReason.UNAUTHORIZED,
                f"{self.shown}: HTTP {code}: {_phrase(code)}: {sent}",
            )
        try:
            api = _api_error(_load_json(body)) if body else None
        except ValueError:
            api = None
        if api is not None and code in (400, 422):
            return MetricsUnavailableError(MetricsErrorReason.QUERY_FAILED, api)
        detail = api or _phrase(code)
        return MetricsUnavailableError(
            MetricsErrorReason.HTTP_ERROR, f"{self.shown}: HTTP {code}: {detail}"
        )


def run_queries(
    client: PrometheusClient, queries: Sequence[Query], at: float
) -> dict[Key, dict[str, Any]]:
    """Every query's answer. The first query runs alone, as a probe: a server that fails
    it (unreachable, too slow, too large, a redirect) costs one connection and one body
    cap, not one per query. The others then run concurrently (one thread each), so a
    snapshot takes at most two timeouts. If any fails, raises the error of the first
    failing query in ``queries`` order (deterministic), its key prefixed to a query
    failure's message."""
    if not queries:
        return {}

    def one(q: Query) -> dict[str, Any]:
        try:
            return client.query(q.promql, at)
        except MetricsUnavailableError as err:
            if err.reason == MetricsErrorReason.QUERY_FAILED:
                raise MetricsUnavailableError(err.reason, f"{q.key}: {err.message}") from None
            raise

    answers: dict[Key, dict[str, Any]] = {queries[0].key: one(queries[0])}
    rest = queries[1:]
    if not rest:
        return answers
    with ThreadPoolExecutor(max_workers=len(rest), thread_name_prefix="promql") as pool:
        futures = [pool.submit(one, q) for q in rest]
    for q, future in zip(rest, futures, strict=True):
        err = future.exception()
        if err is not None:
            raise err
        answers[q.key] = future.result()
    return answers


def read_snapshot(
    client: PrometheusClient,
    spec: PDDeploymentSpec,
    namespace: str,
    name: str,
    now: float,
    *,
    max_age: float = DEFAULT_MAX_AGE_SECONDS,
) -> MetricsSnapshot:
    """The metrics of PDDeployment ``namespace/name`` at ``now``: the queries of its
    preset (``metricsql.build_queries``), evaluated at ``now``, read by
    ``metricsql.assemble`` (unknown values are None with a reason in ``problems``).

    Raises ``MetricsUnavailableError`` when Prometheus cannot answer (module docstring),
    including ``InvalidQuery`` for a custom template refused before sending. E.g. the
    lab exporter serving 4 req/s at 2000 prompt / 500 output tokens gives
    ``request_rate ~ 4.0, prompt_tokens ~ 2000.0, output_tokens ~ 500.0``.
    """
    try:
        queries = build_queries(spec, namespace, name)
    except InvalidQueryError as err:
        raise MetricsUnavailableError(MetricsErrorReason.INVALID_QUERY, str(err)) from None
    answers = run_queries(client, queries, at=now)
    return assemble(queries, answers, now=now, max_age=max_age)
