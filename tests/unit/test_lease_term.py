"""One writer per term (issue 30, item 4): a follower dates the Lease it read from when
the read RETURNED; a tick's writes carry the leadership term it began in; the elector's
rounds are facts for /healthz. The fake Lease API and clock are test_lease's."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler.kube import FencedError, FencedKube
from pdscaler.lease import Move
from pdscaler.liveness import Facts, verdict
from support.leases import FakeLeases, electors


class SlowRead:
    """The follower's GET of the Lease takes ``seconds``; ``meanwhile`` runs at the
    time it lands in that window (the leader's renewal)."""

    def __init__(self, api: FakeLeases, clock: Any, seconds: float, meanwhile: Any) -> None:
        self.api, self.clock, self.seconds, self.meanwhile = api, clock, seconds, meanwhile

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        start = self.clock.t
        self.meanwhile(start)
        self.clock.t = start + self.seconds
        return self.api.get_lease(namespace, name)

    def update_lease(self, *args: Any) -> dict[str, Any]:
        return self.api.update_lease(*args)

    def create_lease(self, *args: Any) -> dict[str, Any]:
        return self.api.create_lease(*args)


def test_a_slow_read_does_not_date_the_lease_from_before_it() -> None:
    """a leads from 100; b's round at 102 reads for 20 s and a's renewal, sent at 116,
    lands in that window; a's renewals fail from then on (its fence open to 126). b
    used to date that record 102 and take the Lease at 124: two writers 124-126. Now
    it dates it 122 (the read's return) and takes it at 138, after a's fence closed."""
    api, clock, a, b = electors()
    assert a.step() is Move.CREATE  # t = 100
    assert b.step() is Move.WAIT

    def renew_at_116(start: float) -> None:
        clock.t = start + 14.0
        assert a.step() is Move.RENEW  # sent at 116
        clock.t = start

    clock.t = 102.0
    b.kube = SlowRead(api, clock, 20.0, renew_at_116)  # type: ignore[assignment]
    assert b.step() is Move.WAIT  # returns at 122
    b.kube = api  # type: ignore[assignment]
    both: list[float] = []
    took = None
    while clock.t < 150.0:  # a renews no more; b polls every 2 s
        clock.t += 2.0
        if b.step() is Move.TAKE and took is None:
            took = clock.t
        if a.may_write() and b.may_write():
            both.append(clock.t)
    assert both == []
    assert took is not None
    assert took >= 122.0 + 15.0


def test_a_tick_that_began_in_an_earlier_term_writes_nothing() -> None:
    """a leads (term 1) and a tick begins; b takes the Lease; a takes it back (term 2):
    the old tick's write is refused although a may write again; a new tick writes."""
    _, clock, a, b = electors()
    sent: list[str] = []

    class Recording(FencedKube):
        def _request(self, method: str, path: str, query: Any = None, body: Any = None,
                     content_type: str = "") -> dict[str, Any]:  # fmt: skip
            sent.append(method)
            return {}

    kube = Recording(object(), fence=a.may_write, instance="a", term=a.term)  # type: ignore[arg-type]
    obj = {"kind": "Deployment", "metadata": {"name": "d", "namespace": "s"}}
    a.step()  # t = 100: a leads
    b.step()
    first = a.term()
    with kube.pinned():
        kube.apply(obj)  # in its term: sent
        assert sent == ["PATCH"]
        clock.t = 116.0  # a stopped 16 s: b takes the Lease
        assert b.step() is Move.TAKE
        b.stop(release=True)  # b hands it back
        clock.t = 120.0
        assert a.step() is Move.TAKE
        assert a.may_write()
        assert a.term() != first
        with pytest.raises(FencedError, match="earlier leadership term"):
            kube.apply(obj)
    assert sent == ["PATCH"]
    with kube.pinned():  # a tick that begins now
        kube.apply(obj)
    assert sent == ["PATCH", "PATCH"]


def test_renewals_keep_the_term_a_closed_fence_ends_it() -> None:
    _, clock, a, _ = electors()
    a.step()
    first = a.term()
    for _ in range(5):
        clock.t += 2.0
        assert a.step() is Move.RENEW
    assert a.term() == first
    clock.t += 11.0  # no renewal for the renew deadline: fenced
    assert a.term() is None
    assert a.step() is Move.RENEW  # the Lease still names a: renewed, a new term
    assert a.term() is not None
    assert a.term() != first


def test_the_elector_rounds_are_liveness_facts() -> None:
    """A round stuck in its GET for 30 s: alive; for 60 s (4 x 15 s): dead."""
    api, clock, a, _ = electors()
    seen: list[bool] = []

    def probe(start: float) -> None:
        for dt in (30.0, 60.0):
            f = Facts(now=start + dt, limit=45.0, last_beat=start + dt, elector=a.facts())
            seen.append(verdict(f).alive)

    a.kube = SlowRead(api, clock, 1.0, probe)  # type: ignore[assignment]
    a.step()
    assert seen == [True, False]
    assert a.facts().round_started is None
    assert verdict(Facts(now=clock.t + 1, limit=45.0, last_beat=clock.t, elector=a.facts())).alive
