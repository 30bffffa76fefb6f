"""A deleted Lease (drill D18, phase 2): the replica that did not hold it must not create
a new one while the holder's fence may still be open; the holder re-creates it at its
next round, and a holder that is gone is replaced once leaseDuration has passed since
the Lease was seen missing. Timings 15/10/2 s."""

from __future__ import annotations

from pdscaler import lease
from pdscaler.lease import Move, Record, Seen
from support.leases import T, electors


def test_a_follower_waits_a_lease_duration_after_the_lease_went() -> None:
    """b saw a's Lease (at 100), then saw it missing at 104: WAIT until 119, CREATE at
    119; a, the holder, re-creates at once."""
    held = Seen(Record("a", 15, "a0", "r1", 0, "5"), 100.0)
    gone = lease.observe(held, None, 104.0)
    assert gone is not None
    assert (gone.record.gone, gone.at) == (True, 104.0)
    assert lease.observe(gone, None, 110.0) == gone  # still missing: same first-seen
    assert lease.decide("b", gone, 110.0, T) is Move.WAIT
    assert lease.decide("b", gone, 118.9, T) is Move.WAIT
    assert lease.decide("b", gone, 119.0, T) is Move.CREATE
    assert lease.decide("a", gone, 104.0, T) is Move.CREATE
    assert lease.decide("c", None, 104.0, T) is Move.CREATE  # never saw one: first start


def test_the_holder_recreates_a_deleted_lease_and_keeps_the_only_fence() -> None:
    """a leads; the Lease is deleted; b's round comes first: b does not take it; a's
    next round re-creates it (a new term) and b follows it again."""
    api, clock, a, b = electors()
    a.step()
    b.step()
    clock.t += 2
    a.step()
    b.step()
    api.obj = None  # kubectl delete lease
    clock.t += 2
    assert b.step() is Move.WAIT
    assert not b.may_write()
    term = a.term()
    assert a.step() is Move.CREATE
    assert a.term() != term  # a new term: ticks pinned before it write nothing
    clock.t += 2
    assert b.step() is Move.WAIT
    assert api.writes[-1] == ("create", "a")
    assert [h for verb, h in api.writes if verb == "create"] == ["a", "a"]


def test_a_lease_deleted_with_its_holder_gone_is_taken_after_a_lease_duration() -> None:
    api, clock, a, b = electors()
    a.step()
    clock.t += 2
    b.step()
    api.obj = None  # a is gone too: it never runs again
    clock.t += 1
    assert b.step() is Move.WAIT  # seen missing at 103
    clock.t += 14.9
    assert b.step() is Move.WAIT
    clock.t += 0.2
    assert b.step() is Move.CREATE
    assert b.may_write()
    assert api.writes[-1] == ("create", "b")
