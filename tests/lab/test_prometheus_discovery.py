"""The lab's Prometheus finds engine pods the way a cluster's does (Kubernetes service
discovery, role: pod, the relabelling of deploy/prometheus/kubernetes-sd.yaml): a pod
labelled as a PDDeployment's pool, with a port named `http`, is scraped at
`<podIP>:<port>/metrics` with the pod labels, and PromQL answers for it. Pods without
the role label or the port are not scraped."""

from __future__ import annotations

import http.server
import secrets
import threading
from typing import Any

from pdlab.cluster import prometheus
from pdlab.cluster.kwok import GPU_TAINT, STARTUP_DELAY_ANNOTATION
from pdlab.cluster.lab import Lab
from support.labkit import Kube, wait_for


def engine_pod(name: str, labels: dict[str, str], port_name: str = "http") -> dict[str, Any]:
    toleration = {"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {STARTUP_DELAY_ANNOTATION: "100ms"},
        },
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "image": "pdlab.invalid/fake-engine:0",
                    "ports": [{"name": port_name, "containerPort": 8000}],
                }
            ],
            "tolerations": [toleration],
            "terminationGracePeriodSeconds": 0,
        },
    }


def pod_ip(kube: Kube, namespace: str, name: str) -> str | None:
    status = kube.core.read_namespaced_pod(name, namespace).status
    assert status is not None
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    return status.pod_ip if ready else None


def test_prometheus_discovers_a_pool_pod_and_answers_promql(
    lab: Lab, kube: Kube, namespace: str
) -> None:
    assert prometheus.ready(lab.prometheus_url)
    token = secrets.token_hex(4)
    metric = f"pdlab_test_requests_total_{token}"
    state = {"count": 0}
    labels = {
        "pdscaler.io/name": "chat",
        "pdscaler.io/role": "prefill",
        "pdscaler.io/revision": "r1",
        "pdscaler.io/version": "v1",
    }
    kube.core.create_namespaced_pod(namespace, engine_pod("chat-r1-prefill-0", labels))  # type: ignore[arg-type]
    # neither a router's port named http (routers are kept on their port named metrics)
    # nor a pool pod without a port named http is a target
    router = {**labels, "pdscaler.io/role": "router"}
    kube.core.create_namespaced_pod(namespace, engine_pod("chat-r1-router-0", router))  # type: ignore[arg-type]
    kube.core.create_namespaced_pod(
        namespace,
        engine_pod("chat-r1-prefill-x", labels, port_name="grpc"),  # type: ignore[arg-type]
    )
    ip = wait_for(lambda: pod_ip(kube, namespace, "chat-r1-prefill-0"), 30, "the pod Ready")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state["count"] += 5
            body = f"# TYPE {metric} counter\n{metric} {state['count']}\n".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer((ip, 8000), Handler)
    threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
    try:
        result: list[dict[str, Any]] = wait_for(
            lambda: lab.query(f"{metric}[30s]") and lab.query(f"rate({metric}[30s])"),
            60,
            f"two scrapes of {ip}:8000",
        )
        ours = wait_for(
            lambda: [
                t
                for t in prometheus.active_targets(lab.prometheus_url)
                if t["labels"].get("namespace") == namespace
            ],
            10,
            "the target in /api/v1/targets",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert [t["scrapeUrl"] for t in ours] == [f"http://{ip}:8000/metrics"]
    target = ours[0]
    assert target["health"] == "up"
    labels_got = result[0]["metric"]
    assert labels_got["namespace"] == namespace
    assert labels_got["pod"] == "chat-r1-prefill-0"
    assert labels_got["pdscaler_io_name"] == "chat"
    assert labels_got["pdscaler_io_role"] == "prefill"
    assert labels_got["pdscaler_io_revision"] == "r1"
    assert labels_got["pdscaler_io_version"] == "v1"
    assert labels_got["job"] == "pdscaler-engines"
    assert float(result[0]["value"][1]) > 0  # the counter grew between scrapes
