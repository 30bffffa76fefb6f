"""kopf glue, and nothing else: which events call ``reconcile_once``, and when.

Owns: the kopf registrations for PDDeployments and the operator settings they need.

* ``@kopf.on.create`` / ``@kopf.on.update`` / ``@kopf.on.resume``: one tick at once (a
  new or changed spec is acted on without waiting for the next interval);
* ``@kopf.daemon``: per PDDeployment, one tick every ``spec.scaling.interval`` (re-read
  on every loop, so a changed interval applies from the next tick); kopf stops it when
  the object is deleted (kopf puts a finalizer on objects with daemons for that);
* ``@kopf.on.login``: the service account in a pod, else ``$KUBECONFIG``;
* ``@kopf.on.startup``: settings. No handler returns a value (kopf would store it in
  ``status.<handler>``; the status is written, typed, by ``reconcile``); kopf's progress
  and diff-base records live in ``pdscaler.io`` annotations, not in the status; kopf
  posts only warnings and errors as Events (a converged tick writes nothing at all).

The event handlers are sync (kopf runs them in its thread pool) because ``kube.py`` uses
the blocking ``kubernetes`` client. The per-object daemon is ``async`` and hands each
tick to a bounded pool of ``TICK_WORKERS`` threads. Must not: hold logic (that is
``reconcile``'s), or run a sync daemon: it would hold one of kopf's worker threads for
the object's whole life, so the PDDeployment after the last worker would never tick.
Example: 200 PDDeployments at a 15 s interval are 13 ticks/s of ~70 ms each, well
inside 8 tick threads.

The process-wide ``Runtime`` (API client, Prometheus clients, telemetry, the policy
memory) is made on first use from the environment, or installed beforehand with
``install(runtime)`` (``pdscaler run`` and the lab tests do).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from pdscaler import reconcile
from pdscaler.spec import GROUP, PLURAL, VERSION

RESOURCE = (GROUP, VERSION, PLURAL)
ANNOTATION_PREFIX = "pdscaler.io"
MIN_INTERVAL_SECONDS = 1.0
TICK_WORKERS = 8

_ticks = ThreadPoolExecutor(max_workers=TICK_WORKERS, thread_name_prefix="pdscaler-tick")

_lock = threading.Lock()
_runtime: reconcile.Runtime | None = None


def install(runtime: reconcile.Runtime | None) -> None:
    """Use ``runtime`` for every handler from now on (None: make one on first use)."""
    global _runtime
    with _lock:
        _runtime = runtime


def runtime() -> reconcile.Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = reconcile.Runtime.from_environment()
        return _runtime


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ANNOTATION_PREFIX}/finalizer"
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "pdscaler"
    settings.execution.max_workers = max(settings.execution.max_workers or 0, 8)
    runtime()  # fail at start-up, not on the first event, if the config is broken


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account inside a pod, else ``$KUBECONFIG`` as it is NOW (the
    client library's default login reads it once, at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def _tick(namespace: str | None, name: str | None) -> None:
    if namespace and name:
        runtime().tick(namespace, name)


@kopf.on.create(*RESOURCE)
def on_create(namespace: str | None, name: str | None, **_: Any) -> None:
    _tick(namespace, name)


@kopf.on.update(*RESOURCE, field="spec")
def on_update(namespace: str | None, name: str | None, **_: Any) -> None:
    _tick(namespace, name)


@kopf.on.resume(*RESOURCE)
def on_resume(namespace: str | None, name: str | None, **_: Any) -> None:
    _tick(namespace, name)


@kopf.daemon(*RESOURCE, cancellation_timeout=5.0)
async def every_interval(
    stopped: kopf.DaemonStopped, namespace: str | None, name: str | None, **_: Any
) -> None:
    """Tick (in the tick pool), then wait ``spec.scaling.interval`` (or until kopf stops
    the daemon)."""
    loop = asyncio.get_running_loop()
    while not stopped:
        await loop.run_in_executor(_ticks, _tick, namespace, name)
        interval = runtime().interval(namespace or "", name or "")
        await stopped.wait(max(interval, MIN_INTERVAL_SECONDS))
