"""A Prometheus whose clock is minutes off the operator's (issue 30, item 8): the
snapshot's queries are evaluated at one instant of Prometheus' own clock (the probe at
its now, the others at the probe's evaluation time) and the ages are measured from the
answers' own time, so a clock 5 min ahead or behind marks no pool stale; scrapes that
are old on Prometheus' own clock still are. The snapshot's ``time`` stays the
operator's.

Before: every query was evaluated at the operator's now; with Prometheus 5 min behind,
that instant is 5 min in its future, the newest scrape 301 s before it: both pools
stale (max 60 s), every tick holding.

The answers are tests/support/prom_answers.py's worked example (4 req/s), shifted to the
fake's evaluation time."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pdscaler import metricsql as mq
from pdscaler.prometheus import ByteBudget, read_snapshot
from support.prom_answers import NAME, NOW, NS, full_answers, spec


class SkewedPrometheus:
    """A PrometheusClient stand-in whose clock reads ``NOW + skew`` and whose targets were
    last scraped ``scrape_age`` s before its now. Answers ``query(promql, at)`` at
    ``at``, else at its own now, like the HTTP API; ``times`` records what was asked."""

    def __init__(self, skew: float, scrape_age: float = 1.0) -> None:
        self.now = NOW + skew
        self.scrape_age = scrape_age
        self.spec = spec()
        self.by_promql = {q.promql: q.key for q in mq.build_queries(self.spec, NS, NAME)}
        self.answers = full_answers(self.spec)
        self.times: list[float | None] = []

    def query(self, promql: str, at: float | None = None, budget: ByteBudget | None = None) -> Any:
        self.times.append(at)
        t = self.now if at is None else at
        key = self.by_promql[promql]
        answer = copy.deepcopy(self.answers[key])
        for sample in answer["data"]["result"]:
            sample["value"][0] = t
            if key == mq.Key.FRESHNESS:  # the newest scrape at or before t
                sample["value"][1] = str(min(t, self.now) - self.scrape_age)
        return answer


@pytest.mark.parametrize("skew", [-300.0, -90.0, 0.0, 90.0, 300.0])
def test_a_prometheus_clock_minutes_off_marks_nothing_stale(skew: float) -> None:
    prom = SkewedPrometheus(skew)
    snap = read_snapshot(prom, prom.spec, NS, NAME, now=NOW)  # type: ignore[arg-type]
    assert not [p for p in snap.problems if "stale" in p], snap.problems
    assert snap.request_rate == 4.0
    assert (snap.prefill.queue_depth, snap.decode.running) == (3.0, 40.0)
    assert snap.time == NOW  # the operator's clock: the policy's windows use it
    assert prom.times[0] is None  # the probe at Prometheus' now
    assert set(prom.times[1:]) == {prom.now}  # the others at the probe's instant


def test_scrapes_old_on_prometheus_own_clock_are_still_stale() -> None:
    """Prometheus 5 min behind AND its newest scrape 100 s old on its own clock: both
    pools stale, with the age on its clock (100 s, not 400 s)."""
    prom = SkewedPrometheus(-300.0, scrape_age=100.0)
    snap = read_snapshot(prom, spec(), NS, NAME, now=NOW)  # type: ignore[arg-type]
    assert "prefill: stale: newest prefill scrape 100s old (max 60s)" in snap.problems
    assert "decode: stale: newest decode scrape 100s old (max 60s)" in snap.problems
    assert snap.prefill.queue_depth is None


def test_an_explicit_instant_is_evaluated_as_asked() -> None:
    """``at`` given (a test asking for an instant 90 s after the newest scrape): every
    query at it, the ages from it."""
    prom = SkewedPrometheus(0.0)
    snap = read_snapshot(prom, prom.spec, NS, NAME, now=NOW, at=NOW + 90)  # type: ignore[arg-type]
    assert set(prom.times) == {NOW + 90}
    assert any(p.startswith("prefill: stale: newest prefill scrape 91s old") for p in snap.problems)


def test_a_clock_hours_off_is_not_believed() -> None:
    """Answers dated 2 h before the operator's now (past ``MAX_CLOCK_SKEW_SECONDS``,
    15 min: garbage or a broken proxy): the queries are evaluated at the operator's now
    and the pools read stale, as before."""
    prom = SkewedPrometheus(-7200.0)
    snap = read_snapshot(prom, prom.spec, NS, NAME, now=NOW)  # type: ignore[arg-type]
    assert set(prom.times[1:]) == {NOW}
    assert "prefill: stale: newest prefill scrape 7201s old (max 60s)" in snap.problems
