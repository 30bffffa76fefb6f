"""Builders shared by the unit tests (no tests here): the chat service of docs/models.md
as a spec, metrics snapshots, pool observations and tick inputs with readable defaults,
and ``run``/``replay`` of the policy on them.

    decision = run(chat_spec(), snapshot(rate=40.0, ttft=2.5), 20, 18)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pdscaler.policy import decide, history
from pdscaler.sim.traces import Trace
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import (
    Decision,
    MetricsSnapshot,
    PolicyMemory,
    PoolMetrics,
    PoolObservation,
    TickInput,
)


def spaced_trace(prompts: Sequence[int], output: int = 10, span: float | None = None) -> Trace:
    """A tiny trace: one request a second (at 0, 1, 2, ...) with these prompts and
    ``output`` tokens each; its span ``span`` (default: one second a request)."""
    n = len(prompts)
    return Trace(
        "t",
        np.arange(float(n)),
        np.array(prompts, dtype=np.int64),
        np.full(n, output, dtype=np.int64),
        float(n) if span is None else span,
    )


def pdd_object(
    namespace: str, name: str, url: str, auth: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A minimal PDDeployment object as the API server returns it (generation 1) whose
    metrics come from the Prometheus at ``url`` (with ``auth`` when given)."""
    prometheus: dict[str, Any] = {"url": url}
    if auth is not None:
        prometheus["auth"] = auth
    return {
        "apiVersion": "pdscaler.io/v1alpha1",
        "kind": "PDDeployment",
        "metadata": {"name": name, "namespace": namespace, "generation": 1, "uid": "u-1"},
        "spec": {
            "engine": {"image": "img", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000},
            "decode": {"tokensPerSecond": 800},
            "metrics": {"prometheus": prometheus},
        },
    }


def chat_spec(**overrides: Any) -> PDDeploymentSpec:
    """The chat service: P_prefill 3000, P_decode 800 tok/s, u 0.7, 1 GPU per replica,
    replicas [1, 32] per pool, maxGPUs 64, T_s 60 s, recovery 60 s, interval 15 s,
    stabilization 5m. ``overrides`` are merged (one level deep) into the manifest."""
    doc: dict[str, Any] = {
        "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
        "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 32}},
        "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 32}},
        "scaling": {"maxGPUs": 64},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return PDDeploymentSpec.model_validate(doc)


def snapshot(
    rate: float | None = 20.0,
    prompt: float | None = 2000.0,
    output: float | None = 500.0,
    *,
    ttft: float | None = None,
    tpot: float | None = None,
    prefill_queue: float | None = 0.0,
    decode_queue: float | None = 0.0,
    prefill_tps: float | None = None,
    decode_tps: float | None = None,
    kv: float | None = None,
    running: float | None = None,
    time: float = 0.0,
) -> MetricsSnapshot:
    """A snapshot of the chat load (R 20, L_p 2000, L_d 500) with empty queues;
    ``running`` is both pools' in-flight requests."""
    return MetricsSnapshot(
        time=time,
        request_rate=rate,
        prompt_tokens=prompt,
        output_tokens=output,
        prefill=PoolMetrics(
            queue_depth=prefill_queue,
            running=running,
            latency_seconds=ttft,
            tokens_per_second=prefill_tps,
        ),
        decode=PoolMetrics(
            queue_depth=decode_queue,
            running=running,
            latency_seconds=tpot,
            tokens_per_second=decode_tps,
            kv_usage=kv,
        ),
    )


def pools(prefill: int, decode: int, **kwargs: Any) -> dict[str, PoolObservation]:
    """Both pools fully ready at the given sizes (``pools(20, 18)``)."""
    return {
        "prefill": PoolObservation(replicas=prefill, ready=prefill, **kwargs),
        "decode": PoolObservation(replicas=decode, ready=decode, **kwargs),
    }


def tick(
    spec: PDDeploymentSpec,
    metrics: MetricsSnapshot | None,
    prefill: int | PoolObservation,
    decode: int | PoolObservation,
    *,
    now: float = 10_000.0,
    memory: PolicyMemory | None = None,
    rollout: bool = False,
) -> TickInput:
    """A TickInput; integer pools are fully ready."""
    p = prefill if isinstance(prefill, PoolObservation) else PoolObservation(prefill, prefill)
    d = decode if isinstance(decode, PoolObservation) else PoolObservation(decode, decode)
    return TickInput(
        now=now,
        spec=spec,
        metrics=metrics,
        prefill=p,
        decode=d,
        memory=memory or PolicyMemory(),
        rollout_in_progress=rollout,
    )


def run(
    spec: PDDeploymentSpec,
    metrics: MetricsSnapshot | None,
    prefill: int | PoolObservation,
    decode: int | PoolObservation,
    **kwargs: Any,
) -> Decision:
    """``decide`` on ``tick(...)``."""
    return decide(tick(spec, metrics, prefill, decode, **kwargs))


def replay(
    spec: PDDeploymentSpec,
    metrics_at: Any,
    prefill: int,
    decode: int,
    times: list[float],
    memory: PolicyMemory | None = None,
    persist: Any = None,
) -> list[tuple[float, Decision]]:
    """Tick at each of ``times``, applying every decision at once (pods ready
    instantly) and carrying the memory; ``metrics_at(t)`` gives the snapshot. With
    ``persist``, the memory goes through ``persist(memory, t)`` between ticks (e.g. the
    status round trip of a restarting operator)."""
    out: list[tuple[float, Decision]] = []
    mem = memory or PolicyMemory()
    for t in times:
        d = run(spec, metrics_at(t), prefill, decode, now=t, memory=mem)
        out.append((t, d))
        prefill, decode = d.prefill, d.decode
        mem = persist(d.memory, t) if persist is not None else d.memory
    return out


def points(queues: list[float | None], ready: int = 10) -> tuple[history.Point, ...]:
    """Policy history points: prefill queues every 15 s from t = 0, decode empty,
    ``ready`` in both pools."""
    return tuple((15.0 * k, q, 0.0, ready, ready) for k, q in enumerate(queues))
