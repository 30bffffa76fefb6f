"""Simulated vLLM engines served over HTTP, one server per Ready pod at its pod IP.

Owns: per pod, its serving models (``pdlab.engine.timing``: prefill batches and
continuous-batching decode with the timing of ``pdscaler.sim.engine.EngineParams``, the
pod's series as vLLM's) run in the pods' event loop, the KV hand-off time charged on a
decode leg's arrival;
the OpenAI-compatible HTTP API on ``<podIP>:<port>`` (vLLM's routes and shapes, and
those of the pod's engine, ``dialect.Dialect``); the legs of the P/D hand-off, read from
each request by its protocol's ``dialect.Handoff``; and the record of every request
(which prefill and decode pod served it, of which cell). Must not: talk to the API
server (the caller gives the pods), or decide anything about scaling.

Routes of every pod (as vLLM serves them):

* ``POST /v1/completions`` and ``POST /v1/chat/completions``, ``stream`` true (SSE, one
  chunk per token as the model produces it, ``[DONE]``; a usage chunk with
  ``stream_options.include_usage``) or false (one answer when the last token is out),
  with ``usage``. Prompt tokens are counted as whitespace-separated words (or the length
  of a token-id list): the lab has no tokenizer.
* ``POST /v1/completions/render`` and ``/v1/chat/completions/render``: vLLM's renderer
  answer, a list of ``{request_id, token_ids, sampling_params, model}`` (vllm-router
  calls it).
* ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (the pod's vLLM series,
  ``pdlab.engine.expo``; no pod labels: Prometheus adds them from discovery).

The P/D protocol (vLLM's NixlConnector): a request with ``kv_transfer_params:
{do_remote_decode: true}`` at a prefill pod is prefilled and answered with one token
and ``kv_transfer_params: {do_remote_prefill: true, do_remote_decode: false,
remote_engine_id: <pod UID>, remote_block_ids: [...], remote_host: <pod IP>,
remote_port: <port>, tp_size: 1}``; a request carrying those at a decode pod waits the
KV transfer time, then decodes without prefilling. A decode request naming no prefill,
an unknown one, or a prefill pod of another cell (namespace, PDDeployment, revision or
config differ) is served as vLLM would (prefilled locally) and recorded as a pairing
error; so is a whole request served by a prefill pod.

SGLang's P/D protocol (``pdlab.engine.sglang``; pods whose engine runs SGLang also
serve ``POST /generate``, ``GET /get_server_info``, ``/get_model_info`` and
``/health_generate``): sglang-router sends the same body to a prefill and a decode pod
at once with ``bootstrap_host``/``bootstrap_port``/``bootstrap_room``; the prefill leg
is prefilled and answered with one token, the decode leg waits for that room's prefill
at the pod serving that bootstrap address, pays the KV transfer and decodes. Both legs
are recorded with ``bootstrap_room`` (and request id ``room-<room>``); the same pairing
errors apply.

    servers = PodServers(EngineParams())
    servers.sync([pod_p, pod_d])          # PodInfo of Ready pods: serve them
    # POST http://127.64.0.1:8000/v1/completions {"prompt": "hi", "max_tokens": 4}
    servers.records.since(0)              # [{"kind": "decode", "ok": ..., ...}]
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Literal

from aiohttp import web

from pdlab.engine import sglang as sgl
from pdlab.engine.dialect import Handoff, dialect_of, handoff
from pdlab.engine.expo import MODEL_NAME, render_pod
from pdlab.engine.loop_thread import LoopThread
from pdlab.engine.pods import PodInfo
from pdlab.engine.text import text as tokens_text
from pdlab.engine.text import token_text
from pdlab.engine.timing import DecodeModel, PrefillModel
from pdscaler.sim.engine import EngineParams, PodStats
from pdscaler.types import Role

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: The answer's shape: OpenAI completions, OpenAI chat, or SGLang's native /generate.
Api = Literal["completion", "chat", "generate"]
#: How long a pod that left keeps serving the requests it holds (a grace period).
DRAIN_SECONDS = 60.0

#: ``max_tokens`` when a request gives none (vLLM's completions default).
DEFAULT_MAX_TOKENS = 16
#: Records kept (the oldest are dropped first).
MAX_RECORDS = 100_000

Extra = Callable[[PodInfo], PodStats | None]


def count_tokens(prompt: Any) -> int:
    """Prompt tokens without a tokenizer: words of a string, length of a token list.

    >>> count_tokens("the quick brown fox"), count_tokens([1, 2, 3]), count_tokens("")
    (4, 3, 1)
    """
    if isinstance(prompt, list):
        if prompt and all(isinstance(x, int) for x in prompt):
            return len(prompt)
        return max(1, sum(count_tokens(x) for x in prompt))
    return max(1, len(str(prompt).split()))


def chat_prompt(messages: Any) -> str:
    """The text of a chat request's messages (contents joined)."""
    parts: list[str] = []
    for msg in messages if isinstance(messages, list) else []:
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return " ".join(parts)


def same_cell(a: PodInfo, b: PodInfo) -> bool:
    """True if a prefill of ``a``'s KV can be decoded by ``b``: same namespace,
    PDDeployment, revision and configuration."""
    return (a.namespace, a.deployment, a.revision, a.config) == (
        b.namespace,
        b.deployment,
        b.revision,
        b.config,
    )


# ------------------------------------------------------------------ records


class RecordLog:
    """Every request's record, numbered from 1; thread-safe (read by the control port)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDS)
        self._seq = itertools.count(1)
        self.pairing_errors = 0

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            record["seq"] = next(self._seq)
            if record.get("pairing_error"):
                self.pairing_errors += 1
            self._items.append(record)
        return record

    def since(self, seq: int = 0) -> list[dict[str, Any]]:
        """Records numbered above ``seq``, oldest first."""
        with self._lock:
            return [r for r in self._items if r["seq"] > seq]

    def page(self, seq: int = 0) -> dict[str, Any]:
        """What ``GET /requests?since=`` answers."""
        items = self.since(seq)
        return {
            "records": items,
            "next": items[-1]["seq"] if items else seq,
            "pairing_errors": self.pairing_errors,
        }


def _pod_fields(prefix: str, pod: PodInfo | None) -> dict[str, Any]:
    return {
        f"{prefix}_pod": pod.name if pod else None,
        f"{prefix}_revision": pod.revision if pod else None,
        f"{prefix}_version": pod.version if pod else None,
        f"{prefix}_config": pod.config if pod else None,
    }


# ------------------------------------------------------------------ HTTP


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class PodServer:
    """One pod's engine and HTTP server (run inside ``PodServers``' event loop)."""

    def __init__(self, pod: PodInfo, owner: PodServers) -> None:
        self.pod = pod
        self.owner = owner
        # vLLM reports its KV capacity (vllm:cache_config_info) in both roles
        capacity = owner.params.decode_kv_tokens if owner.params.export_kv_capacity else 0
        self.stats = PodStats(kv_capacity_tokens=float(capacity))
        self.prefill = PrefillModel(owner.params, self.stats)
        self.decode = DecodeModel(owner.params, self.stats)
        self.runner: web.AppRunner | None = None
        self.site: web.TCPSite | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.inflight = 0

    @web.middleware
    async def _count(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.inflight += 1
        try:
            return await handler(request)
        finally:
            self.inflight -= 1

    # ----- life cycle
    async def start(self) -> None:
        app = web.Application(middlewares=[self._count])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions/render", self.render)
        app.router.add_post("/v1/chat/completions/render", self.render)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.metrics)
        for method, path, handler in dialect_of(self.pod).routes(self):  # SGLang's own
            app.router.add_route(method, path, handler)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        self.site = web.TCPSite(self.runner, self.pod.ip, self.pod.port, reuse_address=True)
        await self.site.start()
        if self.pod.kv_both or self.pod.role is Role.PREFILL:
            self.tasks.append(asyncio.create_task(self.prefill.run()))
        if self.pod.kv_both or self.pod.role is Role.DECODE:
            self.tasks.append(asyncio.create_task(self.decode.run()))

    async def drain(self, timeout: float = DRAIN_SECONDS) -> None:
        """A pod that left: stop listening (no new request), let the requests it holds
        finish (as vLLM does on SIGTERM within the grace period), then stop."""
        if self.site is not None:
            with contextlib.suppress(Exception):
                await self.site.stop()
        deadline = asyncio.get_running_loop().time() + timeout
        while self.inflight and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        await self.stop()

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        if self.runner is not None:
            await self.runner.cleanup()

    # ----- simple routes
    async def health(self, _req: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, _req: web.Request) -> web.Response:
        card = {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "pdlab"}
        return web.json_response({"object": "list", "data": [card]})

    async def metrics(self, _req: web.Request) -> web.Response:
        stats = self.stats.plus(self.owner.extra(self.pod))
        return web.Response(
            text=render_pod(stats, dialect=self.pod.dialect), content_type="text/plain"
        )

    async def render(self, req: web.Request) -> web.Response:
        body = await req.json()
        text = body.get("prompt") if "prompt" in body else chat_prompt(body.get("messages"))
        n = count_tokens(text)
        rid = req.headers.get("X-Request-Id") or f"cmpl-{uuid.uuid4().hex}"
        sampling = {"max_tokens": body.get("max_tokens") or DEFAULT_MAX_TOKENS}
        gen = {
            "request_id": rid,
            "token_ids": list(range(1, n + 1)),
            "sampling_params": sampling,
            "model": body.get("model") or MODEL_NAME,
        }
        return web.json_response([gen])

    # ----- generation
    async def completions(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        return await self._generate(req, body, count_tokens(body.get("prompt", "")), "completion")

    async def chat(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        prompt = count_tokens(chat_prompt(body.get("messages")))
        return await self._generate(req, body, prompt, "chat")

    async def generate(self, req: web.Request) -> web.StreamResponse:
        body = await req.json()
        return await self._generate(req, body, count_tokens(sgl.generate_prompt(body)), "generate")

    async def _generate(
        self, req: web.Request, body: dict[str, Any], prompt: int, api: Api
    ) -> web.StreamResponse:
        t0 = time.monotonic()
        hand: Handoff = handoff(body, self.pod)
        rid = req.headers.get("X-Request-Id") or hand.request_id()
        max_tokens = (
            body.get("max_tokens") or body.get("max_completion_tokens") or sgl.max_new_tokens(body)
        )
        output = int(max_tokens) if max_tokens else DEFAULT_MAX_TOKENS
        record: dict[str, Any] = {
            "request_id": rid,
            "time": time.time(),
            "namespace": self.pod.namespace,
            "deployment": self.pod.deployment,
            "prompt_tokens": prompt,
        }
        record.update(hand.record())
        params = self.owner.params
        kv_out: dict[str, Any] | None = None
        if hand.prefill_leg(self.pod):
            output = 1
            await self.prefill.prefill(prompt)
            kv_out = hand.prefilled(self.pod, self.owner, prompt)
            record.update(kind="prefill", ok=True, pairing_error=False, kv_transfer=False)
            record.update(_pod_fields("prefill", self.pod), **_pod_fields("decode", None))
            tokens: AsyncIterator[int] = _one_token()
        elif hand.whole_at_prefill(self.pod):
            await self.prefill.prefill(prompt)
            tokens = _counted(output)
            record.update(kind="decode", ok=False, pairing_error=True, kv_transfer=False)
            record.update(_pod_fields("prefill", self.pod), **_pod_fields("decode", self.pod))
            record["error"] = "served whole by a prefill pod (no decode hand-off)"
        else:
            source, why = await hand.source(self.owner)
            record.update(kind="decode", kv_transfer=source is not None)
            record.update(_pod_fields("prefill", source), **_pod_fields("decode", self.pod))
            if source is None:
                record["error"] = why
                await asyncio.sleep(params.prefill_seconds(prompt, prompt * prompt))
            elif not same_cell(source, self.pod):
                record["error"] = (
                    f"KV from {source.name} (revision {source.revision}, config "
                    f"{source.config}) at a decode of revision {self.pod.revision}, config "
                    f"{self.pod.config}"
                )
            if source is not None:
                transfer = params.kv_handoff_base_s + params.kv_handoff_s_per_token * prompt
                await asyncio.sleep(transfer)
            record["pairing_error"] = "error" in record
            record["ok"] = not record["pairing_error"]
            tokens = self.decode.decode(prompt, output)
        if record.get("pairing_error"):
            self.owner.say(f"pairing error {rid} at {self.pod.name}: {record['error']}")
        done = False

        def finish() -> None:
            """Record the request once, before its last byte goes out: a client that reads
            ``/requests`` right after its answer finds it there."""
            nonlocal done
            if not done:
                done = True
                record["e2e_s"] = time.monotonic() - t0
                self.owner.records.add(record)

        try:
            if body.get("stream"):
                timed = _first_token_timed(tokens, record, t0)
                return await self._stream(
                    req, body, rid, prompt, output, timed, api, kv_out, finish
                )
            n = 0
            async for n in tokens:
                if n == 1:
                    record["ttft_s"] = time.monotonic() - t0
            text = tokens_text(n)
            return web.json_response(self._answer(rid, body, prompt, n, text, api, kv_out))
        finally:
            finish()

    def _answer(
        self,
        rid: str,
        body: dict[str, Any],
        prompt: int,
        n: int,
        text: str,
        api: Api,
        kv_out: dict[str, Any] | None,
    ) -> dict[str, Any]:
        if api == "generate":
            return sgl.generate_doc(rid, prompt, n, text, last=True)
        chat = api == "chat"
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length"}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice.update(text=text, stop_reason=None)
        return {
            "id": rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_NAME,
            "choices": [choice],
            "usage": _usage(prompt, n),
            "kv_transfer_params": kv_out,
        }

    async def _stream(
        self,
        req: web.Request,
        body: dict[str, Any],
        rid: str,
        prompt: int,
        output: int,
        tokens: AsyncIterator[int],
        api: Api,
        kv_out: dict[str, Any] | None,
        finish: Callable[[], None],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        chat = api == "chat"
        model = body.get("model") or MODEL_NAME
        kind = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": rid, "object": kind, "created": int(time.time()), "model": model}

        async def send(doc: dict[str, Any] | str) -> None:
            data = doc if isinstance(doc, str) else json.dumps(doc)
            await resp.write(f"data: {data}\n\n".encode())

        if chat:
            delta = {"role": "assistant", "content": ""}
            await send({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        n = 0
        async for n in tokens:
            last = n >= output
            if api == "generate":  # SGLang streams the text so far
                text = tokens_text(n)
                await send(sgl.generate_doc(rid, prompt, n, text, last))
                continue
            choice: dict[str, Any] = {"index": 0, "logprobs": None}
            if chat:
                choice["delta"] = {"content": token_text(n)}
            else:
                choice["text"] = token_text(n)
            choice["finish_reason"] = "length" if last else None
            chunk = {**base, "choices": [choice]}
            if last and kv_out is not None:
                chunk["kv_transfer_params"] = kv_out
            await send(chunk)
        opts = body.get("stream_options") or {}
        if opts.get("include_usage") and api != "generate":
            await send({**base, "choices": [], "usage": _usage(prompt, n)})
        finish()
        await send("[DONE]")
        await resp.write_eof()
        return resp


async def _first_token_timed(
    tokens: AsyncIterator[int], record: dict[str, Any], t0: float
) -> AsyncIterator[int]:
    """``tokens``, writing the time to the first one into ``record["ttft_s"]``."""
    async for n in tokens:
        if n == 1:
            record["ttft_s"] = time.monotonic() - t0
        yield n


async def _one_token() -> AsyncIterator[int]:
    yield 1


async def _counted(n: int) -> AsyncIterator[int]:
    """A locally decoded answer on a prefill pod: tokens at a nominal 10 ms each."""
    for i in range(1, n + 1):
        await asyncio.sleep(0.01)
        yield i


class PodServers:
    """Every served pod, in one asyncio event loop on a background thread.

    ``sync(pods)`` serves the Ready ones (at ``pod.ip:pod.port``) and stops the others;
    ``extra`` adds a pod's synthetic (scenario) series to its ``/metrics``.
    """

    def __init__(
        self,
        params: EngineParams,
        *,
        extra: Extra | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.params = params
        self.extra: Extra = extra or (lambda _pod: None)
        self.say: Callable[[str], None] = say or (lambda _line: None)
        self.records = RecordLog()
        self.servers: dict[tuple[str, str], PodServer] = {}
        #: every pod ever served, by engine id and by address (a gone prefill still
        #: names its cell when its KV hand-off arrives)
        self.known_ids: dict[str, PodInfo] = {}
        self.known_addr: dict[str, PodInfo] = {}
        #: SGLang's hand-off: prefill pods by bootstrap address, and their rooms
        self.bootstraps: dict[str, PodInfo] = {}
        self.rooms = sgl.Rooms()
        self._draining: set[asyncio.Task[None]] = set()
        self._loop = LoopThread("pods")

    def lookup(self, kv: dict[str, Any]) -> PodInfo | None:
        """The prefill pod named by NixlConnector params (engine id, else host:port)."""
        pod = self.known_ids.get(str(kv.get("remote_engine_id")))
        if pod is None:
            pod = self.known_addr.get(f"{kv.get('remote_host')}:{kv.get('remote_port')}")
        return pod

    def sync(self, pods: Sequence[PodInfo], timeout: float = 10.0) -> list[str]:
        """Serve exactly the Ready pods among ``pods``; lines saying what changed."""
        return self._loop.run(self._sync(list(pods)), timeout)

    async def _sync(self, pods: list[PodInfo]) -> list[str]:
        said: list[str] = []
        ready = {(p.namespace, p.name): p for p in pods if p.ready and p.ip}
        for key, server in self.servers.items():  # kv_both: a new role is no restart
            now = ready.get(key)
            if now is not None and now.kv_both and now == replace(server.pod, role=now.role):
                if now.role is not server.pod.role:
                    said.append(f"{server.pod.role.value} pod {key[1]} now serves {now.role.value}")
                server.pod = now
                self._known(now)
        for key in [k for k, s in self.servers.items() if ready.get(k) != s.pod]:
            server = self.servers.pop(key)
            task = asyncio.create_task(server.drain())
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
            said.append(f"{server.pod.role.value} pod {key[1]} draining ({server.pod.address})")
        for key, pod in ready.items():
            if key in self.servers:
                continue
            server = PodServer(pod, self)
            try:
                await server.start()
            except OSError as err:
                said.append(f"cannot serve {key[1]} at {pod.address}: {err}")
                await server.stop()
                continue
            self.servers[key] = server
            self._known(pod)
            said.append(f"{pod.role.value} pod {key[1]} serving at http://{pod.address}")
        return said

    def _known(self, pod: PodInfo) -> None:
        """Remember a served pod by engine id and address (and a prefill's bootstrap)."""
        self.known_ids[pod.engine_id] = pod
        self.known_addr[pod.address] = pod
        if pod.role is Role.PREFILL:
            self.bootstraps[f"{pod.ip}:{pod.bootstrap_port}"] = pod

    def stats(self, namespace: str, pod: str) -> PodStats | None:
        """The live series of a served pod (None if not served)."""
        server = self.servers.get((namespace, pod))
        return server.stats if server else None

    def close(self) -> None:
        """Stop every server and the loop."""
        with contextlib.suppress(Exception):
            self.sync([])
        self._loop.stop()
