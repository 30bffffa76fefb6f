"""One ``MetricsSnapshot`` per tick for one PDDeployment: its preset's queries
(``metricsql``), run through a ``PrometheusClient``, read back by ``metricsql.assemble``.

Owns: running a snapshot's queries (the first alone as a probe, the rest concurrently)
within one byte budget (``SNAPSHOT_BUDGET_BYTES``) and the one error a snapshot raises.
Must not: read the clock (``now`` is passed in).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from pdscaler.metricsql import (
    DEFAULT_MAX_AGE_SECONDS,
    InvalidQueryError,
    Key,
    Query,
    assemble,
    build_queries,
    evaluated_at,
)
from pdscaler.prometheus.client import ByteBudget, OverBudgetError, PrometheusClient
from pdscaler.prometheus.errors import MetricsUnavailableError
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsErrorReason, MetricsSnapshot

#: The bytes the answers of one snapshot may take together (``ByteBudget``): 18 queries
#: of up to 4 MiB each could make one tick parse 72 MiB; past this budget the remaining
#: answers are not read and the snapshot is incomplete (MetricsIncomplete, the decision
#: holds). A preset's answers for a few hundred pods are a few hundred KiB.
SNAPSHOT_BUDGET_BYTES = 8 * 2**20


#: How far Prometheus' clock may be from the operator's and still give the snapshot's
#: instant: an answer dated further off (garbage, a broken proxy) is not believed, and
#: the queries are evaluated at the operator's now instead (its ages then say stale).
MAX_CLOCK_SKEW_SECONDS = 900.0


def instant(answer: dict[str, Any] | None, near: float | None) -> float | None:
    """The answer's evaluation time on Prometheus' clock (``evaluated_at``), if it is
    within ``MAX_CLOCK_SKEW_SECONDS`` of ``near`` (the operator's now; None: any), else
    ``near``: 1700000000 near 1700000300 -> 1700000000; 0 near it -> 1700000300."""
    t = evaluated_at(answer) if answer is not None else None
    if t is None:
        return near
    if near is not None and abs(t - near) > MAX_CLOCK_SKEW_SECONDS:
        return near
    return t


def run_queries(
    client: PrometheusClient,
    queries: Sequence[Query],
    at: float | None,
    budget: ByteBudget | None = None,
    *,
    near: float | None = None,
) -> dict[Key, dict[str, Any]]:
    """Every query's answer. The first query runs alone, as a probe: a server that fails
    it (unreachable, too slow, too large, a redirect) costs one connection and one body
    cap, not one per query. The others then run concurrently (one thread each), so a
    snapshot takes at most two timeouts. If any fails, raises the error of the first
    failing query in ``queries`` order (deterministic), its key prefixed to a query
    failure's message. An answer that did not fit ``budget`` is left out (its key is
    missing from the result). With ``at`` None the probe is evaluated at Prometheus'
    own now and the others at the probe's evaluation time (``instant``, within
    ``MAX_CLOCK_SKEW_SECONDS`` of ``near``): one instant on Prometheus' clock, whatever
    the operator's clock says."""
    if not queries:
        return {}

    def one(q: Query) -> dict[str, Any] | None:
        try:
            return client.query(q.promql, at, budget)
        except OverBudgetError:
            return None
        except MetricsUnavailableError as err:
            if err.reason == MetricsErrorReason.QUERY_FAILED:
                raise MetricsUnavailableError(err.reason, f"{q.key}: {err.message}") from None
            raise

    first = one(queries[0])
    answers: dict[Key, dict[str, Any]] = {} if first is None else {queries[0].key: first}
    rest = queries[1:]
    if not rest:
        return answers
    if at is None:
        at = instant(first, near)
    with ThreadPoolExecutor(max_workers=len(rest), thread_name_prefix="promql") as pool:
        futures = [pool.submit(one, q) for q in rest]
    for q, future in zip(rest, futures, strict=True):
        err = future.exception()
        if err is not None:
            raise err
        answer = future.result()
        if answer is not None:
            answers[q.key] = answer
    return answers


def read_snapshot(
    client: PrometheusClient,
    spec: PDDeploymentSpec,
    namespace: str,
    name: str,
    now: float,
    *,
    max_age: float = DEFAULT_MAX_AGE_SECONDS,
    budget_bytes: int = SNAPSHOT_BUDGET_BYTES,
    at: float | None = None,
) -> MetricsSnapshot:
    """The metrics of PDDeployment ``namespace/name`` for the tick at ``now`` (the
    operator's clock: the snapshot's ``time``): the queries of its preset
    (``metricsql.build_queries``), evaluated at one instant of Prometheus' own clock
    (``at``, else its now: ``run_queries``), read by ``metricsql.assemble`` with the
    ages (stale pools, stale answers) measured from that instant, so a Prometheus
    clock 5 min ahead of or behind the operator's marks nothing stale (unknown values
    are None with a reason in ``problems``).

    Raises ``MetricsUnavailableError`` when Prometheus cannot answer (module docstring),
    including ``InvalidQuery`` for a custom template refused before sending. E.g. the
    lab exporter serving 4 req/s at 2000 prompt / 500 output tokens gives
    ``request_rate ~ 4.0, prompt_tokens ~ 2000.0, output_tokens ~ 500.0``.
    """
    try:
        queries = build_queries(spec, namespace, name)
    except InvalidQueryError as err:
        raise MetricsUnavailableError(MetricsErrorReason.INVALID_QUERY, str(err)) from None
    budget = ByteBudget(budget_bytes)
    answers = run_queries(client, queries, at=at, budget=budget, near=now)
    # ages on Prometheus' clock: the answers' own evaluation time, not the operator's
    # (a Prometheus clock minutes off would otherwise make every pool look stale)
    clock = at if at is not None else instant(next(iter(answers.values()), None), now)
    snapshot = assemble(queries, answers, now=now if clock is None else clock, max_age=max_age)
    snapshot = replace(snapshot, time=now)
    if not budget.exhausted:
        return snapshot
    left = ", ".join(str(q.key) for q in queries if q.key not in answers)
    why = f"answers over the snapshot's {budget_bytes}-byte budget, not read: {left}"
    # incomplete as a whole: a tenant whose answers are this large is held, not sized
    return replace(snapshot, request_rate=None, problems=(why, *snapshot.problems))
