"""Cluster plumbing shared by the live overhead measurements (2: one tick, 3: one
operator process): the PDDeployment they create, and typed clients on a lab.

Owns: ``pdd_manifest`` (``deploy/examples/chat.yaml`` as a realistic object: its pod
templates, probes and args kept, the CPU/memory requests dropped so fake nodes hold many
pods, each pod Ready ``startup_delay`` after creation through the lab's annotation),
``Clients`` (core + custom objects + CRDs on a kubeconfig), namespace and PDDeployment
helpers, and waiting. Must not: start or stop the lab (``overhead_lab`` and pdlab do),
or run the operator.
"""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pdscaler.spec import GROUP, PLURAL, VERSION

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "deploy" / "examples" / "chat.yaml"
STARTUP_DELAY_ANNOTATION = "pdscaler.io/startup-delay"
NAMESPACE_PREFIX = "bench-overhead"

T = TypeVar("T")
#: What a lab that stopped answering raises through the clients used here.
LAB_ERRORS: tuple[type[Exception], ...] = (OSError, ApiException, urllib3.exceptions.HTTPError)
Obj = dict[str, Any]


class BenchError(RuntimeError):
    """A live measurement cannot go on; the message says why (shown as "not measured"),
    ``facts`` what was learnt before it stopped (shown as notes)."""

    def __init__(self, message: str, facts: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.facts = dict(facts or {})


def pdd_manifest(
    name: str,
    namespace: str,
    prometheus_url: str,
    *,
    mode: str = "Auto",
    prefill: tuple[int, int] = (1, 4),
    decode: tuple[int, int] = (1, 4),
    interval: str = "15s",
    startup_delay: str = "2s",
) -> Obj:
    """The chat example as ``namespace/name``: replicas (min, max) per pool, ``maxGPUs``
    covering both maxima, ``mode`` Auto or Recommend."""
    doc: Obj = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"] = {"name": name, "namespace": namespace}
    spec = doc["spec"]
    for pool, (lo, hi) in (("prefill", prefill), ("decode", decode)):
        p = spec[pool]
        p["replicas"] = {"min": lo, "max": hi}
        tmpl = p["template"]
        tmpl.setdefault("metadata", {}).setdefault("annotations", {})[STARTUP_DELAY_ANNOTATION] = (
            startup_delay
        )
        tmpl["spec"]["terminationGracePeriodSeconds"] = 0
        for c in tmpl["spec"]["containers"]:
            res = c.get("resources") or {}
            for key in ("requests", "limits"):
                kept = {k: v for k, v in (res.get(key) or {}).items() if k == "nvidia.com/gpu"}
                res[key] = kept
    spec["metrics"]["prometheus"]["url"] = prometheus_url
    spec["scaling"]["mode"] = mode
    spec["scaling"]["interval"] = interval
    spec["scaling"]["maxGPUs"] = (
        prefill[1] * spec["prefill"]["gpusPerReplica"]
        + decode[1] * spec["decode"]["gpusPerReplica"]
    )
    return copy.deepcopy(doc)


def unique_namespace(prefix: str = NAMESPACE_PREFIX) -> str:
    """``bench-overhead-1a2b3c``: never one another helper or run uses."""
    return f"{prefix}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Clients:
    """Typed clients as the lab's admin."""

    api: client.ApiClient
    core: client.CoreV1Api
    custom: client.CustomObjectsApi

    @staticmethod
    def connect(kubeconfig: Path) -> Clients:
        api = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        return Clients(api, client.CoreV1Api(api), client.CustomObjectsApi(api))

    def create_namespace(self, name: str) -> None:
        self.core.create_namespace(cast(Any, {"metadata": {"name": name}}))

    def delete_namespace(self, name: str) -> None:
        try:
            self.core.delete_namespace(name)
        except ApiException as err:
            if err.status != 404:
                raise

    def namespace_gone(self, name: str) -> bool:
        try:
            self.core.read_namespace(name)
        except ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    def create_pdd(self, manifest: Obj) -> None:
        ns = manifest["metadata"]["namespace"]
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)

    def patch_pdd_spec(self, namespace: str, name: str, spec_patch: Obj) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, {"spec": spec_patch}
        )

    def list_pdds(self, namespace: str) -> list[Obj]:
        out = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        return list(cast(Obj, out).get("items") or [])

    def delete_pdds(self, namespace: str) -> None:
        self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)

    def ready_pods(self, namespace: str) -> tuple[int, int]:
        """(Ready pods, all pods) in ``namespace``."""
        pods: Any = self.core.list_namespaced_pod(namespace, _request_timeout=30)
        ready = 0
        for pod in pods.items:
            conds = (pod.status.conditions if pod.status else None) or []
            ready += any(c.type == "Ready" and c.status == "True" for c in conds)
        return ready, len(pods.items)


def reconciled(pdd: Obj) -> bool:
    """True once the operator wrote a status for the current generation."""
    gen = (pdd.get("metadata") or {}).get("generation")
    observed = (pdd.get("status") or {}).get("observedGeneration")
    return gen is not None and observed == gen


def wait_until(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 1.0,
) -> T:
    """Poll ``check`` until it returns something truthy; BenchError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
