"""Helpers for tests against the lab (used through tests/lab/conftest.py's fixtures).

Owns: `wait_for` (`pdlab.cluster.kubeclient.wait_until` failing the test on a timeout), GPU
Deployment manifests for the fake nodes, private fake GPU nodes a test can own, pod
readiness reads, ServiceAccount clients from a TokenRequest, and a throwaway HTTP
exporter for Prometheus tests. The typed clients (`Kube`, imported from here by the
tests), the CRD install and the pod predicates are `pdlab.cluster.kubeclient`'s. Must not start
or stop the lab (pdlab.cluster.lab does) and holds no test assertions of its own beyond the
timeouts.

    kube = Kube.from_kubeconfig(lab.kubeconfig)
    kube.apps.create_namespaced_deployment(ns, gpu_deployment("web", replicas=2))
    pods = wait_for(lambda: ready_pods(kube, ns, "app=web", 2), 30, "2 ready pods of web")
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.config import REPO_DIR
from pdlab.cluster.kubeclient import Kube as Kube  # re-exported: the tests import it from here
from pdlab.cluster.kubeclient import if_found, pod_ready, wait_until
from pdlab.cluster.kwok import GPU_RESOURCE, GPU_TAINT, STARTUP_DELAY_ANNOTATION, gpu_node
from support.httpkit import QuietHandler, serving

REPO = Path(__file__).resolve().parents[2]
TEST_NODE_LABEL = "pdlab.pdscaler.io/test-node"

T = TypeVar("T")


class WaitTimeoutError(AssertionError):
    """`wait_for` ran out of time; the message says what and the last value seen."""


def wait_for(
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.2,
) -> T:
    """`pdlab.cluster.kubeclient.wait_until` for tests: a probe that raises counts as "not yet"
    (its error is reported if it was last), and running out of time fails the test:
    wait_for(lambda: [], 1, "pods") fails after 1 s with "timed out after 1.0s waiting
    for pods; last value: []".
    """
    return wait_until(
        probe, timeout, what, interval=interval, error=WaitTimeoutError, not_yet=(Exception,)
    )


def not_found(call: Callable[[], object]) -> bool:
    """True if `call()` raises a 404 ApiException (the object is gone)."""
    return if_found(call) is None


# ----- workloads on the fake GPU nodes -----------------------------------------------------
def gpu_deployment(
    name: str,
    replicas: int,
    gpus: int = 1,
    startup_delay: str | None = None,
    node_selector: dict[str, str] | None = None,
    extra_tolerations: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Deployment whose pods ask for `gpus` nvidia.com/gpu and tolerate the GPU taint.

    Pods are labelled app=<name>; `startup_delay` (Go duration, "6s") becomes the
    pdscaler.io/startup-delay annotation the lab's kwok stage turns into the Ready delay.
    """
    annotations = {STARTUP_DELAY_ANNOTATION: startup_delay} if startup_delay else {}
    tolerations = [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}]
    tolerations += extra_tolerations or []
    container = {
        "name": "engine",
        "image": "pdlab.invalid/fake-engine:0",
        "resources": {
            "requests": {GPU_RESOURCE: str(gpus)},
            "limits": {GPU_RESOURCE: str(gpus)},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {
                    "containers": [container],
                    "tolerations": tolerations,
                    "nodeSelector": node_selector or {},
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


def list_pods(kube: Kube, namespace: str, selector: str) -> list[client.V1Pod]:
    """Pods matching the label selector that are not being deleted."""
    items = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in items if _meta(p).deletion_timestamp is None]


def ready_pods(kube: Kube, namespace: str, selector: str, count: int) -> list[client.V1Pod]:
    """The matching pods if at least `count` are Ready, else [] (for `wait_for`)."""
    pods = [p for p in list_pods(kube, namespace, selector) if pod_ready(p)]
    return pods if len(pods) >= count else []


def _meta(obj: Any) -> client.V1ObjectMeta:
    """`obj.metadata`, which the API always sets on objects it returns."""
    meta = obj.metadata
    assert meta is not None
    return cast(client.V1ObjectMeta, meta)


def seconds_between(start: datetime, end: datetime) -> float:
    """end - start in seconds (API timestamps have one-second resolution)."""
    return (end - start).total_seconds()


@contextlib.contextmanager
def private_gpu_nodes(
    kube: Kube, owner: str, count: int, gpus: int, product: str = "NVIDIA-L4"
) -> Iterator[dict[str, Any]]:
    """Fake GPU nodes only this test uses; yields the pod fields that reach them.

    The nodes are named `<owner>-n<i>`, managed by the lab's kwok (annotation), labelled
    `pdlab.pdscaler.io/test-node=<owner>` and tainted with the same key, so no other
    test's pods land on them. They lack the lab's node label, so `pdlab up` leaves them
    alone. Deleted (with their pods) on exit. Yields {"node_selector": ...,
    "extra_tolerations": [...]} to pass to `gpu_deployment(**fields)`.
    """
    names = [f"{owner}-n{i}" for i in range(count)]
    for i, name in enumerate(names):
        node = gpu_node(i, gpus, product)
        node["metadata"]["name"] = name
        labels = node["metadata"]["labels"]
        labels.pop("pdlab.pdscaler.io/node", None)
        labels["kubernetes.io/hostname"] = name
        labels[TEST_NODE_LABEL] = owner
        node["spec"]["taints"].append(
            {"key": TEST_NODE_LABEL, "value": owner, "effect": "NoSchedule"}
        )
        kube.core.create_node(cast(Any, node))
    try:
        wait_for(
            lambda: all(_node_ready(kube, n) for n in names), 60, f"private nodes {names} Ready"
        )
        yield {
            "node_selector": {TEST_NODE_LABEL: owner},
            "extra_tolerations": [
                {
                    "key": TEST_NODE_LABEL,
                    "operator": "Equal",
                    "value": owner,
                    "effect": "NoSchedule",
                }
            ],
        }
    finally:
        for name in names:
            with contextlib.suppress(ApiException):
                kube.core.delete_node(name)


def _node_ready(kube: Kube, name: str) -> bool:
    node = kube.core.read_node(name)
    conds = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conds)
    taints = (node.spec.taints if node.spec else None) or []
    return ready and not any(t.key.startswith("node.kubernetes.io/") for t in taints)


# ----- identities ----------------------------------------------------------------------------
def service_account_kube(kube: Kube, namespace: str, name: str) -> Kube:
    """Clients authenticated as ServiceAccount `name` (created if missing) via TokenRequest."""
    with contextlib.suppress(ApiException):
        kube.core.create_namespaced_service_account(
            namespace, cast(Any, {"metadata": {"name": name}})
        )
    token_request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = kube.core.create_namespaced_service_account_token(name, namespace, token_request)
    if token.status is None or not token.status.token:
        raise RuntimeError(f"TokenRequest for {namespace}/{name} returned no token")
    admin = kube.api.configuration
    conf = client.Configuration()
    conf.host = admin.host
    conf.ssl_ca_cert = admin.ssl_ca_cert
    conf.api_key = {"authorization": token.status.token}
    conf.api_key_prefix = {"authorization": "Bearer"}
    return Kube.from_api_client(client.ApiClient(conf))


# ----- network helpers ----------------------------------------------------------------------
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def metrics_exporter(text: Callable[[], str]) -> Iterator[str]:
    """Serve `text()` as Prometheus exposition on 127.0.0.1:<free port>/metrics.

    Yields "127.0.0.1:<port>"; the server thread stops on exit.
    """

    class Handler(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server dispatches on this name)
            status = 200 if self.path.startswith("/metrics") else 404
            self.reply(status, text().encode(), "text/plain; version=0.0.4")

    with serving(Handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


def rbac_allows(kube: Kube, user: str, namespace: str, verb: str, resource: str) -> bool:
    """The API server's own RBAC answer (SubjectAccessReview) for ``user``."""
    parts = resource.split("/")  # [group/]resource[/subresource], group "apps" or dotted
    group = parts.pop(0) if parts[0] == "apps" or "." in parts[0] else ""
    res, sub = parts[0], "/".join(parts[1:])
    ns_of_user = user.split(":")[2]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{ns_of_user}"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb=verb, group=group, resource=res, subresource=sub
            ),
        )
    )
    answer = client.AuthorizationV1Api(kube.api).create_subject_access_review(review)
    assert answer.status is not None  # the API server's decision
    return bool(answer.status.allowed)


@contextlib.contextmanager
def engine_simulator(namespace: str, sim_args: Sequence[str] = ()) -> Iterator[int]:
    """``python -m pdlab engine-sim`` on ``namespace`` (serving its engine pods, running
    its router pods unless ``--no-routers``; ``sim_args`` added, e.g. ``--scenario chat
    --rate-scale 0.5`` for a synthetic load); yields its control port. It must exit
    cleanly."""
    control = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "pdlab", "engine-sim", "--namespace", namespace,
         "--port", str(control), *sim_args],
        cwd=REPO_DIR,
    )  # fmt: skip
    try:
        yield control
    finally:
        sim.terminate()
        assert sim.wait(30) == 0


@contextlib.contextmanager
def request_path(
    lab: Any, namespace: str, service: str, sim_args: Sequence[str] = ()
) -> Iterator[tuple[int, int, Any]]:
    """The lab's request path for ``namespace``: the engine simulator
    (``engine_simulator``) and a kube-proxy stand-in for ``service``; yields (front
    port, simulator control port, the SvcProxy)."""
    from pdlab.cluster.svcproxy import SvcProxy

    with engine_simulator(namespace, sim_args) as control:
        front = free_port()
        proxy = SvcProxy(lab.kubeconfig, namespace, service, front, say=print)
        proxy.start()
        try:
            yield front, control, proxy
        finally:
            proxy.stop()
