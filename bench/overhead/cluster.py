"""Cluster plumbing shared by the live overhead measurements (2: one tick, 3: one
operator process): the PDDeployment they create, and typed clients on a lab.

Owns: ``pdd_manifest`` (``deploy/examples/chat.yaml`` as a realistic object: its pod
templates, probes and args kept, the CPU/memory requests dropped so fake nodes hold many
pods, each pod Ready ``startup_delay`` after creation through the lab's annotation),
``Clients`` (core + custom objects + CRDs on a kubeconfig), namespace and PDDeployment
helpers, and waiting. Must not: start or stop the lab (``private_lab`` and pdlab do),
or run the operator.
"""

from __future__ import annotations

import copy
import secrets
from pathlib import Path
from typing import Any, cast

import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.kubeclient import Kube, pod_ready
from pdlab.cluster.kwok import STARTUP_DELAY_ANNOTATION
from pdscaler import naming
from pdscaler.spec import GROUP, PLURAL, VERSION

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "examples" / "chat.yaml"
NAMESPACE_PREFIX = "bench-overhead"

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


def create_pdd(kube: Kube, manifest: Obj) -> None:
    ns = manifest["metadata"]["namespace"]
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)


def patch_pdd_spec(kube: Kube, namespace: str, name: str, spec_patch: Obj) -> None:
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name, {"spec": spec_patch}
    )


def list_pdds(kube: Kube, namespace: str) -> list[Obj]:
    out = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    return list(cast(Obj, out).get("items") or [])


#: The engine pods of a cell (its router pods are not counted: in the private lab no pod
#: runner starts the router, so its readiness probe never passes).
ENGINE_PODS = f"{naming.LABEL_ROLE} in (prefill,decode)"


def ready_pods(kube: Kube, namespace: str) -> tuple[int, int]:
    """(Ready engine pods, all engine pods) in ``namespace`` (``ENGINE_PODS``)."""
    pods = kube.core.list_namespaced_pod(
        namespace, label_selector=ENGINE_PODS, _request_timeout=30
    ).items
    return sum(1 for pod in pods if pod_ready(pod)), len(pods)


def reconciled(pdd: Obj) -> bool:
    """True once the operator wrote a status for the current generation."""
    gen = (pdd.get("metadata") or {}).get("generation")
    observed = (pdd.get("status") or {}).get("observedGeneration")
    return gen is not None and observed == gen
