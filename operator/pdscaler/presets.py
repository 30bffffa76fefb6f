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
    #: The KV capacity of the pool's replicas: a vector whose series carry
    #: ``num_gpu_blocks`` and ``block_size`` labels (``metricsql`` takes the smallest
    #: product); None: the engine does not report it.
    kv_capacity: str | None = None
    load_scope: Literal["pool", "deployment"] = "pool"
    #: R as ARRIVALS, read on the cells' router pods (``{selector}`` is the routers'):
    #: used when it answers, else ``request_rate`` (completions) is (``metricsql``).
    arrival_rate: str | None = None


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
#             vllm:request_time_per_output_token_seconds (ONE observation per finished
#             request: its decode time over its output tokens - 1), and the inter-token
#             latency vllm:inter_token_latency_seconds (one observation per generated
#             TOKEN);
#   gauges    vllm:num_requests_waiting, vllm:num_requests_running,
#             vllm:kv_cache_usage_perc, and the info gauge vllm:cache_config_info (value
#             1; the engine's CacheConfig in its labels, among them num_gpu_blocks and
#             block_size once the KV cache is allocated: M = their product).
# TPOT: the SLO is per request ("p95 of requests see a TPOT under 50 ms"), so the
# per-request histogram is read first. The inter-token latency is token-weighted: a long
# answer counts once per token, and its p95 is not the requests' p95. It is the
# fall-back for releases without the per-request histogram; the last fall-back,
# vllm:time_per_output_token_seconds, is its DEPRECATED name ("Use
# vllm:inter_token_latency_seconds"), for old releases only. Likewise
# vllm:gpu_cache_usage_perc is the deprecated name of vllm:kv_cache_usage_perc, read
# only when the new one is absent (old releases). `a or b` answers a's series when a
# has any: the fall-backs never mix with the current names. A quantile over a window in
# which its histogram observed nothing is NaN, and a NaN series is still a series: `(a
# >= 0)` drops it, so a window in which no request FINISHED (outputs longer than the
# window) falls back to the inter-token latency of the tokens streamed meanwhile.
# R: ARRIVALS when the cells' routers answer, else completions. vllm:request_success_total
# counts COMPLETIONS, which a growing backlog holds below demand. The arrivals come from
# vllm-router (0.1.17, PD mode), scraped on its `metrics` port with the pod labels
# (docs/operator.md, "What the presets read"); observed against the real binary:
#   vllm_router_processed_requests_total{worker="http://<ip>:<port>"} +1 for the prefill
#             worker AND +1 for the decode worker when the router picks them, i.e. when
#             the request arrives: an in-flight request is counted, and so is one whose
#             decode then fails (500); a body the router rejects (400/422) is not;
#   vllm_router_pd_requests_total{route="/v1/completions"} +1 when the router's answer
#             comes back (a whole non-streamed answer, or a stream's start): NOT
#             arrivals, a long non-streamed request is counted at its end.
# So R = the processed counter over all workers / 2 (one prefill + one decode pick per
# request). The routers' series carry pdscaler_io_role="router".
VLLM = Preset(
    request_rate=_rate("vllm:request_success_total"),
    prompt_tokens=_mean("vllm:request_prompt_tokens"),
    output_tokens=_mean("vllm:request_generation_tokens"),
    ttft=_quantile("vllm:time_to_first_token_seconds"),
    tpot=(
        f"({_quantile('vllm:request_time_per_output_token_seconds')} >= 0)"
        f" or ({_quantile('vllm:inter_token_latency_seconds')} >= 0)"
        f" or {_quantile('vllm:time_per_output_token_seconds')}"
    ),
    queue_depth="sum(vllm:num_requests_waiting{selector})",
    running="sum(vllm:num_requests_running{selector})",
    prefill_tokens_per_second=_rate("vllm:prompt_tokens_total"),
    decode_tokens_per_second=_rate("vllm:generation_tokens_total"),
    kv_usage="avg(vllm:kv_cache_usage_perc{selector}) or avg(vllm:gpu_cache_usage_perc{selector})",
    running_by_pod="sum by (pod) (vllm:num_requests_running{selector})",
    kv_capacity="max by (num_gpu_blocks, block_size) (vllm:cache_config_info{selector})",
    arrival_rate="sum(rate(vllm_router_processed_requests_total{selector}[{window}])) / 2",
)

# SGLang, names as registered in python/sglang/srt/metrics/collector.py (and listed in
# docs/references/production_metrics.md); SGLang exports them only when started with
# `--enable-metrics`:
#   TokenizerMetricsCollector: counters sglang:num_requests_total,
#             sglang:prompt_tokens_total, sglang:generation_tokens_total; histograms
#             sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds
#             (older releases: sglang:time_per_output_token_seconds, fall-back only);
#   SchedulerMetricsCollector: gauges sglang:num_queue_reqs, sglang:num_running_reqs,
#             sglang:token_usage (KV pool usage, 0..1), and in PD mode the hand-off
#             queues: on a prefill server the bootstrap queue
#             (sglang:num_prefill_prealloc_queue_reqs; some releases
#             sglang:num_prefill_bootstrap_queue_reqs), on a decode server
#             sglang:num_decode_prealloc_queue_reqs (waiting for KV memory) and
#             sglang:num_decode_transfer_queue_reqs (KV in flight).
# Queue depth: a PD request waits in those hand-off queues BEFORE it reaches
# num_queue_reqs (a decode server short of KV memory shows an empty waiting queue and a
# full prealloc queue), so the queue signal is their sum. The scheduler queue is
# required (absent: unknown); the hand-off queues count 0 when a server exports none
# (not in PD mode, or a release without them).
# Token means come from the counters: the per-request token histograms are optional.
# R: ARRIVALS when the cells' routers answer, else completions. The arrivals come from
# sglang-router (0.3.2, PD mode; its Rust gateway names its series smg_*), scraped on
# its `metrics` port (--prometheus-port 29000) with the pod labels; observed against
# the real router:
#   smg_router_requests_total{router_type="http",backend_type="pd",model,endpoint
#             (completions|chat|generate),streaming} +1 ONCE per request when it arrives
#             (an in-flight request is counted); a body the router rejects (400) is not;
#   smg_worker_selection_total{worker_type="prefill"|"decode"} +1 per worker picked
#             (one prefill and one decode per request);
#   smg_http_requests_total{method,path} counts every HTTP request, the readiness and
#             liveness probes and the rejected bodies included: not arrivals.
# So R = the requests counter summed over all series (no "/ 2").
_SGLANG_HANDOFF = (
    "sglang:num_prefill_prealloc_queue_reqs|sglang:num_prefill_bootstrap_queue_reqs"
    "|sglang:num_decode_prealloc_queue_reqs|sglang:num_decode_transfer_queue_reqs"
)
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
    queue_depth=(
        "sum(sglang:num_queue_reqs{selector})"
        f' + (sum({{__name__=~"{_SGLANG_HANDOFF}",{{matchers}}}}) or vector(0))'
    ),
    running="sum(sglang:num_running_reqs{selector})",
    prefill_tokens_per_second=_rate("sglang:prompt_tokens_total"),
    decode_tokens_per_second=_rate("sglang:generation_tokens_total"),
    kv_usage="avg(sglang:token_usage{selector})",
    running_by_pod="sum by (pod) (sglang:num_running_reqs{selector})",
    arrival_rate=_rate("smg_router_requests_total"),
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

#: What R, the request rate, counts under each preset when it is read as completions
#: (status and ``explain`` say it): the fall-back where no router answers.
RATE_SOURCES: Mapping[str, str] = {
    "vllm": "completed requests/s (vllm:request_success_total, prefill pool)",
    "sglang": "finished requests/s (sglang:num_requests_total, prefill pool)",
    "dynamo": "requests/s handled by the frontend (dynamo_frontend_requests_total)",
    "custom": "metrics.queries.requestRate",
}


#: What R counts when the preset's ``arrival_rate`` answered (presets that have one).
ARRIVAL_SOURCES: Mapping[str, str] = {
    "vllm": "arriving requests/s (vllm_router_processed_requests_total / 2, cell routers)",
    "sglang": "arriving requests/s (smg_router_requests_total, cell routers)",
}


def rate_source(preset: str, arrivals: bool = False) -> str:
    """What R counts under ``preset``, read as arrivals or as completions:
    ``rate_source("vllm")`` -> ``"completed requests/s (vllm:request_success_total,
    prefill pool)"``; ``rate_source("vllm", arrivals=True)`` -> ``"arriving requests/s
    (vllm_router_processed_requests_total / 2, cell routers)"``."""
    if arrivals and preset in ARRIVAL_SOURCES:
        return ARRIVAL_SOURCES[preset]
    return RATE_SOURCES.get(preset, "metrics.queries.requestRate")
