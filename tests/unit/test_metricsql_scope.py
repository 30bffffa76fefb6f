"""Custom PromQL can only read the PDDeployment's own series: every vector selector of a
custom template carries ``{selector}`` or ``{matchers}``, and none matches on the labels
pdscaler scopes with (``namespace``, ``pod``, ``pdscaler_io_*``). A template that only
had to contain ``{selector}`` once let ``... or sum(x{namespace="other"})`` read another
tenant's series; now it is refused before any query is sent, and the operator says so in
MetricsAvailable (reason InvalidQuery)."""

from __future__ import annotations

import re

import pytest

from pdscaler import metricsql as mq
from pdscaler import presets
from pdscaler.prometheus import (
    MetricsUnavailableError,
    PrometheusClient,
    read_snapshot,
)
from pdscaler.spec import MSG_QUERY_SCOPE, PDDeploymentSpec, parse_spec_lenient
from pdscaler.types import ConditionReason, MetricsErrorReason

SCOPED = [
    "sum(x{selector})",
    "{selector}",
    'sum by (pod) (x{{matchers},job="a"}[{window}])',
    "histogram_quantile({quantile}, sum by (le) (rate(x_bucket{selector}[{window}])))",
    "sum without (pod) (x{selector})",
    "sum(x{selector}) by (pod)",
    'sum({__name__=~"a|b", {matchers}})',
    "x{selector} offset 5m",
    "rate(x{selector}[5m:1m] @ start())",
    "sum(x{selector}) # or y",
    'count_values("pod", x{selector})',
    'label_replace(x{selector}, "namespace", "o", "", "")',
    "sum(x{selector}) > bool 3",
    "vector(1) + x{selector}",
    "sum(rate(a{selector}[{window}])) / sum(rate(b{selector}[{window}]))",
    "sum(x{selector}) * on(pod) group_left(node) sum by (pod, node) (y{selector})",
]

CROSS_TENANT = [
    ('sum(x{selector}) or sum(x{namespace="other"})', "x{...} has no {selector}"),
    ("sum(x{selector}) or sum(y)", "y has no {selector}"),
    ("sum(x{selector}) or absent(y)", "y has no {selector}"),
    ('sum(x{selector}) or {job="engine"}', "{...} has no {selector}"),
    ("sum(x{selector}) * on(pod) group_left(node) kube_pod_info", "kube_pod_info has no"),
    ("sum(x{selector}) / on() group_left sum(y)", "y has no {selector}"),
    ("x{matchers}", "x has no {selector}"),
    ('sum(x{{matchers},namespace=~".+"})', "matches on namespace"),
    ('sum(x{{matchers},"namespace"="other"})', "matches on namespace"),
    ('sum(x{{matchers},pod!="a"})', "matches on pod"),
    ('sum(x{{matchers},pdscaler_io_name="other"})', "matches on pdscaler_io_name"),
    ("sum(x{selector})\nor sum(y) # {selector}", "y has no {selector}"),
]


@pytest.mark.parametrize("template", SCOPED)
def test_scoped_templates_pass(template: str) -> None:
    assert mq.check_template(template) == []


@pytest.mark.parametrize(("template", "problem"), CROSS_TENANT)
def test_templates_reaching_outside_the_deployment_are_refused(template: str, problem: str) -> None:
    problems = mq.check_template(template)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize("preset", sorted(presets.PRESETS))
def test_every_preset_passes_the_scope_check(preset: str) -> None:
    p = presets.PRESETS[preset]
    for field in presets.Preset.__dataclass_fields__:
        template = getattr(p, field)
        if field != "load_scope" and template is not None:
            assert mq.scope_problems(template) == [], (field, template)


def test_a_cross_tenant_custom_query_is_refused_before_sending() -> None:
    """No connection is attempted (the URL refuses connections anyway: a query sent
    would be PrometheusUnreachable), and the condition reason is InvalidQuery."""
    doc = {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
        "metrics": {
            "preset": "custom",
            "queries": {
                "requestRate": "sum(rate(r{selector}[{window}]))",
                "promptTokens": "avg(p{selector})",
                "outputTokens": "avg(o{selector})",
                "queueDepth": 'sum(q{selector}) or sum(q{namespace="other"})',
                "ttft": "max(t{selector})",
                "tpot": "max(u{selector})",
            },
        },
    }
    # offline (pdscaler plan -f) and at admission: the CRD's rule refuses it
    with pytest.raises(ValueError, match=re.escape(MSG_QUERY_SCOPE)):
        PDDeploymentSpec.model_validate(doc)
    # an object stored before the rule: the operator reads it, refuses the query itself
    spec, unknown = parse_spec_lenient(doc)
    assert unknown == ()

    with pytest.raises(MetricsUnavailableError) as info:
        read_snapshot(PrometheusClient("http://127.0.0.1:9"), spec, "ns", "c", 0.0)
    assert info.value.reason == MetricsErrorReason.INVALID_QUERY
    assert info.value.condition_reason == ConditionReason.INVALID_QUERY
    assert info.value.message.startswith(
        "metrics.queries.queueDepth: selector q{...} has no {selector} or {matchers}"
    )
