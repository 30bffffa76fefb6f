"""The one error of the Prometheus client and the sentences it carries.

Owns: ``MetricsUnavailableError`` (a ``types.MetricsErrorReason`` and a sentence that
never holds the server's body or reason phrase), the API error document's
``errorType: error`` cut at 200 characters, the words for a failed connection
(``connection refused``, ``no answer in time``) and URLs as errors show them (no user
information). Must not: send anything.
"""

from __future__ import annotations

import http
import http.client
import json
import socket
import ssl
import urllib.parse
from collections.abc import Mapping
from typing import Any

from pdscaler.types import ConditionReason, MetricsErrorReason

_API_ERROR_CHARS = 200


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
