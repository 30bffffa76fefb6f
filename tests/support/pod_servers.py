"""The engine simulator's HTTP servers for unit tests, without the lab.

Owns: ``served(*pods)``: a ``pdlab.engine.serve.PodServers`` serving the given pods at
their (loopback) addresses, closed on exit. A pod address the kernel cannot bind at all
(``EADDRNOTAVAIL``: macOS without loopback aliases has only 127.0.0.1) skips the test,
in CI too (``support.skips.platform_cannot``); any other failure, a busy port
(``EADDRINUSE``) included, fails it with what the servers said (the tests name their
ports, so none is moved). ``post_json``: one JSON POST to a served pod.
Must not: talk to a cluster.

    with served(PREFILL, DECODE) as pods:   # POST http://<PREFILL.ip>:<port>/v1/...
        ...
"""

from __future__ import annotations

import errno
import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pdlab.engine.pods import PodInfo
from pdlab.engine.serve import PodServers
from pdscaler.sim.engine import EngineParams
from support.skips import bind_errno, platform_cannot


@contextmanager
def served(*pods: PodInfo) -> Iterator[PodServers]:
    servers = PodServers(EngineParams())
    try:
        said = servers.sync(list(pods))
        if any(line.startswith("cannot serve") for line in said):
            unbindable = [p.ip for p in pods if bind_errno(p.ip) == errno.EADDRNOTAVAIL]
            if unbindable:
                platform_cannot(f"bind {unbindable} (EADDRNOTAVAIL, not local addresses): {said}")
            pytest.fail(f"the pods' addresses bind, their ports did not: {said}")
        yield servers
    finally:
        servers.close()


def post_json(pod: PodInfo, path: str, body: dict[str, Any], timeout: float = 40.0) -> Any:
    """POST ``body`` to ``path`` of the pod's server; its JSON answer."""
    req = urllib.request.Request(
        f"http://{pod.address}{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())
