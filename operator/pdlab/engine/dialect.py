"""The engine simulator's protocols as objects: what a pod of each engine serves, and how
a request's P/D hand-off is read and answered.

Owns: ``Dialect``, one per engine a pod can run (``VLLM``, ``SGLANG``; ``DYNAMO_FRONTEND``
for a Dynamo frontend's page): its name (the metric names of its ``/metrics``,
``pdlab.engine.expo``) and the routes its engine serves beyond the OpenAI ones
(SGLang's ``/generate``, ``/get_server_info``, ``/get_model_info``,
``/health_generate``); and ``Handoff``, one per request, chosen by the fields the router
put in its body (``handoff``): ``Nixl`` (vLLM's NixlConnector, ``kv_transfer_params``)
or ``Bootstrap`` (SGLang's bootstrap room, ``pdlab.engine.sglang``), each saying whether
the request is a prefill leg at a pod, what the prefill leg leaves for the decode (vLLM:
the KV parameters in the answer; SGLang: the room marked prefilled), and which prefill
pod a decode leg reads its KV from. Must not: serve HTTP or model time
(``pdlab.engine.serve`` does), or talk to the API server.

A body ``{"prompt": "hi", "kv_transfer_params": {"do_remote_decode": true}}`` at a
prefill pod is ``Nixl``'s prefill leg, answered with ``kv_transfer_params``
``{"do_remote_prefill": true, ..., "remote_block_ids": [0]}``; one with
``"bootstrap_room": 7`` is ``Bootstrap``'s, recorded with ``bootstrap_room`` 7 and
request id ``room-7``, its decode leg waiting for room 7 at the pod serving
``bootstrap_host:bootstrap_port``.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from pdlab.engine import sglang as sgl
from pdlab.engine.pods import PodInfo
from pdscaler.types import Role

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: (method, path, handler) of a route a dialect adds.
Route = tuple[str, str, Handler]

#: KV block size of the simulated engine (vLLM's default), for ``remote_block_ids``.
BLOCK_TOKENS = 16


class Server(Protocol):
    """What a dialect's routes need of a pod's server (``serve.PodServer``)."""

    pod: PodInfo

    async def generate(self, req: web.Request) -> web.StreamResponse: ...

    async def health(self, req: web.Request) -> web.Response: ...


class Peers(Protocol):
    """What a decode leg needs to find its prefill (``serve.PodServers``)."""

    bootstraps: dict[str, PodInfo]
    rooms: sgl.Rooms

    def lookup(self, kv: dict[str, Any]) -> PodInfo | None: ...


# ------------------------------------------------------------------ pods


class Dialect:
    """An engine as its pods show it: vLLM's (the OpenAI routes only, vLLM's metric
    names)."""

    name = "vllm"

    def routes(self, server: Server) -> list[Route]:
        """The routes this engine serves beyond the OpenAI ones."""
        return []


class SGLang(Dialect):
    """SGLang: its native ``/generate`` and the worker metadata sglang-router asks for."""

    name = "sglang"

    def routes(self, server: Server) -> list[Route]:
        async def server_info(_req: web.Request) -> web.Response:
            return web.json_response(sgl.server_info(server.pod))

        async def model_info(_req: web.Request) -> web.Response:
            return web.json_response(sgl.model_info())

        return [
            ("POST", "/generate", server.generate),
            ("GET", "/get_server_info", server_info),
            ("GET", "/get_model_info", model_info),
            ("GET", "/health_generate", server.health),
        ]


class DynamoFrontend(Dialect):
    """A Dynamo frontend's page (``pdlab.engine.frontend`` serves it, one per
    PDDeployment, not per engine pod)."""

    name = "dynamo-frontend"


VLLM = Dialect()
SGLANG = SGLang()
DYNAMO_FRONTEND = DynamoFrontend()
DIALECTS: dict[str, Dialect] = {d.name: d for d in (VLLM, SGLANG, DYNAMO_FRONTEND)}


def dialect_of(pod: PodInfo) -> Dialect:
    """The dialect of a pod's engine (``PodInfo.dialect``, from ``pods.engine_dialect``)."""
    return DIALECTS[pod.dialect]


# ------------------------------------------------------------------ requests


@dataclass(frozen=True)
class Handoff(ABC):
    """A request's P/D hand-off fields. ``kv_in`` is its ``kv_transfer_params`` ({} when
    absent): at a ``kv_both`` engine (a role-flip cell) they alone say which leg a
    request is, whatever its protocol."""

    kv_in: dict[str, Any]

    def request_id(self) -> str:
        """The request's id when its client sent no ``X-Request-Id``."""
        return f"cmpl-{uuid.uuid4().hex}"

    def record(self) -> dict[str, Any]:
        """What the request's record carries of its hand-off."""
        return {}

    def prefill_leg(self, pod: PodInfo) -> bool:
        """Whether the request is a P/D prefill leg at ``pod``: at a prefill pod, one
        that asks for it (``_asks_prefill``); at a ``kv_both`` engine, whatever its role
        label, one that asks for a remote decode (vLLM's router says which leg it is)."""
        if pod.kv_both and self.kv_in:
            return bool(self.kv_in.get("do_remote_decode"))
        return pod.role is Role.PREFILL and self._asks_prefill()

    def whole_at_prefill(self, pod: PodInfo) -> bool:
        """A request no prefill leg yet at a prefill pod: served whole there, a pairing
        error (``prefill_leg`` is asked first)."""
        return pod.role is Role.PREFILL and not (pod.kv_both and self.kv_in)

    @abstractmethod
    def _asks_prefill(self) -> bool:
        """Whether the request asks this pod for a prefill leg (its role is prefill)."""

    @abstractmethod
    def prefilled(self, pod: PodInfo, peers: Peers, prompt: int) -> dict[str, Any] | None:
        """After the prefill leg's prefill at ``pod``: the KV parameters its answer
        carries (vLLM), or None."""

    @abstractmethod
    async def source(self, peers: Peers) -> tuple[PodInfo | None, str]:
        """The prefill pod whose KV a decode leg reads, else None and why."""


@dataclass(frozen=True)
class Nixl(Handoff):
    """vLLM's NixlConnector: ``kv_transfer_params``. A prefill leg asks
    ``do_remote_decode`` and is answered with the KV's address; a decode leg carries
    that address back (``do_remote_prefill``)."""

    def _asks_prefill(self) -> bool:
        return bool(self.kv_in.get("do_remote_decode"))

    def prefilled(self, pod: PodInfo, peers: Peers, prompt: int) -> dict[str, Any] | None:
        """``{do_remote_prefill: true, ..., remote_block_ids: [0, 1]}`` for a 20-token
        prompt (2 blocks of ``BLOCK_TOKENS``) at ``pod``."""
        blocks = -(-prompt // BLOCK_TOKENS)
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_engine_id": pod.engine_id,
            "remote_block_ids": list(range(blocks)),
            "remote_host": pod.ip,
            "remote_port": pod.port,
            "tp_size": 1,
        }

    async def source(self, peers: Peers) -> tuple[PodInfo | None, str]:
        if self.kv_in.get("do_remote_prefill"):
            return peers.lookup(self.kv_in), "names an unknown prefill"
        return None, "no KV hand-off: prefilled locally"


@dataclass(frozen=True)
class Bootstrap(Handoff):
    """SGLang's bootstrap room: the same body goes to a prefill and a decode pod; the
    prefill leg marks the room prefilled, the decode leg waits for it at the pod
    serving the bootstrap address."""

    boot: sgl.Bootstrap

    def request_id(self) -> str:
        return f"room-{self.boot.room}"

    def record(self) -> dict[str, Any]:
        return {"bootstrap_room": self.boot.room}

    def _asks_prefill(self) -> bool:
        return True

    def prefilled(self, pod: PodInfo, peers: Peers, prompt: int) -> dict[str, Any] | None:
        peers.rooms.prefilled(pod.engine_id, self.boot.room)
        return None

    async def source(self, peers: Peers) -> tuple[PodInfo | None, str]:
        return await sgl.find_prefill(peers.bootstraps, peers.rooms, self.boot)


def handoff(body: Mapping[str, Any], pod: PodInfo) -> Handoff:
    """The request's hand-off: SGLang's when its body has a ``bootstrap_room`` (a null
    ``bootstrap_port`` is ``pod``'s own), else vLLM's."""
    kv_in = body.get("kv_transfer_params") or {}
    boot = sgl.bootstrap(body, pod.bootstrap_port)
    return Nixl(kv_in) if boot is None else Bootstrap(kv_in, boot)
