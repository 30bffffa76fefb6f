"""Prometheus answers as the HTTP API gives them, for the worked example of
``tests/unit/test_metricsql.py``: PDDeployment ``serving/chat``, 4 req/s of 2000 prompt /
500 output tokens, every query of the preset answered."""

from __future__ import annotations

from typing import Any

from pdscaler import metricsql as mq
from pdscaler.spec import PDDeploymentSpec

NS, NAME = "serving", "chat"


def spec(preset: str = "vllm", **metrics: Any) -> PDDeploymentSpec:
    doc: dict[str, Any] = {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
        "metrics": {"preset": preset, **metrics},
    }
    return PDDeploymentSpec.model_validate(doc)


NOW = 1_700_000_000.0


def vector(*samples: tuple[dict[str, str], Any], ts: float = NOW) -> dict[str, Any]:
    result = [{"metric": labels, "value": [ts, value]} for labels, value in samples]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def one(value: Any, ts: float = NOW) -> dict[str, Any]:
    return vector(({}, value), ts=ts)


def full_answers(s: PDDeploymentSpec) -> dict[mq.Key, dict[str, Any]]:
    """Answers as Prometheus gives them for 4 req/s of 2000 prompt / 500 output tokens."""
    values = {
        mq.Key.REQUEST_RATE: "4",
        mq.Key.PROMPT_TOKENS: "2000",
        mq.Key.OUTPUT_TOKENS: "500",
        mq.Key.PREFILL_LATENCY: "0.85",
        mq.Key.DECODE_LATENCY: "0.042",
        mq.Key.PREFILL_QUEUE: "3",
        mq.Key.DECODE_QUEUE: "0",
        mq.Key.PREFILL_RUNNING: "2",
        mq.Key.DECODE_RUNNING: "40",
        mq.Key.PREFILL_TPS: "8000",
        mq.Key.DECODE_TPS: "2000",
        mq.Key.DECODE_KV: "0.5",
    }
    out = {k: one(v) for k, v in values.items()}
    out[mq.Key.FRESHNESS] = vector(
        ({"pdscaler_io_role": "prefill"}, str(NOW - 1)),
        ({"pdscaler_io_role": "decode"}, str(NOW - 1)),
    )
    out[mq.Key.DECODE_RUNNING_BY_POD] = vector(({"pod": "d-0"}, "25"), ({"pod": "d-1"}, "15"))
    out[mq.Key.ARRIVAL_RATE] = vector()  # no router scraped: R is the completions
    out[mq.Key.ROUTERS_DOWN] = vector()  # no router target down
    out[mq.Key.KV_CAPACITY] = vector(({"num_gpu_blocks": "6250", "block_size": "16"}, "1"))
    out[mq.Key.TARGETS_UP] = vector(
        ({"pdscaler_io_role": "prefill"}, "1"), ({"pdscaler_io_role": "decode"}, "2")
    )
    assert set(out) == {q.key for q in mq.build_queries(s, NS, NAME)}
    return out
