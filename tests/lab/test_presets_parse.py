"""Every query of every built-in preset (vllm, sglang, dynamo) is PromQL the lab's real
Prometheus accepts: asked for a PDDeployment with no series, each answers
``status: success`` (an empty vector, or the 0 that SGLang's absent hand-off queues add
to an empty scheduler queue: still empty, as the scheduler queue is required).
A parse error would be a ``QueryFailed`` here rather than an unknown value in a
cluster."""

from __future__ import annotations

import pytest

from pdlab.cluster.lab import Lab
from pdscaler.metricsql import build_queries
from pdscaler.prometheus import PrometheusClient
from pdscaler.spec import PDDeploymentSpec


@pytest.mark.parametrize("preset", ["vllm", "sglang", "dynamo"])
def test_every_preset_query_parses(lab: Lab, preset: str) -> None:
    spec = PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "i", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000},
            "decode": {"tokensPerSecond": 800},
            "metrics": {"preset": preset},
        }
    )
    client = PrometheusClient(lab.prometheus_url)
    for query in build_queries(spec, "no-such-namespace", "nothing"):
        answer = client.query(query.promql)
        assert answer["status"] == "success", query.key
        assert answer["data"]["result"] == [], (query.key, answer["data"]["result"])
