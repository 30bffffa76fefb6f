"""The holding proxy's limits without a cluster (``pdscaler.holder``): a bounded queue and
a bounded wait, each answered 503 with Retry-After; held requests forwarded once the
upstream's readiness answers 200, streamed as they come; the gauges pdscaler reads."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pdscaler.holder import Gate, Holder, Limits, Tokens, estimate_tokens, proxy_from_env


def test_gate_bounds_the_queue_and_counts_idle_time() -> None:
    gate = Gate(Limits(max_held=2, max_wait=10), now=100.0)
    assert gate.idle_seconds(130.0) == 30.0
    assert gate.admit(Tokens(100, 10))
    assert gate.admit(Tokens(50, 5))
    assert not gate.admit(Tokens(1, 1))  # the third is refused
    assert gate.held == 2
    assert gate.held_tokens == Tokens(150, 15)
    assert gate.idle_seconds(140.0) == 0.0  # held: never idle
    gate.leave(Tokens(100, 10), 141.0)
    gate.leave(Tokens(50, 5), 141.0)
    gate.start()
    assert gate.idle_seconds(150.0) == 0.0  # in flight: never idle
    gate.finish(152.0)
    assert gate.held == 0
    assert gate.held_tokens == Tokens(0, 0)
    assert gate.idle_seconds(160.0) == 8.0


def test_retry_after_from_the_limits() -> None:
    assert Limits(max_wait=120).retry_full() == 120
    assert Limits(max_wait=120).retry_timeout() == 60
    assert Limits(max_wait=0.3).retry_timeout() == 1
    assert Limits(max_wait=120, retry_after=15).retry_timeout() == 15


def test_estimate_tokens() -> None:
    assert estimate_tokens(json.dumps({"prompt": "x" * 400, "max_tokens": 64}).encode()) == Tokens(
        100, 64
    )
    chat = {"messages": [{"role": "user", "content": "y" * 80}], "max_completion_tokens": 8}
    assert estimate_tokens(json.dumps(chat).encode()) == Tokens(20, 8)
    assert estimate_tokens(b"not json") == Tokens(0, 0)


# ------------------------------------------------------------------ with sockets


@dataclass
class Upstream:
    """A stand-in router: /readiness answers 200 when ``ready``; POSTs stream 3 SSE
    chunks, the last after ``release`` is set."""

    ready: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    bodies: list[bytes] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = 0
        for line in head.split("\r\n")[1:]:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":")[1])
        body = await reader.readexactly(length) if length else b""
        first = head.split("\r\n")[0]
        self.lines.append(first)
        if first.startswith("GET ") and first.split(" ")[1].endswith("/readiness"):
            status = "200 OK" if self.ready else "503 Service Unavailable"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n".encode())
        else:
            self.bodies.append(body)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
            writer.write(b"data: one\n\n")
            await writer.drain()
            await self.release.wait()
            writer.write(b"data: two\n\ndata: [DONE]\n\n")
        await writer.drain()
        writer.close()


@asynccontextmanager
async def running(
    limits: Limits, upstream: Upstream, via_proxy: bool = False
) -> AsyncIterator[tuple[Holder, int, int]]:
    up = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    port = up.sockets[0].getsockname()[1]
    if via_proxy:  # the stand-in plays the HTTP proxy in front of a Service name
        proxy = ("127.0.0.1", port)
        holder = Holder(
            ("chat-routers.serving.svc", 8000), limits, probe_interval=0.05, proxy=proxy
        )
    else:
        holder = Holder(("127.0.0.1", port), limits, probe_interval=0.05)
    front, metrics, probing = await holder.start("127.0.0.1", 0, 0)
    try:
        yield holder, front.sockets[0].getsockname()[1], metrics.sockets[0].getsockname()[1]
    finally:
        probing.cancel()
        for server in (front, metrics, up):
            server.close()


async def post(port: int, body: bytes = b'{"prompt": "hello", "max_tokens": 4}') -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def scrape(port: int) -> dict[str, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    text = (await reader.read()).decode().split("\r\n\r\n", 1)[1]
    writer.close()
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("pdscaler_holder") and " " in line
    }


def test_held_until_ready_then_forwarded_and_streamed() -> None:
    async def scenario() -> None:
        upstream = Upstream(ready=False)
        async with running(Limits(max_held=4, max_wait=10), upstream) as (_holder, port, mport):
            body = json.dumps({"prompt": "x" * 40, "max_tokens": 7}).encode()
            calls = [asyncio.create_task(post(port, body)) for _ in range(2)]
            await asyncio.sleep(0.3)
            seen = await scrape(mport)
            assert seen["pdscaler_holder_held_requests"] == 2.0
            assert seen["pdscaler_holder_held_prompt_tokens"] == 20.0
            assert seen["pdscaler_holder_held_output_tokens"] == 14.0
            assert seen["pdscaler_holder_upstream_ready"] == 0.0
            assert upstream.bodies == []  # nothing reached the router
            # both are held from here on: 0.3 s more each, however late they arrived
            await asyncio.sleep(0.3)
            upstream.ready = True
            await asyncio.sleep(0.3)
            seen = await scrape(mport)
            assert seen["pdscaler_holder_held_requests"] == 0.0
            assert seen["pdscaler_holder_in_flight_requests"] == 2.0  # streaming, not done
            assert seen["pdscaler_holder_idle_seconds"] == 0.0
            assert upstream.bodies == [body, body]
            upstream.release.set()
            answers = await asyncio.gather(*calls)
            for answer in answers:
                assert answer.startswith(b"HTTP/1.1 200 OK")
                assert b"Connection: close" in answer
                assert answer.endswith(b"data: one\n\ndata: two\n\ndata: [DONE]\n\n")
            seen = await scrape(mport)
            assert seen["pdscaler_holder_in_flight_requests"] == 0.0
            assert seen['pdscaler_holder_requests_total{outcome="forwarded"}'] == 2.0
            assert seen["pdscaler_holder_hold_seconds_count"] == 2.0
            assert seen["pdscaler_holder_hold_seconds_sum"] >= 0.5  # held >= 0.3 s each

    asyncio.run(scenario())


def test_first_chunk_passes_before_the_upstream_finishes() -> None:
    async def scenario() -> None:
        upstream = Upstream(ready=True)
        async with running(Limits(), upstream) as (_, port, _m):
            await asyncio.sleep(0.2)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
            got = b""
            while b"data: one" not in got:
                got += await asyncio.wait_for(reader.read(100), timeout=2)
            assert b"[DONE]" not in got  # the upstream still holds the rest
            upstream.release.set()
            got += await reader.read()
            assert got.endswith(b"data: [DONE]\n\n")
            writer.close()

    asyncio.run(scenario())


def test_full_queue_answers_503_with_retry_after_at_once() -> None:
    async def scenario() -> None:
        upstream = Upstream(ready=False)
        limits = Limits(max_held=2, max_wait=30)
        async with running(limits, upstream) as (_, port, mport):
            held = [asyncio.create_task(post(port)) for _ in range(2)]
            await asyncio.sleep(0.2)
            loop = asyncio.get_running_loop()
            began = loop.time()
            third = await post(port)
            assert loop.time() - began < 1.0  # refused at once, not held
            assert third.startswith(b"HTTP/1.1 503 Service Unavailable")
            assert b"Retry-After: 30" in third
            error = json.loads(third.split(b"\r\n\r\n", 1)[1])["error"]
            assert "2 requests are held" in error["message"]
            seen = await scrape(mport)
            assert seen['pdscaler_holder_requests_total{outcome="queue_full"}'] == 1.0
            assert seen["pdscaler_holder_held_requests"] == 2.0
            for task in held:
                task.cancel()

    asyncio.run(scenario())


def test_wait_bound_answers_503_with_retry_after_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        upstream = Upstream(ready=False)
        async with running(Limits(max_held=4, max_wait=0.5), upstream) as (_, port, mport):
            loop = asyncio.get_running_loop()
            began = loop.time()
            answer = await post(port)
            waited = loop.time() - began
            assert 0.5 <= waited < 1.5
            assert answer.startswith(b"HTTP/1.1 503")
            assert b"Retry-After: 1" in answer
            assert b"within 0.5s" in answer
            seen = await scrape(mport)
            assert seen["pdscaler_holder_held_requests"] == 0.0
            assert seen['pdscaler_holder_requests_total{outcome="wait_timeout"}'] == 1.0
            assert upstream.bodies == []

    asyncio.run(scenario())


def test_through_an_http_proxy_the_targets_are_absolute() -> None:
    """As with the lab's cluster DNS stand-in (``http_proxy``): the probe and the
    forwarded request name the Service in an absolute URL."""

    async def scenario() -> None:
        upstream = Upstream(ready=True)
        upstream.release.set()
        async with running(Limits(), upstream, via_proxy=True) as (_, port, _m):
            await asyncio.sleep(0.2)
            answer = await post(port)
            assert answer.startswith(b"HTTP/1.1 200 OK")
        base = "http://chat-routers.serving.svc:8000"
        assert f"GET {base}/readiness HTTP/1.1" in upstream.lines
        assert f"POST {base}/v1/completions HTTP/1.1" in upstream.lines

    asyncio.run(scenario())


def test_proxy_from_env() -> None:
    env = {"http_proxy": "http://127.0.0.1:4123", "no_proxy": "localhost,.internal"}
    assert proxy_from_env("chat-routers.serving.svc", env) == ("127.0.0.1", 4123)
    assert proxy_from_env("a.internal", env) is None
    assert proxy_from_env("localhost", env) is None
    assert proxy_from_env("chat-routers.serving.svc", {}) is None


def test_a_get_at_zero_is_not_held_and_is_no_demand() -> None:
    async def scenario() -> None:
        upstream = Upstream(ready=False)
        async with running(Limits(max_wait=30), upstream) as (_, port, mport):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = await asyncio.wait_for(reader.read(), timeout=2)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 503")
            assert b"Retry-After: 15" in answer
            seen = await scrape(mport)
            assert seen["pdscaler_holder_held_requests"] == 0.0
            assert seen['pdscaler_holder_requests_total{outcome="not_held"}'] == 1.0

    asyncio.run(scenario())
