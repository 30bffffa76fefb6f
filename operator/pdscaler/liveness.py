"""Liveness (``/healthz``): does this process still make progress? A pure function of
progress facts (``verdict``), and the thread-safe record the tick loop and the elector
keep of them (``Health``).

Owns: what counts as progress and how long without it is "stopped". Must not: do I/O
or read a clock (every time is passed in; ``cli/run.py`` serves the answer).

Progress is a tick that STARTS on a tick thread or FINISHES (whatever its outcome), not
a tick that runs fast: a brown-out (Prometheus answering in 2 s, an API server that
does not answer and makes each request wait for its timeout) makes ticks slow, not
stopped, and restarting the operator then cures nothing. A tick waiting in the queue
for one of the tick threads is not running: with 100 PDDeployments due together and
8 threads, the last one waits ~12 ticks' worth. ``verdict`` says "stopped" when:

* the loop thread made no pass for ``limit`` s (3 x the longest ``scaling.interval``,
  at least 45 s);
* ticks are in flight (running or queued) and none started or finished for ``limit``
  s: every tick thread is stuck;
* one tick has run for ``hung_after`` s (8 x ``limit``, 6 min at 45 s: longer than any
  tick whose every request runs into its bounded timeout);
* with leader election, the elector's round has been in progress, or no round has
  started, for ``elector_limit`` s (4 x leaseDuration, 60 s by default: a round's two
  requests are each bounded by half the renew deadline).

Worked example (limit 45 s): 100 PDDeployments due at t = 0, 8 threads, each tick
2.2 s (Prometheus at 2 s a query): ticks finish every ~0.3 s, the last one starts at
~26 s: alive throughout (the record before this module counted a queued tick as
running from its submission and answered 503 at 45 s). The API server stopped at t =
100: each tick's first request runs into its 15 s budget and the tick fails; threads
start and finish ticks every few seconds: alive. Every tick thread deadlocked at 200
(nothing starts or finishes) with ticks queued: dead from 245; the kubelet restarts the
pod after failureThreshold x periodSeconds more (3 x 20 s in the chart).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

#: A single tick that has run this many times ``limit`` is hung (a thread lost).
HUNG_FACTOR = 8.0
#: The elector is stuck after this many lease durations without a finished round.
ELECTOR_FACTOR = 4.0


@dataclass(frozen=True)
class ElectorFacts:
    """The Lease rounds: ``round_started`` of the round in progress (None: none),
    ``last_round_end`` (None: none finished yet), ``since`` (when the elector started),
    ``limit`` (seconds a round may be in progress, or no round start, before "stuck")."""

    round_started: float | None
    last_round_end: float | None
    since: float
    limit: float


@dataclass(frozen=True)
class Facts:
    """What ``verdict`` judges, every time on one monotonic clock."""

    now: float
    limit: float
    last_beat: float | None
    running: tuple[float, ...] = ()  # start times of the ticks running on a thread
    queued: int = 0  # ticks submitted and waiting for a thread
    last_progress: float | None = None  # a tick started on a thread or finished
    hung_after: float = float("inf")
    elector: ElectorFacts | None = None


@dataclass(frozen=True)
class Verdict:
    alive: bool
    reason: str = "ok"


def verdict(f: Facts) -> Verdict:
    """Alive unless one of the module's four rules says stopped. E.g. limit 45, beat
    at 100, ticks in flight, last progress at 60: dead at 105 ("no tick started or
    finished for 45 s"); last progress at 99: alive."""
    if f.last_beat is None or f.now - f.last_beat >= f.limit:
        since = "never" if f.last_beat is None else f"for {f.now - f.last_beat:.0f} s"
        return Verdict(False, f"tick loop made no pass {since}")
    if f.running or f.queued:
        quiet = f.now - f.last_progress if f.last_progress is not None else float("inf")
        if quiet >= f.limit:
            return Verdict(
                False,
                f"no tick started or finished for {quiet:.0f} s "
                f"({len(f.running)} running, {f.queued} queued)",
            )
    oldest = min(f.running, default=None)
    if oldest is not None and f.now - oldest >= f.hung_after:
        return Verdict(False, f"a tick has run for {f.now - oldest:.0f} s")
    e = f.elector
    if e is not None:
        if e.round_started is not None and f.now - e.round_started >= e.limit:
            return Verdict(False, f"lease round in progress for {f.now - e.round_started:.0f} s")
        last = max(x for x in (e.last_round_end, e.round_started, e.since) if x is not None)
        if e.round_started is None and f.now - last >= e.limit:
            return Verdict(False, f"no lease round for {f.now - last:.0f} s")
    return Verdict(True)


@dataclass
class Health:
    """The tick loop's progress facts (thread-safe), judged by ``verdict``.

    ``limit`` is ``factor`` x the longest ``scaling.interval`` the loop reports (at
    least ``floor``): 3 x 15 s = 45 s by default. The loop calls ``beat`` every pass,
    ``tick_queued`` when it submits a tick, the tick thread ``tick_started`` when it
    runs it and ``tick_done`` when it is over."""

    factor: float = 3.0
    floor: float = 15.0
    interval: float = 15.0
    last_beat: float | None = None
    last_progress: float | None = None
    running: dict[tuple[str, str], float] = field(default_factory=dict)
    queued: set[tuple[str, str]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def stale_after(self) -> float:
        return self.factor * max(self.interval, self.floor)

    def beat(self, now: float, interval: float | None = None) -> None:
        with self._lock:
            self.last_beat = now
            if interval is not None:
                self.interval = interval

    def tick_queued(self, key: tuple[str, str], now: float) -> None:
        """Submitted to the pool; from idle, the quiet time counts from now."""
        with self._lock:
            if not self.running and not self.queued:
                self.last_progress = now
            self.queued.add(key)

    def tick_started(self, key: tuple[str, str], now: float) -> None:
        """A tick thread runs it: progress."""
        with self._lock:
            self.queued.discard(key)
            self.running[key] = now
            self.last_progress = max(now, self.last_progress or now)

    def tick_done(self, key: tuple[str, str], now: float) -> None:
        """Over, whatever its outcome: progress."""
        with self._lock:
            self.queued.discard(key)
            self.running.pop(key, None)
            self.last_progress = max(now, self.last_progress or now)

    def facts(self, now: float, elector: ElectorFacts | None = None) -> Facts:
        with self._lock:
            limit = self.stale_after
            return Facts(
                now=now,
                limit=limit,
                last_beat=self.last_beat,
                running=tuple(self.running.values()),
                queued=len(self.queued),
                last_progress=self.last_progress,
                hung_after=HUNG_FACTOR * limit,
                elector=elector,
            )

    def verdict(self, now: float, elector: ElectorFacts | None = None) -> Verdict:
        return verdict(self.facts(now, elector))

    def alive(self, now: float, elector: ElectorFacts | None = None) -> bool:
        return self.verdict(now, elector).alive
