"""The engine simulator's HTTP servers for unit tests, without the lab.

Owns: ``served(*pods)``: a ``pdlab.engine_serve.PodServers`` serving the given pods at
their (loopback) addresses, closed on exit; where those addresses cannot be bound, the
test is skipped with what the servers said; ``post_json``: one JSON POST to a served pod.
Must not: talk to a cluster.

    with served(PREFILL, DECODE) as pods:   # POST http://<PREFILL.ip>:<port>/v1/...
        ...
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pdlab.engine_pods import PodInfo
from pdlab.engine_serve import PodServers
from pdscaler.sim.engine import EngineParams


@contextmanager
def served(*pods: PodInfo) -> Iterator[PodServers]:
    servers = PodServers(EngineParams())
    try:
        said = servers.sync(list(pods))
        if any(line.startswith("cannot serve") for line in said):
            pytest.skip(f"loopback addresses not bindable: {said}")
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
