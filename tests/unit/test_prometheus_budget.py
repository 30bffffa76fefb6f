"""A byte budget across one snapshot's queries (issue 30, item 3): each query's answer
was capped at 4 MiB, but a snapshot sends ~18 of them, so one tenant's tick could make
the operator read and parse ~72 MiB. ``ByteBudget`` charges every chunk read to the
snapshot (``SNAPSHOT_BUDGET_BYTES``, 8 MiB); past it the remaining answers are not read,
and the snapshot is incomplete as a whole (MetricsIncomplete, the decision holds),
naming the budget and the queries left out.

The server on loopback answers every query of the vllm preset as ``prom_answers``
gives it, each padded to ``pad`` bytes (a JSON field Prometheus' answers do not have)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest

from pdscaler import metricsql as mq
from pdscaler.prometheus import (
    SNAPSHOT_BUDGET_BYTES,
    ByteBudget,
    OverBudgetError,
    PrometheusClient,
    read_snapshot,
)
from support.httpkit import QuietHandler, serving
from support.prom_answers import NAME, NOW, NS, full_answers, spec

SPEC = spec()
BY_PROMQL = {q.promql: q.key for q in mq.build_queries(SPEC, NS, NAME)}
ANSWERS = full_answers(SPEC)


class Padded(QuietHandler):
    pad: ClassVar[int] = 0
    served: ClassVar[list[int]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server)
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        key = BY_PROMQL[form["query"][0]]
        doc: dict[str, Any] = {**ANSWERS[key], "pad": "x" * self.pad}
        body = json.dumps(doc).encode()
        self.served.append(len(body))
        self.reply(200, body, "application/json")


@contextmanager
def prometheus(pad: int) -> Iterator[str]:
    Padded.pad, Padded.served = pad, []
    with serving(Padded) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_a_snapshot_within_the_budget_is_read_whole() -> None:
    with prometheus(pad=100_000) as url:
        snap = read_snapshot(PrometheusClient(url), SPEC, NS, NAME, NOW)
    assert snap.complete
    assert snap.request_rate == pytest.approx(4.0)
    assert not any("budget" in p for p in snap.problems)


def test_answers_over_the_budget_are_not_read_and_the_snapshot_is_incomplete() -> None:
    """18 answers of 1 MiB each (18 MiB) against the 8 MiB budget: the snapshot holds."""
    with prometheus(pad=2**20) as url:
        snap = read_snapshot(PrometheusClient(url), SPEC, NS, NAME, NOW)
        assert sum(Padded.served) > 2 * SNAPSHOT_BUDGET_BYTES  # what the server sent
    assert not snap.complete
    assert snap.request_rate is None
    assert f"answers over the snapshot's {SNAPSHOT_BUDGET_BYTES}-byte budget" in snap.problems[0]


def test_the_budget_is_charged_as_bodies_are_read() -> None:
    budget = ByteBudget(1_500_000)
    with prometheus(pad=2**20) as url:
        client = PrometheusClient(url)
        query = next(iter(BY_PROMQL))
        client.query(query, NOW, budget)
        with pytest.raises(OverBudgetError, match="1500000 byte budget"):
            client.query(query, NOW, budget)
    assert budget.exhausted
    assert budget.used <= budget.limit
