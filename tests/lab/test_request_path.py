"""The request path in the lab, with the real router: client -> front Service (svcproxy,
the kube-proxy stand-in) -> router pod (the real `vllm-router`, run by the pod runner at
its pod IP, discovering the cell's workers through the API server) -> prefill pod ->
decode pod (the engine simulator, serving each pod at its pod IP).

The Deployments and the Service are made by hand here, labelled as the operator renders
a revision cell (`<name>-<rev>-prefill|decode|router`, labels pdscaler.io/name, role,
revision, version; the router selecting its own cell's workers). Checked: (a) a streamed
completion through the front port returns its tokens and the simulator's record shows the
router's request prefilled and decoded by the two pods of one cell with the NixlConnector
hand-off; (b) a decode handed the KV of another revision's prefill is a pairing error;
(c) Prometheus' Kubernetes discovery lists exactly the engine pods with their labels, up.
"""

from __future__ import annotations

import json
import sys
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pdlab.cluster import prometheus
from pdlab.cluster.lab import Lab
from pdlab.cluster.podrunner import NotAllowedError, resolve, with_host
from pdlab.cluster.svcproxy import ready_endpoints, selected_endpoints
from support.labkit import Kube, request_path, wait_for
from support.pd_cell import (
    NAME,
    create_router_identity,
    engine_deployment,
    front_service,
    get_json,
    pod_of,
    post,
    router_pod_deployment,
    sse_chunks,
)


def router_deployment(namespace: str, rev: str) -> dict[str, Any]:
    """`chat-<rev>-router`: vllm-router discovering its own cell's prefill and decode."""
    sel = [f"pdscaler.io/name={NAME}", f"pdscaler.io/revision={rev}"]
    args = [
        "--vllm-pd-disaggregation", "--service-discovery",
        "--prefill-selector", *sel, "pdscaler.io/role=prefill",
        "--decode-selector", *sel, "pdscaler.io/role=decode",
        "--service-discovery-namespace", namespace, "--service-discovery-port", "8000",
        "--host", "0.0.0.0", "--port", "8000",
    ]  # fmt: skip
    container = {
        "name": "router",
        "image": "pdlab.invalid/vllm-router:0.1.17",
        "command": ["vllm-router"],
        "args": args,
        "ports": [{"name": "http", "containerPort": 8000}],
        "env": [{"name": "RUST_LOG", "value": "info"}],
    }
    return router_pod_deployment(rev, container)


@pytest.fixture
def cell(lab: Lab, kube: Kube, namespace: str) -> Iterator[tuple[int, int]]:
    """Cells r1 (prefill, decode, router) and r2 (prefill only), the front Service, the
    engine simulator with its pod runner (subprocess), and the svcproxy front port;
    yields (front port, simulator control port)."""
    for rev, role in (("r1", "prefill"), ("r1", "decode"), ("r2", "prefill")):
        kube.apps.create_namespaced_deployment(namespace, cast(Any, engine_deployment(rev, role)))
    create_router_identity(kube, namespace)
    kube.apps.create_namespaced_deployment(namespace, cast(Any, router_deployment(namespace, "r1")))
    kube.core.create_namespaced_service(namespace, cast(Any, front_service()))
    with request_path(lab, namespace, NAME) as (front, control, _):
        yield front, control


def test_a_streamed_completion_flows_router_prefill_decode_of_one_cell(
    lab: Lab, kube: Kube, namespace: str, cell: tuple[int, int]
) -> None:
    front, control = cell
    body = {"model": "simulated/llama-3.1-8b", "prompt": "the lab " * 40,
            "max_tokens": 12, "stream": True}  # fmt: skip

    def completion() -> str | None:
        try:
            status, text = post(f"http://127.0.0.1:{front}/v1/completions", body)
        except (OSError, urllib.error.HTTPError):
            return None
        return text if status == 200 and "[DONE]" in text else None

    text = wait_for(completion, 120, "a streamed completion through the front Service")
    chunks = sse_chunks(text)
    tokens = [c["choices"][0]["text"] for c in chunks if c.get("choices")]
    assert len(tokens) == 12

    records = get_json(f"http://127.0.0.1:{control}/requests?since=0")["records"]
    decode = [r for r in records if r["kind"] == "decode"]
    assert len(decode) == 1, records
    rec = decode[0]
    prefill_pod = pod_of(kube, namespace, "r1", "prefill").metadata.name
    decode_pod = pod_of(kube, namespace, "r1", "decode").metadata.name
    assert (rec["prefill_pod"], rec["decode_pod"]) == (prefill_pod, decode_pod)
    assert (rec["prefill_revision"], rec["decode_revision"]) == ("r1", "r1")
    assert rec["kv_transfer"] is True
    assert rec["ok"] is True
    # the router's two legs: its request id, the prefill leg answered with the hand-off
    assert rec["request_id"].startswith("___prefill_addr_")
    legs = [r for r in records if r["kind"] == "prefill" and r["request_id"] == rec["request_id"]]
    assert [leg["prefill_pod"] for leg in legs] == [prefill_pod]
    assert get_json(f"http://127.0.0.1:{control}/requests?since=0")["pairing_errors"] == 0


def test_a_decode_of_another_revisions_prefill_is_a_pairing_error(
    lab: Lab, kube: Kube, namespace: str, cell: tuple[int, int]
) -> None:
    _, control = cell

    def ready_pods() -> tuple[Any, Any] | None:
        p2, d1 = pod_of(kube, namespace, "r2", "prefill"), pod_of(kube, namespace, "r1", "decode")
        return (p2, d1) if p2 is not None and d1 is not None else None

    p2, d1 = wait_for(ready_pods, 60, "r2 prefill and r1 decode Ready")

    def prefill() -> dict[str, Any] | None:
        try:
            _, text = post(
                f"http://{p2.status.pod_ip}:8000/v1/completions",
                {"prompt": "a b c d", "max_tokens": 4,
                 "kv_transfer_params": {"do_remote_decode": True}},
            )  # fmt: skip
        except OSError:
            return None  # the simulator has not picked the pod up yet
        params: dict[str, Any] = json.loads(text)["kv_transfer_params"]
        return params

    kv = wait_for(prefill, 30, "the r2 prefill pod served")
    assert kv["remote_host"] == p2.status.pod_ip
    status, _ = wait_for(
        lambda: post(
            f"http://{d1.status.pod_ip}:8000/v1/completions",
            {"prompt": "a b c d", "max_tokens": 4, "kv_transfer_params": kv},
        ),
        30,
        "the r1 decode pod served",
    )
    assert status == 200  # served as vLLM would, but counted
    page = get_json(f"http://127.0.0.1:{control}/requests?since=0")
    assert page["pairing_errors"] == 1
    bad = [r for r in page["records"] if r.get("pairing_error")]
    assert len(bad) == 1
    assert (bad[0]["prefill_revision"], bad[0]["decode_revision"]) == ("r2", "r1")
    assert (bad[0]["prefill_pod"], bad[0]["decode_pod"]) == (
        p2.metadata.name,
        d1.metadata.name,
    )


def test_prometheus_discovers_the_engine_pods_with_their_labels(
    lab: Lab, kube: Kube, namespace: str, cell: tuple[int, int]
) -> None:
    def three_up() -> list[dict[str, Any]] | None:
        ours = [
            t
            for t in prometheus.active_targets(lab.prometheus_url)
            if t["labels"].get("namespace") == namespace and t["health"] == "up"
        ]
        return ours if len(ours) == 3 else None

    targets = wait_for(three_up, 90, "3 engine pod targets up")
    got = sorted(
        (t["labels"]["pdscaler_io_revision"], t["labels"]["pdscaler_io_role"]) for t in targets
    )
    assert got == [("r1", "decode"), ("r1", "prefill"), ("r2", "prefill")]
    for t in targets:
        lab_ = t["labels"]
        assert lab_["pdscaler_io_name"] == NAME
        assert lab_["pdscaler_io_version"] == f"v-{lab_['pdscaler_io_revision']}"
        assert lab_["pod"].startswith(f"{NAME}-{lab_['pdscaler_io_revision']}-")
        assert t["scrapeUrl"].endswith(":8000/metrics")
    up = cast(  # the probe's truthy value: the 3 series
        list[dict[str, Any]],
        wait_for(
            lambda: (r := lab.query(f'up{{namespace="{namespace}"}} == 1')) and len(r) == 3 and r,
            30,
            "up == 1 for the 3 engine pods",
        ),
    )
    assert {s["metric"]["pdscaler_io_role"] for s in up} == {"prefill", "decode"}


# ------------------------------------------------------------------ without the lab


def test_the_pod_runner_runs_only_allowed_routers_and_binds_the_pod_ip() -> None:
    argv = resolve(["/usr/local/bin/vllm-router"], ["--port", "8000"])
    assert Path(argv[0]).name == "vllm-router"
    assert Path(argv[0]).exists()
    assert argv[1:] == ["--port", "8000"]
    launcher = resolve(["python3", "-m", "sglang_router.launch_router"], ["--pd-disaggregation"])
    assert launcher[0] == sys.executable
    assert launcher[1:] == ["-m", "sglang_router.launch_router", "--pd-disaggregation"]
    for command, args in (
        (["sh"], ["-c", "echo owned"]),
        (["python", "-c", "print(1)"], []),
        (["python", "-m", "http.server"], []),
        ([], []),
    ):
        with pytest.raises(NotAllowedError):
            resolve(command, args)
    ip = "127.64.0.9"
    assert with_host(["r", "--host", "0.0.0.0", "--port", "8000"], ip) == [
        "r", "--host", ip, "--port", "8000",
    ]  # fmt: skip
    assert with_host(["r", "--host=0.0.0.0"], ip) == ["r", f"--host={ip}"]
    assert with_host(["r", "--prometheus-host", "0.0.0.0", "--host", "0.0.0.0"], ip) == [
        "r", "--prometheus-host", ip, "--host", ip,
    ]  # fmt: skip
    assert with_host(["r", "--port", "8000"], ip) == ["r", "--port", "8000", "--host", ip]


def _pod(name: str, ip: str, labels: dict[str, str], ready: bool = True) -> Any:
    cond = [SimpleNamespace(type="Ready", status="True" if ready else "False")]
    port = SimpleNamespace(name="http", container_port=8000)
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, labels=labels, deletion_timestamp=None),
        status=SimpleNamespace(phase="Running", conditions=cond, pod_ip=ip),
        spec=SimpleNamespace(containers=[SimpleNamespace(name="router", ports=[port])]),
    )


def test_svcproxy_endpoints_from_slices_or_from_the_selector() -> None:
    """EndpointSlices: ready, not terminating endpoints at the chosen port. Without
    slices (loopback pod IPs): the Service's selector over Ready pods, the named target
    port resolved in the pod."""

    def ep(addr: str, ready: bool, term: bool = False) -> SimpleNamespace:
        return SimpleNamespace(
            addresses=[addr], conditions=SimpleNamespace(ready=ready, terminating=term)
        )

    sl = SimpleNamespace(
        ports=[SimpleNamespace(name="http", port=8000)],
        endpoints=[ep("10.0.0.1", True), ep("10.0.0.2", False), ep("10.0.0.3", True, True)],
    )
    assert ready_endpoints([sl]) == ["10.0.0.1:8000"]
    assert ready_endpoints([sl], "metrics") == []
    svc = SimpleNamespace(
        spec=SimpleNamespace(
            selector={"app": "r"},
            ports=[SimpleNamespace(name="http", port=80, target_port="http")],
        )
    )
    pods = [
        _pod("a", "127.64.0.2", {"app": "r"}),
        _pod("b", "127.64.0.3", {"app": "r"}, ready=False),
        _pod("c", "127.64.0.4", {"app": "other"}),
    ]
    assert selected_endpoints(svc, pods) == ["127.64.0.2:8000"]
    svc.spec.ports[0].target_port = 9000
    assert selected_endpoints(svc, pods, "http") == ["127.64.0.2:9000"]
