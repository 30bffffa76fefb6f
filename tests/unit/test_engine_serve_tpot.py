"""pdlab.engine.serve: the decode pod of a P/D request observes the per-request TPOT
(``vllm:request_time_per_output_token_seconds``, decode time / (output tokens - 1)) when
the request finishes, streamed or not, as vLLM does; a one-token request observes none.

The ``vllm`` preset reads TPOT from that histogram first: a decode pod exporting it with
no observations makes ``histogram_quantile`` NaN (TPOT unknown, no scale-down), and the
NaN sample keeps the preset's inter-token-latency fall-back from answering.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pdlab.engine.pods import PodInfo
from pdlab.engine.serve import PodServers
from pdscaler.sim.engine import TPOT_BUCKETS
from pdscaler.types import Role
from support.pod_servers import served

PREFILL = PodInfo("ns", "chat-r1-prefill-0", "chat", Role.PREFILL, "v1", True,
                  ip="127.0.123.1", port=18000, revision="r1", uid="uid-p")  # fmt: skip
DECODE = PodInfo("ns", "chat-r1-decode-0", "chat", Role.DECODE, "v1", True,
                 ip="127.0.123.2", port=18000, revision="r1", uid="uid-d")  # fmt: skip


@pytest.fixture
def servers() -> Iterator[PodServers]:
    with served(PREFILL, DECODE) as pods:
        yield pods


def post(pod: PodInfo, body: dict[str, Any]) -> str:
    req = urllib.request.Request(
        f"http://{pod.address}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.read().decode())


def pd_request(max_tokens: int, *, stream: bool) -> None:
    """What vllm-router in PD mode sends: prefill (one token, KV params back), then the
    decode pod with those KV params and the client's own max_tokens."""
    first = {"prompt": "hello there world", "max_tokens": 1, "stream": False,
             "kv_transfer_params": {"do_remote_decode": True}}  # fmt: skip
    kv = json.loads(post(PREFILL, first))["kv_transfer_params"]
    body = {"prompt": "hello there world", "max_tokens": max_tokens, "stream": stream,
            "kv_transfer_params": kv}  # fmt: skip
    out = post(DECODE, body)
    if stream:
        assert out.rstrip().endswith("data: [DONE]")


def histogram(page: str, name: str) -> tuple[float, float]:
    """(count, sum) of an unlabelled-by-pod histogram on a pod's page."""
    got: dict[str, float] = {}
    for line in page.splitlines():
        for part in ("_count", "_sum"):
            if line.startswith(f"{name}{part}{{"):
                got[part] = float(line.rsplit(" ", 1)[1])
    return got["_count"], got["_sum"]


def metrics(pod: PodInfo) -> str:
    with urllib.request.urlopen(f"http://{pod.address}/metrics", timeout=10) as resp:
        return str(resp.read().decode())


@pytest.mark.parametrize("stream", [True, False])
def test_a_pd_request_of_four_tokens_is_observed_once_on_the_decode_pod(
    servers: PodServers, stream: bool
) -> None:
    for _ in range(3):
        pd_request(4, stream=stream)
    page = metrics(DECODE)
    count, total = histogram(page, "vllm:request_time_per_output_token_seconds")
    assert count == 3  # one per finished request
    itl_count, itl_sum = histogram(page, "vllm:inter_token_latency_seconds")
    assert itl_count == 9  # one per token after the first
    # a request's TPOT is wall time first -> last token over 3 (the steps and the gaps
    # between them), the inter-token latency each step's own time: about the same
    assert itl_sum / 3 * (1 - 1e-9) <= total <= itl_sum / 3 * 2
    assert 0 < total / count < TPOT_BUCKETS[-2]
    # the prefill pod decodes nothing: no TPOT there
    assert histogram(metrics(PREFILL), "vllm:request_time_per_output_token_seconds")[0] == 0
    assert [r["kind"] for r in servers.records.since(0) if r.get("pairing_error")] == []


def test_a_one_token_request_observes_no_tpot(servers: PodServers) -> None:
    pd_request(1, stream=True)
    page = metrics(DECODE)
    assert histogram(page, "vllm:request_time_per_output_token_seconds") == (0, 0)
    assert histogram(page, "vllm:time_to_first_token_seconds")[0] == 1
