"""PromQL for one PDDeployment: templates filled and checked, the queries of a preset
(``presets``) scoped to its pools, and the reading of Prometheus' answers into a
``MetricsSnapshot``. Pure: builds strings and parses JSON already fetched; it never
opens a connection (``pdscaler.prometheus`` does).

Scoping. Every engine series carries the labels ``namespace``, ``pod``,
``pdscaler_io_name`` and ``pdscaler_io_role`` (the pod labels ``pdscaler.io/name`` and
``pdscaler.io/role``, sanitised as Prometheus' Kubernetes discovery does). The scrape
configuration that gives them: docs/operator.md, "Scraping the engines". A pool's
selector is then

>>> from pdscaler.types import Role
>>> selector("serving", "chat", Role.PREFILL)
'{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="prefill"}'

Label values are escaped as PromQL string literals, so a name cannot inject PromQL:

>>> selector("ns", 'x"} or vector(1) #', None)
'{namespace="ns",pdscaler_io_name="x\\\\"} or vector(1) #"}'

Where each quantity is read (the same for every preset, documented once):

* R, the request rate: ARRIVALS on the cells' ROUTER pods (``pdscaler_io_role="router"``)
  when the preset has an arrival query and it answers (``choose_rate``;
  ``MetricsSnapshot.rate_source`` says which), else completions on the PREFILL pool.
* L_p, the mean prompt tokens, and R's completions: on the PREFILL pool (every
  request passes there once; in vLLM's P/D setups the decode side also re-counts the
  prompt, so the decode pool would count it too but later).
* L_d, the mean output tokens: on the DECODE pool (the prefill side of a P/D pair runs
  each request with ``max_tokens=1``, so its output histogram says 1).
* TTFT at the SLO percentile: on the PREFILL pool. In a P/D pair the client's TTFT is
  the prefill-side TTFT (queue + prefill) plus the decode side's KV pull and first step;
  the prefill side is the part the prefill pool's size controls, and the decode side's
  waiting shows up as the decode queue depth, which the policy reads separately.
* TPOT at the SLO percentile, KV usage and per-pod running requests: on the DECODE pool.
* Queue depth, running requests and tokens/s: per pool.

The Dynamo preset is the exception: Dynamo's HTTP frontend observes R, L_p, L_d, TTFT and
TPOT end to end, so those are read with the deployment selector (no role): label the
frontend pods ``pdscaler.io/name: <name>`` too. Its per-pool signals come from the engine
metrics Dynamo's workers pass through (vLLM's, or SGLang's).

Unknown is never 0: an empty answer, NaN, +/-Inf, a stale sample, several series where
one was expected, or a query error each give ``None`` plus a sentence in
``MetricsSnapshot.problems``. A pool whose newest scrape (``timestamp(up)``) is older
than ``max_age`` has all its values set to ``None``: without that check a gauge would
keep answering its last value for Prometheus' 5 min lookback. That check is per pool (the
newest of its pods), and ``up`` is written on every scrape, failed or not, so it cannot
see targets that fail: ``sum by (pdscaler_io_role) (up{...})`` counts each pool's
targets whose last scrape succeeded (``PoolMetrics.targets_up``; a pool absent from the
answer has 0), which the policy compares with the pool's Ready pods. Each pool's own
signals that came back unknown are named in ``PoolMetrics.missing`` (all of them for a
stale pool), so the policy never scales that pool down on them.

Modules: ``templates`` (label names, selectors, the renderer), ``check`` (a custom
template's checks), ``queries`` (the preset and the queries of a snapshot), ``answers``
(the answers read into a ``MetricsSnapshot``). Every public name is importable from
``pdscaler.metricsql``.
"""

from __future__ import annotations

from pdscaler.metricsql.answers import (
    Reading,
    assemble,
    choose_rate,
    evaluated_at,
    parse_by_label,
    parse_scalar,
    router_stale,
    stale_pools,
    targets_up,
)
from pdscaler.metricsql.check import (
    SCOPE_LABEL_PREFIX,
    SCOPE_LABELS,
    InvalidQueryError,
    check_queries,
    check_template,
    scope_problems,
)
from pdscaler.metricsql.queries import (
    Key,
    Query,
    build_queries,
    custom_preset,
    preset_for,
)
from pdscaler.metricsql.templates import (
    DEFAULT_MAX_AGE_SECONDS,
    PLACEHOLDERS,
    PROM_NAME,
    PROM_NAMESPACE,
    PROM_POD,
    PROM_ROLE,
    ROUTER_ROLE,
    escape_label_value,
    matchers,
    prom_label,
    promql_duration,
    render,
    selector,
)

__all__ = [
    "DEFAULT_MAX_AGE_SECONDS",
    "PLACEHOLDERS",
    "PROM_NAME",
    "PROM_NAMESPACE",
    "PROM_POD",
    "PROM_ROLE",
    "ROUTER_ROLE",
    "SCOPE_LABELS",
    "SCOPE_LABEL_PREFIX",
    "InvalidQueryError",
    "Key",
    "Query",
    "Reading",
    "assemble",
    "build_queries",
    "check_queries",
    "check_template",
    "choose_rate",
    "custom_preset",
    "escape_label_value",
    "evaluated_at",
    "matchers",
    "parse_by_label",
    "parse_scalar",
    "preset_for",
    "prom_label",
    "promql_duration",
    "render",
    "router_stale",
    "scope_problems",
    "selector",
    "stale_pools",
    "targets_up",
]
