"""kopf glue, and nothing else: which events call ``reconcile_once``, and when.

Owns: the kopf registrations for PDDeployments, the operator settings they need, and
the tick loop (``TickLoop``) that calls ``reconcile.run_tick``.

* ``@kopf.on.event``: kopf's low-level watch, which keeps no state on the object (no
  progress or diff-base annotations, no finalizer). Every PDDeployment seen (the
  initial listing included) joins the loop's table; a new ``metadata.generation`` (a
  created or changed spec) or a ``pdscaler.io/paused`` annotation put on or taken off
  makes it due at once; DELETED drops it, and so does a tick that reads it gone (a
  DELETED the watch missed: no ghost ticks of a PDDeployment that no longer exists).
* ``TickLoop``: one thread; every ``LOOP_PERIOD`` it ticks, in a bounded pool of
  ``TICK_WORKERS`` threads, each PDDeployment whose ``spec.scaling.interval`` has
  passed since its last tick (re-read on every tick), one tick per object at a time.
  While this replica is not the leader (``leader()`` False) it ticks nothing: no reads,
  no computing, no writes; it keeps watching, and on becoming the leader it forgets
  the in-process policy memory (restored from the status, as after a restart) and
  ticks every PDDeployment at once. Each pass beats ``liveness.Health`` (``/healthz``),
  which hears when a tick is queued, starts on a thread and is done (progress).
* ``@kopf.on.login``: the service account in a pod, else ``$KUBECONFIG``;
* ``@kopf.on.startup`` / ``@kopf.on.cleanup``: settings; start / stop the loop.

No finalizer: the owner references already garbage-collect a PDDeployment's objects,
and a finalizer would block the namespace's deletion once the operator is gone. kopf's
finalizer setting keeps the name pdscaler used before (``pdscaler.io/finalizer``): as
no handler needs it, kopf removes it from any object that still has it, on the next
event. No handler returns a value (kopf would store it in ``status.<handler>``); kopf
posts only warnings and errors as Events.

Must not: hold logic (that is ``reconcile``'s) or run a tick on kopf's event loop.
Example: 200 PDDeployments at a 15 s interval are 13 ticks/s of ~70 ms each, well
inside 8 tick threads.

The process-wide ``Runtime`` (API client, Prometheus clients, telemetry, the policy
memory) is made on first use from the environment, or installed beforehand with
``install(runtime)``; the leader predicate (default: always) with ``install_leader``
(``pdscaler run`` installs both).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf

from pdscaler import logcontext, reconcile
from pdscaler.liveness import Health
from pdscaler.runtime import Runtime
from pdscaler.spec import GROUP, PLURAL, VERSION

RESOURCE = (GROUP, VERSION, PLURAL)
ANNOTATION_PREFIX = "pdscaler.io"
FINALIZER = f"{ANNOTATION_PREFIX}/finalizer"  # no longer added; kopf removes stale ones
MIN_INTERVAL_SECONDS = 1.0
LOOP_PERIOD = 0.5
TICK_WORKERS = 8

log = logging.getLogger("pdscaler.handlers")

Key = tuple[str, str]

#: What a tick returns when its read said the PDDeployment is gone (404): the loop
#: drops it, unless it was seen again meanwhile (made again under the same name).
GONE = "gone"

_lock = threading.Lock()
_runtime: Runtime | None = None
_leader: Callable[[], bool] = lambda: True  # noqa: E731


def install(runtime: Runtime | None) -> None:
    """Use ``runtime`` for every handler from now on (None: make one on first use)."""
    global _runtime
    with _lock:
        _runtime = runtime


def install_leader(leader: Callable[[], bool] | None) -> None:
    """Tick only while ``leader()`` (None: always, a standalone operator)."""
    global _leader
    with _lock:
        _leader = leader if leader is not None else (lambda: True)


def runtime() -> Runtime:
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = Runtime.from_environment()
        return _runtime


def is_leader() -> bool:
    with _lock:
        leader = _leader
    return leader()


# ---------------------------------------------------------------- the tick loop


@dataclass
class _Entry:
    generation: int
    due: float  # monotonic time of the next tick
    paused: bool = False  # the pdscaler.io/paused annotation as last seen
    seen: int = 0  # watch events since it joined (a tick that read it gone checks it)


class TickLoop:
    """Which PDDeployments are due, ticked in ``pool`` while ``leader()``.

    ``run_once(now)`` is one pass (the unit tests drive it with their own clock);
    ``start``/``stop`` run it every ``LOOP_PERIOD`` in a thread."""

    def __init__(
        self,
        tick: Callable[[str, str], object],
        interval: Callable[[str, str], float],
        leader: Callable[[], bool],
        health: Health,
        *,
        on_lead: Callable[[], None] = lambda: None,
        on_lose: Callable[[list[Key]], None] = lambda _keys: None,
        on_late: Callable[[float], None] = lambda _seconds: None,
        pool: ThreadPoolExecutor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tick = tick
        self.interval = interval
        self.leader = leader
        self.health = health
        self.on_lead = on_lead
        self.on_lose = on_lose
        self.on_late = on_late
        self.pool = pool or ThreadPoolExecutor(TICK_WORKERS, thread_name_prefix="pdscaler-tick")
        self.clock = clock
        self.table: dict[Key, _Entry] = {}
        self.running: dict[Key, Future[None]] = {}
        self.leading = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def notice(self, namespace: str, name: str, generation: int, paused: bool = False) -> None:
        """A PDDeployment was seen; a generation not ticked yet, or the pause annotation
        put on or taken off, makes it due now (a pause is an emergency brake: it must
        not wait for the interval)."""
        with self._lock:
            entry = self.table.get((namespace, name))
            if entry is None or (entry.generation, entry.paused) != (generation, paused):
                self.table[(namespace, name)] = _Entry(generation, float("-inf"), paused)
            else:
                entry.seen += 1

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self.table.pop((namespace, name), None)

    def run_once(self, now: float) -> list[Key]:
        """One pass: beat, and (leader only) submit every due, idle PDDeployment.
        Returns the keys submitted."""
        leading = self.leader()
        longest = MIN_INTERVAL_SECONDS
        submitted: list[Key] = []
        with self._lock:
            if leading and not self.leading:
                self.on_lead()
                for entry in self.table.values():
                    entry.due = float("-inf")
            elif self.leading and not leading:
                self.on_lose(list(self.table))
            self.leading = leading
            for key, entry in self.table.items():
                longest = max(longest, self.interval(*key))
                if not leading or key in self.running or entry.due > now:
                    continue
                due, entry.due = entry.due, float("inf")  # set again when the tick is done
                self.health.tick_queued(key, now)  # not running until a thread takes it
                self.running[key] = self.pool.submit(self._run_tick, key, due)
                submitted.append(key)
        self.health.beat(now, longest)
        return submitted

    def _run_tick(self, key: Key, due: float = float("-inf")) -> None:
        """One tick; ``on_late`` gets how long after ``due`` it started (the loop's
        pass, then the queue for a tick thread: 0.3 s when idle, the interval's worth
        when the threads cannot keep up), except for a tick due at once (a new
        generation, a new leader: ``due`` -inf)."""
        started = self.clock()
        self.health.tick_started(key, started)
        if math.isfinite(due):
            self.on_late(started - due)
        with self._lock:
            before = self.table.get(key)
            seen = before.seen if before is not None else -1
        result: object = None
        try:
            with logcontext.object_tick(*key):  # its log lines carry namespace, name, tick
                try:
                    result = self.tick(*key)
                except Exception:
                    log.exception("tick of %s/%s failed", *key)
        finally:
            done = self.clock()
            with self._lock:
                self.running.pop(key, None)
                entry = self.table.get(key)
                if result == GONE and entry is not None and entry is before and entry.seen == seen:
                    del self.table[key]  # a DELETED the watch missed: no more ticks
                    entry = None
                if entry is not None and entry.due == float("inf"):
                    entry.due = done + max(self.interval(*key), MIN_INTERVAL_SECONDS)
            self.health.tick_done(key, done)

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once(self.clock())
            except Exception:
                log.exception("tick loop pass failed")
            self._stop.wait(LOOP_PERIOD)

    def start(self) -> TickLoop:
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="pdscaler-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        with self._lock:
            running = list(self.running.values())
        for fut in running:
            with contextlib.suppress(Exception):  # logged by _run_tick
                fut.result(timeout=timeout)
        self.pool.shutdown(wait=False)


_loop: TickLoop | None = None
_health = Health()


def health() -> Health:
    """The loop's liveness record (``/healthz``)."""
    return _health


def _reset_memory() -> None:
    """A replica that (re)gains the Lease starts from the status, like a restart: what
    it remembered may be older than another leader's writes."""
    rt = runtime()
    rt.memory.clear()
    rt.rollouts.clear()
    rt.last.clear()


def _note_unobserved(keys: list[Key]) -> None:
    """A replica that lost the Lease (its fence closed: an API server it cannot reach,
    a stopped process) observes nothing until it leads again: from now on, for each
    PDDeployment it ticked, that time does not count against a rollout's
    progressDeadline (``Runtime.failing_since``, as for ticks that fail)."""
    rt = runtime()
    now = rt.clock()
    for key in keys:
        rt.failing_since.setdefault(key, now)


def _tick(namespace: str, name: str) -> str | None:
    """One tick, its writes pinned to the leadership term it began in (a tick that
    hung while this replica lost and took back the Lease writes nothing); ``GONE`` when
    it read the PDDeployment gone (404)."""
    rt = runtime()
    with rt.kube.pinned():
        report = reconcile.run_tick(rt, namespace, name)
    return GONE if report is not None and report.skipped == reconcile.NOT_FOUND else None


def loop() -> TickLoop:
    """The process's tick loop (made on first use, started by the startup handler)."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = TickLoop(
                tick=_tick,
                interval=lambda ns, n: runtime().interval(ns, n),
                leader=is_leader,
                health=_health,
                on_lead=_reset_memory,
                on_lose=_note_unobserved,
                on_late=lambda seconds: runtime().telemetry.lateness.observe(seconds),
            )
        return _loop


# ------------------------------------------------------------------ kopf handlers


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "pdscaler"
    settings.execution.max_workers = max(settings.execution.max_workers or 0, 8)
    runtime()  # fail at start-up, not on the first event, if the config is broken
    loop().start()


@kopf.on.cleanup()
def shutdown(**_: Any) -> None:
    global _loop
    with _lock:
        current, _loop = _loop, None
    if current is not None:
        current.stop()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account inside a pod, else ``$KUBECONFIG`` as it is NOW (the
    client library's default login reads it once, at import)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.event(*RESOURCE)
def on_event(
    type: str | None, body: kopf.Body, namespace: str | None, name: str | None, **_: Any
) -> None:
    """Keep the loop's table: DELETED drops the object, anything else notes its
    generation (a new one is ticked at once)."""
    if not namespace or not name:
        return
    if type == "DELETED":
        loop().forget(namespace, name)
        runtime().forget(namespace, name)
        return
    generation = int(body.get("metadata", {}).get("generation") or 0)
    loop().notice(namespace, name, generation, reconcile.paused(dict(body)))
