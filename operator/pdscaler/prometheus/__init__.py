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

The package, by seam: ``errors`` (``MetricsUnavailableError``), ``allowlist``
(``url_allowed``), ``auth`` (``Credentials``, ``credentials_from``, ``SecretCache``),
``client`` (``PrometheusClient``: the exchange and its limits), ``snapshot``
(``read_snapshot``). Every name is importable from ``pdscaler.prometheus``.
"""

from __future__ import annotations

from pdscaler.prometheus.allowlist import DEFAULT_ALLOWED_URLS, parse_allowed_urls, url_allowed
from pdscaler.prometheus.auth import (
    DEFAULT_SECRET_TTL_SECONDS,
    Credentials,
    SecretCache,
    SecretData,
    SecretUnreadableError,
    credentials_from,
    tls_context,
)
from pdscaler.prometheus.client import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    KEEP_IDLE_CONNECTIONS,
    KEEP_IDLE_SECONDS,
    ByteBudget,
    OverBudgetError,
    PrometheusClient,
    PrometheusStats,
)
from pdscaler.prometheus.errors import MetricsUnavailableError, shown_url
from pdscaler.prometheus.snapshot import SNAPSHOT_BUDGET_BYTES, read_snapshot, run_queries

__all__ = [
    "DEFAULT_ALLOWED_URLS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_SECRET_TTL_SECONDS",
    "DEFAULT_TIMEOUT_SECONDS",
    "KEEP_IDLE_CONNECTIONS",
    "KEEP_IDLE_SECONDS",
    "SNAPSHOT_BUDGET_BYTES",
    "ByteBudget",
    "Credentials",
    "MetricsUnavailableError",
    "OverBudgetError",
    "PrometheusClient",
    "PrometheusStats",
    "SecretCache",
    "SecretData",
    "SecretUnreadableError",
    "credentials_from",
    "parse_allowed_urls",
    "read_snapshot",
    "run_queries",
    "shown_url",
    "tls_context",
    "url_allowed",
]
