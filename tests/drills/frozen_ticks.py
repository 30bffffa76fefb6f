"""``python -m drills.frozen_ticks run ...``: ``pdscaler run`` with one switch for the
liveness drill (D16): after SIGUSR1, every tick that starts blocks forever (its thread
stays taken), so the tick threads fill and nothing starts or finishes: ticks that
truly stop, which ``/healthz`` must report. Nothing else differs from ``python -m
pdscaler`` but ``$PDSCALER_DRILL_TIME_SCALE`` (a factor <= 1, when set): the operator's
liveness floor (``liveness.Health.floor``, 15 s), the interval it assumes for a
PDDeployment not ticked yet (``Runtime.interval``, 15 s) and its API requests' timeouts
and retry budget (``kube.client.REQUEST_TIMEOUT``, ``RETRY_BUDGET_SECONDS``: one request
at most 15 + 20 s, inside the 45 s limit) times that factor, so ``make test`` runs the drill at
a shorter interval with every ratio kept. Must not be imported by the operator or any
other test."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from pdscaler import handlers, reconcile
from pdscaler.cli import main
from pdscaler.kube import client
from pdscaler.runtime import Runtime

_frozen = threading.Event()
_original = reconcile.run_tick


def _run_tick(*args: Any, **kwargs: Any) -> Any:
    if _frozen.is_set():
        threading.Event().wait()  # forever: this thread is lost
    return _original(*args, **kwargs)


def _interval_at(scale: float) -> Callable[[Runtime, str, str], float]:
    """``Runtime.interval`` assuming ``15 s x scale`` for a PDDeployment not ticked yet."""

    def interval(self: Runtime, namespace: str, name: str) -> float:
        return self.intervals.get((namespace, name), 15.0 * scale)

    return interval


if __name__ == "__main__":
    reconcile.run_tick = _run_tick
    scale = float(os.environ.get("PDSCALER_DRILL_TIME_SCALE") or 1.0)
    handlers.health().floor *= scale
    client.REQUEST_TIMEOUT = (client.REQUEST_TIMEOUT[0] * scale, client.REQUEST_TIMEOUT[1] * scale)
    client.RETRY_BUDGET_SECONDS *= scale
    Runtime.interval = _interval_at(scale)  # type: ignore[method-assign, assignment]
    signal.signal(signal.SIGUSR1, lambda *_: _frozen.set())
    main()
