"""An API server outage in the middle of a rollout: the time every tick failed is not
time without progress (``Runtime.failing_since`` -> ``TickFacts.unobserved`` ->
``rollout.discount_unobserved``), so the outage alone never rolls back.

Worked numbers: interval 5 s, progressDeadline 20 s; v1 -> v2 starts, then for 40 s
every request fails (connection refused); the first good tick comes 45 s after the
last one. Counted in full (the gap is under 60 s), 45 s > 20 s would roll v2 back.
"""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import rollout
from pdscaler.reconcile import run_tick
from pdscaler.rollout.phases import RolloutState
from pdscaler.types import RolloutPhase, RolloutReason
from support.reconcile_world import NAME, NS, PDD_PATH, World


def _rolling_v2() -> World:
    w = World()
    w.tick()
    w.converge()
    pdd = w.kube.store[PDD_PATH]
    pdd["spec"]["rollout"] = {"progressDeadline": "20s"}
    pdd["spec"]["engine"]["version"] = "v2"
    pdd["metadata"]["generation"] = 2
    rep = w.tick()
    assert w.pdd()["status"]["rollout"]["phase"] == RolloutPhase.PROGRESSING, rep
    return w


def _outage(w: World, seconds: float, step: float = 5.0) -> None:
    """Every request refused for ``seconds``, the Runtime ticking every ``step`` s."""
    real = w.kube._request

    def refused(*_: Any, **__: Any) -> Any:
        raise ConnectionRefusedError(111, "Connection refused")

    w.kube._request = refused  # type: ignore[method-assign]
    try:
        t = 0.0
        while t < seconds:
            w.now += step
            t += step
            assert run_tick(w.rt, NS, NAME) is None  # failed, logged, counted
    finally:
        w.kube._request = real  # type: ignore[method-assign]


@pytest.mark.parametrize("memory", ["kept", "cleared (a new leader, from the status)"])
def test_an_api_outage_does_not_roll_back(memory: str) -> None:
    w = _rolling_v2()
    _outage(w, 40.0)
    if memory != "kept":
        w.rt.memory.clear()
        w.rt.rollouts.clear()
    w.now += 5.0
    rep = run_tick(w.rt, NS, NAME)
    assert rep is not None
    assert not any("ProgressDeadlineExceeded" in e for e in rep.events), rep.events
    assert w.pdd()["status"]["rollout"]["phase"] == RolloutPhase.PROGRESSING
    assert (NS, NAME) not in w.rt.failing_since  # a good tick ends the outage


def test_a_stalled_rollout_still_rolls_back_after_the_outage() -> None:
    """The outage is not counted, the time the cluster was seen stalled still is."""
    w = _rolling_v2()
    _outage(w, 40.0)
    phases = []
    for _ in range(8):
        w.now += 5.0
        run_tick(w.rt, NS, NAME)
        phases.append(w.pdd()["status"]["rollout"]["phase"])
    assert RolloutPhase.ROLLING_BACK in phases or RolloutPhase.ROLLED_BACK in phases


def test_discount_moves_both_clocks_by_the_outage_at_most_to_now() -> None:
    """The docstring's numbers: last good tick 100 (progress 95), failing from 102,
    good again at 141: progress 134, last tick 139."""
    state = RolloutState(phase=RolloutPhase.PROGRESSING, progress_at=95.0, checked_at=100.0)
    out = rollout.discount_unobserved(state, 39.0, 141.0)
    assert (out.progress_at, out.checked_at) == (134.0, 139.0)
    capped = rollout.discount_unobserved(state, 500.0, 141.0)
    assert (capped.progress_at, capped.checked_at) == (136.0, 141.0)
    assert rollout.discount_unobserved(state, 0.0, 141.0) == state
    stable = RolloutState(phase=RolloutPhase.STABLE, progress_at=95.0, checked_at=100.0)
    assert rollout.discount_unobserved(stable, 39.0, 141.0) == stable
    assert RolloutReason.DEADLINE  # the Event a discounted outage must not cause


def test_a_tick_that_hung_on_a_stopped_api_server_does_not_roll_back() -> None:
    """SIGSTOP: no request fails, the reads come from the watch caches, but one write
    hangs 40 s until the server continues: the tick succeeds, 40 s late. That time is
    not a rollout without progress either (seen failing in the lab's D4 before:
    RollingBack 0.6 s after SIGCONT)."""
    w = _rolling_v2()
    real = w.kube._request

    def hung(method: str, *args: Any, **kwargs: Any) -> Any:
        if method != "GET":  # the first write: the stopped server answers 40 s later
            w.now += 40.0
            w.kube._request = real  # type: ignore[method-assign]
        return real(method, *args, **kwargs)

    w.now += 2.0
    w.kube._request = hung  # type: ignore[method-assign]
    assert run_tick(w.rt, NS, NAME) is not None
    assert (NS, NAME) in w.rt.failing_since
    w.now += 2.0
    rep = run_tick(w.rt, NS, NAME)
    assert rep is not None
    assert not any("ProgressDeadlineExceeded" in e for e in rep.events), rep.events
    assert w.pdd()["status"]["rollout"]["phase"] == RolloutPhase.PROGRESSING


def test_a_slow_tick_that_found_the_object_gone_leaves_no_mark() -> None:
    """The PDDeployment was deleted; the read that says so took 40 s: nothing is kept
    for it (the unobserved mark is only for an object the tick found)."""
    w = _rolling_v2()
    real = w.kube._request
    del w.kube.store[PDD_PATH]

    def slow(*args: Any, **kwargs: Any) -> Any:
        w.now += 40.0
        return real(*args, **kwargs)

    w.kube._request = slow  # type: ignore[method-assign]
    run_tick(w.rt, NS, NAME)
    assert (NS, NAME) not in w.rt.failing_since
