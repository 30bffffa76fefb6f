"""A sampler that runs on a daemon thread for the span of a ``with`` block.

Owns: starting ``_run`` on entry and, on exit, setting ``_stop`` and joining the thread
(at most 10 s). Subclasses are dataclasses that implement ``_run`` as a loop on
``self._stop`` (``while not self._stop.is_set(): ...; self._stop.wait(period)``). Must
not sample anything itself.

    @dataclass
    class Counter(Background):
        n: int = 0

        def _run(self) -> None:
            while not self._stop.is_set():
                self.n += 1
                self._stop.wait(0.1)

    with Counter() as c:
        time.sleep(0.35)
    # c.n is about 4, and the thread has stopped
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Self


@dataclass
class Background:
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        raise NotImplementedError
