"""The engine simulator's HTTP servers for unit tests, without the lab.

Owns: ``served(*pods)``: a ``pdlab.engine_serve.PodServers`` serving the given pods at
their (loopback) addresses, closed on exit; where those addresses cannot be bound, the
test is skipped with what the servers said. Must not: talk to a cluster.

    with served(PREFILL, DECODE) as pods:   # POST http://<PREFILL.ip>:<port>/v1/...
        ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
