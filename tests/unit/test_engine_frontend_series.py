"""The lab's stand-in for Dynamo's frontend (``pdlab.engine.frontend``): the page it
serves carries every series the ``dynamo`` preset's deployment-scoped queries read, with
the deployment's synthetic load as a frontend counts it (``DeploymentSim.
frontend_stats``: requests answered, their prompt and output tokens, TTFT from arrival
to first token, decode's inter-token latencies); frontend pods are told from pool pods
by their role label."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kubernetes import client

from pdlab.engine import scenarios
from pdlab.engine.expo import render_pod
from pdlab.engine.pods import FrontendInfo, to_frontend, to_info
from pdlab.engine.sim import DeploymentSim
from pdscaler import metricsql as mq
from pdscaler.sim.engine import EngineParams
from pdscaler.sim.traces import Trace
from support.prom_answers import spec


def served(page: str, name: str) -> float:
    """The total of every sample of ``name`` on ``page`` (summed over label sets)."""
    total = 0.0
    for line in page.splitlines():
        m = re.fullmatch(rf"{re.escape(name)}(\{{[^}}]*\}})? (\S+)", line)
        if m:
            total += float(m.group(2))
    return total


def run_deployment() -> DeploymentSim:
    """A deployment of one prefill and one decode pod serving 40 requests of 100 / 20
    tokens over 10 s, scraped at 30 s (all done)."""
    n = 40
    trace = Trace(
        "uniform",
        np.linspace(0.0, 10.0, n),
        np.full(n, 100, dtype=np.int64),
        np.full(n, 20, dtype=np.int64),
        10.0,
    )
    dep = DeploymentSim(
        "serving",
        "dynamo-chat",
        trace,
        scenarios.get("chat"),
        EngineParams(),
        seed=0,
        created=0.0,
    )
    pods = [pod(role, f"dynamo-chat-{role}-0") for role in ("prefill", "decode")]
    dep.sync([p for p in (to_info(x) for x in pods) if p is not None], 0.0)
    dep.step(30.0)
    return dep


def pod(role: str, name: str, ready: bool = True) -> client.V1Pod:
    """A V1Pod as the kubernetes client lists it, with the fields the listers read."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            namespace="serving",
            labels={"pdscaler.io/name": "dynamo-chat", "pdscaler.io/role": role},
            annotations={},
            uid=f"uid-{name}",
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="engine",
                    image="img",
                    command=[],
                    args=[],
                    ports=[client.V1ContainerPort(name="http", container_port=8000)],
                )
            ]
        ),
        status=client.V1PodStatus(
            phase="Running",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            pod_ip="127.64.0.9",
        ),
    )


@pytest.fixture(scope="module")
def page() -> str:
    stats = run_deployment().frontend_stats()
    assert stats is not None
    return render_pod(stats, dialect="dynamo-frontend")


def test_no_page_before_the_first_scrape() -> None:
    dep = DeploymentSim(
        "serving", "x", run_deployment().trace, scenarios.get("chat"), EngineParams(), 0, 0.0
    )
    assert dep.frontend_stats() is None


def test_the_page_has_every_series_the_dynamo_preset_reads(page: str) -> None:
    read: set[str] = set()
    for q in mq.build_queries(spec("dynamo"), "serving", "dynamo-chat"):
        read |= set(re.findall(r"dynamo_frontend_\w+", q.promql))
    # R, two means (sum and count each), two quantiles (buckets)
    assert len(read) == 7, sorted(read)
    for name in read:
        assert served(page, name) > 0, name


def test_the_series_are_the_deployments_load_as_a_frontend_counts_it(page: str) -> None:
    """40 requests answered, 100 prompt and 20 output tokens each; every TTFT counted
    once, arrival -> first token, a positive sum; decode's inter-token latencies."""
    assert served(page, "dynamo_frontend_requests_total") == 40
    assert served(page, "dynamo_frontend_input_sequence_tokens_sum") == 4000
    assert served(page, "dynamo_frontend_output_sequence_tokens_sum") == 800
    assert served(page, "dynamo_frontend_output_sequence_tokens_count") == 40
    assert served(page, "dynamo_frontend_time_to_first_token_seconds_count") == 40
    assert served(page, "dynamo_frontend_time_to_first_token_seconds_sum") > 0
    assert served(page, "dynamo_frontend_inter_token_latency_seconds_count") > 0


def test_frontend_pods_are_told_from_pool_pods() -> None:
    front = pod("frontend", "dynamo-chat-frontend-x")
    assert to_frontend(front) == FrontendInfo(
        "serving", "dynamo-chat-frontend-x", "dynamo-chat", "127.64.0.9", 8000
    )
    assert to_info(front) is None  # not a pool: no engine model, no replica
    assert to_frontend(pod("decode", "dynamo-chat-decode-0")) is None
    assert to_frontend(pod("frontend", "f", ready=False)) is None
