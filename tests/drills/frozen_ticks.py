"""``python -m drills.frozen_ticks run ...``: ``pdscaler run`` with one switch for the
liveness drill (D16): after SIGUSR1, every tick that starts blocks forever (its thread
stays taken), so the tick threads fill and nothing starts or finishes: ticks that
truly stop, which ``/healthz`` must report. Nothing else differs from ``python -m
pdscaler``. Must not be imported by the operator or any other test."""

from __future__ import annotations

import signal
import threading
from typing import Any

from pdscaler import reconcile
from pdscaler.cli import main

_frozen = threading.Event()
_original = reconcile.run_tick


def _run_tick(*args: Any, **kwargs: Any) -> Any:
    if _frozen.is_set():
        threading.Event().wait()  # forever: this thread is lost
    return _original(*args, **kwargs)


if __name__ == "__main__":
    reconcile.run_tick = _run_tick
    signal.signal(signal.SIGUSR1, lambda *_: _frozen.set())
    main()
