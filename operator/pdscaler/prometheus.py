"""The only module that talks to Prometheus: instant queries over its HTTP API, and one
``MetricsSnapshot`` per tick for one PDDeployment.

Owns: the HTTP exchange (POST ``/api/v1/query``, short timeouts, the queries of a
snapshot run concurrently) and the translation of every way it can fail into one typed
error, ``MetricsUnavailableError``, with a machine ``reason`` and a sentence. What to
ask and how to read the answers is ``metricsql``'s (pure); what to do when metrics are
unavailable is the policy's (hold, never scale down) and the status' (condition
MetricsAvailable=False with the reason). Must not: decide anything, cache answers,
read the clock (``now`` is passed in) or return 0 for "no data".

Two kinds of "not known", kept apart on purpose (KEDA's rule):

* Prometheus could not answer (connection refused, timeout, HTTP 4xx/5xx, not JSON,
  a query Prometheus rejects, a custom template refused before sending):
  ``read_snapshot`` raises ``MetricsUnavailableError``. The caller passes
  ``metrics=None`` to the policy.
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
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pdscaler.metricsql import (
    DEFAULT_MAX_AGE_SECONDS,
    InvalidQueryError,
    Key,
    Query,
    assemble,
    build_queries,
)
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot

DEFAULT_TIMEOUT_SECONDS = 3.0

# Machine reasons of MetricsUnavailableError (CamelCase, usable as a condition reason).
REASON_UNREACHABLE = "PrometheusUnreachable"  # refused, DNS, TLS, no answer in time
REASON_HTTP_ERROR = "PrometheusError"  # HTTP status other than 200 without a query error
REASON_QUERY_FAILED = "QueryFailed"  # Prometheus rejected or could not run a query
REASON_BAD_ANSWER = "BadAnswer"  # 200, but not the API's JSON
REASON_INVALID_QUERY = "InvalidQuery"  # a custom template refused before sending

_BODY_EXCERPT = 200


class MetricsUnavailableError(Exception):
    """Prometheus could not give a snapshot. ``reason``: one of the ``REASON_*``
    constants; ``message``: a sentence for the condition and the Event, e.g.
    ``QueryFailed`` / ``request_rate: bad_data: 1:6: parse error: unexpected "}"``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ")
    return text if len(text) <= _BODY_EXCERPT else text[:_BODY_EXCERPT] + "..."


def _api_error(doc: Any) -> str | None:
    """``"<errorType>: <error>"`` of a Prometheus API error document, else None."""
    if isinstance(doc, Mapping) and doc.get("status") == "error":
        return f"{doc.get('errorType', 'error')}: {doc.get('error', 'no reason given')}"
    return None


def _connection_problem(err: BaseException) -> str:
    """``connection refused``, ``no answer within 3s``, ``name not resolved``..."""
    if isinstance(err, urllib.error.URLError):
        err = err.reason if isinstance(err.reason, BaseException) else err
    if isinstance(err, TimeoutError):
        return "no answer in time"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"name not resolved ({err.strerror})"
    return str(err) or type(err).__name__


class PrometheusClient:
    """Instant queries against one Prometheus (``url`` may carry a path prefix, e.g.
    ``http://gateway/prometheus``). Stateless apart from its settings: safe to share
    between threads and ticks."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query(self, promql: str, at: float | None = None) -> dict[str, Any]:
        """The JSON answer of an instant query (``status`` is ``success``), evaluated at
        ``at`` (seconds since the epoch; None: Prometheus' now). Sent as a form POST (no
        URL length limit), with Prometheus' own ``timeout`` set to ours so a slow query is
        abandoned on both sides. Raises ``MetricsUnavailableError``."""
        form = {"query": promql, "timeout": f"{self.timeout:g}s"}
        if at is not None:
            form["time"] = f"{at:.3f}"
        request = urllib.request.Request(
            self.url + "/api/v1/query",
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            raise self._http_error(err) from None
        except (OSError, ValueError, http.client.HTTPException) as err:  # refused, timeout...
            problem = _connection_problem(err)
            if problem == "no answer in time":
                problem = f"no answer within {self.timeout:g}s"
            raise MetricsUnavailableError(
                REASON_UNREACHABLE, f"cannot connect to {self.url}: {problem}"
            ) from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise MetricsUnavailableError(
                REASON_BAD_ANSWER, f"{self.url} answered 200 with no JSON: {_excerpt(body)}"
            ) from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise MetricsUnavailableError(
                REASON_QUERY_FAILED, _api_error(doc) or f"unexpected answer: {_excerpt(body)}"
            )
        return doc

    def _http_error(self, err: urllib.error.HTTPError) -> MetricsUnavailableError:
        """400 (bad_data) and 422 (execution) with Prometheus' error document are the
        query's fault; anything else (404: not a Prometheus API, 5xx) the server's."""
        body = err.read() if err.fp is not None else b""
        try:
            api = _api_error(json.loads(body))
        except ValueError:
            api = None
        if api is not None and err.code in (400, 422):
            return MetricsUnavailableError(REASON_QUERY_FAILED, api)
        detail = api or _excerpt(body) or (err.reason or "")
        return MetricsUnavailableError(REASON_HTTP_ERROR, f"{self.url}: HTTP {err.code}: {detail}")


def run_queries(
    client: PrometheusClient, queries: Sequence[Query], at: float
) -> dict[Key, dict[str, Any]]:
    """Every query's answer, the queries run concurrently (one thread each, at most one
    timeout in total). If any fails, raises the error of the first failing query in
    ``queries`` order (deterministic), its key prefixed to a query failure's message."""
    if not queries:
        return {}
    with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="promql") as pool:
        futures = [pool.submit(client.query, q.promql, at) for q in queries]
    answers: dict[Key, dict[str, Any]] = {}
    for q, future in zip(queries, futures, strict=True):
        err = future.exception()
        if isinstance(err, MetricsUnavailableError):
            if err.reason == REASON_QUERY_FAILED:
                raise MetricsUnavailableError(err.reason, f"{q.key}: {err.message}")
            raise err
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
        raise MetricsUnavailableError(REASON_INVALID_QUERY, str(err)) from None
    answers = run_queries(client, queries, at=now)
    return assemble(queries, answers, now=now, max_age=max_age)
