"""policy.zero: scale from zero on requests the holding proxy holds, stay at zero while
nothing is held, and stop both pools after ``scaleToZero.idleSeconds`` with nothing held
or in flight (issue 29, item 3). The chat spec with both mins 0 and idleSeconds 300."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from pydantic import ValidationError

from pdscaler import spec as pdspec
from pdscaler.policy.zero import wake_sizes
from pdscaler.types import Action, HolderReading, MetricsSnapshot, PoolObservation
from support.builders import chat_spec, run, snapshot

ZERO = {"min": 0, "max": 32}
SPEC = chat_spec(prefill={"replicas": ZERO}, decode={"replicas": ZERO}, scaleToZero={})


def held(n: float, prompt: float = 0.0, output: float = 0.0, idle: float = 0.0) -> MetricsSnapshot:
    """No engine answers (pools at zero: R unknown); the holder holds ``n``."""
    reading = HolderReading(
        held=n, held_prompt_tokens=prompt, held_output_tokens=output, in_flight=0, idle_seconds=idle
    )
    return replace(
        snapshot(None, None, None, prefill_queue=None, decode_queue=None), holder=reading
    )


def idle(seconds: float, in_flight: float = 0.0, held_now: float = 0.0) -> MetricsSnapshot:
    """A quiet cell: R 0, queues and running 0; the holder idle for ``seconds``."""
    reading = HolderReading(
        held=held_now,
        held_prompt_tokens=0,
        held_output_tokens=0,
        in_flight=in_flight,
        idle_seconds=seconds,
    )
    return replace(snapshot(0.0, 2000.0, 500.0, running=0.0), holder=reading)


def test_held_requests_at_zero_wake_both_pools() -> None:
    d = run(SPEC, held(3), 0, 0)
    assert (d.prefill, d.decode, d.action) == (1, 1, Action.SCALED_FROM_ZERO)
    assert d.message == "Scaled from zero prefill 1, decode 1: 3 requests held at zero replicas"
    assert d.memory.last_scale_time == 10_000.0


def test_first_replicas_sized_from_the_held_queue() -> None:
    """600 held chat requests (2000 / 500 tokens each), recovery 60 s -> R 10 req/s:
    N_P 9.52, N_D 8.93 -> 10 / 9, both in one decision."""
    d = run(SPEC, held(600, 600 * 2000, 600 * 500), 0, 0)
    assert (d.prefill, d.decode, d.action) == (10, 9, Action.SCALED_FROM_ZERO)
    assert wake_sizes(SPEC, 600, 600 * 2000, 600 * 500) == {"prefill": 10, "decode": 9}
    assert wake_sizes(SPEC, 3, 0, 0) == {"prefill": 1, "decode": 1}


def test_wake_within_max_gpus() -> None:
    spec = chat_spec(prefill={"replicas": ZERO}, decode={"replicas": ZERO}, scaling={"maxGPUs": 8})
    d = run(spec, held(600, 600 * 2000, 600 * 500), 0, 0)
    assert d.prefill + d.decode <= 8
    assert d.prefill >= 1
    assert d.decode >= 1


def test_wakes_without_scale_to_zero_too() -> None:
    """A cell put at zero by its mins (no scaleToZero) still wakes on held requests."""
    spec = chat_spec(prefill={"replicas": ZERO}, decode={"replicas": ZERO})
    assert run(spec, held(1), 0, 0).action == Action.SCALED_FROM_ZERO


def test_nothing_held_at_zero_stays_and_says_so() -> None:
    d = run(SPEC, held(0, idle=400), 0, 0)
    assert (d.prefill, d.decode, d.action) == (0, 0, Action.HOLD_AT_ZERO)
    assert d.message == "Held at zero prefill 0, decode 0: no request held; idle for 400s"


def test_holder_unknown_at_zero_is_the_models_hold() -> None:
    d = run(SPEC, snapshot(None, None, None), 0, 0)
    assert (d.prefill, d.decode, d.action) == (0, 0, Action.HOLD_METRICS_UNAVAILABLE)


def test_idle_past_idle_seconds_stops_both_pools() -> None:
    d = run(SPEC, idle(312), 2, 2)
    assert (d.prefill, d.decode, d.action) == (0, 0, Action.SCALED_TO_ZERO)
    assert d.message == (
        "Scaled to zero prefill 0, decode 0: nothing held or in flight for 312s"
        " (scaleToZero.idleSeconds 300)"
    )


@pytest.mark.parametrize(
    ("snap", "why"),
    [
        (idle(120), "idle less than idleSeconds"),
        (idle(0, in_flight=1), "a request in flight"),
        (idle(400, held_now=1), "a request held"),
        (replace(idle(400), holder=None), "no holder answered"),
        (replace(idle(400), holder=HolderReading(held=0, in_flight=0)), "idle unknown"),
        (snapshot(0.0, 2000.0, 500.0, running=1.0), "no holder, a pool running one"),
    ],
)
def test_never_sleeps_while_anything_is_held_or_in_flight(snap: MetricsSnapshot, why: str) -> None:
    d = run(SPEC, snap, 2, 2)
    assert d.action != Action.SCALED_TO_ZERO, why
    assert (d.prefill, d.decode) != (0, 0), why


def test_engine_running_requests_keep_the_pools() -> None:
    reading = HolderReading(held=0, in_flight=0, idle_seconds=400)
    snap = replace(snapshot(0.0, 2000.0, 500.0, running=2.0), holder=reading)
    assert run(SPEC, snap, 2, 2).action != Action.SCALED_TO_ZERO


def test_no_sleep_during_a_rollout_or_without_scale_to_zero() -> None:
    assert run(SPEC, idle(400), 2, 2, rollout=True).action != Action.SCALED_TO_ZERO
    plain = chat_spec(prefill={"replicas": ZERO}, decode={"replicas": ZERO})
    assert run(plain, idle(400), 2, 2).action != Action.SCALED_TO_ZERO


def test_pods_starting_after_a_wake_are_kept() -> None:
    """The tick after the wake: 1 / 1 asked, none Ready, no engine metrics yet: the
    models' hold keeps them (never back to zero while they start)."""
    starting = PoolObservation(replicas=1, ready=0)
    d = run(SPEC, held(3), starting, starting)
    assert (d.prefill, d.decode) == (1, 1)


def test_scale_to_zero_needs_both_mins_zero() -> None:
    with pytest.raises(ValidationError, match=re.escape(pdspec.MSG_ZERO_PREFILL_MIN)):
        chat_spec(decode={"replicas": ZERO}, scaleToZero={"idleSeconds": 60})
    with pytest.raises(ValidationError, match=re.escape(pdspec.MSG_ZERO_DECODE_MIN)):
        chat_spec(prefill={"replicas": ZERO}, scaleToZero={"idleSeconds": 60})
    assert SPEC.scale_to_zero is not None
    assert SPEC.scale_to_zero.idle_seconds == 300.0
