"""The fenced ``Kube`` a replica of an elected operator writes through (part of
``pdscaler.kube``): its writes happen only while it holds the Lease (``leader``).
Must not: fence reads or the Lease's own requests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client as k8s_client

from pdscaler.kube.audit import WriteAudit
from pdscaler.kube.client import DEFAULT_BURST, JSON, KubeError, Obj
from pdscaler.kube.writes import Kube


class FencedError(KubeError):
    """A write refused by the fence: this replica does not hold the Lease (now)."""

    def __init__(self, what: str) -> None:
        super().__init__(0, "Fenced", f"{what}: not the leader, write refused")


class FencedKube(Kube):
    """A ``Kube`` whose writes (Deployments, Services, pods, status, Events: everything
    through ``_write``) happen only while ``fence()`` is True, checked right before each
    request; a refused write raises ``FencedError`` and reaches neither the API server
    nor ``audit``. Its Events carry ``instance`` (the Lease holder identity) as
    ``reportingInstance``, so who wrote an Event can be told. Example::

        kube = FencedKube(load_api_client(), fence=elector.may_write, instance="pod-a")
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        audit: WriteAudit | None = None,
        *,
        fence: Callable[[], bool],
        instance: str,
        qps: float = 0.0,
        burst: int = DEFAULT_BURST,
        cache: bool = False,
    ) -> None:
        super().__init__(api_client, audit, qps=qps, burst=burst, cache=cache)
        self.fence = fence
        self.instance = instance
        self._guard = threading.local()
        _guard_sends(self.api, self._guard)

    def _write(
        self,
        verb: str,
        kind: str,
        namespace: str,
        name: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = JSON,
        query: Mapping[str, str] | None = None,
    ) -> Obj:
        what = f"{verb} {kind} {namespace}/{name}"
        if not self.fence():
            raise FencedError(what)
        if kind == "Event" and method == "POST" and isinstance(body, dict):
            body = {**body, "reportingInstance": self.instance[:128]}
            body["source"] = {**(body.get("source") or {}), "host": self.instance}
        self._guard.check = (self.fence, what)  # checked again once the body is encoded
        try:
            return super()._write(
                verb,
                kind,
                namespace,
                name,
                method,
                path,
                body=body,
                content_type=content_type,
                query=query,
            )
        finally:
            self._guard.check = None


def _guard_sends(api: Any, guard: threading.local) -> None:
    """Check the fence a second time as late as the client library allows: when the
    request is encoded and handed to the connection pool (the serialising in between
    can take milliseconds on a loaded host, and a process stopped there would send a
    stale write when continued). The Lease calls set no check and pass through."""
    rest = getattr(api, "rest_client", None)
    pool = getattr(rest, "pool_manager", None)
    if pool is None:
        return
    send = pool.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        check = getattr(guard, "check", None)
        if check is not None and not check[0]():
            raise FencedError(check[1])
        return send(method, url, *args, **kwargs)

    pool.request = request
