"""The HTTP exchange with one Prometheus: instant queries over its API.

Owns: POST ``/api/v1/query`` with limits the URL's server cannot stretch (a total
deadline per query, connect to body; a cap on the body; no redirects), kept-alive
connections, the credentials sent with each query, the count of queries and connections
(``PrometheusStats``), and the translation of every failure into
``MetricsUnavailableError``. Must not: decide anything, cache answers or return 0 for
"no data".
"""

from __future__ import annotations

import http
import http.client
import io
import socket
import threading
import time
import urllib.parse
from typing import Any

from pdscaler.prometheus.auth import Credentials, tls_context
from pdscaler.prometheus.errors import (
    MetricsUnavailableError,
    _api_error,
    _connection_problem,
    _load_json,
    shown_url,
)
from pdscaler.types import MetricsErrorReason

DEFAULT_TIMEOUT_SECONDS = 3.0
#: The largest answer read (an instant query of pdscaler's reads a few series: a per-pod
#: vector of 10 000 pods is under 1 MiB); larger ones are refused, not read.
DEFAULT_MAX_BODY_BYTES = 4 * 2**20
_ERROR_DOC_BYTES = 65536  # a non-200 body larger than this is not read as an error document
_READ_CHUNK = 65536
#: Idle kept-alive connections per Prometheus URL, and how long one is kept idle.
KEEP_IDLE_CONNECTIONS = 128
KEEP_IDLE_SECONDS = 30.0


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


class _OverBudgetError(Exception):
    pass


class ByteBudget:
    """The bytes the answers of one snapshot may take together (thread-safe): each
    chunk read is charged as it arrives, so a snapshot reads and parses at most
    ``limit`` bytes (plus one chunk) however many queries it sends. 18 queries of 4 MiB
    each were 72 MiB; with the default 8 MiB budget the ninth 1 MiB answer is cut."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.exhausted = False
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Charge ``size`` bytes; False (and ``exhausted``) when they do not fit."""
        with self._lock:
            if self.used + size > self.limit:
                self.exhausted = True
                return False
            self.used += size
            return True


class OverBudgetError(MetricsUnavailableError):
    """An answer that did not fit its snapshot's ``ByteBudget`` (not read to the end,
    not parsed): the snapshot goes on without it (``snapshot.run_queries``)."""


def _read_capped(
    resp: http.client.HTTPResponse, cap: int, budget: ByteBudget | None = None
) -> bytes:
    """The body, or ``_TooLargeError`` as soon as it is known to exceed ``cap`` bytes
    (an announced Content-Length is checked before reading anything), or
    ``_OverBudgetError`` when a chunk does not fit ``budget``."""
    if resp.length is not None and resp.length > cap:
        raise _TooLargeError
    chunks: list[bytes] = []
    size = 0
    while chunk := resp.read(_READ_CHUNK):
        size += len(chunk)
        if size > cap:
            raise _TooLargeError
        if budget is not None and not budget.take(len(chunk)):
            raise _OverBudgetError
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

    def query(
        self, promql: str, at: float | None = None, budget: ByteBudget | None = None
    ) -> dict[str, Any]:
        """The JSON answer of an instant query (``status`` is ``success``), evaluated at
        ``at`` (seconds since the epoch; None: Prometheus' now). Sent as a form POST (no
        URL length limit), with Prometheus' own ``timeout`` set to ours so a slow query is
        abandoned on both sides. Its body is charged to ``budget`` (the snapshot's) as it
        is read. Raises ``MetricsUnavailableError`` (``OverBudgetError`` when the budget
        ran out)."""
        form = {"query": promql, "timeout": f"{self.timeout:g}s"}
        if at is not None:
            form["time"] = f"{at:.3f}"
        deadline = time.monotonic() + self.timeout
        self.stats.query_sent()
        try:
            code, body = self._post(urllib.parse.urlencode(form).encode(), deadline, budget)
        except _OverBudgetError:
            raise OverBudgetError(
                MetricsErrorReason.BAD_ANSWER,
                f"{self.shown}: answers over the snapshot's {budget.limit if budget else 0}"
                " byte budget",
            ) from None
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

    def _post(
        self, form: bytes, deadline: float, budget: ByteBudget | None = None
    ) -> tuple[int, bytes | None]:
        """(status, body) of one POST; the body of a non-200 only if it is small
        (``None`` otherwise); every step within ``deadline``. Redirects are answers like
        any other status: never followed. Sent on an idle kept-alive connection when
        there is one (``_acquire``); a kept connection the server has closed meanwhile
        is replaced by a new one once."""
        reused, conn = self._acquire(deadline)
        try:
            return self._exchange(conn, form, deadline, budget)
        except (ConnectionError, http.client.BadStatusLine):  # (not TimeoutError: no retry)
            if not reused:
                raise
            conn.close()
            _, conn = self._connect(deadline)  # a stale kept-alive connection: once more
            return self._exchange(conn, form, deadline, budget)

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
        self,
        conn: http.client.HTTPConnection,
        form: bytes,
        deadline: float,
        budget: ByteBudget | None = None,
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
                return 200, _read_capped(resp, self.max_body_bytes, budget)
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
