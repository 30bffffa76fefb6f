"""metricsql (queries.HOLDER_QUERIES, answers.read_holder): the holding proxy's gauges
are asked when both pools may stand at zero, read into ``MetricsSnapshot.holder``, and
unknown (None) when any is missing or the holder's scrape is stale (issue 29, item
3)."""

from __future__ import annotations

from typing import Any

from pdscaler import metricsql as mq
from pdscaler.metricsql.queries import HOLDER_QUERIES
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import HolderReading
from support.prom_answers import NAME, NOW, NS, full_answers, one, spec, vector

ZERO = {"min": 0, "max": 4}


def zero_spec() -> PDDeploymentSpec:
    base = spec().model_dump(by_alias=True, exclude_unset=True)
    base["prefill"]["replicas"] = ZERO
    base["decode"]["replicas"] = ZERO
    base["scaleToZero"] = {"idleSeconds": 60}
    return PDDeploymentSpec.model_validate(base)


def answers(held: str = "3", idle: str = "0", holder_scraped: float = NOW - 1) -> dict[Any, Any]:
    out: dict[Any, Any] = full_answers(spec())
    out.update(
        {
            mq.Key.HOLDER_HELD: one(held),
            mq.Key.HOLDER_PROMPT: one("120"),
            mq.Key.HOLDER_OUTPUT: one("24"),
            mq.Key.HOLDER_IN_FLIGHT: one("0"),
            mq.Key.HOLDER_IDLE: one(idle),
        }
    )
    out[mq.Key.FRESHNESS] = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 1)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 1)),
        ({"pdscaler_io_role": "holder"}, str(holder_scraped)),
    )
    return out


def test_holder_asked_only_when_both_pools_may_stand_at_zero() -> None:
    keys = {q.key for q in mq.build_queries(zero_spec(), NS, NAME)}
    assert set(HOLDER_QUERIES) <= keys
    promql = {q.key: q.promql for q in mq.build_queries(zero_spec(), NS, NAME)}
    sel = '{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="holder"}'
    assert promql[mq.Key.HOLDER_HELD] == f"sum(pdscaler_holder_held_requests{sel})"
    assert promql[mq.Key.HOLDER_IDLE] == f"min(pdscaler_holder_idle_seconds{sel})"
    assert not set(HOLDER_QUERIES) & {q.key for q in mq.build_queries(spec(), NS, NAME)}


def test_holder_read_into_the_snapshot() -> None:
    queries = mq.build_queries(zero_spec(), NS, NAME)
    snap = mq.assemble(queries, answers(), now=NOW)
    assert snap.holder == HolderReading(
        held=3, held_prompt_tokens=120, held_output_tokens=24, in_flight=0, idle_seconds=0
    )
    assert not [p for p in snap.problems if p.startswith("holder")]
    assert snap.request_rate == 4.0  # the rest read as before


def test_holder_unknown_when_missing_or_stale() -> None:
    queries = mq.build_queries(zero_spec(), NS, NAME)
    empty = answers()
    empty[mq.Key.HOLDER_IDLE] = vector()  # no holder pod scraped
    assert mq.assemble(queries, empty, now=NOW).holder is None
    stale = answers(holder_scraped=NOW - 600)
    assert mq.assemble(queries, stale, now=NOW).holder is None
    assert (
        mq.assemble(mq.build_queries(spec(), NS, NAME), full_answers(spec()), now=NOW).holder
        is None
    )
