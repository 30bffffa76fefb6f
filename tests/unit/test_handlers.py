"""The kopf glue: no handler needs a finalizer (so none is added, and kopf removes the
stale one), kopf's peering is not used, the tick loop ticks only while this replica
leads, and liveness follows the loop (``liveness.Health``)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from pdscaler import handlers
from pdscaler.liveness import Health
from support.manual_pool import ManualPool


def test_no_handler_requires_a_finalizer() -> None:
    """Owner references garbage-collect the owned objects; a finalizer would block the
    namespace's deletion once the operator is uninstalled."""
    registry = kopf.get_default_registry()
    spawning = list(registry._spawning.get_all_handlers())
    changing = list(registry._changing.get_all_handlers())
    assert spawning == []  # no daemons/timers: kopf forces a finalizer on those
    assert all(not getattr(h, "requires_finalizer", False) for h in changing)
    assert handlers.FINALIZER == "pdscaler.io/finalizer"  # the name kopf cleans up


Made = tuple[handlers.TickLoop, list[tuple[str, str]], ManualPool, list[float]]


def make_loop(leading: list[bool]) -> Made:
    ticks: list[tuple[str, str]] = []
    pool = ManualPool()
    clock = [0.0]
    resets: list[float] = []
    loop = handlers.TickLoop(
        tick=lambda ns, n: ticks.append((ns, n)),
        interval=lambda ns, n: 15.0,
        leader=lambda: leading[0],
        health=Health(),
        on_lead=lambda: resets.append(clock[0]),
        pool=pool,  # type: ignore[arg-type]
        clock=lambda: clock[0],
    )
    return loop, ticks, pool, clock


def test_a_follower_ticks_nothing_and_a_new_leader_ticks_everything_at_once() -> None:
    """Follower from 0 to 30 s: no tick. Leader at 31: chat and faq at once (memory
    reset first), then chat every 15 s after its tick ended; a new generation is due
    at once."""
    leading = [False]
    loop, ticks, pool, clock = make_loop(leading)
    loop.notice("serving", "chat", 1)
    loop.notice("serving", "faq", 1)
    for t in range(0, 31, 2):
        clock[0] = float(t)
        assert loop.run_once(clock[0]) == []
    assert ticks == []
    leading[0] = True
    clock[0] = 31.0
    assert sorted(loop.run_once(31.0)) == [("serving", "chat"), ("serving", "faq")]
    assert loop.run_once(31.5) == []  # still running: one tick per object at a time
    clock[0] = 32.0
    pool.drain()
    assert sorted(ticks) == [("serving", "chat"), ("serving", "faq")]
    assert loop.run_once(46.9) == []
    assert len(loop.run_once(47.0)) == 2  # 32 + 15
    clock[0] = 47.5
    pool.drain()
    loop.notice("serving", "chat", 2)  # a spec change
    assert loop.run_once(48.0) == [("serving", "chat")]
    loop.notice("serving", "chat", 2)  # a status write: same generation, not due
    clock[0] = 48.5
    pool.drain()
    assert loop.run_once(49.0) == []
    assert loop.on_lead is not None
    leading[0] = False
    assert loop.run_once(70.0) == []  # lost the Lease: nothing more


def test_the_pause_annotation_put_on_or_taken_off_is_ticked_at_once() -> None:
    """chat ticked at 0 (next due at 15): paused at 5 -> due at once; seen again paused
    (a status write) -> not due; unpaused at 7 -> due at once."""
    loop, ticks, pool, clock = make_loop([True])
    loop.notice("serving", "chat", 1)
    assert loop.run_once(0.0) == [("serving", "chat")]
    pool.drain()
    assert loop.run_once(4.0) == []
    loop.notice("serving", "chat", 1, paused=True)
    assert loop.run_once(5.0) == [("serving", "chat")]
    clock[0] = 5.5
    pool.drain()
    assert ticks == [("serving", "chat")] * 2
    loop.notice("serving", "chat", 1, paused=True)
    assert loop.run_once(6.0) == []
    loop.notice("serving", "chat", 1)
    assert loop.run_once(7.0) == [("serving", "chat")]


def test_losing_the_lease_marks_every_object_unobserved_from_then_on() -> None:
    """A leader whose fence closes (the API server stopped: it cannot renew) ticks
    nothing; that time must not count against a rollout's progressDeadline when it
    leads again (seen in the lab: D4 SIGSTOP rolled back 0.6 s after SIGCONT)."""
    leading = [True]
    lost: list[list[tuple[str, str]]] = []
    loop, _, pool, _ = make_loop(leading)
    loop.on_lose = lost.append
    loop.notice("serving", "chat", 1)
    loop.run_once(1.0)
    pool.drain()
    assert lost == []
    leading[0] = False
    loop.run_once(2.0)
    loop.run_once(3.0)
    assert lost == [[("serving", "chat")]]  # once, at the transition


def test_the_unobserved_mark_keeps_the_earliest_start(monkeypatch: Any) -> None:
    rt = SimpleNamespace(clock=lambda: 500.0, failing_since={("serving", "faq"): 400.0})
    monkeypatch.setattr(handlers, "runtime", lambda: rt)
    handlers._note_unobserved([("serving", "chat"), ("serving", "faq")])
    assert rt.failing_since == {("serving", "chat"): 500.0, ("serving", "faq"): 400.0}


def test_health_follows_the_loop() -> None:
    """3 x 15 s: beat at 100 -> alive at 144.9, dead at 145; a tick started at 101 and
    still running makes it dead at 146 even while the loop beats."""
    h = Health()
    assert not h.alive(0.0)  # never beat
    h.beat(100.0, 15.0)
    assert h.alive(144.9)
    assert not h.alive(145.0)
    h.tick_started(("serving", "chat"), 101.0)
    h.beat(140.0, 15.0)
    assert h.alive(145.9)
    assert not h.alive(146.0)
    h.tick_done(("serving", "chat"), 146.0)
    assert h.alive(146.0)


def test_the_loop_beats_as_a_follower_and_when_idle() -> None:
    leading = [False]
    loop, _, _, _ = make_loop(leading)
    loop.run_once(10.0)
    assert loop.health.alive(10.0)
    assert loop.health.last_beat == 10.0


def test_run_operator_does_not_use_kopf_peering(monkeypatch: Any) -> None:
    """kopf peering with several replicas at priority 0 pauses every replica: the
    operator always runs kopf standalone and elects through the Lease."""
    from pdscaler.cli import run

    seen: dict[str, Any] = {}
    monkeypatch.setattr(kopf, "run", lambda **kw: seen.update(kw))

    class Rt:
        def __init__(self) -> None:
            from pdscaler.kube import WriteAudit
            from pdscaler.telemetry import Telemetry

            self.kube = SimpleNamespace(audit=WriteAudit())
            self.telemetry = Telemetry()

    from pdscaler.runtime import Runtime

    monkeypatch.setattr(Runtime, "from_environment", staticmethod(Rt))
    run.run_operator(namespaces=["serving"], metrics_port=0)
    assert seen["standalone"] is True
    assert "peering_name" not in seen or seen["peering_name"] is None
    handlers.install(None)


def test_metrics_bind_loopback_unless_told() -> None:
    """``pdscaler run`` from a workstation serves /metrics on loopback only; the chart
    passes ``--metrics-address=0.0.0.0`` explicitly."""
    from pdscaler.cli import run
    from pdscaler.telemetry import MetricsServer, Telemetry

    assert run.DEFAULT_METRICS_BIND == "127.0.0.1"
    server = MetricsServer(Telemetry(), 0).start()
    try:
        assert server._server.server_address[0] == "127.0.0.1"
    finally:
        server.stop()


def test_run_refuses_lease_timings_client_go_would_refuse(monkeypatch: Any) -> None:
    """leaseDuration 10 <= renewDeadline 10: one line on stderr, exit 2, nothing run."""
    from typer.testing import CliRunner

    from pdscaler.cli import build_app, run

    monkeypatch.setattr(run, "run_operator", lambda **kw: pytest.fail("ran"))
    args = ["run", "-n", "serving", "--leader-elect", "--lease-duration", "10"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 2
    assert "lease duration 10.0 s must exceed renew deadline 10.0 s" in result.output


def test_run_elects_with_the_lease_options(monkeypatch: Any) -> None:
    """--leader-elect passes the Lease's name, namespace, identity and timings on."""
    from typer.testing import CliRunner

    from pdscaler.cli import build_app, run

    seen: dict[str, Any] = {}
    monkeypatch.setattr(run, "run_operator", lambda **kw: seen.update(kw))
    args = ["run", "-n", "serving", "--leader-elect", "--identity", "op-a"]
    args += ["--lease-duration", "6", "--renew-deadline", "4", "--retry-period", "1"]
    result = CliRunner().invoke(build_app(), args, env={"POD_NAMESPACE": "ops"})
    assert result.exit_code == 0, result.output
    election = seen["election"]
    assert (election.name, election.namespace, election.identity) == (
        "pdscaler-leader",
        "ops",
        "op-a",
    )
    assert (election.timings.lease_duration, election.timings.renew_deadline) == (6.0, 4.0)
    assert seen["metrics_host"] == "127.0.0.1"


def test_a_tick_reports_how_late_it_started_after_it_was_due() -> None:
    """chat ticked at 0 (due at once: no lateness), done at 1 -> due at 16; the loop
    submits it at 16.5 and a tick thread starts it at 19 (the threads were busy): 3.0 s
    late. Seen failing with on_late never called (the metric read 0 ticks)."""
    late: list[float] = []
    loop, _ticks, pool, clock = make_loop([True])
    loop.on_late = late.append
    loop.notice("serving", "chat", 1)
    assert loop.run_once(0.0) == [("serving", "chat")]
    clock[0] = 1.0
    pool.drain()
    assert late == []  # a new generation is due at once: not late
    assert loop.run_once(16.5) == [("serving", "chat")]
    clock[0] = 19.0
    pool.drain()
    assert late == [3.0]
