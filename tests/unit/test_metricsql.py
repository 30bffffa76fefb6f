"""metricsql: scoped selectors that cannot be escaped from, each preset's PromQL, custom
templates, and the reading of Prometheus answers where "no data" is never 0."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdscaler import metricsql as mq
from pdscaler import presets
from pdscaler.spec import LENIENT, CustomQueries, PDDeploymentSpec
from pdscaler.types import Role
from support.prom_answers import NAME, NOW, NS, full_answers, one, spec, vector

PREFILL_SEL = '{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="prefill"}'
DECODE_SEL = '{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="decode"}'
DEPLOY_SEL = '{namespace="serving",pdscaler_io_name="chat"}'

CUSTOM = {
    "requestRate": "sum(rate(my_requests_total{selector}[{window}]))",
    "promptTokens": "avg(my_prompt_len{selector})",
    "outputTokens": "avg(my_output_len{selector})",
    "queueDepth": "sum(my_queue{selector})",
    "ttft": (
        "histogram_quantile({quantile}, sum by (le) (rate(my_ttft_bucket{selector}[{window}])))"
    ),
    "tpot": 'max(my_tpot{{matchers},job="engine"})',
}


def queries(s: PDDeploymentSpec) -> dict[mq.Key, mq.Query]:
    return {q.key: q for q in mq.build_queries(s, NS, NAME)}


# ---------------------------------------------------------------------- escaping

_VALUE = r'"((?:[^"\\]|\\.)*)"'
_SELECTOR = re.compile(rf"^\{{(\w+)={_VALUE},(\w+)={_VALUE},(\w+)={_VALUE}\}}$")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n", "\\r": "\r", "\\t": "\t"}


def unquote(literal: str) -> str:
    """PromQL's (Go's) reading of the escapes escape_label_value produces."""
    return re.sub(r"\\.", lambda m: _UNESCAPE[m.group(0)], literal)


def test_selector_of_a_pool_and_of_the_deployment() -> None:
    assert mq.selector(NS, NAME, Role.PREFILL) == PREFILL_SEL
    assert mq.selector(NS, NAME, None) == DEPLOY_SEL


def test_quote_and_backslash_are_escaped() -> None:
    """a"b\\c -> a\\"b\\\\c: the quote cannot end the string literal."""
    assert mq.escape_label_value('a"b\\c') == 'a\\"b\\\\c'
    assert mq.escape_label_value("line\nbreak") == "line\\nbreak"


def test_injection_attempt_stays_inside_the_label_value() -> None:
    """A name that tries to close the selector and add `or vector(1)` is one label
    value: the selector still has exactly three matchers and reads back the same name."""
    evil = 'x"} or vector(1) #'
    sel = mq.selector(NS, evil, Role.DECODE)
    m = _SELECTOR.match(sel)
    assert m is not None, sel
    assert unquote(m.group(4)) == evil


@given(st.text(), st.text())
def test_any_namespace_and_name_round_trip(namespace: str, name: str) -> None:
    """For every string, the selector parses as exactly three matchers whose values
    are the original strings (no PromQL can be injected)."""
    m = _SELECTOR.match(mq.selector(namespace, name, Role.PREFILL))
    assert m is not None
    labels = dict(zip(m.groups()[0::2], map(unquote, m.groups()[1::2]), strict=True))
    assert labels == {
        "namespace": namespace,
        "pdscaler_io_name": name,
        "pdscaler_io_role": "prefill",
    }


def test_render_is_one_pass() -> None:
    """A placeholder-like text inside a substituted value is not substituted again."""
    out = mq.render(
        "x{selector}[{window}]", sel='{n="{window}"}', match="", window="1m", quantile=0.5
    )
    assert out == 'x{n="{window}"}[1m]'


@pytest.mark.parametrize(
    ("seconds", "text"), [(120.0, "120s"), (90.0, "90s"), (0.5, "500ms"), (1.25, "1250ms")]
)
def test_promql_duration(seconds: float, text: str) -> None:
    assert mq.promql_duration(seconds) == text


# ---------------------------------------------------------------------- presets


def test_vllm_queries_read_each_quantity_on_its_pool() -> None:
    """R, L_p and TTFT on prefill; L_d and TPOT on decode; window 2m, SLO p95."""
    q = queries(spec("vllm"))
    assert q[mq.Key.REQUEST_RATE].promql == (
        f"sum(rate(vllm:request_success_total{PREFILL_SEL}[120s]))"
    )
    assert q[mq.Key.PROMPT_TOKENS].promql == (
        f"sum(rate(vllm:request_prompt_tokens_sum{PREFILL_SEL}[120s]))"
        f" / sum(rate(vllm:request_prompt_tokens_count{PREFILL_SEL}[120s]))"
    )
    assert q[mq.Key.OUTPUT_TOKENS].promql == (
        f"sum(rate(vllm:request_generation_tokens_sum{DECODE_SEL}[120s]))"
        f" / sum(rate(vllm:request_generation_tokens_count{DECODE_SEL}[120s]))"
    )
    assert q[mq.Key.PREFILL_LATENCY].promql == (
        "histogram_quantile(0.95, sum by (le) "
        f"(rate(vllm:time_to_first_token_seconds_bucket{PREFILL_SEL}[120s])))"
    )
    tpot = q[mq.Key.DECODE_LATENCY].promql
    # per request first (the SLO's unit), then the token-weighted inter-token latency,
    # then its deprecated name (old releases)
    assert tpot.startswith(
        "(histogram_quantile(0.95, sum by (le) (rate(vllm:request_time_per_output_token"
    )
    # a quantile that observed nothing is NaN: `>= 0` drops it so the next one answers
    assert f"vllm:request_time_per_output_token_seconds_bucket{DECODE_SEL}[120s]))) >= 0)" in (tpot)
    assert f"vllm:inter_token_latency_seconds_bucket{DECODE_SEL}[120s]))) >= 0) or" in tpot
    assert tpot.index("vllm:request_time_per_output_token_seconds_bucket") < tpot.index(
        "vllm:inter_token_latency_seconds_bucket"
    )
    assert f"vllm:inter_token_latency_seconds_bucket{DECODE_SEL}" in tpot
    assert tpot.endswith(
        f"or histogram_quantile(0.95, sum by (le) "
        f"(rate(vllm:time_per_output_token_seconds_bucket{DECODE_SEL}[120s])))"
    )
    assert q[mq.Key.PREFILL_QUEUE].promql == f"sum(vllm:num_requests_waiting{PREFILL_SEL})"
    assert q[mq.Key.DECODE_QUEUE].promql == f"sum(vllm:num_requests_waiting{DECODE_SEL})"
    assert q[mq.Key.DECODE_RUNNING_BY_POD].promql == (
        f"sum by (pod) (vllm:num_requests_running{DECODE_SEL})"
    )
    assert q[mq.Key.DECODE_RUNNING_BY_POD].by == "pod"
    assert q[mq.Key.FRESHNESS].promql == (f"max by (pdscaler_io_role) (timestamp(up{DEPLOY_SEL}))")


def test_quantile_and_window_follow_the_spec() -> None:
    """slo.percentile 0.9 and metrics.window 90s appear in the latency queries."""
    s = PDDeploymentSpec.model_validate(
        {
            **spec().model_dump(by_alias=True),
            "slo": {"percentile": 0.9},
            "metrics": {"preset": "vllm", "window": "90s"},
        }
    )
    q = queries(s)
    for key in (mq.Key.PREFILL_LATENCY, mq.Key.DECODE_LATENCY):
        assert q[key].promql.lstrip("(").startswith("histogram_quantile(0.9, ")
        assert "[90s]" in q[key].promql


def test_sglang_metric_names() -> None:
    q = queries(spec("sglang"))
    assert (
        q[mq.Key.REQUEST_RATE].promql == f"sum(rate(sglang:num_requests_total{PREFILL_SEL}[120s]))"
    )
    assert q[mq.Key.PROMPT_TOKENS].promql == (
        f"sum(rate(sglang:prompt_tokens_total{PREFILL_SEL}[120s]))"
        f" / sum(rate(sglang:num_requests_total{PREFILL_SEL}[120s]))"
    )
    assert "sglang:generation_tokens_total" in q[mq.Key.OUTPUT_TOKENS].promql
    assert DECODE_SEL in q[mq.Key.OUTPUT_TOKENS].promql
    assert "sglang:time_to_first_token_seconds_bucket" in q[mq.Key.PREFILL_LATENCY].promql
    assert "sglang:inter_token_latency_seconds_bucket" in q[mq.Key.DECODE_LATENCY].promql
    decode_matchers = DECODE_SEL[1:-1]
    assert q[mq.Key.DECODE_QUEUE].promql == (
        f"sum(sglang:num_queue_reqs{DECODE_SEL}) + (sum({{__name__=~"
        '"sglang:num_prefill_prealloc_queue_reqs|sglang:num_prefill_bootstrap_queue_reqs'
        '|sglang:num_decode_prealloc_queue_reqs|sglang:num_decode_transfer_queue_reqs",'
        f"{decode_matchers}}}) or vector(0))"
    )
    assert q[mq.Key.PREFILL_RUNNING].promql == f"sum(sglang:num_running_reqs{PREFILL_SEL})"
    assert q[mq.Key.DECODE_KV].promql == f"avg(sglang:token_usage{DECODE_SEL})"


def test_dynamo_reads_load_on_the_frontend_and_queues_per_pool() -> None:
    """The frontend sees every request end to end: R, L_p, L_d, TTFT and TPOT use the
    deployment selector (no role); queues stay per pool from the workers' engines."""
    q = queries(spec("dynamo"))
    assert q[mq.Key.REQUEST_RATE].promql == (
        f"sum(rate(dynamo_frontend_requests_total{DEPLOY_SEL}[120s]))"
    )
    assert q[mq.Key.REQUEST_RATE].pool is None
    assert "dynamo_frontend_input_sequence_tokens_sum" in q[mq.Key.PROMPT_TOKENS].promql
    assert "dynamo_frontend_output_sequence_tokens_count" in q[mq.Key.OUTPUT_TOKENS].promql
    assert f"dynamo_frontend_time_to_first_token_seconds_bucket{DEPLOY_SEL}" in (
        q[mq.Key.PREFILL_LATENCY].promql
    )
    assert "dynamo_frontend_inter_token_latency_seconds_bucket" in q[mq.Key.DECODE_LATENCY].promql
    assert q[mq.Key.PREFILL_QUEUE].promql == (
        f"sum(vllm:num_requests_waiting{PREFILL_SEL}) or sum(sglang:num_queue_reqs{PREFILL_SEL})"
    )
    assert q[mq.Key.PREFILL_QUEUE].pool is Role.PREFILL


@pytest.mark.parametrize("preset", ["vllm", "sglang", "dynamo"])
def test_every_preset_query_is_scoped_and_well_formed(preset: str) -> None:
    """Each template passes the same checks as a user's custom template, and every
    rendered query names this deployment's namespace and name."""
    p = presets.PRESETS[preset]
    templates = [getattr(p, f) for f in presets.Preset.__dataclass_fields__ if f != "load_scope"]
    for template in templates:
        if template is not None:
            assert mq.check_template(template) == [], template
    for q in mq.build_queries(spec(preset), NS, NAME):
        assert 'namespace="serving",pdscaler_io_name="chat"' in q.promql


def test_custom_preset_renders_the_users_templates() -> None:
    q = queries(spec("custom", queries=CUSTOM))
    assert q[mq.Key.REQUEST_RATE].promql == f"sum(rate(my_requests_total{PREFILL_SEL}[120s]))"
    assert q[mq.Key.DECODE_LATENCY].promql == (
        'max(my_tpot{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="decode",'
        'job="engine"})'
    )
    assert q[mq.Key.PREFILL_LATENCY].promql.startswith("histogram_quantile(0.95, ")
    # no template for tokens/s or per-pod running: not queried (unknown), not invented
    assert mq.Key.DECODE_TPS not in q
    assert mq.Key.DECODE_RUNNING_BY_POD not in q


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("sum(my_queue)", "not scoped to the deployment"),
        ("sum(my_queue{selector}[{windw}])", "unknown placeholder {windw}"),
        ("sum(rate(my_queue{selector}[{window}])", "unclosed '('"),
        ("sum(my_queue{selector}))", "unbalanced ')'"),
        ('sum(my_queue{{matchers},job="a})', "unterminated string literal"),
    ],
)
def test_custom_template_mistakes_are_named(template: str, problem: str) -> None:
    problems = mq.check_template(template)
    assert any(problem in p for p in problems), problems


def test_custom_preset_refuses_bad_templates_with_the_field_name() -> None:
    # the operator's lenient read: the CRD's CEL twin is left to metricsql
    bad = CustomQueries.model_validate({**CUSTOM, "queueDepth": "sum(my_queue)"}, context=LENIENT)
    assert mq.check_queries(bad) == [
        "metrics.queries.queueDepth: not scoped to the deployment: use {selector} or {matchers}"
    ]
    with pytest.raises(mq.InvalidQueryError, match=r"metrics\.queries\.queueDepth"):
        mq.custom_preset(bad)


def test_brackets_inside_string_literals_do_not_count() -> None:
    assert mq.check_template('sum(x{{matchers},path=~"/a(b|c"})') == []


# ---------------------------------------------------------------------- answers


def read(answer: dict[str, Any]) -> mq.Reading:
    return mq.parse_scalar(answer, now=NOW, max_age=60.0)


def test_a_single_finite_value_is_read() -> None:
    assert read(one("2.5")) == mq.Reading(2.5)
    assert read(one("0")) == mq.Reading(0.0)  # a measured zero is a value


def test_scalar_answers_are_read() -> None:
    answer = {"status": "success", "data": {"resultType": "scalar", "result": [NOW, "3"]}}
    assert read(answer) == mq.Reading(3.0)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (vector(), "no data (empty answer)"),
        (one("NaN"), "value is NaN"),
        (one("+Inf"), "value is +Inf"),
        (one("-Inf"), "value is -Inf"),
        (one("1", ts=NOW - 300), "stale: sample 300s old (max 60s)"),
        (vector(({"pod": "a"}, "1"), ({"pod": "b"}, "2")), "2 series where one was expected"),
        (
            {"status": "error", "errorType": "bad_data", "error": "parse error"},
            "query failed (bad_data): parse error",
        ),
        (
            {"status": "success", "data": {"resultType": "matrix", "result": []}},
            "unexpected result type 'matrix'",
        ),
        ({"status": "success"}, "malformed answer: no data"),
    ],
)
def test_unknown_is_none_with_a_reason_never_zero(answer: dict[str, Any], problem: str) -> None:
    r = read(answer)
    assert r.value is None
    assert r.problem is not None
    assert problem in r.problem, r.problem


def test_per_pod_vector() -> None:
    answer = vector(({"pod": "d-0"}, "3"), ({"pod": "d-1"}, "NaN"), ({}, "1"))
    got, problems = mq.parse_by_label(answer, "pod")
    assert got == {"d-0": 3.0}
    assert problems == (
        "pod=d-1: value is NaN (nothing observed in the window?)",
        "a series without the 'pod' label",
    )


def test_stale_pools_from_the_newest_scrape() -> None:
    """Prefill last scraped 100 s before now (max 60 s): stale; decode 2 s: fresh."""
    fresh = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 100)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 2)),
    )
    assert mq.stale_pools(fresh, now=NOW, max_age=60.0) == {
        Role.PREFILL: "stale: newest prefill scrape 100s old (max 60s)"
    }


def test_assemble_a_complete_snapshot() -> None:
    s = spec()
    snap = mq.assemble(mq.build_queries(s, NS, NAME), full_answers(s), now=NOW)
    assert (snap.request_rate, snap.prompt_tokens, snap.output_tokens) == (4.0, 2000.0, 500.0)
    assert snap.complete
    assert snap.prefill.latency_seconds == 0.85
    assert snap.decode.latency_seconds == 0.042
    assert (snap.prefill.queue_depth, snap.decode.queue_depth) == (3.0, 0.0)
    assert (snap.prefill.running, snap.decode.running) == (2.0, 40.0)
    assert (snap.prefill.tokens_per_second, snap.decode.tokens_per_second) == (8000.0, 2000.0)
    assert snap.decode.kv_usage == 0.5
    assert snap.decode.kv_capacity_tokens == 100_000.0  # 6,250 blocks of 16
    assert snap.decode.running_by_pod == {"d-0": 25.0, "d-1": 15.0}
    assert snap.problems == ()
    assert snap.time == NOW


def test_assemble_marks_each_unknown_with_its_key() -> None:
    """An empty TTFT answer and a NaN prompt mean leave those None (not 0), named."""
    s = spec()
    answers = full_answers(s)
    answers[mq.Key.PREFILL_LATENCY] = vector()
    answers[mq.Key.PROMPT_TOKENS] = one("NaN")
    del answers[mq.Key.DECODE_KV]
    snap = mq.assemble(mq.build_queries(s, NS, NAME), answers, now=NOW)
    assert snap.prefill.latency_seconds is None
    assert snap.prompt_tokens is None
    assert snap.decode.kv_usage is None
    assert not snap.complete
    assert snap.request_rate == 4.0
    assert snap.problems == (
        "prompt_tokens: value is NaN (nothing observed in the window?)",
        "prefill.latency_seconds: no data (empty answer)",
        "decode.kv_usage: not queried",
    )


def test_a_stale_pool_voids_every_value_read_on_it() -> None:
    """Decode's newest scrape is 120 s old: L_d, TPOT and decode's gauges are None,
    prefill's values stay."""
    s = spec()
    answers = full_answers(s)
    answers[mq.Key.FRESHNESS] = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 1)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 120)),
    )
    snap = mq.assemble(mq.build_queries(s, NS, NAME), answers, now=NOW)
    assert snap.output_tokens is None
    assert snap.decode.latency_seconds is None
    assert snap.decode.queue_depth is None
    assert snap.decode.running_by_pod == {}
    assert snap.request_rate == 4.0
    assert snap.prefill.queue_depth == 3.0
    assert snap.problems == ("decode: stale: newest decode scrape 120s old (max 60s)",)
