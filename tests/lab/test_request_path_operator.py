"""The request path as the OPERATOR deploys it, proven with real HTTP: a scaled-down
``deploy/examples/chat.yaml`` is applied, pdscaler creates the cell (prefill, decode, and
the real ``vllm-router`` whose discovery is scoped to the cell) and the front Service;
requests go client -> front Service (svcproxy) -> router -> prefill -> decode.

1. One streamed completion sent to the front address returns its tokens, and the engine
   simulator's record shows it went router -> prefill -> decode of one cell with the
   NixlConnector hand-off parameters.
2. A rollout v1 -> v2 under load from a third-party client (aiperf, replaying a
   constant-rate trace on its timestamps, a new connection per request as many clients
   would open): 0 failed requests, 0 cross-version or cross-config pairs, and once both
   cells serve, each cell's share of requests within 15 points of its share of Ready
   prefill capacity (the router split). aiperf's client-side TTFT is logged beside
   the server-side figure Prometheus gives the operator.
3. A decode scale-down (3 -> 1) under aiperf's load fails no request: the pods pdscaler
   deletes keep serving through the preStop sleep it renders (docs/design.md §4.1.1).

Scaled down: prefill min 3 and maxSurgeGPUs 1 (the rollout moves one level at a time,
so both cells serve together for a while: old 3 -> 2 + new 1 -> 1 + 2 -> new 3), decode
min 1, engine pods Ready 6 s after creation, router pods 3 s (the lab's pod runner starts
the router at Running; its readiness probe decides when it takes traffic), one router per
Ready prefill replica (prefillPerRouter 1), the operator ticking every second. With
``PDSCALER_RESULTS_OUT=bench/results`` the rollout's figures (requests, failures, mixed
pairs, how long both cells served, each cell's traffic and Ready prefill share) go to
``bench/results/request_path.json``, which the README quotes (``bench.request_path``);
without it nothing is written.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import request_path
from pdlab.cluster.lab import Lab
from pdlab.cluster.loadclient import AiPerf, TraceRow
from pdlab.cluster.svcproxy import SvcProxy
from pdscaler import naming
from pdscaler.observe import is_ready, labels, terminating
from support.labkit import Kube, rbac_allows, wait_for
from support.opkit import patch_spec, pod_dicts
from support.served_chat import NAME, completion, records, serving


@pytest.fixture
def served(lab: Lab, kube: Kube, crd: str, namespace: str) -> Iterator[tuple[int, int, SvcProxy]]:
    with serving(lab, kube, namespace) as path:
        yield path


#: Each cell's share of requests is within this of its share of Ready prefill capacity.
SHARE_TOLERANCE = 0.15


def ready_prefill_by_rev(kube: Kube, namespace: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for pod in pod_dicts(kube, namespace, NAME):
        lab_ = labels(pod)
        if lab_.get(naming.LABEL_ROLE) == "prefill" and is_ready(pod) and not terminating(pod):
            rev = lab_[naming.LABEL_REVISION]
            out[rev] = out.get(rev, 0) + 1
    return out


def test_a_streamed_completion_goes_router_prefill_decode_of_one_cell(
    kube: Kube, namespace: str, served: tuple[int, int, SvcProxy]
) -> None:
    front, control, _ = served
    text = wait_for(lambda: completion(front), 120, "a streamed completion via the front")
    tokens = [
        json.loads(line[6:])["choices"][0]["text"]
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]" and '"choices": [{' in line
    ]
    assert len(tokens) == 8
    decoded = [r for r in records(control) if r["kind"] == "decode" and r["ok"]]
    assert decoded, records(control)
    rec = decoded[-1]
    assert rec["kv_transfer"] is True
    assert rec["prefill_revision"] == rec["decode_revision"]
    assert rec["prefill_config"] == rec["decode_config"]
    prefill = {p["metadata"]["name"]: labels(p) for p in pod_dicts(kube, namespace, NAME)}
    assert prefill[rec["prefill_pod"]][naming.LABEL_ROLE] == "prefill"
    assert prefill[rec["decode_pod"]][naming.LABEL_ROLE] == "decode"
    assert prefill[rec["prefill_pod"]][naming.LABEL_REVISION] == rec["decode_revision"]

    # the routers ran with their own ServiceAccount's token (the pod runner asks for one):
    # that identity may read pods here and nothing else
    sa = f"system:serviceaccount:{namespace}:{NAME}-router"
    assert rbac_allows(kube, sa, namespace, "watch", "pods")
    assert rbac_allows(kube, sa, namespace, "list", "pods")
    assert not rbac_allows(kube, sa, "default", "list", "pods")
    assert not rbac_allows(kube, sa, namespace, "get", "secrets")
    assert not rbac_allows(kube, sa, namespace, "create", "pods")
    assert not rbac_allows(kube, sa, namespace, "patch", "apps/deployments")


def test_a_rollout_under_a_third_party_client_fails_no_request_and_pairs_within_cells(
    kube: Kube, namespace: str, served: tuple[int, int, SvcProxy], tmp_path: Path
) -> None:
    front, control, proxy = served
    wait_for(lambda: completion(front), 120, "the v1 cell serves through the front")
    wait_for(
        lambda: ready_prefill_by_rev(kube, namespace) and min(
            ready_prefill_by_rev(kube, namespace).values()) >= 3,
        90, "3 Ready v1 prefill pods",
    )  # fmt: skip
    before = records(control)
    start_index = before[-1]["seq"] if before else 0
    client = AiPerf.ensure()
    rate, seconds = 4.0, 75.0
    rows = [TraceRow(i / rate, 180, 12) for i in range(int(rate * seconds))]
    proc = client.start(f"http://127.0.0.1:{front}", rows, tmp_path / "aiperf")

    capacity: list[tuple[float, dict[str, int], set[str | None]]] = []
    stop = threading.Event()

    def sample() -> None:
        # (time, Ready prefill per cell, cells with a router behind the front Service)
        while not stop.is_set():
            at_ip = {
                p["status"].get("podIP"): labels(p)[naming.LABEL_REVISION]
                for p in pod_dicts(kube, namespace, NAME)
            }
            fronted = {at_ip.get(e.rpartition(":")[0]) for e in proxy.endpoints()}
            capacity.append((time.time(), ready_prefill_by_rev(kube, namespace), fronted))
            stop.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        # aiperf takes a while to start its workers: roll once its requests flow
        wait_for(lambda: len(records(control, start_index)) >= 20, 120, "aiperf's requests")
        patch_spec(kube, namespace, NAME, {"engine": {"version": "v2"}})
        proc.wait(timeout=seconds + 120)
    finally:
        stop.set()
        sampler.join(5)
        if proc.poll() is None:
            proc.kill()
    result = client.result(tmp_path / "aiperf")
    seen = records(control, start_index)
    decodes = [r for r in seen if r["kind"] == "decode"]
    print(f"aiperf: {result.requests} requests, {result.errors} errors, TTFT p50 "
          f"{result.ttft_ms.get('p50')} ms p95 {result.ttft_ms.get('p95')} ms, ITL p50 "
          f"{result.itl_ms.get('p50')} ms")  # fmt: skip

    # 0 failed requests, every one served
    assert result.errors == 0, result.raw.get("error_summary")
    assert result.requests == len(rows)
    # 0 cross-version / cross-config pairs, 0 pairing errors at the engines
    mixed = [
        r
        for r in decodes
        if r["prefill_revision"] != r["decode_revision"]
        or r["prefill_config"] != r["decode_config"]
        or not r["kv_transfer"]
    ]
    assert mixed == []
    revs = {r["decode_revision"] for r in decodes}
    assert len(revs) == 2, f"the rollout did not move traffic: {revs}"

    # traffic share vs capacity share while both cells serve: each has Ready prefill and a
    # router the front Service sends to (its readiness probe passed)
    both = [(t, c) for t, c, f in capacity if len(c) == 2 and set(c) <= f and bool(sum(c.values()))]
    assert both, "no moment with both cells serving"
    start, end = both[0][0], both[-1][0]
    during = [r["decode_revision"] for r in decodes if start <= r["time"] <= end]
    print(f"both cells served for {end - start:.1f} s: {len(during)} requests")
    assert len(during) >= 10, f"too few requests while both cells served: {len(during)}"
    old_rev = decodes[0]["decode_revision"]
    shares: list[tuple[str, float, float]] = []  # (cell, traffic, capacity), old first
    for rev in sorted(revs, key=lambda r: r != old_rev):
        traffic = during.count(rev) / len(during)
        cap = sum(c.get(rev, 0) / sum(c.values()) for _, c in both) / len(both)
        print(f"{rev}: traffic {traffic:.2f} capacity {cap:.2f}")
        shares.append(("old" if rev == old_rev else "new", traffic, cap))
    # the README quotes these (bench/readme.py), written only with PDSCALER_RESULTS_OUT set
    request_path.write(
        {
            "test": "tests/lab/test_request_path_operator.py::"
            "test_a_rollout_under_a_third_party_client_fails_no_request_and_pairs_within_cells",
            "requests": result.requests,
            "errors": result.errors,
            "mixed_pairs": len(mixed),
            "tolerance": SHARE_TOLERANCE,
            "both_serving_s": round(end - start, 1),
            "requests_both_serving": len(during),
            "cells": [{"cell": n, "traffic": t, "capacity": c} for n, t, c in shares],
        }
    )
    for cell, traffic, cap in shares:
        assert abs(traffic - cap) <= SHARE_TOLERANCE, (cell, traffic, cap)


# A decode scale-down under load fails no request: the router may pick a decode pod for a
# request whose prefill is still running; if that pod is deleted in the meantime its
# engine must still take the hand-off. pdscaler renders a preStop sleep on every pool pod
# whose template has none (``manifests.drain_seconds``): a kubelet keeps the deleted pod's
# container serving through it while the router's discovery drops the pod at once. In
# the lab the engine simulator serves a deleted pod for its preStop sleep
# (``pdlab.engine.pods.LingeringPods``, as a kubelet would) and stops listening at once
# for a pod without one (as vLLM does on SIGTERM).


def ready_decode(kube: Kube, namespace: str) -> int:
    return sum(
        1
        for p in pod_dicts(kube, namespace, NAME)
        if labels(p).get(naming.LABEL_ROLE) == "decode" and is_ready(p) and not terminating(p)
    )


def test_a_decode_scale_down_under_load_fails_no_request(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    """Prefill slowed to 1,000 words/s (a 500-word prompt takes 0.5 s) and the engine
    simulator polling pods every 0.2 s (a deleted pod without a preStop hook stops
    listening within 0.2 s, as vLLM on SIGTERM): 4 req/s from aiperf while decode goes
    3 -> 1 (its max lowered): 0 failed requests, 0 failed hand-offs at the engines."""
    sim_args = ["--prefill-tps", "1000", "--poll", "0.2"]
    with serving(lab, kube, namespace, sim_args) as (front, control, _):
        patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 3, "max": 4}}})
        wait_for(lambda: completion(front), 120, "the cell serves through the front")
        wait_for(lambda: ready_decode(kube, namespace) >= 3, 90, "3 Ready decode pods")
        before = records(control)
        start_index = before[-1]["seq"] if before else 0
        client = AiPerf.ensure()
        rate, seconds = 4.0, 30.0
        rows = [TraceRow(i / rate, 500, 8) for i in range(int(rate * seconds))]
        proc = client.start(f"http://127.0.0.1:{front}", rows, tmp_path / "aiperf")
        try:
            wait_for(lambda: len(records(control, start_index)) >= 20, 240, "aiperf's requests")
            t_cut = time.monotonic()
            patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 1, "max": 1}}})
            wait_for(lambda: ready_decode(kube, namespace) == 1, 30, "decode down to 1")
            print(f"decode 3 -> 1 in {time.monotonic() - t_cut:.1f} s")
            proc.wait(timeout=seconds + 120)
        finally:
            if proc.poll() is None:
                proc.kill()
        seen = records(control, start_index)
    result = client.result(tmp_path / "aiperf")
    failed = [r for r in seen if r["kind"] == "decode" and not r["ok"]]
    print(f"aiperf: {result.requests} requests, {result.errors} errors")
    assert result.errors == 0, result.raw.get("error_summary")
    assert result.requests == len(rows)
    assert failed == [], failed[:3]
