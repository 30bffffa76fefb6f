"""The holding proxy: a small HTTP reverse proxy in front of a PDDeployment's routers
that holds requests while the cell has nothing to answer with (both pools at zero, the
routers not yet Ready), and tells pdscaler there is demand (issue 29, item 3).

Owns: admission (``Limits``, ``Gate``: a bounded queue and a bounded wait, past either
a ``503`` with ``Retry-After``), the readiness of the upstream (a ``GET`` of the
router's readiness path through its Service, every ``probe_interval`` s), forwarding
(one upstream connection per request, the response streamed back as it comes: SSE
tokens pass one by one), and its gauges on a separate metrics port:

* ``pdscaler_holder_held_requests``: requests waiting for a Ready router now;
* ``pdscaler_holder_held_prompt_tokens`` / ``..._held_output_tokens``: their estimated
  tokens (prompt characters / 4; ``max_tokens``), which size the first replicas
  (``pdscaler.policy.zero``);
* ``pdscaler_holder_in_flight_requests``: forwarded, response not finished;
* ``pdscaler_holder_idle_seconds``: since the last request ended, 0 while any is held or
  in flight (the policy scales to zero only past ``scaleToZero.idleSeconds``);
* ``pdscaler_holder_upstream_ready`` (0/1), ``pdscaler_holder_requests_total{outcome}``
  (forwarded, queue_full, wait_timeout, not_held, upstream_error) and
  ``pdscaler_holder_hold_seconds`` (how long forwarded requests were held).

Only POST requests are held (inference); a GET while no router is Ready (a health check,
a stray scrape, ``/v1/models``) is answered 503 at once and wakes nothing. Must not: read
the Kubernetes API or Prometheus (the routers and pdscaler do), or buffer
a response (it streams). Run as ``python -m pdscaler.holder --upstream HOST:PORT``.

Worked example (limits 64 held, 120 s): both pools at zero, 3 requests arrive; the
readiness probe fails, so they are held (the gauge reads 3); pdscaler reads held 3 at
zero replicas and scales both pools to 1; the router's readiness answers 200 some 40 s
later and the 3 requests are forwarded (hold_seconds ~40). A 65th held request gets
``503`` with ``Retry-After: 120`` at once; a request still held after 120 s gets ``503``
with ``Retry-After: 30`` (half the wait, at least 1 s) and leaves the queue.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("pdscaler.holder")

#: Headers hop-by-hop (RFC 9110 7.6.1): not forwarded; the holder sets its own.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade"})
#: Methods whose requests are held (inference: completions, chat, embeddings); any other
#: is answered 503 at once while no router is Ready, and is no demand.
HELD_METHODS = frozenset({"POST"})
MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Limits:
    """The bounds of the hold: at most ``max_held`` requests wait, each at most
    ``max_wait`` s; ``retry_after`` (s) is what a refused client is told (None: the
    wait bound for a full queue, half of it for a timed-out request, at least 1 s)."""

    max_held: int = 64
    max_wait: float = 120.0
    retry_after: float | None = None

    def retry_full(self) -> int:
        """Retry-After for a full queue: ``retry_after`` or the wait bound (120)."""
        return max(1, math.ceil(self.retry_after or self.max_wait))

    def retry_timeout(self) -> int:
        """Retry-After for a request held past ``max_wait``: half the wait (60)."""
        return max(1, math.ceil(self.retry_after or self.max_wait / 2))


@dataclass
class Tokens:
    """Estimated tokens of one request: prompt characters / 4, and ``max_tokens``."""

    prompt: float = 0.0
    output: float = 0.0


def estimate_tokens(body: bytes) -> Tokens:
    """Tokens of an OpenAI-style JSON body, estimated: ``{"prompt": "x" * 400,
    "max_tokens": 64}`` -> 100 prompt, 64 output; chat ``messages`` count their
    ``content`` strings; anything unreadable -> 0 and 0 (unknown sizes nothing)."""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return Tokens()
    if not isinstance(doc, dict):
        return Tokens()
    chars = 0
    prompt = doc.get("prompt")
    if isinstance(prompt, str):
        chars += len(prompt)
    elif isinstance(prompt, list):
        chars += sum(len(p) for p in prompt if isinstance(p, str))
    for message in doc.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            chars += len(content)
    out = doc.get("max_tokens", doc.get("max_completion_tokens"))
    output = float(out) if isinstance(out, int | float) and out > 0 else 0.0
    return Tokens(prompt=chars / CHARS_PER_TOKEN, output=output)


@dataclass
class Gate:
    """Admission and accounting, without I/O; times are passed in.

    ``admit`` takes a request into the queue (False: the queue is full), ``leave`` takes
    it out (forwarded or timed out), ``start``/``finish`` count a forwarded request in
    flight. ``idle_seconds(now)``: 0 while anything is held or in flight, else the time
    since the last request ended (or since the gate was made)."""

    limits: Limits
    now: float
    held: int = 0
    in_flight: int = 0
    held_tokens: Tokens = field(default_factory=Tokens)
    last_activity: float = 0.0

    def __post_init__(self) -> None:
        self.last_activity = self.now

    def admit(self, tokens: Tokens) -> bool:
        if self.held >= self.limits.max_held:
            return False
        self.held += 1
        self.held_tokens.prompt += tokens.prompt
        self.held_tokens.output += tokens.output
        return True

    def leave(self, tokens: Tokens, now: float) -> None:
        self.held -= 1
        self.held_tokens.prompt = max(self.held_tokens.prompt - tokens.prompt, 0.0)
        self.held_tokens.output = max(self.held_tokens.output - tokens.output, 0.0)
        self.last_activity = now

    def start(self) -> None:
        self.in_flight += 1

    def finish(self, now: float) -> None:
        self.in_flight -= 1
        self.last_activity = now

    def idle_seconds(self, now: float) -> float:
        if self.held or self.in_flight:
            return 0.0
        return max(now - self.last_activity, 0.0)


class HolderMetrics:
    """The holder's series on their own registry (``Gate`` read at scrape time)."""

    def __init__(self, gate: Gate, ready: Callable[[], bool], clock: Callable[[], float]):
        self.registry = CollectorRegistry()
        r = self.registry
        Gauge("pdscaler_holder_held_requests", "Requests held", registry=r).set_function(
            lambda: gate.held
        )
        Gauge(
            "pdscaler_holder_held_prompt_tokens", "Estimated prompt tokens held", registry=r
        ).set_function(lambda: gate.held_tokens.prompt)
        Gauge(
            "pdscaler_holder_held_output_tokens", "Requested output tokens held", registry=r
        ).set_function(lambda: gate.held_tokens.output)
        Gauge(
            "pdscaler_holder_in_flight_requests", "Forwarded, not finished", registry=r
        ).set_function(lambda: gate.in_flight)
        Gauge(
            "pdscaler_holder_idle_seconds", "Seconds since the last request ended", registry=r
        ).set_function(lambda: gate.idle_seconds(clock()))
        Gauge(
            "pdscaler_holder_upstream_ready", "1 when the router answers ready", registry=r
        ).set_function(lambda: 1.0 if ready() else 0.0)
        self.requests = Counter(
            "pdscaler_holder_requests", "Requests by outcome", ["outcome"], registry=r
        )
        self.hold_seconds = Histogram(
            "pdscaler_holder_hold_seconds",
            "Seconds a forwarded request was held",
            buckets=(0.01, 0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 90, 120, 180, 300),
            registry=r,
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class Request:
    """One parsed request: the request line's parts, headers in order, the body."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]
    body: bytes


class BadRequestError(Exception):
    """A request the holder cannot read (answered 400)."""


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on a connection (None at EOF). Bodies by Content-Length only: a
    chunked request body is refused (OpenAI clients send a length)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError as err:
        raise BadRequestError("header too large") from err
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise BadRequestError("bad request line")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequestError("bad header line")
        headers.append((name.strip(), value.strip()))
    lookup = {k.lower(): v for k, v in headers}
    if "chunked" in lookup.get("transfer-encoding", "").lower():
        raise BadRequestError("chunked request bodies are not supported")
    length = int(lookup.get("content-length", "0") or 0)
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequestError("body too large")
    body = await reader.readexactly(length) if length else b""
    return Request(parts[0], parts[1], parts[2], headers, body)


def response(status: int, reason: str, body: bytes, extra: list[tuple[str, str]]) -> bytes:
    """A whole small response that closes the connection."""
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in extra]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def unavailable(retry_after: int, why: str) -> bytes:
    """503 with Retry-After and a JSON error saying why (OpenAI's error shape)."""
    doc = {"error": {"message": why, "type": "service_unavailable", "code": 503}}
    body = json.dumps(doc).encode()
    extra = [("Retry-After", str(retry_after)), ("Content-Type", "application/json")]
    return response(503, "Service Unavailable", body, extra)


class Holder:
    """The proxy: ``serve()`` listens on ``port`` (requests) and ``metrics_port``."""

    def __init__(
        self,
        upstream: tuple[str, int],
        limits: Limits,
        ready_path: str = "/readiness",
        probe_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        proxy: tuple[str, int] | None = None,
    ) -> None:
        self.upstream = upstream
        self.proxy = proxy
        self.limits = limits
        self.ready_path = ready_path
        self.probe_interval = probe_interval
        self.clock = clock
        self.gate = Gate(limits, clock())
        self._ready = asyncio.Event()
        self.metrics = HolderMetrics(self.gate, self._ready.is_set, clock)

    # --------------------------------------------------------------- upstream

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the upstream, or to the HTTP proxy in front of it."""
        return await asyncio.open_connection(*(self.proxy or self.upstream))

    def target(self, path: str) -> str:
        """The request target: ``path``, or the absolute URL through a proxy
        (``http://chat-routers.serving.svc:8000/readiness``)."""
        if self.proxy is None:
            return path
        return f"http://{self.upstream[0]}:{self.upstream[1]}{path}"

    # --------------------------------------------------------------- readiness

    async def probe(self) -> bool:
        """One readiness probe: ``GET ready_path`` on the upstream answers 2xx."""
        try:
            reader, writer = await asyncio.wait_for(self.connect(), timeout=2.0)
        except (OSError, TimeoutError):
            return False
        try:
            host = f"{self.upstream[0]}:{self.upstream[1]}"
            path = self.target(self.ready_path)
            req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            writer.write(req.encode())
            await writer.drain()
            line = await asyncio.wait_for(reader.readline(), timeout=2.0)
            parts = line.split(b" ")
            return len(parts) >= 2 and parts[1][:1] == b"2"
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return False
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def probe_loop(self) -> None:
        while True:
            ok = await self.probe()
            if ok and not self._ready.is_set():
                log.info("upstream ready: forwarding %d held requests", self.gate.held)
                self._ready.set()
            elif not ok and self._ready.is_set():
                log.info("upstream not ready: holding new requests")
                self._ready.clear()
            await asyncio.sleep(self.probe_interval)

    # -------------------------------------------------------------- requests

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                req = await read_request(reader)
            except BadRequestError as err:
                writer.write(response(400, "Bad Request", str(err).encode(), []))
                return
            if req is None:
                return
            await self.serve_one(req, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            with contextlib.suppress(OSError):
                await writer.drain()
            writer.close()

    async def serve_one(self, req: Request, writer: asyncio.StreamWriter) -> None:
        """Hold ``req`` until the upstream is ready (within the limits), then forward."""
        arrived = self.clock()
        if not self._ready.is_set() and req.method not in HELD_METHODS:
            # a GET (a health check, a scrape, /v1/models) is no demand: never held
            self.metrics.requests.labels("not_held").inc()
            why = f"no replica is ready; only {', '.join(sorted(HELD_METHODS))} requests are held"
            writer.write(unavailable(self.limits.retry_timeout(), why))
            return
        if not self._ready.is_set():
            tokens = estimate_tokens(req.body)
            log.info("holding %s %s (%d held)", req.method, req.target, self.gate.held)
            if not self.gate.admit(tokens):
                self.metrics.requests.labels("queue_full").inc()
                why = f"no replica is ready and {self.limits.max_held} requests are held"
                writer.write(unavailable(self.limits.retry_full(), why))
                return
            try:
                await asyncio.wait_for(self._ready.wait(), timeout=self.limits.max_wait)
            except TimeoutError:
                self.metrics.requests.labels("wait_timeout").inc()
                why = f"no replica became ready within {self.limits.max_wait:g}s"
                writer.write(unavailable(self.limits.retry_timeout(), why))
                return
            finally:
                self.gate.leave(tokens, self.clock())
        self.metrics.hold_seconds.observe(self.clock() - arrived)
        self.gate.start()
        try:
            await self.forward(req, writer)
        finally:
            self.gate.finish(self.clock())

    async def forward(self, req: Request, writer: asyncio.StreamWriter) -> None:
        """Send ``req`` upstream on a fresh connection and stream the answer back."""
        try:
            up_reader, up_writer = await self.connect()
        except OSError as err:
            self.metrics.requests.labels("upstream_error").inc()
            writer.write(response(502, "Bad Gateway", str(err).encode(), []))
            return
        try:
            headers = [(k, v) for k, v in req.headers if k.lower() not in HOP_BY_HOP]
            head = [f"{req.method} {self.target(req.target)} HTTP/1.1"]
            head += [f"{k}: {v}" for k, v in headers]
            head.append("Connection: close")
            up_writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + req.body)
            await up_writer.drain()
            await self.relay(up_reader, writer)
            self.metrics.requests.labels("forwarded").inc()
        finally:
            up_writer.close()
            with contextlib.suppress(OSError):
                await up_writer.wait_closed()

    async def relay(self, up: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The upstream's status line and headers (``Connection: close`` in place of its
        hop-by-hop ones), then its bytes as they come until it closes."""
        try:
            head = await up.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.write(response(502, "Bad Gateway", b"upstream sent no response", []))
            return
        lines = head.decode("latin-1").split("\r\n")
        kept = [lines[0]]
        kept += [
            ln for ln in lines[1:] if ln and ln.split(":")[0].strip().lower() not in HOP_BY_HOP
        ]
        kept.append("Connection: close")
        writer.write(("\r\n".join(kept) + "\r\n\r\n").encode("latin-1"))
        while chunk := await up.read(65536):
            writer.write(chunk)
            await writer.drain()

    # --------------------------------------------------------------- metrics

    async def handle_metrics(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            req = await read_request(reader)
            if req is None:
                return
            if req.target.startswith("/metrics"):
                body = self.metrics.exposition()
                extra = [("Content-Type", "text/plain; version=0.0.4")]
                writer.write(response(200, "OK", body, extra))
            elif req.target.startswith("/healthz"):
                writer.write(response(200, "OK", b"ok", []))
            else:
                writer.write(response(404, "Not Found", b"", []))
            await writer.drain()
        except (OSError, BadRequestError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def start(
        self, host: str, port: int, metrics_port: int
    ) -> tuple[asyncio.Server, asyncio.Server, asyncio.Task[None]]:
        """Listen on both ports and start the probe loop (``port`` 0: any free port)."""
        front = await asyncio.start_server(self.handle, host, port, limit=MAX_HEADER_BYTES)
        metrics = await asyncio.start_server(self.handle_metrics, host, metrics_port)
        probing = asyncio.create_task(self.probe_loop())
        return front, metrics, probing


def parse_upstream(text: str) -> tuple[str, int]:
    """``"chat.serving.svc:8000"`` -> ("chat.serving.svc", 8000)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def proxy_from_env(host: str, env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """The HTTP proxy for ``host`` from ``http_proxy`` (None: none, or ``host`` matches
    ``no_proxy``), as urllib reads them: ``http_proxy=http://127.0.0.1:4123`` ->
    ("127.0.0.1", 4123). The lab's cluster DNS stand-in is such a proxy."""
    env = os.environ if env is None else env
    skip = (env.get("no_proxy") or env.get("NO_PROXY") or "").split(",")
    for entry in (e.strip().lstrip(".") for e in skip):
        if entry and (host == entry or host.endswith("." + entry)):
            return None
    url = env.get("http_proxy") or env.get("HTTP_PROXY")
    if not url:
        return None
    parsed = urllib.parse.urlsplit(url)
    return (parsed.hostname or "127.0.0.1", parsed.port or 80)


def main(argv: list[str] | None = None) -> None:
    """``python -m pdscaler.holder --upstream chat-router.serving.svc:8000``."""
    p = argparse.ArgumentParser(prog="pdscaler-holder", description=__doc__.split("\n")[0])
    p.add_argument("--upstream", type=parse_upstream, required=True)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--metrics-port", type=int, default=9000)
    p.add_argument("--max-held", type=int, default=Limits.max_held)
    p.add_argument("--max-wait", type=float, default=Limits.max_wait)
    p.add_argument("--retry-after", type=float, default=None)
    p.add_argument("--ready-path", default="/readiness")
    p.add_argument("--probe-interval", type=float, default=0.5)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def run() -> None:
        limits = Limits(args.max_held, args.max_wait, args.retry_after)
        proxy = proxy_from_env(args.upstream[0])
        holder = Holder(args.upstream, limits, args.ready_path, args.probe_interval, proxy=proxy)
        front, metrics, probing = await holder.start(args.host, args.port, args.metrics_port)
        async with front, metrics:
            await asyncio.gather(front.serve_forever(), metrics.serve_forever(), probing)

    asyncio.run(run())


if __name__ == "__main__":
    main()
