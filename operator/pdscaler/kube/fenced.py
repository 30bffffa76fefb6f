"""The fenced ``Kube`` a replica of an elected operator writes through (part of
``pdscaler.kube``): its writes happen only while it holds the Lease (``fence``) and,
inside a tick (``pinned``), only in the term the tick began in (``term``): a tick that
hung through a leadership change (this replica lost the Lease, another wrote, this one
took it back) writes nothing from what it read in the old term. Must not: fence reads
or the Lease's own requests.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes import client as k8s_client

from pdscaler.kube.audit import WriteAudit
from pdscaler.kube.client import DEFAULT_BURST, JSON, KubeError, Obj
from pdscaler.kube.writes import Kube


class FencedError(KubeError):
    """A write refused by the fence: this replica does not hold the Lease (now)."""

    def __init__(self, what: str, why: str = "not the leader") -> None:
        super().__init__(0, "Fenced", f"{what}: {why}, write refused")


_UNPINNED = object()


class FencedKube(Kube):
    """A ``Kube`` whose writes (Deployments, Services, pods, status, Events: everything
    through ``_write``) happen only while ``fence()`` is True, checked right before each
    request; a refused write raises ``FencedError`` and reaches neither the API server
    nor ``audit``. Its Events carry ``instance`` (the Lease holder identity) as
    ``reportingInstance``, so who wrote an Event can be told. With ``term`` (the
    elector's token of the term it holds, None when it holds none), a write inside
    ``pinned()`` also needs the term it was pinned in. Example::

        kube = FencedKube(load_api_client(), fence=elector.may_write, instance="pod-a",
                          term=elector.term)
        with kube.pinned():     # a tick: its writes only in this term
            ...
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
        term: Callable[[], object] | None = None,
    ) -> None:
        super().__init__(api_client, audit, qps=qps, burst=burst, cache=cache)
        self.fence = fence
        self.instance = instance
        self.term = term
        self._guard = threading.local()
        self._pins = threading.local()
        _guard_sends(self.api, self._guard)

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Writes of this thread inside the block need the term it began in."""
        self._pins.term = self.term() if self.term is not None else _UNPINNED
        try:
            yield
        finally:
            self._pins.term = _UNPINNED

    def _refusal(self) -> str | None:
        """Why a write must not leave now (None: it may)."""
        if not self.fence():
            return "not the leader"
        pinned = getattr(self._pins, "term", _UNPINNED)
        if pinned is not _UNPINNED and self.term is not None and self.term() != pinned:
            return "the tick began in an earlier leadership term"
        return None

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
        why = self._refusal()
        if why is not None:
            raise FencedError(what, why)
        if kind == "Event" and method == "POST" and isinstance(body, dict):
            body = {**body, "reportingInstance": self.instance[:128]}
            body["source"] = {**(body.get("source") or {}), "host": self.instance}
        self._guard.check = (self._refusal, what)  # checked again once the body is encoded
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
        why = check[0]() if check is not None else None
        if check is not None and why is not None:
            raise FencedError(check[1], why)
        return send(method, url, *args, **kwargs)

    pool.request = request
