"""Prometheus text exposition of one simulated vLLM (or SGLang) pod's series.

Owns: the metric names, types and help texts the engine simulator exports (the vLLM
names ``pdscaler.metricsql``'s ``vllm`` preset queries: the per-request TPOT histogram
``vllm:request_time_per_output_token_seconds`` the preset reads first, and the
token-weighted inter-token latency under its current and its deprecated name, for the
preset's fall-backs) and rendering a
:class:`pdscaler.sim.engine.PodStats` in the text format (version 0.0.4).
Must not: run the engine, hold state, or do I/O.

Two renderings of the same series: ``render_pod(stats)`` for the pod's own endpoint
(no pod labels: Prometheus attaches ``namespace``, ``pod``, ``pdscaler_io_name`` and
``pdscaler_io_role`` from the scrape target, as a Kubernetes pod scrape would), and
``render_pod(stats, labels)`` for the combined ``/metrics`` page a human reads.
Histogram counts arrive per bucket and are written cumulative over ``le``:

>>> print(histogram("h", (1.0, float("inf")), [2.0, 1.0], 4.5, {}), end="")
h_bucket{le="1.0"} 2
h_bucket{le="+Inf"} 3
h_sum 4.5
h_count 3
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS, PodStats

MODEL_NAME = "simulated/llama-3.1-8b"

#: name -> (type, help) of every series exported, in exposition order.
METRICS: dict[str, tuple[str, str]] = {
    "vllm:num_requests_waiting": ("gauge", "Number of requests waiting to be processed."),
    "vllm:num_requests_running": ("gauge", "Number of requests in model execution batches."),
    "vllm:kv_cache_usage_perc": ("gauge", "KV-cache usage. 1 means 100 percent usage."),
    "vllm:cache_config_info": ("gauge", "Information of the LLMEngine CacheConfig"),
    "vllm:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "vllm:generation_tokens": ("counter", "Number of generation tokens processed."),
    "vllm:request_success": ("counter", "Count of successfully processed requests."),
    "vllm:time_to_first_token_seconds": ("histogram", "Histogram of time to first token."),
    "vllm:request_time_per_output_token_seconds": (
        "histogram",
        "Histogram of time_per_output_token_seconds per request.",
    ),
    "vllm:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency."),
    "vllm:time_per_output_token_seconds": (
        "histogram",
        "Histogram of time per output token (deprecated name of the inter-token latency).",
    ),
    "vllm:request_prompt_tokens": ("histogram", "Number of prefill tokens processed."),
    "vllm:request_generation_tokens": ("histogram", "Number of generation tokens processed."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: Mapping[str, str]) -> str:
    """``{a="x",b="y"}`` (empty string for no labels)."""
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _num(value: float) -> str:
    """Integers without a fraction (``3``), others in repr (``0.25``), ``+Inf``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def histogram(
    name: str,
    bounds: Sequence[float],
    counts: Sequence[float],
    total: float,
    labels: Mapping[str, str],
) -> str:
    """``name_bucket`` lines (cumulative), ``name_sum`` and ``name_count``."""
    lines = []
    acc = 0.0
    for bound, count in zip(bounds, counts, strict=True):
        acc += count
        lines.append(f"{name}_bucket{_labels({**labels, 'le': _le(bound)})} {_num(acc)}")
    lines.append(f"{name}_sum{_labels(labels)} {_num(total)}")
    lines.append(f"{name}_count{_labels(labels)} {_num(acc)}")
    return "\n".join(lines) + "\n"


def _sample(name: str, labels: Mapping[str, str], value: float) -> str:
    return f"{name}{_labels(labels)} {_num(value)}\n"


#: The KV block size the simulated engine reports (vLLM's default on CUDA).
BLOCK_SIZE = 16


def _cache_config(stats: PodStats, labels: Mapping[str, str]) -> str:
    """vLLM's info gauge of its CacheConfig (value 1, the config in the labels); only
    where the pod has a KV capacity: 100,000 tokens -> ``num_gpu_blocks="6250"``,
    ``block_size="16"``."""
    if stats.kv_capacity_tokens <= 0:
        return ""
    blocks = int(stats.kv_capacity_tokens // BLOCK_SIZE)
    info = {"block_size": str(BLOCK_SIZE), "num_gpu_blocks": str(blocks), **labels}
    return _sample("vllm:cache_config_info", info, 1.0)


def _series(stats: PodStats, labels: Mapping[str, str]) -> dict[str, str]:
    """The sample lines of each metric for one pod."""
    base = {"model_name": MODEL_NAME, "engine": "0", **labels}
    inf = (math.inf,)
    ok = stats.request_success
    return {
        "vllm:num_requests_waiting": _sample("vllm:num_requests_waiting", base, stats.waiting),
        "vllm:num_requests_running": _sample("vllm:num_requests_running", base, stats.running),
        "vllm:kv_cache_usage_perc": _sample("vllm:kv_cache_usage_perc", base, stats.kv_usage),
        "vllm:cache_config_info": _cache_config(stats, labels),
        "vllm:prompt_tokens": _sample("vllm:prompt_tokens_total", base, stats.prompt_tokens),
        "vllm:generation_tokens": _sample(
            "vllm:generation_tokens_total", base, stats.generation_tokens
        ),
        "vllm:request_success": _sample(
            "vllm:request_success_total", {**base, "finished_reason": "stop"}, ok
        ),
        "vllm:time_to_first_token_seconds": histogram(
            "vllm:time_to_first_token_seconds",
            TTFT_BUCKETS,
            stats.ttft_counts,
            stats.ttft_sum,
            base,
        ),
        "vllm:request_time_per_output_token_seconds": histogram(
            "vllm:request_time_per_output_token_seconds",
            TPOT_BUCKETS,
            stats.request_tpot_counts,
            stats.request_tpot_sum,
            base,
        ),
        "vllm:inter_token_latency_seconds": histogram(
            "vllm:inter_token_latency_seconds", TPOT_BUCKETS, stats.itl_counts, stats.itl_sum, base
        ),
        "vllm:time_per_output_token_seconds": histogram(
            "vllm:time_per_output_token_seconds",
            TPOT_BUCKETS,
            stats.itl_counts,
            stats.itl_sum,
            base,
        ),
        "vllm:request_prompt_tokens": histogram(
            "vllm:request_prompt_tokens", inf, [ok], stats.request_prompt_tokens_sum, base
        ),
        "vllm:request_generation_tokens": histogram(
            "vllm:request_generation_tokens", inf, [ok], stats.request_generation_tokens_sum, base
        ),
    }


#: SGLang's names (python/sglang/srt/metrics/collector.py, what the ``sglang`` preset
#: reads) for the same quantities: name -> (type, help).
SGLANG_METRICS: dict[str, tuple[str, str]] = {
    "sglang:num_queue_reqs": ("gauge", "The number of requests in the waiting queue."),
    "sglang:num_running_reqs": ("gauge", "The number of running requests."),
    "sglang:token_usage": ("gauge", "The token usage."),
    "sglang:num_requests": ("counter", "Number of requests processed."),
    "sglang:prompt_tokens": ("counter", "Number of prefill tokens processed."),
    "sglang:generation_tokens": ("counter", "Number of generation tokens processed."),
    "sglang:time_to_first_token_seconds": ("histogram", "Histogram of time to first token."),
    "sglang:inter_token_latency_seconds": ("histogram", "Histogram of inter-token latency."),
}


def _sglang_series(stats: PodStats, labels: Mapping[str, str]) -> dict[str, str]:
    """The sample lines of each SGLang metric for one pod (no KV capacity info: SGLang
    has no ``cache_config_info``)."""
    base = {"model_name": MODEL_NAME, **labels}
    return {
        "sglang:num_queue_reqs": _sample("sglang:num_queue_reqs", base, stats.waiting),
        "sglang:num_running_reqs": _sample("sglang:num_running_reqs", base, stats.running),
        "sglang:token_usage": _sample("sglang:token_usage", base, stats.kv_usage),
        "sglang:num_requests": _sample("sglang:num_requests_total", base, stats.request_success),
        "sglang:prompt_tokens": _sample("sglang:prompt_tokens_total", base, stats.prompt_tokens),
        "sglang:generation_tokens": _sample(
            "sglang:generation_tokens_total", base, stats.generation_tokens
        ),
        "sglang:time_to_first_token_seconds": histogram(
            "sglang:time_to_first_token_seconds",
            TTFT_BUCKETS,
            stats.ttft_counts,
            stats.ttft_sum,
            base,
        ),
        "sglang:inter_token_latency_seconds": histogram(
            "sglang:inter_token_latency_seconds",
            TPOT_BUCKETS,
            stats.itl_counts,
            stats.itl_sum,
            base,
        ),
    }


#: NVIDIA Dynamo's frontend names (lib/runtime/src/metrics/prometheus_names.rs, module
#: frontend_service; what the ``dynamo`` preset reads R, the lengths, TTFT and ITL from):
#: name -> (type, help).
DYNAMO_FRONTEND_METRICS: dict[str, tuple[str, str]] = {
    "dynamo_frontend_requests": ("counter", "Total number of LLM requests processed"),
    "dynamo_frontend_input_sequence_tokens": ("histogram", "Input sequence length in tokens"),
    "dynamo_frontend_output_sequence_tokens": ("histogram", "Output sequence length in tokens"),
    "dynamo_frontend_time_to_first_token_seconds": (
        "histogram",
        "Time to first token in seconds",
    ),
    "dynamo_frontend_inter_token_latency_seconds": (
        "histogram",
        "Inter-token latency in seconds",
    ),
}


def _dynamo_frontend_series(stats: PodStats, labels: Mapping[str, str]) -> dict[str, str]:
    """The sample lines of Dynamo's frontend for one PDDeployment, from ``stats`` of the
    whole deployment as the frontend sees it (``request_success``: requests answered;
    the per-request token sums; ``ttft_*``: arrival -> first token; ``itl_*``: every
    token after the first), as ``sim.frontend_stats`` sums them."""
    base = {"model": MODEL_NAME, **labels}
    ok = stats.request_success
    inf = (math.inf,)
    return {
        "dynamo_frontend_requests": _sample(
            "dynamo_frontend_requests_total",
            {**base, "request_type": "stream", "status": "success"},
            ok,
        ),
        "dynamo_frontend_input_sequence_tokens": histogram(
            "dynamo_frontend_input_sequence_tokens",
            inf,
            [ok],
            stats.request_prompt_tokens_sum,
            base,
        ),
        "dynamo_frontend_output_sequence_tokens": histogram(
            "dynamo_frontend_output_sequence_tokens",
            inf,
            [ok],
            stats.request_generation_tokens_sum,
            base,
        ),
        "dynamo_frontend_time_to_first_token_seconds": histogram(
            "dynamo_frontend_time_to_first_token_seconds",
            TTFT_BUCKETS,
            stats.ttft_counts,
            stats.ttft_sum,
            base,
        ),
        "dynamo_frontend_inter_token_latency_seconds": histogram(
            "dynamo_frontend_inter_token_latency_seconds",
            TPOT_BUCKETS,
            stats.itl_counts,
            stats.itl_sum,
            base,
        ),
    }


#: The dialects a page speaks: (metric table, series of one pod). ``dynamo-frontend``
#: is a Dynamo frontend pod's page (one per PDDeployment, not per engine pod).
DIALECTS = {
    "vllm": (METRICS, _series),
    "sglang": (SGLANG_METRICS, _sglang_series),
    "dynamo-frontend": (DYNAMO_FRONTEND_METRICS, _dynamo_frontend_series),
}


def render_pods(pods: Sequence[tuple[PodStats, Mapping[str, str]]], dialect: str = "vllm") -> str:
    """One exposition page for several pods (each with its own labels), grouped by
    metric with one ``# HELP``/``# TYPE`` header each, as the format requires; in vLLM's
    names, SGLang's (``dialect="sglang"``) or Dynamo's frontend's
    (``dialect="dynamo-frontend"``)."""
    table, series_of = DIALECTS[dialect]
    per_pod = [series_of(stats, labels) for stats, labels in pods]
    out: list[str] = []
    for name, (kind, help_text) in table.items():
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
        out.extend(series[name] for series in per_pod)
    return "".join(out)


def render_pod(
    stats: PodStats, labels: Mapping[str, str] | None = None, dialect: str = "vllm"
) -> str:
    """One pod's page (its own endpoint: no pod labels)."""
    return render_pods([(stats, labels or {})], dialect)
