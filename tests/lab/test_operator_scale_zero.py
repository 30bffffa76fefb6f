"""Scale from zero without dropping the first request, and back to zero after the idle
period (issue 29, item 3), with the operator's own objects: ``deploy/examples/chat.yaml``
scaled to the lab with both ``replicas.min`` 0 and ``scaleToZero.idleSeconds`` 10, and the
same for ``deploy/examples/sglang.yaml`` (the holder in front of the real sglang-router).

The request path: client -> front Service ``chat`` (svcproxy) -> the holding proxy's pod
(``python -m pdscaler.holder``, run by the lab's pod runner as the routers are, reaching
``chat-routers.<ns>.svc`` through the cluster DNS stand-in) -> the real vllm-router ->
prefill -> decode. Prometheus scrapes the holder's gauges (the role ``holder`` of
``deploy/prometheus/kubernetes-sd.yaml``, reloaded into the lab's Prometheus).

0. The new cell starts at one replica a pool; idle for ``idleSeconds`` it goes to zero.
1. With both pools at zero, one streamed completion is sent: it is held, pdscaler reads
   ``held 1`` and scales both pools from zero (``ScaledFromZero``), the held request flows
   through the router once it is Ready and answers 200 with its tokens. Its cold start
   (arrival to first token) is printed and bounded by the start-up (engines 6 s, router
   3 s after its pod) plus a 60 s margin (scrape 2 s, tick 1 s, the router's boot and
   discovery, the hold's 0.5 s probe).
2. Nothing in flight for ``idleSeconds`` (10 s): both pools go back to zero
   (``ScaledToZero``, then ``HoldAtZero``), and the holder refused nothing (no
   ``queue_full`` or ``wait_timeout``).

The cluster DNS stand-in relays a response once complete, so the first token arrives
with the last (8 tokens): the cold start is measured to the whole answer.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pdlab.cluster import prometheus
from pdlab.cluster.lab import Lab
from pdlab.cluster.podrunner import NotAllowedError, PodRunner, Workload
from pdlab.cluster.svcdns import ClusterHttpProxy
from support.labkit import Kube, wait_for
from support.opkit import get_pdd, pod_dicts
from support.served_chat import NAME, WORDS, scaled_chat, serving

REPO = Path(__file__).resolve().parents[2]
IDLE_S = 10
STARTUP_S = 6 + 3  # engine pods Ready 6 s after creation, the router's 3 s after its own
MARGIN_S = 60


def resolve_holder(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The holder's argv: only ``python -m pdscaler.holder`` (the operator image's)."""
    full = [*command, *args]
    if full[:3] != ["python", "-m", "pdscaler.holder"]:
        raise NotAllowedError(f"not the holding proxy: {full[:3]}")
    return [sys.executable, *full[1:]]


HOLDERS = Workload("pdscaler.io/role=holder", resolve_holder, ("--host",), True)


#: The examples the cold start is proven with: the holder sits in front of either router.
EXAMPLES = {"vllm-router": "chat.yaml", "sglang-router": "sglang.yaml"}


def zero_chat(namespace: str, prometheus_url: str, example: str = "chat.yaml") -> dict[str, Any]:
    doc = scaled_chat(namespace, prometheus_url, example)
    spec = doc["spec"]
    for role in ("prefill", "decode"):
        spec[role]["replicas"] = {"min": 0, "max": 2}
    spec["scaleToZero"] = {"idleSeconds": IDLE_S}
    spec["scaling"]["scaleDownStabilization"] = "10s"
    return doc


def first_answer(front: int) -> tuple[int, float, str]:
    """One streamed completion through the front: (status, seconds to the first
    ``data:`` chunk, the whole body)."""
    body = {"model": "simulated/llama-3.1-8b", "prompt": WORDS, "max_tokens": 8, "stream": True}
    req = urllib.request.Request(
        f"http://127.0.0.1:{front}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    began = time.monotonic()
    with urllib.request.urlopen(req, timeout=STARTUP_S + MARGIN_S + 30) as resp:
        first = resp.readline()
        while first and not first.startswith(b"data:"):
            first = resp.readline()
        to_first = time.monotonic() - began
        return resp.status, to_first, (first + resp.read()).decode()


def holder_counts(kube: Kube, namespace: str) -> dict[str, float]:
    """The holder pod's own series (its metrics port at the pod IP)."""
    pods = [p for p in pod_dicts(kube, namespace, NAME)
            if p["metadata"]["labels"].get("pdscaler.io/role") == "holder"]  # fmt: skip
    ip = pods[0]["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:29100/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("pdscaler_holder") and " " in line
    }


def pool_replicas(kube: Kube, namespace: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for dep in kube.apps.list_namespaced_deployment(namespace).items:
        role = ((dep.metadata and dep.metadata.labels) or {}).get("pdscaler.io/role")
        if role in ("prefill", "decode"):
            out[role] = out.get(role, 0) + (dep.spec.replicas or 0)
    return out


def last_action(kube: Kube, namespace: str) -> str | None:
    status = get_pdd(kube, namespace, NAME).get("status") or {}
    return (status.get("lastDecision") or {}).get("action")


@pytest.fixture
def holders(lab: Lab, namespace: str, tmp_path: Path) -> Iterator[None]:
    """The lab's Prometheus scraping the holder role, and the holder's pods run."""
    prometheus.write_config(
        lab.prom_dir, lab.config.scrape_interval, lab.apiserver_url, lab.pki_dir
    )
    assert prometheus.reload(lab.prometheus_url)
    with ClusterHttpProxy(lab.kubeconfig) as dns:
        env = {"http_proxy": dns.url, "PYTHONPATH": str(REPO / "operator")}
        runner = PodRunner(lab.kubeconfig, tmp_path / "pods", [namespace], workload=HOLDERS,
                           env=env, say=print)  # fmt: skip
        runner.start()
        try:
            yield
        finally:
            runner.stop()


@pytest.mark.parametrize("router_type", list(EXAMPLES))
def test_the_first_request_at_zero_is_answered_and_the_pools_return_to_zero(
    lab: Lab, kube: Kube, crd: str, namespace: str, holders: None, router_type: str
) -> None:
    began = time.monotonic()
    doc = zero_chat(namespace, lab.prometheus_url, EXAMPLES[router_type])
    assert doc["spec"]["router"]["type"] == router_type
    with serving(lab, kube, namespace, doc=doc) as (front, _control, proxy):
        # the new cell starts at one replica a pool; idle, it goes to zero
        wait_for(lambda: pool_replicas(kube, namespace) == {"prefill": 0, "decode": 0},
                 IDLE_S + 90, "the new cell idle at zero")  # fmt: skip
        wait_for(lambda: last_action(kube, namespace) == "HoldAtZero", 30,
                 "the cell at zero, the holder read")  # fmt: skip
        before = holder_counts(kube, namespace)
        # the front Service's endpoint is the holder's pod: a Service without one refuses
        # the connection (as kube-proxy's REJECT would) before any holding is tried
        wait_for(proxy.endpoints, 30, "the front Service's endpoint (the holder's pod)")
        sent = time.monotonic()
        try:
            status, to_first, text = first_answer(front)
        except OSError as err:
            raise AssertionError(
                f"{err!r} {time.monotonic() - sent:.1f} s after sending; front endpoints now "
                f"{proxy.endpoints()}; pools {pool_replicas(kube, namespace)}; last decision "
                f"{last_action(kube, namespace)}"
            ) from err
        print(f"cold start: first token {to_first:.1f} s after arrival (bound "
              f"{STARTUP_S + MARGIN_S} s)")  # fmt: skip
        assert status == 200
        assert text.rstrip().endswith("data: [DONE]"), text
        tokens = [ln for ln in text.splitlines() if ln.startswith("data: {")]
        assert len(tokens) >= 8, text
        assert to_first <= STARTUP_S + MARGIN_S
        woke = time.monotonic()
        wait_for(lambda: pool_replicas(kube, namespace) == {"prefill": 0, "decode": 0},
                 IDLE_S + 60, "both pools back at zero")  # fmt: skip
        asleep = time.monotonic() - woke
        print(f"back at zero {asleep:.1f} s after the answer (idleSeconds {IDLE_S})")
        assert asleep >= IDLE_S
        wait_for(lambda: last_action(kube, namespace) in ("ScaledToZero", "HoldAtZero"), 30,
                 "the decision says why")  # fmt: skip
        counts = holder_counts(kube, namespace)
        forwarded = 'pdscaler_holder_requests_total{outcome="forwarded"}'
        assert counts[forwarded] >= before.get(forwarded, 0.0) + 1
        refused = [k for k in counts if "queue_full" in k or "wait_timeout" in k]
        assert all(counts[k] == 0 for k in refused), counts
    print(f"test body took {time.monotonic() - began:.0f} s")
