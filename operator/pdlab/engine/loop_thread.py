"""An asyncio event loop on a daemon thread, driven from synchronous code.

Owns: starting the loop, running a coroutine on it and waiting for its result
(``run``), stopping it (``stop``). The lab's pod and frontend servers each keep their
aiohttp sites on one (``serve.PodServers``, ``frontend.FrontendServers``).

``LoopThread("pods").run(coro, 10.0)`` returns ``coro``'s result, or raises
``TimeoutError`` after 10 s.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """One event loop, run forever on a daemon thread named ``name``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """``coro``'s result, run on the loop (waits at most ``timeout`` seconds)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and join its thread (at most 5 s)."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
