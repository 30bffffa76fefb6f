"""policy: data the policy cannot trust never scales a pool down, per pool and per
direction (docs/design.md §3 step 1). The chat spec with a 0 s stabilization window:
at R 20 req/s (N_P 19.05 -> 20, N_D 17.86 -> 18) pools of 30 / 30 with complete data
scale down to 20 / 20 (a third at a time for decode, towards 18)."""

from __future__ import annotations

import importlib
import math
from dataclasses import replace
from typing import Any

import pytest

from pdscaler.policy.sanitize import Bounds, sanitize
from pdscaler.types import Action, MetricsSnapshot, PoolMetrics, Role
from support.builders import chat_spec, run, snapshot

SPEC = chat_spec(scaling={"maxGPUs": 64, "scaleDownStabilization": "0s"})


def pools(snap: MetricsSnapshot, **changes: Any) -> MetricsSnapshot:
    """``snap`` with ``prefill``/``decode`` fields replaced: ``pools(s, prefill={...})``."""
    out = snap
    for role, fields in changes.items():
        pool: PoolMetrics = getattr(out, role)
        changed: dict[str, Any] = {role: replace(pool, **fields)}
        out = replace(out, **changed)
    return out


def test_complete_data_scales_down() -> None:
    """The baseline every case below departs from: 30 / 30 -> 20 / 20, ScaledDown."""
    d = run(SPEC, snapshot(), 30, 30)
    assert (d.prefill, d.decode, d.action) == (20, 20, Action.SCALED_DOWN)
    assert d.data_gaps == ()


def test_half_of_prefills_targets_down_scales_neither_pool_down() -> None:
    """Prefill 30 Ready, 15 targets up: R (summed over prefill's pods) reads half of
    what arrives, so neither pool may shrink; the decision names the gap."""
    d = run(SPEC, pools(snapshot(10.0), prefill={"targets_up": 15}), 30, 30)
    assert (d.prefill, d.decode) == (30, 30)
    assert d.action == Action.HOLD_METRICS_UNAVAILABLE
    assert d.data_gaps == ("prefill targets: 15 of 30 ready pods scraped (up)",)


def test_decode_targets_down_hold_decode_only() -> None:
    """Decode 30 Ready, 29 targets up: decode holds 30, prefill still goes to 20."""
    d = run(SPEC, pools(snapshot(), decode={"targets_up": 29}), 30, 30)
    assert (d.prefill, d.decode) == (20, 30)
    assert d.data_gaps == ("decode targets: 29 of 30 ready pods scraped (up)",)


def test_all_targets_up_is_complete() -> None:
    d = run(SPEC, pools(snapshot(), prefill={"targets_up": 30}, decode={"targets_up": 30}), 30, 30)
    assert (d.prefill, d.decode) == (20, 20)


def test_a_pools_missing_latency_series_holds_that_pool() -> None:
    """The reader asked for decode's TPOT and got nothing, while R = 20 > 0: decode
    stays 30, prefill (complete) shrinks to 20."""
    d = run(SPEC, pools(snapshot(), decode={"missing": ("latency_seconds",)}), 30, 30)
    assert (d.prefill, d.decode) == (20, 30)
    assert d.data_gaps == ("decode TPOT unknown",)


def test_an_idle_pool_without_latency_is_complete() -> None:
    """R = 0: no request finished, so no latency exists to measure: not a gap."""
    d = run(SPEC, pools(snapshot(0.0), decode={"missing": ("latency_seconds",)}), 30, 30)
    assert d.data_gaps == ()
    assert (d.prefill, d.decode) == (20, 20)


@pytest.mark.parametrize("queue", [None, math.nan, math.inf, -1.0, 1e12, 1e300])
def test_a_garbage_queue_never_lowers_its_pool(queue: float | None) -> None:
    """Prefill's queue unknown (None, NaN, +Inf, -1, or beyond 384,000 req/s x 120 s
    = 4.6e7 requests): prefill stays 30, decode shrinks to 20; no exception."""
    d = run(SPEC, snapshot(prefill_queue=queue), 30, 30)
    assert (d.prefill, d.decode) == (30, 20)
    assert "prefill queue depth unknown" in d.data_gaps


@pytest.mark.parametrize("ttft", [math.nan, -0.5, 1e12, 1e300])
def test_a_garbage_latency_never_lowers_its_pool(ttft: float) -> None:
    """TTFT beyond 1000 x the 2 s SLO, negative or NaN: prefill stays 30."""
    d = run(SPEC, snapshot(ttft=ttft), 30, 30)
    assert d.prefill == 30
    assert "prefill TTFT unknown" in d.data_gaps


@pytest.mark.parametrize("rate", [1e12, 1e300, 384_001.0])
def test_an_absurd_rate_holds_instead_of_scaling_to_max(rate: float) -> None:
    """1e12 req/s is beyond 10 x what the chat spec's largest deployment serves
    (384,000 req/s): hold 10 / 10 instead of 32 / 32 (the old result)."""
    d = run(SPEC, snapshot(rate), 10, 10)
    assert (d.prefill, d.decode) == (10, 10)
    assert d.action == Action.HOLD_METRICS_UNAVAILABLE
    assert "request_rate is implausible" in d.message


def test_an_absurd_token_load_holds() -> None:
    """R 100 x L_p 1e6 = 1e8 tok/s > 10 x 144,000 (prefill at 32 x 3000 x 1.5)."""
    d = run(SPEC, snapshot(100.0, 1e6), 10, 10)
    assert (d.prefill, d.decode) == (10, 10)
    assert "prefill load R x prompt_tokens is implausible" in d.message


def test_bounds_of_the_chat_spec() -> None:
    b = Bounds.of(SPEC)
    assert b.rate == pytest.approx(384_000.0)
    assert b.queue == pytest.approx(384_000.0 * 120)
    assert b.latency[Role.PREFILL] == pytest.approx(2000.0)


def test_zero_rate_beside_a_queue_is_not_idle() -> None:
    """R = 0 with unknown lengths while decode has 5 waiting (a wedged engine, a frozen
    counter): not idle, hold 30 / 30 (it used to recommend 1 / 1 and scale down)."""
    d = run(SPEC, snapshot(0.0, None, None, decode_queue=5.0), 30, 30)
    assert (d.prefill, d.decode) == (30, 30)
    assert d.action == Action.HOLD_METRICS_UNAVAILABLE
    assert "not idle" in d.message


def test_zero_rate_beside_running_requests_is_not_idle() -> None:
    d = run(SPEC, snapshot(0.0, None, None, running=3.0), 30, 30)
    assert (d.prefill, d.decode) == (30, 30)


def test_zero_rate_with_unknown_queues_is_not_idle() -> None:
    assert not sanitize(snapshot(0.0, None, None, prefill_queue=None), SPEC).usable


def test_an_overflowing_model_holds_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model step that overflows on finite input holds what runs, naming the error,
    instead of raising out of the tick."""

    def overflow(*args: Any) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(importlib.import_module("pdscaler.policy.decide"), "ratio_model", overflow)
    d = run(SPEC, snapshot(), 30, 30)
    assert (d.prefill, d.decode) == (30, 30)
    assert d.action == Action.HOLD_METRICS_UNAVAILABLE
    assert "the models cannot size this load (OverflowError" in d.message
    assert d.data_gaps


def test_a_gapped_pool_keeps_its_gpus_when_the_other_grows() -> None:
    """maxGPUs 32, prefill at 10 must grow (R 20 wants 20), decode at 22 has a gap:
    decode keeps 22 and prefill grows only into the 10 GPUs left: 10 / 22."""
    spec = chat_spec(scaling={"maxGPUs": 32, "scaleDownStabilization": "0s"})
    d = run(spec, snapshot(decode_queue=None), 10, 22)
    assert d.decode == 22
    assert d.prefill == 10


# ------------------------------------------------- the reader: up and missing signals


def _reader_answers() -> tuple[Any, dict[Any, Any]]:
    """The chat queries and complete answers (4 req/s), both pools fresh, 2 targets each."""
    from pdscaler import metricsql as mq

    spec = chat_spec()
    queries = mq.build_queries(spec, "ns", "chat")

    def vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
        result = [{"metric": m, "value": [NOW, v]} for m, v in series]
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    role = "pdscaler_io_role"
    answers: dict[Any, Any] = {q.key: vector(({}, "1")) for q in queries}
    answers[mq.Key.REQUEST_RATE] = vector(({}, "4"))
    answers[mq.Key.FRESHNESS] = vector(({role: "prefill"}, str(NOW)), ({role: "decode"}, str(NOW)))
    answers[mq.Key.TARGETS_UP] = vector(({role: "prefill"}, "2"), ({role: "decode"}, "2"))
    answers[mq.Key.DECODE_RUNNING_BY_POD] = vector(({"pod": "d-0"}, "1"))
    return queries, answers


NOW = 1_700_000_000.0


def test_the_reader_counts_targets_up_by_value_not_by_timestamp() -> None:
    """``timestamp(up)`` is fresh while a scrape fails (up = 0); the count of up == 1
    per pool is not: prefill 1 of its 2 targets up -> targets_up 1; a pool absent from
    the answer (every target down or gone) -> 0."""
    from pdscaler import metricsql as mq

    queries, answers = _reader_answers()
    role = "pdscaler_io_role"
    answers[mq.Key.TARGETS_UP]["data"]["result"] = [
        {"metric": {role: "prefill"}, "value": [NOW, "1"]}
    ]
    snap = mq.assemble(queries, answers, now=NOW)
    assert (snap.prefill.targets_up, snap.decode.targets_up) == (1, 0)
    assert any(q.promql.startswith("sum by (pdscaler_io_role) (up{") for q in queries)


def test_the_reader_names_a_pools_missing_signals() -> None:
    """Decode's TPOT answer empty, prefill's queue NaN -> missing names them per pool;
    a stale decode pool -> every decode signal missing."""
    from pdscaler import metricsql as mq

    queries, answers = _reader_answers()
    answers[mq.Key.DECODE_LATENCY]["data"]["result"] = []
    answers[mq.Key.PREFILL_QUEUE]["data"]["result"][0]["value"][1] = "NaN"
    snap = mq.assemble(queries, answers, now=NOW)
    assert snap.decode.missing == ("latency_seconds",)
    assert snap.prefill.missing == ("queue_depth",)
    role = "pdscaler_io_role"
    answers = _reader_answers()[1]
    answers[mq.Key.FRESHNESS]["data"]["result"] = [
        {"metric": {role: "prefill"}, "value": [NOW, str(NOW)]},
        {"metric": {role: "decode"}, "value": [NOW, str(NOW - 600)]},
    ]
    snap = mq.assemble(queries, answers, now=NOW)
    assert "queue_depth" in snap.decode.missing
    assert "latency_seconds" in snap.decode.missing
    assert snap.prefill.missing == ()


def test_a_failed_up_query_leaves_targets_unknown() -> None:
    from pdscaler import metricsql as mq

    queries, answers = _reader_answers()
    answers[mq.Key.TARGETS_UP] = {"status": "error", "errorType": "timeout", "error": "slow"}
    snap = mq.assemble(queries, answers, now=NOW)
    assert snap.prefill.targets_up is None
    assert "targets_up: query failed (timeout): slow" in snap.problems
    assert "targets_up" in snap.prefill.missing
    assert "targets_up" in snap.decode.missing


def test_targets_that_cannot_be_checked_hold_the_pool() -> None:
    """The up query failed (the reader marks targets_up missing): prefill's targets
    cannot be checked, so R may be under-counted: neither pool shrinks (30 / 30). Decode's
    alone uncheckable: prefill still goes to 20."""
    d = run(SPEC, pools(snapshot(), prefill={"missing": ("targets_up",)}), 30, 30)
    assert (d.prefill, d.decode) == (30, 30)
    assert d.data_gaps == ("prefill targets up unknown",)
    d = run(SPEC, pools(snapshot(), decode={"missing": ("targets_up",)}), 30, 30)
    assert (d.prefill, d.decode) == (20, 30)


def test_the_condition_names_the_missing_data() -> None:
    """The decision's gaps reach the MetricsAvailable condition: False,
    MetricsIncomplete, ``prefill targets: 15 of 30 ready pods scraped (up); no
    scale-down of the pools concerned``."""
    from pdscaler import status as st
    from pdscaler.types import ConditionReason, ConditionType, PoolObservation

    snap = pools(snapshot(10.0), prefill={"targets_up": 15})
    d = run(SPEC, snap, 30, 30)
    built = st.build_status(
        st.StatusInput(
            now=NOW,
            generation=1,
            spec=SPEC,
            decision=d,
            metrics=snap,
            prefill=PoolObservation(30, 30),
            decode=PoolObservation(30, 30),
            active_version="v1",
            target_version="v1",
            progress=st.ProgressFacts(),
        )
    )
    c = next(c for c in built.conditions or [] if c.type == ConditionType.METRICS_AVAILABLE)
    assert (c.status, c.reason) == ("False", ConditionReason.METRICS_INCOMPLETE)
    assert c.message == (
        "prefill targets: 15 of 30 ready pods scraped (up); no scale-down of the pools concerned"
    )


def test_a_gapped_pool_never_pushes_the_other_below_its_min() -> None:
    """maxGPUs 1, prefill [0, 1] running 1 with a gap, decode [1, 1] running 0: decode
    must come up to its min 1; prefill keeping 1 would need 2 GPUs, so the spec's
    bounds win: prefill 0, decode 1 (found by the bounds property on a random tick)."""
    spec = chat_spec(
        prefill={"tokensPerSecond": 100, "replicas": {"min": 0, "max": 1}},
        decode={"tokensPerSecond": 100, "replicas": {"min": 1, "max": 1}},
        scaling={"maxGPUs": 1, "scaleDownStabilization": "0s"},
    )
    snap = pools(snapshot(0.0, 0.0, 0.0), prefill={"kv_usage": math.nan})
    d = run(spec, snap, 1, 0)
    assert (d.prefill, d.decode) == (0, 1)
