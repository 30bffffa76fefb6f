"""A half-open watch (issue 30, item 5): the connection stays open and delivers nothing
(a proxy or a network path stopped forwarding). The informer gives up on it once no
byte came for the server's timeoutSeconds plus its read slack (30 + 10 s in the
operator, 1 + 0.5 s here), clears ``synced`` (a tick then waits instead of reading a
stale cache) and watches again from its resourceVersion. Before: 240 + 30 s."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s_client

from pdscaler.kube import WATCH_READ_SLACK_SECONDS, WATCH_TIMEOUT_SECONDS, Informer, Kube


class Frozen(http.server.ThreadingHTTPServer):
    """LIST answers one pod at resourceVersion 10; every WATCH gets its headers and then
    nothing, ever (until the server stops)."""

    def __init__(self) -> None:
        self.watches: list[float] = []
        self.stop = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if "watch=1" in self.path:
                    server.watches.append(time.monotonic())
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.flush()
                    server.stop.wait(30)  # open, silent
                    return
                pod = {"metadata": {"name": "p0", "resourceVersion": "9",
                                    "labels": {"pdscaler.io/name": "chat"}}}  # fmt: skip
                body = json.dumps({"metadata": {"resourceVersion": "10"}, "items": [pod]})
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                return

        super().__init__(("127.0.0.1", 0), Handler)
        self.daemon_threads = True


@pytest.fixture
def frozen() -> Iterator[Frozen]:
    server = Frozen()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.stop.set()
    server.shutdown()
    server.server_close()


def test_the_operator_gives_up_on_a_silent_watch_within_40_s() -> None:
    assert WATCH_TIMEOUT_SECONDS + WATCH_READ_SLACK_SECONDS <= 40.0


def test_a_silent_watch_is_dropped_and_watched_again(frozen: Frozen) -> None:
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{frozen.server_address[1]}"
    kube = Kube(k8s_client.ApiClient(cfg))
    kube.watch_read_slack = 0.5
    inf = Informer(kube, "Pod", "serving", watch_timeout=1, rng=lambda: 0.0)
    inf.start()
    try:
        assert inf.wait_ready(5.0)
        assert [p["metadata"]["name"] for p in inf.select({})] == ["p0"]
        deadline = time.monotonic() + 6.0
        while inf.failures == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert inf.failures >= 1, "the silent watch was never given up on"
        first = frozen.watches[0]
        while len(frozen.watches) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(frozen.watches) >= 2, "not watched again"
        assert frozen.watches[1] - first < 1.0 + 0.5 + 1.0  # timeout + slack + backoff
        assert inf.relists == 1  # watched again from its version, no new list
    finally:
        inf.stop()
