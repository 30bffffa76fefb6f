"""Which PDDeployment pods the engine simulator serves: a poll of the lab's API server.

Owns: listing the pods labelled ``pdscaler.io/name`` + ``pdscaler.io/role`` (optionally
one namespace, one PDDeployment) with the ``kubernetes`` client and the lab's admin
kubeconfig, the readiness predicate, and the same for a stack's own frontend pods
(``pdscaler.io/role=frontend``: ``FrontendLister``). Must not: change anything in the
cluster, or know about the serving model.

A pod counts as serving when its phase is Running, its ``Ready`` condition is True and
it is not being deleted (``metadata.deletionTimestamp`` unset) and has a pod IP: the
same pods a Service's endpoints would route to. A pod
``chat-r1-prefill-x`` (IP 127.64.0.7, port ``http`` 8000, revision ``r1``) becomes
``PodInfo(..., ip="127.64.0.7", port=8000, revision="r1", config="r1")``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client, config

from pdlab.cluster.kubeclient import is_serving
from pdscaler.naming import LABEL_NAME, LABEL_POOL, LABEL_REVISION, LABEL_ROLE, LABEL_VERSION
from pdscaler.router import DEFAULT_BOOTSTRAP_PORT, bootstrap_port
from pdscaler.types import Role

#: The pod annotation naming the configuration a pod runs (its KV compatibility).
SPEC_HASH_ANNOTATION = "pdscaler.io/spec-hash"
#: The engine's port when the pod declares none (vLLM's default).
DEFAULT_PORT = 8000
#: The role label value of a stack's own frontend pods (Dynamo's, with ``router.type:
#: external``): not a pool, but the ``dynamo`` preset reads R, the lengths and the
#: latencies from it (docs/operator.md, "Scraping the engines").
FRONTEND_ROLE = "frontend"


@dataclass(frozen=True)
class PodInfo:
    """One pool pod as the simulator sees it.

    ``ip``/``port``: where the pod is served (its pod IP, the engine container's port
    named ``http``, else its first port, else 8000); ``revision``: the cell
    (``pdscaler.io/revision``); ``config``: what makes its KV compatible (the pod
    annotation ``pdscaler.io/spec-hash``, else the revision); ``uid``: the pod's UID.
    """

    namespace: str
    name: str
    deployment: str
    role: Role
    version: str
    ready: bool
    ip: str = ""
    port: int = DEFAULT_PORT
    revision: str = ""
    config: str = ""
    uid: str = ""
    #: the engine container's preStop sleep: how long its container keeps serving
    #: after the pod is deleted (a kubelet runs the hook before SIGTERM)
    prestop_s: float = 0.0
    #: the metric names its /metrics speaks (``engine_dialect``): ``vllm`` or ``sglang``
    dialect: str = "vllm"
    #: the port an SGLang prefill's bootstrap (KV hand-off) server binds: its engine's
    #: ``--disaggregation-bootstrap-port``, else 8998 (``engine_words``)
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT
    #: a pod of a role-flip cell (labelled ``pdscaler.io/pool``): its engine runs the KV
    #: connector in both roles (vLLM ``kv_role: kv_both``), so it serves either leg and
    #: a change of its role label is no restart
    kv_both: bool = False

    @property
    def engine_id(self) -> str:
        """The id its NixlConnector would advertise: the pod UID (else namespace/name)."""
        return self.uid or f"{self.namespace}/{self.name}"

    @property
    def address(self) -> str:
        """``127.64.0.7:8000``"""
        return f"{self.ip}:{self.port}"


def engine_port(pod: Any) -> int:
    """The container port named ``http`` (the container named ``engine`` first), else
    the first container port, else 8000 (a kubernetes-client V1Pod)."""
    containers = sorted(pod.spec.containers or [], key=lambda c: c.name != "engine")
    ports = [p for c in containers for p in (c.ports or [])]
    named = [p for p in ports if p.name == "http"]
    chosen = named or ports
    return int(chosen[0].container_port) if chosen else DEFAULT_PORT


def prestop_seconds(pod: Any) -> float:
    """The engine container's ``lifecycle.preStop.sleep.seconds`` (0 without one): the
    container named ``engine``, else the first (a kubernetes-client V1Pod)."""
    containers = sorted(pod.spec.containers or [], key=lambda c: c.name != "engine")
    if not containers:
        return 0.0
    hook = containers[0].lifecycle.pre_stop if containers[0].lifecycle else None
    sleep = hook.sleep if hook is not None else None
    return float(sleep.seconds) if sleep is not None and sleep.seconds else 0.0


def engine_words(pod: Any) -> list[str]:
    """The engine container's (the one named ``engine``, else the first) image,
    command and args (a kubernetes-client V1Pod); [] without a container."""
    containers = sorted(pod.spec.containers or [], key=lambda c: c.name != "engine")
    if not containers:
        return []
    c = containers[0]
    return [c.image or "", *(c.command or []), *(c.args or [])]


def engine_dialect(pod: Any) -> str:
    """``sglang`` when the engine container runs SGLang (``sglang`` in its image,
    command or args: ``python3 -m sglang.launch_server``), else ``vllm``."""
    return "sglang" if any("sglang" in w for w in engine_words(pod)) else "vllm"


def to_info(pod: Any) -> PodInfo | None:
    """A PodInfo, or None for a pod whose role label is neither prefill nor decode."""
    labels = pod.metadata.labels or {}
    try:
        role = Role(labels.get(LABEL_ROLE, ""))
    except ValueError:
        return None
    annotations = pod.metadata.annotations or {}
    revision = labels.get(LABEL_REVISION, "")
    return PodInfo(
        namespace=pod.metadata.namespace,
        name=pod.metadata.name,
        deployment=labels.get(LABEL_NAME, ""),
        role=role,
        version=labels.get(LABEL_VERSION, ""),
        ready=is_serving(pod) and bool(pod.status.pod_ip),
        ip=(pod.status.pod_ip if pod.status else None) or "",
        port=engine_port(pod),
        revision=revision,
        config=annotations.get(SPEC_HASH_ANNOTATION) or revision,
        uid=pod.metadata.uid or "",
        prestop_s=prestop_seconds(pod),
        dialect=engine_dialect(pod),
        bootstrap_port=bootstrap_port(engine_words(pod)),
        kv_both=bool(labels.get(LABEL_POOL)),
    )


@dataclass(frozen=True)
class FrontendInfo:
    """A Ready pod of a stack's own frontend (``pdscaler.io/role=frontend``, e.g.
    Dynamo's): where it is served and whose series it shows (``deployment``, its
    ``pdscaler.io/name``). ``dynamo-chat-frontend-x`` at 127.64.0.12:8000 of
    ``serving/dynamo-chat`` -> ``FrontendInfo("serving", "dynamo-chat-frontend-x",
    "dynamo-chat", "127.64.0.12", 8000)``."""

    namespace: str
    name: str
    deployment: str
    ip: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"


def to_frontend(pod: Any) -> FrontendInfo | None:
    """A FrontendInfo for a Ready frontend pod with an IP, else None (a
    kubernetes-client V1Pod)."""
    labels = pod.metadata.labels or {}
    if labels.get(LABEL_ROLE) != FRONTEND_ROLE or not labels.get(LABEL_NAME):
        return None
    if not is_serving(pod) or not pod.status.pod_ip:
        return None
    return FrontendInfo(
        pod.metadata.namespace,
        pod.metadata.name,
        labels[LABEL_NAME],
        pod.status.pod_ip,
        engine_port(pod),
    )


class _Pods:
    """The pods matching one label selector (optionally in one namespace): one API call
    per ``items()``."""

    def __init__(self, kubeconfig: Path, namespace: str | None, selector: str) -> None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._api = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.selector = selector

    def items(self) -> list[Any]:
        if self.namespace:
            return list(
                self._api.list_namespaced_pod(
                    self.namespace, label_selector=self.selector, _request_timeout=10
                ).items
            )
        return list(
            self._api.list_pod_for_all_namespaces(
                label_selector=self.selector, _request_timeout=10
            ).items
        )


def _owner(name: str | None) -> str:
    """The selector term of one PDDeployment's pods (any PDDeployment's: None)."""
    return f"{LABEL_NAME}={name}" if name else LABEL_NAME


class PodLister:
    """``list()`` the pool pods; one API call per poll."""

    def __init__(
        self, kubeconfig: Path, namespace: str | None = None, name: str | None = None
    ) -> None:
        self._pods = _Pods(kubeconfig, namespace, f"{_owner(name)},{LABEL_ROLE}")
        self.namespace = namespace

    def list(self) -> list[PodInfo]:
        """Every pool pod (ready or not) matching the namespace/name filter."""
        return [info for info in (to_info(p) for p in self._pods.items()) if info is not None]


class FrontendLister:
    """``list()`` the Ready frontend pods (``pdlab.engine.frontend`` serves them); one API
    call per poll."""

    def __init__(
        self, kubeconfig: Path, namespace: str | None = None, name: str | None = None
    ) -> None:
        self._pods = _Pods(kubeconfig, namespace, f"{_owner(name)},{LABEL_ROLE}={FRONTEND_ROLE}")

    def list(self) -> list[FrontendInfo]:
        return [f for f in (to_frontend(p) for p in self._pods.items()) if f is not None]


class PodSource(Protocol):
    def list(self) -> list[PodInfo]: ...


class FrontendSource(Protocol):
    def list(self) -> list[FrontendInfo]: ...


class LingeringPods:
    """A ``PodSource`` whose pods stay served for their preStop sleep (``prestop_s``)
    after they stop being Ready or are deleted (their last Ready ``PodInfo``), as a
    kubelet keeps a deleted pod's container running through its preStop hook: a router
    that chose a decode pod before its prefill finished still reaches it. A pod without
    a preStop sleep leaves at once (as vLLM stops listening on SIGTERM).

    A decode pod with ``preStop: {sleep: {seconds: 9}}`` deleted at t = 100 s is listed
    Ready until t = 109 s, then no more."""

    def __init__(self, inner: PodSource) -> None:
        self.inner = inner
        self.last: dict[tuple[str, str], PodInfo] = {}
        self.left_at: dict[tuple[str, str], float] = {}

    def _keep(self, key: tuple[str, str], now: float) -> bool:
        if now - self.left_at.setdefault(key, now) < self.last[key].prestop_s:
            return True
        self.last.pop(key, None)
        self.left_at.pop(key, None)
        return False

    def list(self) -> list[PodInfo]:
        now = time.monotonic()
        out: list[PodInfo] = []
        for pod in self.inner.list():
            key = (pod.namespace, pod.name)
            if pod.ready:
                self.last[key] = pod
                self.left_at.pop(key, None)
            elif key in self.last and self._keep(key, now):
                pod = self.last[key]
            out.append(pod)
        listed = {(p.namespace, p.name) for p in out}
        for key in [k for k in self.last if k not in listed]:
            if self._keep(key, now):
                out.append(self.last[key])
        return out
