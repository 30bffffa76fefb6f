"""Inputs of the status builder (status.py) with readable defaults (no tests here): the
chat service at v1, a metrics snapshot (4 req/s, TTFT 850 ms, TPOT 42 ms), a decision
that scaled decode 4 -> 6 (``SCALE``) and a steady ``HOLD``.

    st.build_status(inp()).ttft                          # -> "850ms"
    st.build_status(inp(decision=HOLD, metrics=None))    # MetricsAvailable False
"""

from __future__ import annotations

from typing import Any

from pdscaler import status as st
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import (
    Action,
    Decision,
    MetricsSnapshot,
    ModelOutputs,
    PoolMetrics,
    PoolObservation,
    Role,
)

SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 2, "max": 8}},
        "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 8}},
    }
)
METRICS = MetricsSnapshot(
    time=1000.0,
    request_rate=4.0,
    prompt_tokens=2000.0,
    output_tokens=500.0,
    prefill=PoolMetrics(queue_depth=3.0, latency_seconds=0.85),
    decode=PoolMetrics(queue_depth=0.0, latency_seconds=0.042),
)
SCALE = Decision(
    prefill=4,
    decode=6,
    action=Action.SCALED_DECODE,
    message="Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s",
    pool=Role.DECODE,
    model=ModelOutputs(n_prefill=3.8, n_decode=5.4, ratio=0.7, drain_seconds=38.0),
)
HOLD = Decision(prefill=4, decode=6, action=Action.HOLD, message="within tolerance")


def inp(**over: Any) -> st.StatusInput:
    base: dict[str, Any] = {
        "now": 1000.4,
        "generation": 3,
        "spec": SPEC,
        "decision": SCALE,
        "metrics": METRICS,
        "prefill": PoolObservation(replicas=4, ready=4),
        "decode": PoolObservation(replicas=6, ready=5),
        "active_version": "v1",
        "target_version": "v1",
        "progress": st.ProgressFacts(),
    }
    base.update(over)
    return st.StatusInput(**base)
