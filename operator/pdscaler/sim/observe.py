"""What an autoscaler sees of the simulated deployment: the ``MetricsSnapshot`` the
live operator would assemble from Prometheus (vLLM preset), and the ``PoolObservation``
the Kubernetes API would show.

Owns: the mapping from scraped pool series to the snapshot, with the same semantics as
``pdscaler.metricsql``'s vLLM preset (documented there): R = ``rate`` of the prefill
pool's ``request_success`` (a request counts when its prefill is done, so a backlog
hides arrivals from R: the queue depth shows them), L_p = prefill prompt-token sum /
count, L_d = decode generation-token sum / count, TTFT = ``histogram_quantile`` of the
prefill pool's TTFT, TPOT of the decode pool's inter-token latency, queue depth /
running / KV usage / running per pod from the newest scrape, tokens/s from the pools'
token counters. Unknown is ``None`` with a problem sentence, never 0 (a 0/0 mean when
nothing finished in the window is unknown).
Must not: look at the engine's internals for metrics (only at scrapes in the
``PromView``), or read clocks.
"""

from __future__ import annotations

from collections.abc import Callable

from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS, Engine, Sample
from pdscaler.sim.prom import PromView
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, PoolMetrics, PoolObservation, RateSource, Role

#: Start-up samples the API would show per pool (the pods that exist; bounded).
STARTUP_SAMPLES = 10


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def snapshot(
    prom: PromView, now: float, spec: PDDeploymentSpec, *, arrivals: bool = False
) -> MetricsSnapshot | None:
    """The vLLM-preset snapshot at ``now`` over ``spec.metrics.window``, at
    ``spec.slo.percentile``; None before the first scrape is visible (like an
    unreachable Prometheus: nothing to decide on). R is the prefill pool's completions
    (the live preset's fall-back); with ``arrivals`` (the closed loop's default,
    ``LoopConfig.arrivals``) it is the rate of ``Sample.requests_arrived``, what the
    cells' routers count (the live preset's reading where routers are scraped),
    ``rate_source`` ARRIVALS.

    Worked example: two scrapes 120 s apart whose prefill ``request_success`` went
    100 -> 700 and prompt-token sum 115,500 -> 808,500 give R = 5 req/s and
    L_p = 693,000 / 600 = 1,155 tokens.
    """
    latest = prom.latest(now)
    if latest is None:
        return None
    window = spec.metrics.window_seconds
    q = spec.slo.percentile
    problems: list[str] = []

    def rate(name: str, counter: Callable[[Sample], float]) -> float | None:
        value = prom.rate(now, window, counter)
        if value is None:
            problems.append(f"{name}: no data (fewer than 2 scrapes in the window)")
        return value

    def mean(
        name: str, total: Callable[[Sample], float], count: Callable[[Sample], float]
    ) -> float | None:
        value = _ratio(prom.increase(now, window, total), prom.increase(now, window, count))
        if value is None:
            problems.append(f"{name}: value is NaN (nothing observed in the window?)")
        return value

    def quantile(
        name: str, counts: Callable[[Sample], list[float]], bounds: tuple[float, ...]
    ) -> float | None:
        value = prom.quantile(now, window, q, counts, bounds)
        if value is None:
            problems.append(f"{name}: value is NaN (nothing observed in the window?)")
        return value

    if arrivals:
        request_rate = rate("request_rate", lambda s: s.requests_arrived)
    else:
        request_rate = rate("request_rate", lambda s: s.prefill.request_success)
    prompt = mean(
        "prompt_tokens",
        lambda s: s.prefill.request_prompt_tokens_sum,
        lambda s: s.prefill.request_success,
    )
    output = mean(
        "output_tokens",
        lambda s: s.decode.request_generation_tokens_sum,
        lambda s: s.decode.request_success,
    )
    ttft = quantile("prefill.latency_seconds", lambda s: s.prefill.ttft_counts, TTFT_BUCKETS)
    tpot = quantile("decode.latency_seconds", lambda s: s.decode.itl_counts, TPOT_BUCKETS)
    return MetricsSnapshot(
        time=now,
        request_rate=request_rate,
        prompt_tokens=prompt,
        output_tokens=output,
        prefill=PoolMetrics(
            queue_depth=latest.prefill.waiting,
            running=latest.prefill.running,
            latency_seconds=ttft,
            tokens_per_second=rate("prefill.tokens_per_second", lambda s: s.prefill.prompt_tokens),
        ),
        decode=PoolMetrics(
            queue_depth=latest.decode.waiting,
            running=latest.decode.running,
            latency_seconds=tpot,
            tokens_per_second=rate(
                "decode.tokens_per_second", lambda s: s.decode.generation_tokens
            ),
            kv_usage=latest.kv_usage,
            kv_capacity_tokens=latest.decode_kv_capacity_tokens or None,
            running_by_pod=dict(latest.decode_running_by_pod),
        ),
        problems=tuple(problems),
        rate_source=RateSource.ARRIVALS if arrivals else RateSource.COMPLETIONS,
    )


def pool_observation(engine: Engine, role: Role) -> PoolObservation:
    """The pool as the API server shows it: replicas asked for (starting + ready),
    ready ones, and the creation -> Ready durations of the newest started pods."""
    return PoolObservation(
        replicas=engine.desired(role),
        ready=engine.ready(role),
        startup_samples=tuple(engine.startup_samples[role][-STARTUP_SAMPLES:]),
    )
