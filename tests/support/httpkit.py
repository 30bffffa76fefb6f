"""In-process HTTP servers for tests (a fake Prometheus, engine exporters).

Owns: ``QuietHandler``, a request handler whose ``reply`` sends one whole response
(status, Content-Type, Content-Length, body) and which logs no request line, and
``start_server``/``serving``: a ``ThreadingHTTPServer`` on 127.0.0.1 at a free port,
served by a daemon thread; and ``read_request``, for raw-socket servers that answer on
their own terms. Must not know any protocol: a subclass's ``do_GET`` or
``do_POST`` decides what to answer.

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, b"up 1\\n", "text/plain; version=0.0.4")

    with serving(Handler) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any


class QuietHandler(http.server.BaseHTTPRequestHandler):
    def reply(self, status: int, body: bytes, content_type: str) -> None:
        """Send ``body`` as the whole response: 200 with 7 bytes -> Content-Length: 7."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


def start_server(
    handler: type[http.server.BaseHTTPRequestHandler],
    queue_size: int = 64,
    poll_seconds: float = 0.5,
) -> http.server.ThreadingHTTPServer:
    """Serve ``handler`` on 127.0.0.1:<free port> from a daemon thread. ``queue_size`` is
    the listen backlog: 64, not socketserver's 5, because a tick sends its ~15 Prometheus
    queries at once and the accept loop shares the test process's GIL with them; with 5,
    an accept loop stalled 0.25 s per connection (a loaded machine) overflows the queue
    and test_prometheus_auth's second tick reads "connection closed"
    (PrometheusUnreachable). ``poll_seconds`` bounds how long ``shutdown()`` waits."""

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = queue_size

    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(poll_seconds,), daemon=True).start()
    return server


def stop_server(server: http.server.ThreadingHTTPServer) -> None:
    """Stop serving and close the listening socket."""
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def serving(
    handler: type[http.server.BaseHTTPRequestHandler],
    queue_size: int = 64,
    poll_seconds: float = 0.5,
) -> Iterator[http.server.ThreadingHTTPServer]:
    """``start_server`` for the block; stopped on exit."""
    server = start_server(handler, queue_size, poll_seconds)
    try:
        yield server
    finally:
        stop_server(server)


def read_request(conn: socket.socket) -> None:
    """Read one whole HTTP request (headers, then Content-Length bytes of body): closing
    a socket with unread input sends a reset, which the client would see instead of the
    answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        body += chunk
