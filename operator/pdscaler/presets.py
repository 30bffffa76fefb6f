"""The metric presets: the PromQL templates of each engine family (vLLM, SGLang,
Dynamo), and the table ``spec.metrics.preset`` names them by.

Owns: which metric each quantity is read from, per engine, with the sources the names
were taken from; templates use the placeholders ``metricsql.render`` fills
(``{selector}``, ``{window}``, ``{quantile}``). Must not: render, scope, run or parse
queries (``metricsql`` does), or read the spec (``metricsql.preset_for`` picks the
preset, and builds the ``custom`` one from ``spec.metrics.queries``).

``VLLM.queue_depth`` is ``sum(vllm:num_requests_waiting{selector})``; a request rate is
``sum(rate(<counter>{selector}[{window}]))``; a mean per request is the rate of a
histogram's ``_sum`` over the rate of its ``_count``. Where each quantity is read
(prefill or decode pool, or the whole deployment for Dynamo's frontend) is documented
once, in ``metricsql``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Preset:
    """The query templates of one engine family (placeholders as in ``metricsql.render``).

    ``load_scope`` says where R, L_p, L_d, TTFT and TPOT are read: per pool (prefill for
    R, L_p and TTFT; decode for L_d and TPOT) or on the whole deployment (a frontend).
    Per-pool templates (queue, running, tokens/s) are rendered once per pool.
    """

    request_rate: str
    prompt_tokens: str
    output_tokens: str
    ttft: str
    tpot: str
    queue_depth: str
    running: str | None = None
    prefill_tokens_per_second: str | None = None
    decode_tokens_per_second: str | None = None
    kv_usage: str | None = None
    running_by_pod: str | None = None
    load_scope: Literal["pool", "deployment"] = "pool"


def _rate(metric: str) -> str:
    return f"sum(rate({metric}{{selector}}[{{window}}]))"


def _mean(hist: str) -> str:
    """Mean of a histogram over the window: rate of its _sum over rate of its _count
    (0/0 = NaN when nothing was observed: unknown, not 0)."""
    return f"{_rate(hist + '_sum')} / {_rate(hist + '_count')}"


def _quantile(hist: str) -> str:
    return (
        "histogram_quantile({quantile}, sum by (le) "
        f"(rate({hist}_bucket{{selector}}[{{window}}])))"
    )


# vLLM, names as registered in vllm/v1/metrics/loggers.py (PrometheusStatLogger), also
# listed in docs/design/metrics.md:
#   counters  vllm:request_success (label finished_reason), vllm:prompt_tokens,
#             vllm:generation_tokens; prometheus_client exposes them with `_total`;
#   histograms vllm:request_prompt_tokens, vllm:request_generation_tokens (tokens per
#             finished request), vllm:time_to_first_token_seconds,
#             vllm:inter_token_latency_seconds, and vllm:time_per_output_token_seconds,
#             same buckets, documented "DEPRECATED: Use vllm:inter_token_latency_seconds"
#             (older releases have only it, hence the `or` fallback);
#   gauges    vllm:num_requests_waiting, vllm:num_requests_running,
#             vllm:kv_cache_usage_perc (older releases: vllm:gpu_cache_usage_perc).
VLLM = Preset(
    request_rate=_rate("vllm:request_success_total"),
    prompt_tokens=_mean("vllm:request_prompt_tokens"),
    output_tokens=_mean("vllm:request_generation_tokens"),
    ttft=_quantile("vllm:time_to_first_token_seconds"),
    tpot=(
        f"{_quantile('vllm:inter_token_latency_seconds')}"
        f" or {_quantile('vllm:time_per_output_token_seconds')}"
    ),
    queue_depth="sum(vllm:num_requests_waiting{selector})",
    running="sum(vllm:num_requests_running{selector})",
    prefill_tokens_per_second=_rate("vllm:prompt_tokens_total"),
    decode_tokens_per_second=_rate("vllm:generation_tokens_total"),
    kv_usage="avg(vllm:kv_cache_usage_perc{selector}) or avg(vllm:gpu_cache_usage_perc{selector})",
    running_by_pod="sum by (pod) (vllm:num_requests_running{selector})",
)

# SGLang, names as registered in python/sglang/srt/metrics/collector.py (and listed in
# docs/references/production_metrics.md):
#   TokenizerMetricsCollector: counters sglang:num_requests_total,
#             sglang:prompt_tokens_total, sglang:generation_tokens_total; histograms
#             sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds
#             (older releases: sglang:time_per_output_token_seconds);
#   SchedulerMetricsCollector: gauges sglang:num_queue_reqs, sglang:num_running_reqs,
#             sglang:token_usage (KV pool usage, 0..1).
# Token means come from the counters: the per-request token histograms are optional.
SGLANG = Preset(
    request_rate=_rate("sglang:num_requests_total"),
    prompt_tokens=f"{_rate('sglang:prompt_tokens_total')} / {_rate('sglang:num_requests_total')}",
    output_tokens=(
        f"{_rate('sglang:generation_tokens_total')} / {_rate('sglang:num_requests_total')}"
    ),
    ttft=_quantile("sglang:time_to_first_token_seconds"),
    tpot=(
        f"{_quantile('sglang:inter_token_latency_seconds')}"
        f" or {_quantile('sglang:time_per_output_token_seconds')}"
    ),
    queue_depth="sum(sglang:num_queue_reqs{selector})",
    running="sum(sglang:num_running_reqs{selector})",
    prefill_tokens_per_second=_rate("sglang:prompt_tokens_total"),
    decode_tokens_per_second=_rate("sglang:generation_tokens_total"),
    kv_usage="avg(sglang:token_usage{selector})",
    running_by_pod="sum by (pod) (sglang:num_running_reqs{selector})",
)

# Dynamo, names from lib/runtime/src/metrics/prometheus_names.rs (module frontend_service,
# prefix dynamo_frontend_) and the docs' metrics catalog:
#   dynamo_frontend_requests_total (counter; labels status, request_type),
#   dynamo_frontend_input_sequence_tokens, dynamo_frontend_output_sequence_tokens,
#   dynamo_frontend_time_to_first_token_seconds,
#   dynamo_frontend_inter_token_latency_seconds (histograms).
# R counts every request the frontend handled (status success or error): the pools carried
# them all. Per pool: the engine metrics Dynamo's vLLM or SGLang workers pass through on
# their /metrics, and the workers' dynamo_component_kvstats_gpu_cache_usage_percent (0..1).
DYNAMO = Preset(
    request_rate=_rate("dynamo_frontend_requests_total"),
    prompt_tokens=_mean("dynamo_frontend_input_sequence_tokens"),
    output_tokens=_mean("dynamo_frontend_output_sequence_tokens"),
    ttft=_quantile("dynamo_frontend_time_to_first_token_seconds"),
    tpot=_quantile("dynamo_frontend_inter_token_latency_seconds"),
    queue_depth="sum(vllm:num_requests_waiting{selector}) or sum(sglang:num_queue_reqs{selector})",
    running="sum(vllm:num_requests_running{selector}) or sum(sglang:num_running_reqs{selector})",
    prefill_tokens_per_second=(
        f"{_rate('vllm:prompt_tokens_total')} or {_rate('sglang:prompt_tokens_total')}"
    ),
    decode_tokens_per_second=(
        f"{_rate('vllm:generation_tokens_total')} or {_rate('sglang:generation_tokens_total')}"
    ),
    kv_usage=(
        "avg(dynamo_component_kvstats_gpu_cache_usage_percent{selector})"
        " or avg(vllm:kv_cache_usage_perc{selector}) or avg(sglang:token_usage{selector})"
    ),
    running_by_pod=(
        "sum by (pod) (vllm:num_requests_running{selector})"
        " or sum by (pod) (sglang:num_running_reqs{selector})"
    ),
    load_scope="deployment",
)

PRESETS: Mapping[str, Preset] = {"vllm": VLLM, "sglang": SGLANG, "dynamo": DYNAMO}
