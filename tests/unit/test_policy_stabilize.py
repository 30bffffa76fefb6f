"""Fast up, slow down: the stabilization window's timing, the tolerance band, the
rollout freeze and missing metrics, on ticks every 15 s (chat spec, window 5m)."""

from __future__ import annotations

from typing import Any

from pdscaler.policy.stabilize import Stabilized, down_step, prune, stabilize, window_record
from pdscaler.status import memory_from_status, memory_to_status
from pdscaler.types import Action, Decision, MetricsSnapshot, PolicyMemory
from support.builders import chat_spec, replay, run, snapshot

DROP = 600.0  # the load falls from 20 to 10 req/s here
STEP = 15.0


def ticks(until: float, start: float = 0.0) -> list[float]:
    return [start + STEP * k for k in range(int((until - start) / STEP) + 1)]


def drop_at(t: float) -> MetricsSnapshot:
    return snapshot(20.0 if t < DROP else 10.0)


def first(decisions: list[tuple[float, Decision]], action: str) -> float | None:
    return next((t for t, d in decisions if d.action == action), None)


def test_scale_down_applies_exactly_one_window_after_the_drop() -> None:
    """At 10 req/s the chat pools need ceil(20000/2100 = 9.52) = 10 and
    ceil(5000/560 = 8.93) = 9. The last 20/18 recommendation is at 585 s; the window
    (300 s) holds it until the tick at 900 s, when the anchor is the 600 s record.
    A step removes at most a third of each pool (20 -> 14, 18 -> 12) and is recorded
    in the window (at 900 s, the anchor of the window until 1215 s), so the rest
    (14 -> 10, 12 -> 9) applies at 1215 s."""
    out = replay(chat_spec(), drop_at, 20, 18, ticks(1305))
    assert first(out, Action.SCALED_DOWN) == DROP + 300
    sizes = {t: (d.prefill, d.decode) for t, d in out}
    for t, d in out:
        if t < DROP + 300:
            assert sizes[t] == (20, 18), t
        if DROP <= t < DROP + 300:
            assert d.action == Action.HOLD_STABILIZING, t
        if DROP + 300 <= t < DROP + 615:
            assert sizes[t] == (14, 12), t
    assert sizes[DROP + 615] == (10, 9)
    step = dict(out)[DROP + 300].message
    assert "prefill towards 10, a third at a time" in step
    assert "decode towards 9, a third at a time" in step
    assert sizes[1305.0] == (10, 9)


def test_one_scale_down_step_per_window() -> None:
    """``down_step`` leaves two thirds; ``window_record`` keeps the applied size of a
    scale-down in the window (and only of a scale-down)."""
    assert [down_step(n) for n in (22, 9, 4, 2, 1)] == [15, 6, 3, 1, 0]
    assert stabilize(22, 8, [8, 9], True, 300) == Stabilized(15, towards=9)
    assert stabilize(22, 16, [16, 15], True, 300) == Stabilized(16)
    assert window_record(10.0, (11, 9), (22, 9), (15, 9)) == (10.0, 15, 9)
    assert window_record(10.0, (11, 12), (22, 9), (22, 12)) == (10.0, 11, 12)


def test_a_dip_shorter_than_the_window_never_scales_down() -> None:
    """10 req/s for 2 minutes (600-720 s), then 20 again: nothing shrinks."""

    def dip(t: float) -> MetricsSnapshot:
        return snapshot(10.0 if DROP <= t < DROP + 120 else 20.0)

    out = replay(chat_spec(), dip, 20, 18, ticks(1500))
    assert all((d.prefill, d.decode) == (20, 18) for _, d in out)


def test_scale_up_is_immediate_after_a_scale_down() -> None:
    """Back to 20 req/s one tick after scaling down to 10/9: both grow on that tick."""

    def back(t: float) -> MetricsSnapshot:
        return snapshot(10.0 if DROP <= t < DROP + 315 else 20.0)

    out = replay(chat_spec(), back, 20, 18, ticks(DROP + 315))
    d = out[-1][1]
    assert out[-2][1].action == Action.SCALED_DOWN
    assert d.action == Action.SCALED_BOTH
    assert d.prefill >= 20
    assert d.decode >= 18


def test_tolerance_band_ignores_small_scale_downs() -> None:
    """19.9 req/s: prefill wants ceil(39800/2100 = 18.95) = 19 of 20 (5% < 10%), decode
    ceil(17.77) = 18: a plain Hold forever, never a 20 -> 19 -> 20 flap."""
    out = replay(chat_spec(), lambda t: snapshot(19.9), 20, 18, ticks(900))
    assert all((d.prefill, d.decode) == (20, 18) for _, d in out)
    assert out[-1][1].action == Action.HOLD
    assert "within the 10% tolerance" in out[-1][1].message


def test_no_scale_down_during_a_rollout() -> None:
    """10 req/s from 0 s: at 300 s the window is covered and 20/18 would shrink to
    14/12 (a third less, the first step towards 10/9), unless a rollout is in progress
    (then: hold, HoldRolloutInProgress)."""
    out = replay(chat_spec(), lambda t: snapshot(10.0), 20, 18, ticks(285))
    memory = out[-1][1].memory
    free = run(chat_spec(), snapshot(10.0), 20, 18, now=300.0, memory=memory)
    assert (free.prefill, free.decode, free.action) == (14, 12, Action.SCALED_DOWN)
    frozen = run(chat_spec(), snapshot(10.0), 20, 18, now=300.0, memory=memory, rollout=True)
    assert (frozen.prefill, frozen.decode) == (20, 18)
    assert frozen.action == Action.HOLD_ROLLOUT


def test_missing_metrics_count_as_holding_in_the_window() -> None:
    """The load drops at 600 s while Prometheus is down until 900 s: the held 20/18
    fill the window, so the scale-down comes at 1200 s, a full window of real data
    after the metrics return."""

    def outage(t: float) -> MetricsSnapshot | None:
        return None if DROP <= t < DROP + 300 else drop_at(t)

    out = replay(chat_spec(), outage, 20, 18, ticks(1305))
    assert first(out, Action.SCALED_DOWN) == DROP + 600
    assert all(
        d.action == Action.HOLD_METRICS_UNAVAILABLE for t, d in out if DROP <= t < DROP + 300
    )


def test_window_survives_an_operator_restart() -> None:
    """The memory goes through status (memory_to_status / memory_from_status) between
    every tick, as when the operator restarts each time: same scale-down time."""

    def through_status(memory: PolicyMemory, t: float) -> PolicyMemory:
        return memory_from_status(memory_to_status(memory, t, 300.0), t)

    out = replay(chat_spec(), drop_at, 20, 18, ticks(1000), persist=through_status)
    assert first(out, Action.SCALED_DOWN) == DROP + 300


def test_zero_window_scales_down_at_once() -> None:
    """scaleDownStabilization 0s: the first tick at 10 req/s shrinks."""
    spec = chat_spec(scaling={"scaleDownStabilization": "0s"})
    out = replay(spec, drop_at, 20, 18, ticks(DROP))
    assert out[-1][1].action == Action.SCALED_DOWN


def test_prune_keeps_the_anchor() -> None:
    """Window 300 at 1000: records 600, 690, 710, 1000 -> 690 (anchor), 710, 1000."""
    records = [(600.0, 1, 1), (690.0, 2, 2), (710.0, 3, 3), (1000.0, 4, 4)]
    assert [r[0] for r in prune(records, 1000.0, 300.0)] == [690.0, 710.0, 1000.0]


def test_stabilize_rules() -> None:
    """4 -> 6 applies; 6 -> 4 with [6, 5, 4] stays 6; with [4, 4] covered -> 4, not
    covered -> 6; 20 -> 19 ignored (tolerance); frozen -> stays."""
    kw: dict[str, Any] = {"window_seconds": 300.0}
    assert stabilize(4, 6, [4], True, **kw).replicas == 6
    assert stabilize(6, 4, [6, 5, 4], True, **kw).replicas == 6
    assert stabilize(6, 4, [4, 4], True, **kw).replicas == 4
    assert stabilize(6, 4, [4, 4], False, **kw).held_by == "window"
    assert stabilize(20, 19, [19], True, **kw).held_by == "tolerance"
    assert stabilize(6, 4, [4], True, frozen=True, **kw).held_by == "rollout"
