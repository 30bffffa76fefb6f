"""Liveness under brown-outs (issue 30, item 2): ``liveness.verdict`` judges progress
(a tick started on a thread or finished), not speed; the tick loop reports a queued
tick as queued; the API client's re-sends are bounded, counted and never hidden inside
the client library."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import urllib3
from kubernetes import client as k8s_client

from pdscaler import handlers
from pdscaler.kube import RETRY_ATTEMPTS, FencedError, FencedKube, Kube
from pdscaler.liveness import ElectorFacts, Facts, Health, verdict
from pdscaler.telemetry import Telemetry

# ------------------------------------------------------------------ the pure rules


def test_a_loop_that_does_not_beat_is_dead() -> None:
    assert not verdict(Facts(now=0.0, limit=45.0, last_beat=None)).alive
    assert verdict(Facts(now=144.9, limit=45.0, last_beat=100.0)).alive
    v = verdict(Facts(now=145.0, limit=45.0, last_beat=100.0))
    assert not v.alive
    assert "no pass for 45 s" in v.reason


def test_slow_ticks_that_progress_are_alive_and_stuck_ones_are_not() -> None:
    """8 ticks running for 40 s (an API server that does not answer), one finished
    2 s ago: alive. Nothing started or finished for 45 s with ticks queued: dead."""
    busy = Facts(now=140.0, limit=45.0, last_beat=139.5, running=(100.0,) * 8, queued=92,
                 last_progress=138.0)  # fmt: skip
    assert verdict(busy).alive
    stuck = Facts(now=145.0, limit=45.0, last_beat=144.5, running=(100.0,) * 8, queued=92,
                  last_progress=100.0)  # fmt: skip
    v = verdict(stuck)
    assert not v.alive
    assert "8 running, 92 queued" in v.reason
    idle = Facts(now=1000.0, limit=45.0, last_beat=999.5, last_progress=100.0)
    assert verdict(idle).alive  # nothing in flight: nothing to make progress on


def test_one_hung_tick_is_dead_after_hung_after_even_while_others_progress() -> None:
    f = Facts(now=460.0, limit=45.0, last_beat=459.5, running=(100.0, 458.0),
              last_progress=459.0, hung_after=360.0)  # fmt: skip
    assert not verdict(f).alive
    assert verdict(Facts(**{**f.__dict__, "now": 459.9})).alive


def test_a_slow_lease_round_is_alive_a_stuck_elector_is_not() -> None:
    """limit 60 s (4 x 15 s): a round in progress for 30 s (the request's timeout
    was the old 30 s read) is alive; 60 s is a stuck thread; no round at all for 60 s
    (the thread died) is dead too."""
    base = Facts(now=130.0, limit=45.0, last_beat=129.5)
    slow = ElectorFacts(round_started=100.0, last_round_end=98.0, since=0.0, limit=60.0)
    assert verdict(Facts(**{**base.__dict__, "elector": slow})).alive
    stuck = Facts(**{**base.__dict__, "now": 160.0, "last_beat": 159.5, "elector": slow})
    assert "lease round in progress for 60 s" in verdict(stuck).reason
    dead = ElectorFacts(round_started=None, last_round_end=100.0, since=0.0, limit=60.0)
    f = Facts(**{**base.__dict__, "now": 160.0, "last_beat": 159.5, "elector": dead})
    assert "no lease round for 60 s" in verdict(f).reason


# ------------------------------------------------- the loop: queued is not running


class VirtualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _settle(count: Callable[[], int], want: int) -> None:
    """Wait (really, a few ms) until ``count()`` is ``want``: the tick threads took
    what the virtual time step released."""
    deadline = time.monotonic() + 5.0
    while (have := count()) != want:
        assert time.monotonic() < deadline, f"{have} ticks running, wanted {want}"
        time.sleep(0.001)


def test_a_fleet_of_slow_ticks_queued_for_the_threads_stays_alive() -> None:
    """The issue's model: 100 PDDeployments due at once, 8 tick threads, each tick 4 s
    (two rounds of 2 s Prometheus queries): the last starts at 48 s. Before, a tick was
    "running" from its submission and /healthz went 503 at 45 s while ticks finished
    every 0.5 s; now alive at every 0.5 s step up to 60 s, and dead 45 s after every
    thread froze."""
    clock = VirtualClock()
    health = Health()
    gates: dict[str, threading.Event] = {}
    done = threading.Event()
    started: dict[str, float] = {}
    lock = threading.Lock()

    def tick(_ns: str, name: str) -> None:
        if done.is_set():
            return
        with lock:
            started[name] = clock()
            gate = gates[name] = threading.Event()  # this tick's
        gate.wait(10)

    pool = ThreadPoolExecutor(handlers.TICK_WORKERS)
    loop = handlers.TickLoop(tick, lambda _ns, _n: 15.0, lambda: True, health, pool=pool,
                             clock=clock)  # fmt: skip
    for i in range(100):
        loop.notice("serving", f"p{i:03d}", 1)
    dead_at: list[float] = []
    reasons: list[str] = []
    frozen = False
    try:
        for step in range(0, 240):
            clock.t = step / 2
            loop.run_once(clock.t)
            if not frozen:
                with lock:
                    due = [n for n, s in started.items() if clock.t >= s + 4.0]
                with loop._lock:
                    futures = [loop.running[("serving", n)] for n in due]
                with lock:
                    for name in due:
                        gates[name].set()
                        del started[name]
                for fut in futures:
                    fut.result(timeout=5)
                with loop._lock:
                    in_flight = len(loop.running)
                _settle(lambda: len(started), min(handlers.TICK_WORKERS, in_flight))
            if clock.t == 60.0:
                frozen = True  # every thread stops here: nothing starts or finishes
            if not health.alive(clock.t):
                dead_at.append(clock.t)
                reasons.append(health.verdict(clock.t).reason)
    finally:
        done.set()
        with lock:
            for gate in gates.values():
                gate.set()
        loop.stop(timeout=5)
    assert dead_at, "never dead although every tick thread froze at 60 s"
    assert dead_at[0] >= 60.0 + 45.0 - 4.0, (dead_at[:3], reasons[:3])  # while ticks progressed
    assert dead_at[0] <= 60.0 + 45.0 + 0.5, (dead_at[:3], reasons[:3])


# --------------------------------------------------- the client: bounded re-sends


class Hangup:
    """A TCP server that reads each request and closes the connection without an
    answer (an API server that dies mid-request); ``methods`` lists what arrived."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.methods: list[str] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except OSError:
                    continue
                if data:
                    self.methods.append(data.split(b" ", 1)[0].decode())

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def hangup() -> Iterator[Hangup]:
    server = Hangup()
    yield server
    server.close()


#: what a request whose connection the server closed raises
BROKEN = (urllib3.exceptions.HTTPError, OSError)


def _api(port: int) -> k8s_client.ApiClient:
    cfg = k8s_client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    return k8s_client.ApiClient(cfg)


def test_a_read_is_sent_at_most_retry_attempts_times_and_each_retry_is_counted(
    hangup: Hangup,
) -> None:
    """Before: 16 GETs (urllib3's 3 silent re-sends inside each of the 4 tries)."""
    kube = Kube(_api(hangup.port))
    kube.sleep = lambda _s: None
    with pytest.raises(BROKEN):
        kube.get_pdd("serving", "chat")
    assert hangup.methods == ["GET"] * RETRY_ATTEMPTS
    assert kube.retry_snapshot() == {("get", "pddeployments", "read"): RETRY_ATTEMPTS - 1}
    telemetry = Telemetry()
    telemetry.track_retries(kube.retry_snapshot)
    text = telemetry.exposition().decode()
    line = 'pdscaler_kube_retries_total{reason="read",resource="pddeployments",verb="get"} 3.0'
    assert line in text


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_a_write_whose_connection_broke_is_not_sent_again(hangup: Hangup, method: str) -> None:
    """It may have been applied: the next tick reads and decides again. Before: PUT
    and DELETE 16 times, 4 of them past the fence's check, PATCH 4 times."""
    kube = Kube(_api(hangup.port))
    kube.sleep = lambda _s: None
    sends: dict[str, Callable[[], object]] = {
        "PUT": lambda: kube.update_lease("ns", "pdscaler-leader", {"holderIdentity": "a"}, "7"),
        "DELETE": lambda: kube.delete("Deployment", "serving", "chat-v1-decode", uid="u1"),
        "PATCH": lambda: kube.annotate_pod("serving", "p0", {"x": "1"}),
    }
    send = sends[method]
    with pytest.raises(BROKEN):
        send()
    assert hangup.methods == [method]
    assert kube.retry_snapshot() == {}


def test_a_fenced_write_is_never_resent_past_the_fence(hangup: Hangup) -> None:
    """The fence closes right after the first send: nothing else is sent (urllib3 used
    to re-send the DELETE inside the one check)."""
    kube = FencedKube(_api(hangup.port), fence=lambda: not hangup.methods, instance="op-a")
    kube.sleep = lambda _s: None
    with pytest.raises(BROKEN) as info:
        kube.delete("Deployment", "serving", "chat-v1-decode", uid="u1")
    assert not isinstance(info.value, FencedError)  # it left; its connection broke
    assert hangup.methods == ["DELETE"]
