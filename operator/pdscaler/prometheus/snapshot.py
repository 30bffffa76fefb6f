"""One ``MetricsSnapshot`` per tick for one PDDeployment: its preset's queries
(``metricsql``), run through a ``PrometheusClient``, read back by ``metricsql.assemble``.

Owns: running a snapshot's queries (the first alone as a probe, the rest concurrently)
and the one error a snapshot raises. Must not: read the clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Sequence
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
from pdscaler.prometheus.client import PrometheusClient
from pdscaler.prometheus.errors import MetricsUnavailableError
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsErrorReason, MetricsSnapshot


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
