"""A recording, fault-injecting proxy between ONE operator replica and the lab's API
server, for the drills of one writer per term (D18) and half-open watches (D19).

Owns: a plain-HTTP listener on a free loopback port (the replica's kubeconfig points at
it, ``kubeconfig``) that forwards each request over TLS to the API server with the lab
admin's client certificate, and records every request as the API server saw it
(``Call``: method, path, whether it is a watch, when it was forwarded and answered, the
status); the faults a drill switches on and off while it runs (``Faults``: delay a kind
of request before forwarding it, drop a kind of request unanswered, freeze every watch
opened before now: its connection stays open and no byte more is forwarded). Must not:
alter a request or an answer it forwards, or forward a request it dropped.

    with ApiProxy(lab, "op-a") as pa:
        run_operator(kubeconfig=pa.kubeconfig(tmp_path))
        pa.faults.drop = lambda c: c.lease and c.method == "PUT"   # renewals fail
        pa.faults.freeze_watches()                                 # half-open watches
        writes = [c for c in pa.calls if c.write and not c.lease]
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import http.server
import select
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from pdlab.cluster.lab import Lab

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"}
WRITES = {"POST", "PUT", "PATCH", "DELETE"}


@dataclass
class Call:
    """One request as forwarded: ``at`` when the proxy sent it upstream (monotonic; None:
    dropped, never sent), ``done`` when the answer's head came back (None: no answer)."""

    replica: str
    method: str
    path: str
    received: float
    at: float | None = None
    done: float | None = None
    status: int = 0

    @property
    def watch(self) -> bool:
        query = urlsplit(self.path).query
        return "watch=1" in query or "watch=true" in query

    @property
    def lease(self) -> bool:
        return "/leases" in urlsplit(self.path).path

    @property
    def write(self) -> bool:
        return self.method in WRITES


@dataclass
class Faults:
    """What the proxy does to a request (``Call`` before forwarding): ``delay`` (seconds
    to wait first, 0: none), ``drop`` (True: never forwarded, the connection closed
    after ``drop_after`` s, as a lost packet's request times out); ``freeze_watches``:
    every watch stream opened before the call forwards no more bytes (nor its end) and
    its connection stays open, until the client gives up on it."""

    delay: Callable[[Call], float] = field(default=lambda c: 0.0)
    drop: Callable[[Call], bool] = field(default=lambda c: False)
    drop_after: float = 2.0
    frozen_before: float = 0.0

    def freeze_watches(self) -> float:
        self.frozen_before = time.monotonic()
        return self.frozen_before

    def clear(self) -> None:
        self.delay, self.drop = (lambda c: 0.0), (lambda c: False)


class ApiProxy:
    """The proxy of one replica (``replica`` names it in each ``Call``); a context
    manager (listening while open)."""

    def __init__(self, lab: Lab, replica: str) -> None:
        self.replica = replica
        self.faults = Faults()
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        config = yaml.safe_load(Path(lab.kubeconfig).read_text())
        server = urlsplit(config["clusters"][0]["cluster"]["server"])
        self.upstream = (server.hostname or "127.0.0.1", int(server.port or 443))
        user = config["users"][0]["user"]
        self._dir = tempfile.TemporaryDirectory(prefix="apiproxy-")
        cert, key = Path(self._dir.name) / "c.pem", Path(self._dir.name) / "k.pem"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        ca = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
        self.tls = ssl.create_default_context(cadata=ca.decode())
        self.tls.load_cert_chain(str(cert), str(key))
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                proxy.relay(self)

            def do_POST(self) -> None:
                proxy.relay(self)

            def do_PUT(self) -> None:
                proxy.relay(self)

            def do_PATCH(self) -> None:
                proxy.relay(self)

            def do_DELETE(self) -> None:
                proxy.relay(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def kubeconfig(self, directory: Path) -> Path:
        """A kubeconfig reaching the API server through this proxy (a token the proxy
        never forwards: the admin's certificate authenticates upstream)."""
        path = directory / f"kubeconfig-{self.replica}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "p", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}
                    ],
                    "users": [{"name": "p", "user": {"token": "drill"}}],
                    "contexts": [{"name": "p", "context": {"cluster": "p", "user": "p"}}],
                    "current-context": "p",
                }
            )
        )
        return path

    def __enter__(self) -> ApiProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._dir.cleanup()

    # ------------------------------------------------------------------ relaying

    def relay(self, h: http.server.BaseHTTPRequestHandler) -> None:
        call = Call(self.replica, h.command, h.path, time.monotonic())
        with self._lock:
            self.calls.append(call)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        if self.faults.drop(call):
            time.sleep(self.faults.drop_after)
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        wait = self.faults.delay(call)
        if wait > 0:
            time.sleep(wait)
        headers = {
            k: v for k, v in h.headers.items() if k.lower() not in HOP | {"authorization", "host"}
        }
        conn = http.client.HTTPSConnection(*self.upstream, context=self.tls, timeout=None)
        try:
            call.at = time.monotonic()
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            call.done, call.status = time.monotonic(), resp.status
            if call.watch:
                self._stream(h, call, resp)
            else:
                data = resp.read()
                h.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP | {"content-length"}:
                        h.send_header(k, v)
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
        except OSError:
            h.close_connection = True
        finally:
            conn.close()

    def _stream(
        self, h: http.server.BaseHTTPRequestHandler, call: Call, resp: http.client.HTTPResponse
    ) -> None:
        """A watch's answer, chunk by chunk, until it ends or is frozen."""
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP | {"content-length"}:
                h.send_header(k, v)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.close_connection = True
        while True:
            data = resp.read1(65536)  # blocks until the server sends: checked after
            if self.faults.frozen_before > call.received:
                self._hold(h)
                return
            if not data:
                h.wfile.write(b"0\r\n\r\n")
                return
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

    @staticmethod
    def _hold(h: http.server.BaseHTTPRequestHandler) -> None:
        """Half-open: keep the client's connection, send nothing, until it hangs up."""
        sock = h.connection
        with contextlib.suppress(OSError):
            while True:
                readable, _, _ = select.select([sock], [], [], 1.0)
                if readable and not sock.recv(4096):
                    return

    def writes(self) -> list[Call]:
        """Writes other than the Lease's that reached the API server (forwarded)."""
        with self._lock:
            return [c for c in self.calls if c.write and not c.lease and c.at is not None]
