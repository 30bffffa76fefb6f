"""R as arrivals: the vLLM preset reads the cells' routers' arrival counter when its
series answer and falls back to the prefill pool's completions otherwise; the snapshot,
the MetricsAvailable condition and the policy say and use which one answered.

The counters and their meaning were observed against the real vllm-router 0.1.17 and
sglang-router 0.3.2 in PD mode (presets.py, the comments above ``VLLM`` and ``SGLANG``;
tests/lab/test_sglang_router_path.py checks the SGLang one on the real router)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pdscaler import metricsql as mq
from pdscaler import status as st
from pdscaler.policy.decide import arrival_rate
from pdscaler.presets import rate_source
from pdscaler.types import PolicyMemory, RateSource
from support.builders import chat_spec, points, run, snapshot
from support.prom_answers import NAME, NOW, NS, full_answers, one, spec, vector
from support.status_inputs import METRICS, inp

ROUTER_SEL = '{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="router"}'
COMPLETIONS = "completed requests/s (vllm:request_success_total, prefill pool)"
ARRIVALS = "arriving requests/s (vllm_router_processed_requests_total / 2, cell routers)"


def assemble(answers: dict[mq.Key, dict[str, Any]]) -> Any:
    return mq.assemble(mq.build_queries(spec(), NS, NAME), answers, now=NOW)


def with_routers(router_scrape: float = NOW - 1, arrivals: str = "6") -> dict[mq.Key, Any]:
    """``full_answers`` (4 req/s completed) with the routers scraped and answering."""
    answers = full_answers(spec())
    answers[mq.Key.ARRIVAL_RATE] = one(arrivals)
    answers[mq.Key.FRESHNESS] = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 1)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 1)),
        ({"pdscaler_io_role": "router"}, str(router_scrape)),
    )
    return answers


# ------------------------------------------------------------------------ queries


def test_vllm_reads_arrivals_on_the_cells_routers() -> None:
    """Sum over every router pod of the PDDeployment (all cells), rate over the window,
    halved: each request counts once on its prefill worker and once on its decode."""
    (q,) = [q for q in mq.build_queries(spec(), NS, NAME) if q.key == mq.Key.ARRIVAL_RATE]
    assert q.promql == f"sum(rate(vllm_router_processed_requests_total{ROUTER_SEL}[120s])) / 2"
    assert q.pool is None
    assert q.by is None
    (r,) = [q for q in mq.build_queries(spec(), NS, NAME) if q.key == mq.Key.REQUEST_RATE]
    assert "vllm:request_success_total" in r.promql  # the completions are still asked


def test_sglang_reads_arrivals_on_the_cells_routers() -> None:
    """sglang-router counts each request once (not once per worker): no halving."""
    queries = mq.build_queries(spec("sglang"), NS, NAME)
    (q,) = [q for q in queries if q.key == mq.Key.ARRIVAL_RATE]
    assert q.promql == f"sum(rate(smg_router_requests_total{ROUTER_SEL}[120s]))"
    assert q.pool is None
    (down,) = [q for q in queries if q.key == mq.Key.ROUTERS_DOWN]
    assert down.promql == f"count(up{ROUTER_SEL} == 0)"
    (r,) = [q for q in queries if q.key == mq.Key.REQUEST_RATE]
    assert "sglang:num_requests_total" in r.promql  # the completions are still asked


def test_the_sources_name_each_routers_counter() -> None:
    assert rate_source("sglang", arrivals=True) == (
        "arriving requests/s (smg_router_requests_total, cell routers)"
    )
    assert rate_source("sglang") == "finished requests/s (sglang:num_requests_total, prefill pool)"
    assert rate_source("dynamo", arrivals=True) == rate_source("dynamo")


def test_presets_without_a_router_counter_ask_only_completions() -> None:
    keys = {q.key for q in mq.build_queries(spec("dynamo"), NS, NAME)}
    assert mq.Key.REQUEST_RATE in keys
    assert mq.Key.ARRIVAL_RATE not in keys


# ---------------------------------------------------------------------- selection


def test_choose_rate_prefers_known_arrivals() -> None:
    assert mq.choose_rate(mq.Reading(6.0), mq.Reading(4.0)) == (
        mq.Reading(6.0),
        RateSource.ARRIVALS,
    )
    # a measured 0 is known: the routers saw no request
    assert mq.choose_rate(mq.Reading(0.0), mq.Reading(4.0))[1] is RateSource.ARRIVALS


@pytest.mark.parametrize("arrivals", [None, mq.Reading(None, "no data (empty answer)")])
def test_choose_rate_falls_back_to_completions(arrivals: mq.Reading | None) -> None:
    assert mq.choose_rate(arrivals, mq.Reading(4.0)) == (mq.Reading(4.0), RateSource.COMPLETIONS)
    assert mq.choose_rate(arrivals, mq.Reading(None))[1] is RateSource.COMPLETIONS


def test_router_series_present_give_arrivals() -> None:
    snap = assemble(with_routers())
    assert (snap.request_rate, snap.rate_source) == (6.0, RateSource.ARRIVALS)
    assert snap.problems == ()


def test_a_measured_zero_arrival_rate_is_arrivals() -> None:
    snap = assemble(with_routers(arrivals="0"))
    assert (snap.request_rate, snap.rate_source) == (0.0, RateSource.ARRIVALS)


@pytest.mark.parametrize(
    "answer",
    [vector(), one("NaN"), one("6", ts=NOW - 300), {"status": "error", "error": "x"}],
    ids=["absent", "nan", "old-sample", "failed"],
)
def test_no_usable_router_answer_gives_completions(answer: dict[str, Any]) -> None:
    answers = with_routers()
    answers[mq.Key.ARRIVAL_RATE] = answer
    snap = assemble(answers)
    assert (snap.request_rate, snap.rate_source) == (4.0, RateSource.COMPLETIONS)
    assert snap.problems == ()  # the fall-back is not a problem


def test_stale_routers_give_completions() -> None:
    """The routers' newest scrape is 120 s old (max 60 s): their rate is not read."""
    snap = assemble(with_routers(router_scrape=NOW - 120))
    assert (snap.request_rate, snap.rate_source) == (4.0, RateSource.COMPLETIONS)
    assert mq.router_stale(with_routers(NOW - 120)[mq.Key.FRESHNESS], now=NOW, max_age=60.0) == (
        "stale: newest router scrape 120s old (max 60s)"
    )


def test_routers_down_query_counts_the_routers_not_scraped() -> None:
    (q,) = [q for q in mq.build_queries(spec(), NS, NAME) if q.key == mq.Key.ROUTERS_DOWN]
    assert q.promql == f"count(up{ROUTER_SEL} == 0)"
    keys = {q.key for q in mq.build_queries(spec("dynamo"), NS, NAME)}
    assert mq.Key.ROUTERS_DOWN not in keys


@pytest.mark.parametrize(
    "down",
    [one("1"), {"status": "error", "error": "x"}, None],
    ids=["one-router-down", "failed", "not-answered"],
)
def test_a_router_target_down_or_unchecked_gives_completions(down: dict[str, Any] | None) -> None:
    """A router not scraped (up 0) drops its arrivals from the sum: R would read low and
    could shrink the pools on missing data, so the completions (whose prefill targets
    are checked) stand in; so they do when the routers cannot be checked."""
    answers = with_routers()
    if down is None:
        del answers[mq.Key.ROUTERS_DOWN]
    else:
        answers[mq.Key.ROUTERS_DOWN] = down
    snap = assemble(answers)
    assert (snap.request_rate, snap.rate_source) == (4.0, RateSource.COMPLETIONS)
    assert snap.problems == ()


def test_arrivals_stand_in_for_unknown_completions() -> None:
    answers = with_routers()
    answers[mq.Key.REQUEST_RATE] = vector()
    snap = assemble(answers)
    assert (snap.request_rate, snap.rate_source) == (6.0, RateSource.ARRIVALS)
    assert snap.problems == ()
    answers[mq.Key.ARRIVAL_RATE] = vector()
    unknown = assemble(answers)
    assert (unknown.request_rate, unknown.rate_source) == (None, RateSource.COMPLETIONS)
    assert unknown.problems == ("request_rate: no data (empty answer)",)


# ------------------------------------------------------------------------- status


def test_the_condition_names_the_source_used_this_tick() -> None:
    def message(source: RateSource) -> str | None:
        metrics = dataclasses.replace(METRICS, rate_source=source)
        (c,) = [
            c
            for c in st.build_status(inp(metrics=metrics)).conditions or []
            if c.type == "MetricsAvailable"
        ]
        return c.message

    assert message(RateSource.ARRIVALS) == f"load shape known; R = {ARRIVALS}"
    assert message(RateSource.COMPLETIONS) == f"load shape known; R = {COMPLETIONS}"


# ------------------------------------------------------------------------- policy


def test_arrivals_are_not_corrected_by_the_queue_slope() -> None:
    """The queue's slope estimated arrivals from completions; arrivals need none."""
    falling = points([600.0 - 75.0 * k for k in range(9)])
    assert arrival_rate(50.0, falling, RateSource.ARRIVALS) == 50.0
    assert arrival_rate(50.0, falling, RateSource.COMPLETIONS) == pytest.approx(45.0)


def test_through_decide_arrivals_are_the_forecast_rate() -> None:
    """The queue 300 -> 60 over 120 s: 22 req/s COMPLETED forecasts 20 (test_policy_
    history); 22 req/s ARRIVING forecasts 22."""
    memory = PolicyMemory()
    d = None
    for k in range(9):
        metrics = dataclasses.replace(
            snapshot(22.0, prefill_queue=300.0 - 30.0 * k), rate_source=RateSource.ARRIVALS
        )
        d = run(chat_spec(), metrics, 30, 30, now=1000.0 + 15 * k, memory=memory)
        memory = d.memory
    assert d is not None
    assert d.model.forecast_rate == pytest.approx(22.0)
