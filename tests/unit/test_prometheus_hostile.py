"""prometheus.py against hostile HTTP servers on loopback: a server dripping one byte at a
time, one streaming a body far larger than any instant-query answer, one redirecting to a
server that holds a secret, one putting a secret in its body or status line. Whatever the
server does, a query ends within its total deadline, reads at most the body cap, never
follows a redirect and never copies the body (or the server's reason phrase) into the
error the condition and the Event show."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pdscaler.prometheus import (
    MetricsUnavailableError,
    PrometheusClient,
    read_snapshot,
)
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsErrorReason
from support.httpkit import QuietHandler, read_request, serving

SECRET = "s3cr3t-token-4d1f"
SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
    }
)
CHUNK = b"x" * 65536


def query_in_thread(client: PrometheusClient, limit: float) -> tuple[float, BaseException | None]:
    """Run one query in a thread; (seconds it took, what it raised). A query still running
    after ``limit`` seconds fails the test (its thread is left behind, daemon)."""
    box: list[BaseException | None] = []
    start = time.monotonic()

    def run() -> None:
        try:
            client.query("up", at=0.0)
            box.append(None)
        except BaseException as err:
            box.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the query was still running after {limit}s"
    return time.monotonic() - start, box[0]


def unavailable(client: PrometheusClient, limit: float = 10.0) -> MetricsUnavailableError:
    _, err = query_in_thread(client, limit)
    assert isinstance(err, MetricsUnavailableError), repr(err)
    return err


@contextlib.contextmanager
def raw_server(serve: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 calling ``serve(conn)`` per connection (after reading
    the request); yields its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            conn.settimeout(5)
            read_request(conn)
            serve(conn)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def drip(prefix: bytes, period: float) -> Callable[[socket.socket], None]:
    """Send ``prefix`` at once, then one byte every ``period`` seconds until the client
    hangs up (each byte arrives well within any per-read timeout)."""

    def serve(conn: socket.socket) -> None:
        conn.sendall(prefix)
        for _ in range(1000):
            time.sleep(period)
            conn.sendall(b"x")

    return serve


@pytest.mark.parametrize(
    "prefix",
    [
        b"HTTP/1.1 200 OK\r\n",  # dripping headers
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n",
    ],
    ids=["headers", "body"],
)
def test_a_byte_drip_ends_at_the_total_deadline(prefix: bytes) -> None:
    """One byte every 0.1 s against a 0.5 s timeout: the old per-read timeout never fired
    (the query ran forever); the total deadline ends it after about 0.5 s."""
    with raw_server(drip(prefix, 0.1)) as url:
        elapsed, err = query_in_thread(PrometheusClient(url, timeout=0.5), limit=5.0)
    assert isinstance(err, MetricsUnavailableError), repr(err)
    assert err.reason == MetricsErrorReason.UNREACHABLE
    assert err.message == f"cannot connect to {url}: no answer within 0.5s"
    assert elapsed < 2.0


def stream(total: int, sent: list[int], content_length: bool) -> Callable[[socket.socket], None]:
    """A 200 whose body is ``total`` bytes, streamed from one 64 KiB buffer (never
    allocated whole); ``sent`` gets the bytes the client took before hanging up."""

    def serve(conn: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        head += f"Content-Length: {total}\r\n".encode() if content_length else b""
        conn.sendall(head + b"Connection: close\r\n\r\n")
        done = 0
        try:
            while done < total:
                conn.sendall(CHUNK)
                done += len(CHUNK)
        finally:
            sent.append(done)

    return serve


@pytest.mark.parametrize("content_length", [False, True], ids=["streamed", "announced"])
def test_a_huge_body_is_cut_at_the_cap(content_length: bool) -> None:
    """A 256 MiB answer against a 1 MiB cap: refused after at most the cap (plus what the
    kernel buffers), not read whole into memory."""
    sent: list[int] = []
    total = 256 * 2**20
    with raw_server(stream(total, sent, content_length)) as url:
        client = PrometheusClient(url, timeout=10.0, max_body_bytes=2**20)
        err = unavailable(client, limit=20.0)
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.05)
    assert err.reason == MetricsErrorReason.BAD_ANSWER
    assert err.message == f"{url}: answer larger than 1048576 bytes"
    assert sent
    assert sent[0] < 16 * 2**20, f"the client read {sent} bytes"


def test_a_redirect_is_not_followed_and_the_target_never_contacted() -> None:
    """The tenant's URL answers 302 to a server holding a secret: the operator does not
    go there, and the error names only the status."""
    hits: list[str] = []

    class Holder(QuietHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.reply(200, f'{{"status":"error","error":"{SECRET}"}}'.encode(), "text/plain")

        do_POST = do_GET  # noqa: N815

    with serving(Holder) as holder:
        target = f"http://127.0.0.1:{holder.server_address[1]}/api/v1/query"

        class Redirect(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

        with serving(Redirect) as redirect:
            url = f"http://127.0.0.1:{redirect.server_address[1]}"
            err = unavailable(PrometheusClient(url, timeout=2.0))
    assert hits == []
    assert err.reason == MetricsErrorReason.HTTP_ERROR
    assert err.message == f"{url}: HTTP 302: redirects are not followed"
    assert SECRET not in str(err)


@pytest.mark.parametrize(
    ("status", "body", "reason", "message"),
    [
        (
            500,
            f"internal: {SECRET}",
            MetricsErrorReason.HTTP_ERROR,
            "HTTP 500: Internal Server Error",
        ),
        (404, f"<html>{SECRET}</html>", MetricsErrorReason.HTTP_ERROR, "HTTP 404: Not Found"),
        (200, f"<html>{SECRET}</html>", MetricsErrorReason.BAD_ANSWER, "answered 200 with no JSON"),
        (200, f'{{"{SECRET}": 1}}', MetricsErrorReason.BAD_ANSWER, "not a Prometheus API answer"),
    ],
)
def test_a_body_is_never_copied_into_the_error(
    status: int, body: str, reason: str, message: str
) -> None:
    def serve(conn: socket.socket) -> None:
        data = body.encode()
        conn.sendall(
            f"HTTP/1.1 {status} {SECRET}\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data
        )

    with raw_server(serve) as url:
        err = unavailable(PrometheusClient(url, timeout=2.0))
    assert err.reason == reason
    assert err.message == f"{url}: {message}"
    assert SECRET not in str(err)


def test_a_deeply_nested_answer_is_a_bad_answer() -> None:
    """``[[[[...`` 200 000 deep: json's recursion limit is a bad answer, not a crash."""
    body = b"[" * 200_000

    def serve(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    with raw_server(serve) as url:
        err = unavailable(PrometheusClient(url, timeout=2.0))
    assert err.reason == MetricsErrorReason.BAD_ANSWER
    assert err.message == f"{url}: answered 200 with no JSON"


def test_credentials_in_the_url_are_not_shown() -> None:
    """``http://user:pw@host``: the error shows the URL without its user information."""
    with raw_server(lambda conn: None) as url:
        pass  # closed: the port refuses connections
    secret_url = url.replace("http://", f"http://admin:{SECRET}@")
    err = unavailable(PrometheusClient(secret_url, timeout=1.0))
    assert err.reason == MetricsErrorReason.UNREACHABLE
    assert err.message == f"cannot connect to {url}: connection refused"


def test_a_hostile_server_gets_one_connection_per_snapshot() -> None:
    """The snapshot's first query is a probe: a server that fails it is not asked the
    other 13 queries at once (14 bodies up to the cap, 14 dripping connections)."""
    sent: list[int] = []
    with raw_server(stream(256 * 2**20, sent, content_length=False)) as url:
        client = PrometheusClient(url, timeout=10.0, max_body_bytes=2**20)
        with pytest.raises(MetricsUnavailableError) as info:
            read_snapshot(client, SPEC, "ns", "chat", now=0.0)
        deadline = time.monotonic() + 5
        while not sent and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
    assert info.value.reason == MetricsErrorReason.BAD_ANSWER
    assert len(sent) == 1


def test_https_with_an_untrusted_certificate_is_unreachable(tmp_path: Path) -> None:
    """The https path verifies the server (system trust store): a self-signed server is
    ``TLS failed``, and nothing it sends reaches the message."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError):
            tls = ctx.wrap_socket(conn, server_side=True)
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n" + SECRET[:6].encode())

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def accept() -> None:
        with contextlib.suppress(OSError):
            conn, _ = listener.accept()
            serve(conn)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        err = unavailable(PrometheusClient(f"https://127.0.0.1:{port}", timeout=3.0))
    finally:
        listener.close()
        thread.join(5)
    assert err.reason == MetricsErrorReason.UNREACHABLE
    assert err.message.startswith(f"cannot connect to https://127.0.0.1:{port}: TLS failed")
    assert SECRET[:6] not in err.message
