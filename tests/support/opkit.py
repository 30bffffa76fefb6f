"""Helpers for the operator's lab tests (tests/lab/test_operator_*.py).

Owns: a PDDeployment manifest sized for the lab (1-GPU replicas, 1 s start-up delay,
short interval, window and stabilization), running the operator in-process (``ticking``:
a thread calling ``Runtime.tick`` every ``period`` seconds; ``kopf_operator``: the real
kopf runner limited to one namespace), a light load for the exporter (``serve_light``),
reading the cell back and waiting for a condition or a retired cell, a TCP proxy that plays
"Prometheus stopped" for one operator without stopping the shared Prometheus, and a
cluster sampler checking the rollout invariants. Must not start or stop the lab.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes.client.exceptions import ApiException

from pdlab.cluster.lab import Lab
from pdscaler import invariants, naming
from pdscaler.kube import Kube as OperatorKube
from pdscaler.kube import load_api_client
from pdscaler.reconcile import run_tick
from pdscaler.runtime import Runtime
from pdscaler.spec import GROUP, PLURAL, VERSION, PDDeploymentSpec
from pdscaler.types import Role
from support.background import Sampling
from support.exporter import EngineExporter
from support.labkit import Kube, not_found, wait_for

IMAGE = "pdlab.invalid/engine"
STARTUP_DELAY = "1s"


def pdd_manifest(
    name: str,
    prometheus_url: str,
    *,
    version: str = "v1",
    mode: str = "Auto",
    prefill_tps: float = 3000,
    decode_tps: float = 800,
    max_replicas: int = 12,
    max_gpus: int = 32,
    interval: str = "2s",
    window: str = "10s",
    stabilization: str = "20s",
    recovery: float = 30.0,
    startup_seconds: float = 2.0,
    progress_deadline: str = "60s",
    surge: int = 4,
    startup_delay: str = STARTUP_DELAY,
    node_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PDDeployment for the lab: pods Ready ``startup_delay`` after creation, min 1 /
    max ``max_replicas`` per pool, 1 GPU each."""
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "engine"}],
    }
    if node_fields:
        pod_spec["nodeSelector"] = node_fields["node_selector"]
        pod_spec["tolerations"] = node_fields["extra_tolerations"]
    template = {
        "metadata": {"annotations": {"pdscaler.io/startup-delay": startup_delay}},
        "spec": pod_spec,
    }

    def pool(tps: float) -> dict[str, Any]:
        return {
            "template": template,
            "gpusPerReplica": 1,
            "replicas": {"min": 1, "max": max_replicas},
            "tokensPerSecond": tps,
            "targetUtilization": 0.7,
        }

    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PDDeployment",
        "metadata": {"name": name},
        "spec": {
            "engine": {"image": IMAGE, "version": version},
            "prefill": pool(prefill_tps),
            "decode": pool(decode_tps),
            "slo": {
                "ttftSeconds": 2.0,
                "tpotSeconds": 0.05,
                "percentile": 0.95,
                "recoverySeconds": recovery,
            },
            "startupSeconds": startup_seconds,
            "metrics": {"prometheus": {"url": prometheus_url}, "preset": "vllm", "window": window},
            "scaling": {
                "mode": mode,
                "interval": interval,
                "maxGPUs": max_gpus,
                "scaleDownStabilization": stabilization,
            },
            "rollout": {"maxSurgeGPUs": surge, "progressDeadline": progress_deadline},
        },
    }


def serve_light(exp: EngineExporter, namespace: str, name: str) -> None:
    """1 req/s of 2000 prompt / 500 output tokens through one prefill and one decode
    pod, TTFT 0.3 s and TPOT 20 ms: at u = 0.7, N_P = 2000/2100 = 0.95 and
    N_D = 500/560 = 0.89, so the lab's manifest holds at 1 + 1 replicas."""
    exp.set_deployment(
        namespace, name, [f"{name}-p0"], [f"{name}-d0"], rate=1.0, prompt_tokens=2000,
        output_tokens=500, ttft=0.3, tpot=0.02,
    )  # fmt: skip


def serve_two_by_two(exp: EngineExporter, namespace: str, name: str, rate: float) -> None:
    """``rate`` req/s of 2000 prompt / 500 output tokens through two prefill and two
    decode pods, TTFT 0.4 s and TPOT 20 ms: the load of the drills that start at 2 + 2."""
    exp.set_deployment(
        namespace, name, [f"{name}-p0", f"{name}-p1"], [f"{name}-d0", f"{name}-d1"],
        rate=rate, prompt_tokens=2000, output_tokens=500, ttft=0.4, tpot=0.02,
    )  # fmt: skip


def create_pdd(kube: Kube, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    out = kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
    return cast(dict[str, Any], out)


def get_pdd(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    out = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return cast(dict[str, Any], out)


def patch_spec(kube: Kube, namespace: str, name: str, spec_patch: dict[str, Any]) -> None:
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": spec_patch}
    )


def condition(pdd: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (pdd.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def wait_condition(
    kube: Kube,
    namespace: str,
    name: str,
    type_: str,
    status: str,
    timeout: float,
    reason: str | None = None,
) -> dict[str, Any]:
    """Until the PDDeployment's condition ``type_`` has ``status`` ("True"/"False") (and
    ``reason``, if given); returns that condition (its reason, message,
    lastTransitionTime)."""

    def reached() -> dict[str, Any] | None:
        c = condition(get_pdd(kube, namespace, name), type_)
        if c is None or c["status"] != status:
            return None
        return c if reason is None or c.get("reason") == reason else None

    return wait_for(reached, timeout, f"{type_}={status}" + (f" ({reason})" if reason else ""))


def spec_of(pdd: dict[str, Any]) -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(pdd["spec"])


def as_dict(kube: Kube, obj: Any) -> dict[str, Any]:
    """A typed client object as the API's JSON (camelCase keys)."""
    out = kube.api.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return cast(dict[str, Any], out)


def deployments(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    sel = f"{naming.LABEL_NAME}={name}"
    items = kube.apps.list_namespaced_deployment(namespace, label_selector=sel).items
    return [as_dict(kube, d) for d in items]


def replicas(kube: Kube, namespace: str, name: str, role: Role) -> dict[str, int]:
    """Deployment replicas of ``role`` by revision: {rev: spec.replicas}."""
    return {
        d["metadata"]["labels"][naming.LABEL_REVISION]: int(d["spec"].get("replicas") or 0)
        for d in deployments(kube, namespace, name)
        if d["metadata"]["labels"].get(naming.LABEL_ROLE) == role.value
        and not d["metadata"].get("deletionTimestamp")
    }


def total(kube: Kube, namespace: str, name: str, role: Role) -> int:
    return sum(replicas(kube, namespace, name, role).values())


def wait_cell_gone(kube: Kube, namespace: str, name: str, version: str, timeout: float) -> None:
    """Until neither pool has a Deployment of ``version``'s cell (deleted ones count as gone)."""
    label = naming.version_label(version)  # a cell's revision also hashes its engine config
    wait_for(
        lambda: (
            not any(
                d["metadata"]["labels"].get(naming.LABEL_VERSION) == label
                and not d["metadata"].get("deletionTimestamp")
                for d in deployments(kube, namespace, name)
                if d["metadata"]["labels"].get(naming.LABEL_ROLE) in {r.value for r in Role}
            )
        ),
        timeout,
        f"the {version} cell removed",
    )


def pod_dicts(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    """The PDDeployment's pods as plain dicts (the API's JSON), for pdscaler's readers."""
    items = kube.core.list_namespaced_pod(
        namespace, label_selector=f"{naming.LABEL_NAME}={name}"
    ).items
    return [as_dict(kube, p) for p in items]


def ready_count(kube: Kube, namespace: str, name: str, role: Role) -> int:
    from pdscaler.observe import is_ready, labels

    return sum(
        1
        for p in pod_dicts(kube, namespace, name)
        if labels(p).get(naming.LABEL_ROLE) == role.value and is_ready(p)
    )


def wait_both_pools(
    kube: Kube,
    namespace: str,
    name: str,
    at_least: int,
    timeout: float,
    what: str,
    *,
    ready: bool = False,
) -> None:
    """Until both pools ask for (``ready``: have Ready) at least ``at_least`` replicas;
    fails after ``timeout`` seconds naming ``what``."""
    count = ready_count if ready else total
    wait_for(
        lambda: all(count(kube, namespace, name, r) >= at_least for r in Role),
        timeout,
        what,
    )


GPU = "nvidia.com/gpu"


def _pod_gpus(pod: Any) -> int:
    """GPUs a pod bound to a node holds (requests or, for an extended resource, limits);
    0 once it Succeeded or Failed."""
    if pod.status.phase in ("Succeeded", "Failed"):
        return 0
    held = 0
    for c in pod.spec.containers:
        res = c.resources
        wanted = (res.requests or {}).get(GPU) or (res.limits or {}).get(GPU) if res else None
        held += int(wanted or 0)
    return held


def _bound_pods(kube: Kube) -> list[Any]:
    pods: list[Any] = kube.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items
    return pods


def free_gpus(kube: Kube) -> int:
    """The GPUs of the schedulable nodes that no pod bound to a node holds (requests or,
    for an extended resource, limits), terminating pods included: the namespace fixture
    deletes a test's namespace in the background, so an earlier test's pods can keep
    their GPUs into the next test."""
    nodes: list[Any] = kube.core.list_node().items
    total_gpus = sum(
        int((n.status.allocatable or {}).get(GPU, "0")) for n in nodes if not n.spec.unschedulable
    )
    return int(total_gpus) - sum(_pod_gpus(p) for p in _bound_pods(kube))


def gpu_holders(kube: Kube) -> dict[str, int]:
    """GPUs held per namespace (``free_gpus``' count), a terminating pod's namespace
    marked ``(terminating)``: what a test waiting for GPUs reports when it times out."""
    out: dict[str, int] = {}
    for pod in _bound_pods(kube):
        n = _pod_gpus(pod)
        if n:
            gone = " (terminating)" if pod.metadata.deletion_timestamp else ""
            key = pod.metadata.namespace + gone
            out[key] = out.get(key, 0) + n
    return out


def wait_free_gpus(kube: Kube, gpus: int, timeout: float = 120.0) -> None:
    """Until ``free_gpus`` >= ``gpus``: a test whose invariant needs its pools to reach a
    size waits for the earlier tests' pods to let go of the GPUs first. On a timeout the
    error names who holds them (``gpu_holders``)."""

    def free() -> bool:
        if free_gpus(kube) >= gpus:
            return True
        raise LookupError(f"GPUs held: {gpu_holders(kube)}")

    wait_for(free, timeout, f"{gpus} free GPUs in the lab")


def wait_stable(
    kube: Kube, namespace: str, name: str, hold: float = 5.0, timeout: float = 90.0
) -> tuple[int, int]:
    """Until both pools' replicas stay the same for ``hold`` seconds with every pod
    Ready; returns (prefill, decode)."""
    deadline = time.monotonic() + timeout
    last: tuple[int, int] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = (
            total(kube, namespace, name, Role.PREFILL),
            total(kube, namespace, name, Role.DECODE),
        )
        ready = (
            ready_count(kube, namespace, name, Role.PREFILL),
            ready_count(kube, namespace, name, Role.DECODE),
        )
        if now != last or ready != now:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= hold:
            return now
        time.sleep(0.5)
    raise AssertionError(f"{name}: replicas not stable and Ready within {timeout}s: {last}")


# ------------------------------------------------------------------ the operator


def operator_runtime(lab: Lab) -> Runtime:
    """A Runtime on the lab's admin kubeconfig (its ``kube.audit`` counts writes)."""
    return Runtime(kube=OperatorKube(load_api_client(str(lab.kubeconfig))))


@contextlib.contextmanager
def ticking(rt: Runtime, namespace: str, name: str, period: float = 1.0) -> Iterator[Runtime]:
    """The operator's loop for one PDDeployment in a thread: ``run_tick`` every
    ``period`` seconds (the kopf daemon does the same at ``spec.scaling.interval``)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            run_tick(rt, namespace, name)
            stop.wait(period)

    thread = threading.Thread(target=loop, name=f"tick-{name}", daemon=True)
    thread.start()
    try:
        yield rt
    finally:
        stop.set()
        thread.join(timeout=30)


@contextlib.contextmanager
def kopf_operator(namespace: str, rt: Runtime) -> Iterator[Any]:
    """The real operator (kopf + pdscaler.handlers) in a thread, watching ``namespace``."""
    from kopf.testing import KopfRunner

    from pdscaler import handlers

    handlers.install(rt)
    args = ["run", "--standalone", "--namespace", namespace, "-m", "pdscaler.handlers"]
    try:
        with KopfRunner(args, timeout=60) as runner:
            yield runner
    finally:
        handlers.install(None)


def delete_pdd_and_wait(kube: Kube, namespace: str, name: str, timeout: float = 60.0) -> None:
    """Delete the PDDeployment (while its operator runs, so kopf releases its finalizer)."""
    with contextlib.suppress(ApiException):
        kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for(
        lambda: not_found(lambda: get_pdd(kube, namespace, name)),
        timeout,
        f"PDDeployment {namespace}/{name} to be deleted",
        interval=0.3,
    )


def strip_finalizers(kube: Kube, namespace: str, name: str) -> None:
    """Release a PDDeployment whose operator is gone (test teardown)."""
    with contextlib.suppress(ApiException):
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
        )


# ------------------------------------------------------------- Prometheus on/off


class TcpProxy:
    """127.0.0.1:<port> forwarding to ``target`` ("host:port") while ``up``; when down,
    connections are refused (the listening socket is closed) and the open ones are cut
    (a client keeping its connection alive would otherwise go on reaching the target),
    as when Prometheus stops.
    """

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(16)
        sock.settimeout(0.2)
        self._listener = sock
        self._stop.clear()
        threading.Thread(target=self._accept, args=(sock,), daemon=True).start()

    def down(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            cut, self._open = list(self._open), set()
        for conn in cut:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, sock: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=self._pipe_pair, args=(client,), daemon=True).start()

    def _pipe_pair(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._open |= {client, upstream}
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


# ------------------------------------------------------------- invariant sampler


@dataclass
class InvariantChecker(Sampling):
    """Samples the PDDeployment's pods every ``period`` s (0.2 by default) and records
    every violation of the docs/design.md §4 invariants (``pdscaler.invariants``); a
    read that fails is counted (``failed``, ``errors``), not a sample, and sampling
    goes on: ``check(at_least)`` is what a test asserts of it."""

    kube: Kube
    namespace: str
    name: str
    spec: PDDeploymentSpec
    violations: list[tuple[float, str]] = field(default_factory=list)
    versions_seen: set[str] = field(default_factory=set)

    def sample(self) -> None:
        pods = pod_dicts(self.kube, self.namespace, self.name)
        for p in pods:
            self.versions_seen.add(
                ((p.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_VERSION, "")
            )
        now = time.time()
        for v in invariants.violations(pods, self.spec, self.name, check_capacity=True):
            self.violations.append((now, v))
