"""A stand-in for the tick loop's thread pool (``handlers.TickLoop(pool=...)``) that runs
the submitted ticks only when the test calls ``drain`` (``run_once`` holds the loop's
lock while it submits, so a pool running them at once would deadlock)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any


class ManualPool:
    """Runs a submitted tick only when the test says so."""

    def __init__(self) -> None:
        self.queued: list[tuple[Any, tuple[Any, ...]]] = []

    def submit(self, fn: Any, *args: Any) -> Future[None]:
        self.queued.append((fn, args))
        return Future()

    def drain(self) -> None:
        queued, self.queued = self.queued, []
        for fn, args in queued:
            fn(*args)

    def shutdown(self, wait: bool = True) -> None:
        pass
