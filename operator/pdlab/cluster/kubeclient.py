"""The lab side's Kubernetes plumbing, once: typed clients for a kubeconfig, waiting, and
the few reads and writes the demo, the lab tests and the benchmarks all make.

Owns: ``Kube`` (the typed API clients sharing one ``ApiClient``), ``wait_until`` (poll
a predicate until it returns something truthy, with a timeout that names what it
waited for and the last value seen), ``pod_ready`` / ``pod_condition`` / ``is_serving``
on typed pods, ``if_found`` (a read that is None on 404), namespaces created and deleted
idempotently, and the PDDeployment CRD applied and waited Established. Must not: start
or stop the lab (``pdlab.cluster.lab``), import the engine simulator or the demo, or be
imported by ``pdscaler`` (the product talks to Kubernetes in ``pdscaler.kube`` only).

    kube = Kube.from_kubeconfig(lab.kubeconfig)
    apply_crd(kube)                                  # idempotent, waits Established
    created = ensure_namespace(kube, "demo")         # False: it was there already
    wait_until(lambda: all(pod_ready(p) for p in pods()), 30, "pods Ready", interval=1.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.config import REPO_DIR

CRD_PATH = REPO_DIR / "crds" / "pdscaler.io_pddeployments.yaml"

T = TypeVar("T")


@dataclass(frozen=True)
class Kube:
    """Typed clients sharing one `ApiClient` (the lab admin, or a ServiceAccount)."""

    api: client.ApiClient
    core: client.CoreV1Api
    apps: client.AppsV1Api
    rbac: client.RbacAuthorizationV1Api
    custom: client.CustomObjectsApi
    apiext: client.ApiextensionsV1Api

    @staticmethod
    def from_api_client(api: client.ApiClient) -> Kube:
        """Wrap an existing ApiClient."""
        return Kube(
            api=api,
            core=client.CoreV1Api(api),
            apps=client.AppsV1Api(api),
            rbac=client.RbacAuthorizationV1Api(api),
            custom=client.CustomObjectsApi(api),
            apiext=client.ApiextensionsV1Api(api),
        )

    @staticmethod
    def from_kubeconfig(path: Path) -> Kube:
        """Clients for the kubeconfig at `path` (the lab's admin kubeconfig)."""
        api = config.new_client_from_config(config_file=str(path))  # type: ignore[no-untyped-call]
        return Kube.from_api_client(api)


class WaitTimeoutError(TimeoutError):
    """`wait_until` ran out of time; the message says what and the last value seen."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.5,
    error: Callable[[str], Exception] = WaitTimeoutError,
    not_yet: tuple[type[Exception], ...] = (),
) -> T:
    """Call `predicate` every `interval` seconds until it returns something truthy; that
    value. After `timeout` seconds, raise ``error(message)`` naming `what` and the last
    value: ``wait_until(lambda: [], 1, "pods")`` fails after 1 s with "timed out after
    1.0s waiting for pods; last value: []". An exception of a type in `not_yet` counts
    as "not yet" (and is the last value); any other propagates at once.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = predicate()
        except not_yet as err:
            value, last = None, err
        else:
            last = value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise error(f"timed out after {timeout:.1f}s waiting for {what}; last value: {last!r}")
        time.sleep(interval)


def if_found(call: Callable[[], T]) -> T | None:
    """``call()``, or None if it raises a 404 ApiException (the object is not there)."""
    try:
        return call()
    except ApiException as err:
        if err.status == 404:
            return None
        raise


# ----- pods ----------------------------------------------------------------------------------
def pod_condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition | None:
    """The pod condition of type `kind` ("Ready", "PodScheduled", ...), if present."""
    for cond in (pod.status.conditions if pod.status else None) or []:
        if cond.type == kind:
            return cond
    return None


def is_serving(pod: Any) -> bool:
    """Running, Ready=True and not terminating (a kubernetes-client V1Pod): a pod a
    Service sends to (the Service proxy) and an engine serves (the engine simulator)."""
    if pod.metadata.deletion_timestamp is not None:
        return False
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


def pod_ready(pod: client.V1Pod) -> bool:
    """The pod's Ready condition is True."""
    cond = pod_condition(pod, "Ready")
    return cond is not None and cond.status == "True"


# ----- namespaces ----------------------------------------------------------------------------
def ensure_namespace(
    kube: Kube, name: str, labels: dict[str, str] | None = None, timeout: float = 120.0
) -> bool:
    """Create the namespace; True if this call created it (and so its caller may delete
    it), False if it existed. One still being deleted (phase Terminating: the API server
    refuses new objects in it) is waited for, up to ``timeout`` seconds, and created
    again (True): a demo run right after another one whose namespace is still emptying."""
    body: dict[str, Any] = {"metadata": {"name": name}}
    if labels:
        body["metadata"]["labels"] = labels
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.core.create_namespace(cast(Any, body))
            return True
        except ApiException as err:
            if err.status != 409:
                raise
        found = if_found(lambda: kube.core.read_namespace(name))
        if found is not None and (found.status is None or found.status.phase != "Terminating"):
            return False
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"namespace {name} still Terminating after {timeout:g}s")
        time.sleep(1.0)


def delete_namespace(kube: Kube, name: str) -> None:
    """Delete the namespace (its objects go with it); nothing if it is already gone."""
    if_found(lambda: kube.core.delete_namespace(name))


# ----- the CRD -------------------------------------------------------------------------------
def crd_established(kube: Kube, name: str) -> bool:
    """True once the CRD `name` has condition Established=True."""
    crd = kube.apiext.read_custom_resource_definition(name)
    conds = crd.status.conditions if crd.status and crd.status.conditions else []
    return any(c.type == "Established" and c.status == "True" for c in conds)


def apply_crd(kube: Kube, path: Path = CRD_PATH, timeout: float = 30.0) -> str:
    """Create or update the CRD in `path` and wait until Established; its name.

    Idempotent and safe when several users share the lab: an existing CRD is replaced at
    its current resourceVersion (an unchanged one is a no-op for the API server),
    retrying on a conflict with a concurrent writer.
    """
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    name: str = body["metadata"]["name"]
    for attempt in range(5):
        try:
            if attempt == 0:
                kube.apiext.create_custom_resource_definition(cast(Any, body))
            else:
                current: Any = kube.apiext.read_custom_resource_definition(name)
                body["metadata"]["resourceVersion"] = current.metadata.resource_version
                kube.apiext.replace_custom_resource_definition(name, cast(Any, body))
            break
        except ApiException as err:
            if err.status != 409:  # 409: exists (create) or conflict (replace): go again
                raise
    wait_until(
        lambda: crd_established(kube, name), timeout, f"CRD {name} Established", interval=0.2
    )
    return name
