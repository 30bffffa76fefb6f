"""prometheus.py keeps connections alive: one client per URL reuses its connections from
query to query and snapshot to snapshot (a fleet's ticks no longer open a connection per
query), a connection the server closed meanwhile is replaced once, and an answer not
read to its end (a redirect, a body over the cap) never leaves its connection for the
next query."""

from __future__ import annotations

import json
import threading
import time

import pytest

from pdscaler.prometheus import (
    MetricsUnavailableError,
    PrometheusClient,
    read_snapshot,
)
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsErrorReason
from support.httpkit import QuietHandler, serving

SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
    }
)
EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})


class Server:
    """An HTTP/1.1 keep-alive fake Prometheus counting the connections it accepted."""

    def __init__(
        self, body: bytes = EMPTY.encode(), status: int = 200, hang_up: bool = False
    ) -> None:
        self.connections = 0
        self.queries = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with outer.lock:
                    outer.connections += 1

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with outer.lock:
                    outer.queries += 1
                self.reply(status, body, "application/json")
                if hang_up:  # closes after answering, without saying so
                    self.close_connection = True

        self.handler = Handler


def test_queries_reuse_one_connection() -> None:
    """20 queries one after the other: 1 connection (it was 20)."""
    srv = Server()
    with serving(srv.handler) as server:
        client = PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=3.0)
        for _ in range(20):
            client.query("up", at=0.0)
    assert srv.queries == 20
    assert srv.connections == 1
    assert client.stats.connections == 1
    assert client.stats.queries == 20


def test_snapshots_reuse_their_connections() -> None:
    """A snapshot runs its queries concurrently (the probe, then the rest at once): the
    next snapshots reuse those connections instead of opening as many again."""
    srv = Server()
    with serving(srv.handler, queue_size=64) as server:
        client = PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=3.0)
        read_snapshot(client, SPEC, "ns", "chat", now=0.0)
        first = srv.connections
        for _ in range(5):
            read_snapshot(client, SPEC, "ns", "chat", now=0.0)
    per_snapshot = srv.queries // 6
    assert per_snapshot > 5
    assert first <= per_snapshot
    assert srv.connections < 2 * per_snapshot, (srv.connections, per_snapshot)


def test_a_connection_closed_by_the_server_is_replaced() -> None:
    """The server hangs up each kept connection after its answer (as an idle timeout
    would): every next query finds its kept connection dead and sends once more on a
    new one; none fails."""
    srv = Server(hang_up=True)
    with serving(srv.handler) as server:
        client = PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=3.0)
        for _ in range(5):
            time.sleep(0.05)  # the server's close reaches the client
            client.query("up", at=0.0)
    assert srv.queries == 5


@pytest.mark.parametrize(
    ("status", "body"), [(302, b""), (200, b"x" * 4096)], ids=["redirect", "over-cap"]
)
def test_an_answer_not_read_to_its_end_closes_its_connection(status: int, body: bytes) -> None:
    srv = Server(body=body, status=status)
    with serving(srv.handler) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        client = PrometheusClient(url, timeout=3.0, max_body_bytes=1024)
        for _ in range(3):
            with pytest.raises(MetricsUnavailableError) as info:
                client.query("up", at=0.0)
    assert client._idle == []
    assert srv.connections == 3
    if status == 200:
        assert info.value.reason == MetricsErrorReason.BAD_ANSWER


def test_close_drops_the_kept_connections() -> None:
    srv = Server()
    with serving(srv.handler) as server:
        client = PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout=3.0)
        client.query("up", at=0.0)
        assert len(client._idle) == 1
        client.close()
        assert client._idle == []
        client.query("up", at=0.0)  # still usable
    assert srv.connections == 2
