"""Leader election over a Lease: the pure decisions (``pdscaler.lease``) and the elector
(``pdscaler.leader``) against an in-memory Lease API with resourceVersion conflicts, on a
fake clock. Timings are client-go's 15/10/2 s unless a test says otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import lease
from pdscaler.kube import FencedError, FencedKube, KubeError
from pdscaler.lease import Move, Record, Seen, Timings
from support.leases import WALL, FakeLeases, T, electors


def rec(holder: str, rv: str = "1", duration: int | None = 15, renew: str = "r1") -> Record:
    return Record(holder, duration, "a0", renew, 0, rv)


# ------------------------------------------------------------------ pure decisions


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_duration": 10.0, "renew_deadline": 10.0}, "lease duration"),
        ({"renew_deadline": 2.0, "retry_period": 2.0}, "renew deadline"),
        ({"retry_period": 0.0}, "retry period"),
    ],
)
def test_timings_are_checked_as_client_go_does(kwargs: dict[str, float], message: str) -> None:
    """leaseDuration > renewDeadline > 1.2 x retryPeriod > 0."""
    with pytest.raises(ValueError, match=message):
        Timings(**kwargs)


def test_the_fence_closes_renew_deadline_after_the_last_renewal() -> None:
    """Renewed (sent) at 100.0: may write at 109.99, not at 110.0; never without one."""
    assert lease.may_write(100.0, 109.99, T)
    assert not lease.may_write(100.0, 110.0, T)
    assert not lease.may_write(None, 100.0, T)


def test_observe_keeps_the_first_seen_time_of_unchanged_content() -> None:
    """Seen at 100 with renewTime r1; r1 again at 102 -> 100; r2 at 104 -> 104."""
    first = lease.observe(None, rec("b", rv="5"), 100.0)
    again = lease.observe(first, rec("b", rv="5"), 102.0)
    newer = lease.observe(again, rec("b", rv="6", renew="r2"), 104.0)
    assert first is not None
    assert again is not None
    assert newer is not None
    assert (first.at, again.at, newer.at) == (100.0, 100.0, 104.0)
    gone = lease.observe(newer, None, 105.0)  # deleted: a gone record of its holder
    assert gone is not None
    assert (gone.record.gone, gone.record.holder, gone.at) == (True, "b", 105.0)


def test_decide() -> None:
    """No Lease: CREATE. Ours: RENEW. Released: TAKE. Another's, seen at 100: WAIT until
    114.99, TAKE from 115.0 (its own 15 s duration; ours when it has none)."""
    assert lease.decide("a", None, 0.0, T) is Move.CREATE
    assert lease.decide("a", Seen(rec("a"), 100.0), 200.0, T) is Move.RENEW
    assert lease.decide("a", Seen(rec(""), 100.0), 100.0, T) is Move.TAKE
    assert lease.decide("a", Seen(rec("b"), 100.0), 114.99, T) is Move.WAIT
    assert lease.decide("a", Seen(rec("b"), 100.0), 115.0, T) is Move.TAKE
    assert lease.decide("a", Seen(rec("b", duration=None), 100.0), 115.0, T) is Move.TAKE
    assert lease.decide("a", Seen(rec("b", duration=40), 100.0), 139.0, T) is Move.WAIT


def test_desired_records() -> None:
    """RENEW keeps acquireTime and transitions; TAKE is transition + 1; CREATE is 0."""
    stamp = "2026-01-01T00:00:00.000000Z"
    cur = Record("b", 15, "a0", "r1", 3, "9")
    renew = lease.desired("b", cur, Move.RENEW, WALL, T)
    assert (renew.holder, renew.acquire_time, renew.renew_time, renew.transitions) == (
        "b",
        "a0",
        stamp,
        3,
    )
    take = lease.desired("a", cur, Move.TAKE, WALL, T)
    assert (take.holder, take.acquire_time, take.transitions, take.resource_version) == (
        "a",
        stamp,
        4,
        "9",
    )
    create = lease.desired("a", None, Move.CREATE, WALL, T)
    assert create.spec() == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }
    gone = lease.released(cur, WALL)
    assert (gone.holder, gone.duration_seconds) == ("", 1)


# -------------------------------------------------------- the elector, fake API


def test_two_started_at_once_exactly_one_leads() -> None:
    """Both see no Lease; a's POST lands first; b's POST gets 409 AlreadyExists, and
    b's next round sees a's fresh Lease: WAIT."""
    api, clock, a, b = electors()
    assert a.kube.get_lease("ops", "x") is None
    assert a.step() is Move.CREATE
    b.seen = None
    # b decided CREATE on an empty store as well: its POST loses the race
    with pytest.raises(KubeError):
        api.create_lease("ops", "pdscaler-leader", {"holderIdentity": "b"})
    assert b.step() is Move.WAIT
    assert a.may_write()
    assert not b.may_write()
    for _ in range(20):  # 40 s of rounds: a renews, b keeps waiting
        clock.t += 2.0
        assert a.step() is Move.RENEW
        assert b.step() is Move.WAIT
        assert a.may_write()
        assert not b.may_write()


def test_a_conflicting_update_loses_the_round() -> None:
    """a read version 1, b wrote version 2 meanwhile: a's PUT is a 409, a does not lead."""
    api, clock, a, b = electors()
    api.create_lease("ops", "pdscaler-leader", {"holderIdentity": "", "leaseTransitions": 0})
    b.step()  # b takes the released Lease (version 2)
    a.seen = lease.observe(None, Record("", 15, None, None, 0, "1"), clock.t)
    a.kube = _StaleGet(api, version="1")  # type: ignore[assignment]
    assert a.step() is Move.WAIT
    assert not a.may_write()
    assert b.may_write()


class _StaleGet:
    """Answers GET with an old version (a read that raced a write)."""

    def __init__(self, api: FakeLeases, version: str) -> None:
        self.api, self.version = api, version

    def get_lease(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": self.version}, "spec": {"holderIdentity": ""}}

    def update_lease(self, *args: Any) -> dict[str, Any]:
        return self.api.update_lease(*args)


def test_a_stopped_leader_is_fenced_before_the_next_one_takes_over() -> None:
    """Worked numbers (15/10/2): a renews at t=100 and is stopped. a's fence closes at
    110; b, which first saw a's last renewal at 100 (its poll), takes the Lease at its
    first poll at or after 115 (116 here). At no time do both may-write. a continued
    at 125: fenced at once, its round sees holder b and waits."""
    api, clock, a, b = electors()
    assert a.step() is Move.CREATE  # t = 100, a leads
    assert b.step() is Move.WAIT  # b first saw a's record at 100
    timeline: dict[float, tuple[bool, bool]] = {}
    while clock.t < 124.0:  # a is stopped: only b polls
        clock.t += 2.0
        b.step()
        timeline[clock.t] = (a.may_write(), b.may_write())
    assert timeline[108.0] == (True, False)
    assert timeline[110.0] == (False, False)  # fence closed, nobody writes
    assert timeline[114.0] == (False, False)
    assert timeline[116.0] == (False, True)  # b's first poll at or after 115
    assert all(not (x and y) for x, y in timeline.values())
    clock.t = 125.0
    assert not a.may_write()  # before any request
    assert a.step() is Move.WAIT
    assert api.writes[-1] == ("update", "b")
    assert not a.may_write()
    assert api.obj is not None
    assert api.obj["spec"]["leaseTransitions"] == 1


def test_a_leader_that_cannot_renew_stops_writing_at_the_deadline() -> None:
    """The API refuses a's renewals from t=100 on: a still writes at 109.9, not at 110."""
    api, clock, a, _ = electors()
    a.step()

    def broken(
        namespace: str, name: str, spec: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        raise KubeError(500, "InternalError", "etcd down")

    api.update_lease = broken  # type: ignore[method-assign]
    clock.t = 102.0
    with pytest.raises(KubeError):
        a.step()
    clock.t = 109.9
    assert a.may_write()
    clock.t = 110.0
    assert not a.may_write()


def test_release_hands_the_lease_over_at_the_next_poll() -> None:
    """a stops: fence closed first, then holder "" and 1 s: b takes it at its next poll."""
    api, clock, a, b = electors()
    a.step()
    b.step()
    a.stop(release=True)
    assert not a.may_write()
    assert api.obj is not None
    assert api.obj["spec"]["holderIdentity"] == ""
    clock.t += 2.0
    assert b.step() is Move.TAKE
    assert b.may_write()


def test_fenced_kube_refuses_writes_and_names_the_instance_in_events() -> None:
    """Closed fence: no request, no audit record. Open: the Event's reportingInstance is
    the holder identity."""
    sent: list[tuple[str, Any]] = []
    fence = [False]

    class Recording(FencedKube):
        def _request(self, method: str, path: str, query: Any = None, body: Any = None,
                     content_type: str = "") -> dict[str, Any]:  # fmt: skip
            sent.append((method, body))
            return {}

    kube = Recording(object(), fence=lambda: fence[0], instance="op-a")  # type: ignore[arg-type]
    pdd = {"metadata": {"name": "chat", "namespace": "serving", "uid": "u1"}}
    with pytest.raises(FencedError):
        kube.event(pdd, "ScaledDecode", "Scaled decode 1->2")
    assert sent == []
    assert kube.audit.count == 0
    fence[0] = True
    kube.event(pdd, "ScaledDecode", "Scaled decode 1->2")
    ((method, body),) = sent
    assert method == "POST"
    assert body["reportingInstance"] == "op-a"
    assert kube.audit.count == 1


def test_the_fence_is_checked_again_when_the_request_leaves() -> None:
    """Open when the write starts, closed by the time the encoded request reaches the
    connection pool (the process was stopped in between): nothing is sent."""
    sent: list[str] = []
    fence = [True]

    class Pool:
        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(method)
            raise AssertionError("sent")

    class Api:
        def __init__(self) -> None:
            self.rest_client = type("Rest", (), {"pool_manager": Pool()})()

    class Stopped(FencedKube):
        def _request(self, method: str, path: str, query: Any = None, body: Any = None,
                     content_type: str = "") -> dict[str, Any]:  # fmt: skip
            fence[0] = False  # stopped and continued after the first check
            return self.api.rest_client.pool_manager.request(method, path)  # type: ignore[return-value]

    kube = Stopped(Api(), fence=lambda: fence[0], instance="op-a")  # type: ignore[arg-type]
    with pytest.raises(FencedError):
        kube.apply({"kind": "Deployment", "metadata": {"name": "d", "namespace": "s"}})
    assert sent == []
