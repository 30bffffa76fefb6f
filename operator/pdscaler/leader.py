"""The leader elector: runs ``lease.py``'s decisions against ``kube``'s Lease calls.

Owns: one loop (a daemon thread) that every ``retry_period`` GETs the Lease, notes when
its content changed (``lease.observe``, dated when the GET's answer ARRIVED: a follower
whose read took 20 s must not count those 20 s against the holder's term), decides
(``lease.decide``) and writes (POST to create, PUT with the resourceVersion it read to
take or renew: a concurrent writer gets 409 and this round is lost), plus ``may_write``
(the fence every tick write checks, through ``kube.FencedKube``), ``term`` (the token of
the term this replica holds, checked by ``FencedKube`` against the one a tick started
in), ``facts`` (its rounds' progress, for ``/healthz``) and ``release`` on shutdown.
Each Lease request has its own short timeout (``kube.LEASE_TIMEOUT``, 2 + 4 s), so a
round against a stopped API server ends within the renew deadline. Must not: decide
anything ``lease.py`` does, or talk to the API server except through ``Kube``.

Example::

    elector = Elector(kube, "pdscaler-system", "pdscaler-leader", "pdscaler-7d9f_1")
    elector.start()
    ...                      # ticks write only while elector.may_write()
    elector.stop()           # fence closed first, then the Lease released
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from pdscaler import lease
from pdscaler.kube import Kube, KubeError
from pdscaler.liveness import ELECTOR_FACTOR, ElectorFacts

log = logging.getLogger("pdscaler.leader")


class Elector:
    """Leader election for one process. Thread-safe: ``may_write`` is called from the
    tick threads, ``step`` from the elector's own."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        timings: lease.Timings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(tz=UTC),
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timings = timings if timings is not None else lease.Timings()
        self.clock = clock
        self.wall = wall
        self.on_change = on_change
        self.seen: lease.Seen | None = None
        self.last_renew: float | None = None
        self.last_step: float | None = None  # the round in progress started (or the last)
        self.last_step_end: float | None = None
        self.in_round = False
        self.since = clock()
        #: what this replica's term is: (times it became the leader here, holder,
        #: leaseTransitions, acquireTime) of the Lease it took or created
        self._term: tuple[int, str, int, str] | None = None
        self._epoch = 0
        self._leading = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the fence

    def may_write(self) -> bool:
        """``lease.may_write`` now: this replica renewed less than renewDeadline ago."""
        with self._lock:
            last = self.last_renew
        return lease.may_write(last, self.clock(), self.timings)

    def term(self) -> tuple[int, str, int, str] | None:
        """The token of the term this replica holds now (None: it may not write). A
        renewal keeps it; taking the Lease again (after anyone else held it, or after
        this replica's fence closed) gives a new one, so a write of a tick that began
        in an earlier term is refused (``FencedKube``). Example: a takes the Lease
        (transitions 3) -> (1, "a", 3, "2026-...Z"); b takes it, a takes it back ->
        (2, "a", 5, ...)."""
        with self._lock:
            term = self._term
        return term if self.may_write() else None

    def facts(self) -> ElectorFacts:
        """The rounds' progress for ``liveness.verdict``: stuck after 4 x
        leaseDuration (60 s) in one round or without one."""
        return ElectorFacts(
            round_started=self.last_step if self.in_round else None,
            last_round_end=self.last_step_end,
            since=self.since,
            limit=ELECTOR_FACTOR * self.timings.lease_duration,
        )

    def holder(self) -> str:
        """The holder in the Lease as last read ("" when none / not read yet)."""
        seen = self.seen
        return seen.record.holder if seen is not None else ""

    # ------------------------------------------------------------------- one round

    def step(self) -> lease.Move:
        """One round: GET, decide, write. Returns the move tried (WAIT: none, or the
        write lost a race). Raises on API errors other than 404/409."""
        self.last_step = self.clock()
        self.in_round = True
        try:
            return self._round()
        finally:
            self.in_round = False
            self.last_step_end = self.clock()

    def _round(self) -> lease.Move:
        raw = self.kube.get_lease(self.namespace, self.name)
        now = self.clock()  # after the read: what it returned was current no earlier
        record = lease.Record.from_lease(raw) if raw is not None else None
        self.seen = lease.observe(self.seen, record, now)
        move = lease.decide(self.identity, self.seen, now, self.timings)
        if move is not lease.Move.WAIT:
            want = lease.desired(self.identity, record, move, self.wall(), self.timings)
            open_before = self.may_write()  # a renewal after a closed fence: a new term
            sent = self.clock()
            try:
                if move is lease.Move.CREATE:
                    out = self.kube.create_lease(self.namespace, self.name, want.spec())
                else:
                    out = self.kube.update_lease(
                        self.namespace, self.name, want.spec(), want.resource_version
                    )
            except KubeError as err:
                if err.status != 409:
                    raise
                log.info("lease %s: %s lost a race (%s)", self.name, move, err.reason)
                self._note_leading()
                return lease.Move.WAIT
            written = lease.Record.from_lease(out)
            self.seen = lease.Seen(written, sent)
            with self._lock:
                self.last_renew = sent
                if move is not lease.Move.RENEW or not open_before or self._term is None:
                    self._epoch += 1
                    self._term = (
                        self._epoch,
                        written.holder,
                        written.transitions,
                        written.acquire_time or "",
                    )
            if move is not lease.Move.RENEW:
                log.info("lease %s/%s acquired by %s", self.namespace, self.name, self.identity)
        self._note_leading()
        return move

    def _note_leading(self) -> None:
        leading = self.may_write()
        if not leading:
            with self._lock:
                self._term = None  # the fence closed: a renewal after it is a new term
        if leading != self._leading:
            self._leading = leading
            log.info(
                "%s %s the leader (lease %s/%s, holder %r)",
                self.identity,
                "is now" if leading else "is no longer",
                self.namespace,
                self.name,
                self.holder(),
            )
            if self.on_change is not None:
                self.on_change(leading)

    # ------------------------------------------------------------------ the thread

    def run(self) -> None:
        """Rounds every ``retry_period`` until ``stop``; errors are logged and the round
        is retried (the fence closes by itself when renewals keep failing)."""
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("lease %s/%s: round failed", self.namespace, self.name)
                self._note_leading()
            self._stop.wait(self.timings.retry_period)

    def start(self) -> Elector:
        self._thread = threading.Thread(target=self.run, name="pdscaler-leader", daemon=True)
        self._thread.start()
        return self

    def stop(self, release: bool = True) -> None:
        """Stop the rounds, close the fence, then (``release``) hand the Lease back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timings.retry_period + 10.0)
        with self._lock:
            held = self.last_renew is not None
            self.last_renew = None
            self._term = None
        self._note_leading()
        if release and held:
            self.release()

    def release(self) -> None:
        """Give the Lease up if this replica still holds it (a conflict: someone else
        already does, nothing to give up)."""
        try:
            raw = self.kube.get_lease(self.namespace, self.name)
            if raw is None:
                return
            record = lease.Record.from_lease(raw)
            if record.holder != self.identity:
                return
            gone = lease.released(record, self.wall())
            self.kube.update_lease(self.namespace, self.name, gone.spec(), gone.resource_version)
            log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        except KubeError as err:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, err)
