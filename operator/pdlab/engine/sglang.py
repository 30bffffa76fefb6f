"""SGLang's P/D protocol, as the engine simulator speaks it (``pdlab.engine.serve``
serves it on pods whose engine runs SGLang, ``PodInfo.dialect == "sglang"``).

Owns: the bootstrap hand-off (which prefill a decode request names, and the wait for
that prefill's room), the worker-metadata answers sglang-router asks for, and the
shapes of SGLang's native ``/generate``. Must not: serve HTTP or model time (the
caller does), or talk to the API server.

What the real sglang-router 0.3.2 does (observed against it, with stub workers):

* registering a worker: ``GET /health``; ``GET /server_info`` then, on 404,
  ``/get_server_info``; ``GET /model_info`` then ``/get_model_info`` (its model id is
  ``served_model_name``, else ``model_path``; with a ``model_path`` it also loads that
  tokenizer from the Hugging Face hub, so the simulator reports none). It also probes
  for gRPC first (an HTTP/2 preface the HTTP server refuses).
* a request (``/generate``, ``/v1/completions``, ``/v1/chat/completions``; streamed
  or not): the SAME JSON body to one prefill AND one decode worker at once, at the
  client's path, with ``bootstrap_host`` (the prefill's host), ``bootstrap_port`` (the
  prefill pod's ``sglang.ai/bootstrap-port`` annotation under discovery, ``null``
  without) and ``bootstrap_room`` (a random 63-bit integer) added; the client gets the
  decode's answer.
* SGLang's decode reads the KV of room ``bootstrap_room`` from the bootstrap server at
  ``bootstrap_host:bootstrap_port`` (its own ``--disaggregation-bootstrap-port`` when
  the port is null).

The simulator: a prefill pod's bootstrap server is ``<pod IP>:<bootstrap port>``
(``PodInfo.bootstrap_port``, from its engine's flags). A prefill leg (a body with a
``bootstrap_room``) marks ``(pod, room)`` prefilled once its prefill is done; a decode
leg finds the prefill pod by address, waits up to ``ROOM_WAIT_S`` for that room, then
pays the KV transfer. A decode naming no prefill pod, a room never prefilled, or a
prefill of another cell is a pairing error (served, as ``serve`` says).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdlab.engine.expo import MODEL_NAME
from pdlab.engine.pods import PodInfo
from pdscaler.router import DEFAULT_BOOTSTRAP_PORT
from pdscaler.types import Role

#: How long a decode leg waits for its room's prefill (SGLang's bootstrap timeout is
#: longer; the simulator's prefill leg arrives at the same moment).
ROOM_WAIT_S = 30.0
#: Rooms remembered (prefilled but never decoded ones are dropped oldest first).
MAX_ROOMS = 10_000


@dataclass(frozen=True)
class Bootstrap:
    """The hand-off fields sglang-router adds to a request."""

    host: str
    port: int
    room: int

    @property
    def address(self) -> str:
        """``127.64.0.7:8998``: the prefill's bootstrap server."""
        return f"{self.host}:{self.port}"


def bootstrap(
    body: Mapping[str, Any], default_port: int = DEFAULT_BOOTSTRAP_PORT
) -> Bootstrap | None:
    """The request's hand-off, or None when it has no ``bootstrap_room`` (not a P/D
    leg); a null ``bootstrap_port`` is ``default_port`` (the decode's own, as SGLang's).

    >>> bootstrap({"bootstrap_host": "127.64.0.7", "bootstrap_port": None, "bootstrap_room": 5})
    Bootstrap(host='127.64.0.7', port=8998, room=5)
    >>> bootstrap({"prompt": "hi"}) is None
    True
    """
    room = body.get("bootstrap_room")
    if room is None or isinstance(room, bool) or not isinstance(room, int):
        return None
    port = body.get("bootstrap_port")
    return Bootstrap(
        str(body.get("bootstrap_host") or ""),
        int(port) if isinstance(port, int) and not isinstance(port, bool) else default_port,
        room,
    )


class Rooms:
    """Rooms prefilled per prefill pod (engine id): set by the prefill leg, awaited by
    the decode leg. Used inside one event loop."""

    def __init__(self, limit: int = MAX_ROOMS) -> None:
        self.limit = limit
        self._rooms: OrderedDict[tuple[str, int], asyncio.Future[None]] = OrderedDict()

    def _future(self, key: tuple[str, int]) -> asyncio.Future[None]:
        fut = self._rooms.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._rooms[key] = fut
            while len(self._rooms) > self.limit:
                self._rooms.popitem(last=False)
        return fut

    def prefilled(self, engine_id: str, room: int) -> None:
        fut = self._future((engine_id, room))
        if not fut.done():
            fut.set_result(None)

    async def wait(self, engine_id: str, room: int, timeout: float) -> bool:
        """True once ``room`` is prefilled at ``engine_id`` (within ``timeout`` s)."""
        key = (engine_id, room)
        try:
            await asyncio.wait_for(asyncio.shield(self._future(key)), timeout)
        except TimeoutError:
            return False
        finally:
            self._rooms.pop(key, None)
        return True


async def find_prefill(
    prefills: Mapping[str, PodInfo], rooms: Rooms, boot: Bootstrap, timeout: float = ROOM_WAIT_S
) -> tuple[PodInfo | None, str]:
    """The prefill pod whose KV a decode leg reads (``prefills``: by bootstrap
    address), once its room is prefilled; else None and why."""
    pod = prefills.get(boot.address)
    if pod is None:
        return None, f"bootstrap {boot.address} is no prefill pod's: prefilled locally"
    if not await rooms.wait(pod.engine_id, boot.room, timeout):
        return None, f"room {boot.room} was never prefilled at {pod.name}: prefilled locally"
    return pod, ""


# ------------------------------------------------------------------ worker metadata


def server_info(pod: PodInfo) -> dict[str, Any]:
    """``GET /get_server_info``: the few fields the router reads (no ``model_path``:
    the router would fetch its tokenizer from the hub)."""
    info: dict[str, Any] = {
        "served_model_name": MODEL_NAME,
        "disaggregation_mode": pod.role.value,
        "tp_size": 1,
        "dp_size": 1,
        "version": "pdlab-sim",
    }
    if pod.role is Role.PREFILL:
        info["disaggregation_bootstrap_port"] = pod.bootstrap_port
    return info


def model_info() -> dict[str, Any]:
    """``GET /get_model_info``."""
    return {"is_generation": True, "model_type": "llama", "architectures": ["LlamaForCausalLM"]}


# ------------------------------------------------------------------ native /generate


def generate_prompt(body: Mapping[str, Any]) -> Any:
    """The prompt of a ``/generate`` body: ``input_ids`` or ``text``."""
    ids = body.get("input_ids")
    return ids if ids is not None else body.get("text", "")


def max_new_tokens(body: Mapping[str, Any]) -> int | None:
    """``sampling_params.max_new_tokens`` of a ``/generate`` body, if set."""
    params = body.get("sampling_params")
    value = params.get("max_new_tokens") if isinstance(params, Mapping) else None
    return int(value) if isinstance(value, int) and value > 0 else None


def generate_doc(rid: str, prompt: int, n: int, text: str, last: bool) -> dict[str, Any]:
    """One ``/generate`` answer (or, streamed, one chunk: ``text`` so far)."""
    return {
        "text": text,
        "output_ids": list(range(1, n + 1)),
        "meta_info": {
            "id": rid,
            "finish_reason": {"type": "length", "length": n} if last else None,
            "prompt_tokens": prompt,
            "completion_tokens": n,
            "cached_tokens": 0,
            "e2e_latency": 0.0,
            "created": time.time(),
        },
    }
