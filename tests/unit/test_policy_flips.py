"""Role flips (docs/models.md §5a): a growing pool takes ready replicas the other pool's
recent recommendations do not need, when their drain plus the reconfiguration beats a
cold start; in the policy (``policy.flips``) and in the offline engine (``Engine.flip``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from pdscaler.policy import decide
from pdscaler.policy.flips import flip_seconds, record_flip, surplus
from pdscaler.policy.sizing import PoolFacts
from pdscaler.sim.controllers import Target
from pdscaler.sim.engine import Engine, EngineParams, State
from pdscaler.sim.loop import Action, _apply, _Recorder
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Flip, FlipOptions, PolicyMemory, Role, TickInput
from support.builders import chat_spec, snapshot, tick

NOW = 10_000.0
#: The golden chat load (N_P 19.05 -> 20, N_D 17.86 -> 18) with prefill short: TTFT
#: 3 s over its 2 s SLO and 140 requests queued on 14 replicas; decode at TPOT 30 ms.
SHORT_PREFILL = snapshot(ttft=3.0, tpot=0.03, prefill_queue=140.0)
#: Decode ran 24 until 70 s ago, and has been recommended 18 since: the 5-minute
#: stabilization window still holds it at 24, the 60-second flip window does not.
RECENT = PolicyMemory(recommendations=((NOW - 400.0, 14, 24), (NOW - 70.0, 14, 18)))
#: The defaults: the reconfiguration model's 9 s floor, a 60 s flip window.
FLIPS = FlipOptions()


def flipping(inp: TickInput, **changes: Any) -> TickInput:
    """``inp`` on an actuator that can flip (``FLIPS``), with ``changes``."""
    return replace(inp, **{"flips": FLIPS, **changes})


def chat_flip(spec: PDDeploymentSpec, **changes: Any) -> Flip | None:
    inp = tick(spec, SHORT_PREFILL, 14, 24, now=NOW, memory=RECENT)
    return decide(flipping(inp, **changes)).flip


def test_prefill_takes_the_decode_replicas_decode_no_longer_needs() -> None:
    """Prefill 14 -> 20; decode runs 24 against recommendations of 18 for the last 60 s,
    so 6 of its replicas change role (at most a third of 24 = 8): each drains in
    L_d x TPOT = 500 x 30 ms = 15 s and serves prefill 9 s later, 24 s against a 60 s
    start-up. Decode ends at 18, prefill at 20 (6 flipped, none new): the GPUs stay 38.
    Without the actuator the same tick holds decode at 24 (the 5-minute window) and
    starts 6 new prefill replicas: 44 GPUs."""
    inp = tick(chat_spec(), SHORT_PREFILL, 14, 24, now=NOW, memory=RECENT)
    with_flips = decide(flipping(inp))
    flip = with_flips.flip
    assert flip is not None
    assert (flip.source, flip.target, flip.count) == (Role.DECODE, Role.PREFILL, 6)
    assert (flip.seconds, flip.cold_start_seconds) == pytest.approx((24.0, 60.0))
    assert chat_flip(chat_spec(), flips=FlipOptions(reconfigure_seconds=30.0)) is not None
    assert chat_flip(chat_spec(), flips=FlipOptions(reconfigure_seconds=50.0)) is None
    assert (with_flips.prefill, with_flips.decode) == (20, 18)
    assert (
        "6 decode replicas change role to prefill: serving in ~24s (a new one in ~60s), "
        "within the 60s drain deadline" in with_flips.message
    )
    assert with_flips.memory.recommendations[-1][2] == 18  # the next flip waits a window
    without = decide(inp)
    assert without.flip is None
    assert (without.prefill, without.decode) == (20, 24)


@pytest.mark.parametrize(
    ("spec", "change", "why"),
    [
        (chat_spec(), {"flips": None}, "the actuator cannot change roles (the live operator)"),
        (chat_spec(), {"rollout_in_progress": True}, "a rollout is in progress"),
        (chat_spec(decode={"gpusPerReplica": 2}), {}, "the pools' hardware differs"),
        (chat_spec(startupSeconds=20), {}, "a cold start (20 s) is sooner than a flip (24 s)"),
        (
            chat_spec(),
            {"memory": PolicyMemory(recommendations=((NOW - 40.0, 14, 18),))},
            "the flip window is not covered",
        ),
    ],
)
def test_no_flip(spec: PDDeploymentSpec, change: dict[str, Any], why: str) -> None:
    assert chat_flip(spec) is not None or change == {}, "the same tick flips on its own"
    assert chat_flip(spec, **change) is None, why


def test_a_small_pool_gives_at_most_a_third_of_itself() -> None:
    """Short outputs (L_d 20: N_D 0.71, decode recommended 1): decode at 2 gives none (a
    third of 2 rounds to 0: flipping one would halve decode on one minute's
    recommendations); at 3, one."""
    short = snapshot(output=20.0, ttft=3.0, tpot=0.03, prefill_queue=140.0)
    for have, flips in ((2, 0), (3, 1)):
        memory = PolicyMemory(recommendations=((NOW - 400.0, 14, have), (NOW - 70.0, 14, 1)))
        inp = tick(chat_spec(), short, 14, have, now=NOW, memory=memory)
        d = decide(flipping(inp))
        assert (d.flip.count if d.flip else 0) == flips
        if not flips:
            assert (
                "no decode replica changes role: a third of its 2 replicas rounds to 0" in d.message
            )


def test_surplus_reads_the_window_as_a_step_function() -> None:
    """Records (t, p, d) hold until the next: at t = 1000 with a 60 s window, decode 20
    against 16 (from 930, the anchor), 17 and 16 -> 3; the anchor at 950 = 19 -> 1;
    records starting after 940 do not cover the window -> 0."""
    records = ((900.0, 5, 22), (930.0, 5, 16), (960.0, 5, 17), (1000.0, 5, 16))
    assert surplus(Role.DECODE, 20, records, 1000.0, 60.0) == 3
    assert surplus(Role.DECODE, 20, ((900.0, 5, 19), *records[2:]), 1000.0, 60.0) == 1
    assert surplus(Role.DECODE, 20, records[2:], 1000.0, 60.0) == 0
    assert surplus(Role.PREFILL, 4, records, 1000.0, 60.0) == 0


def test_flip_seconds_and_the_record_after_a_flip() -> None:
    """Decode at L_d 250, TPOT 40 ms: 10 + 9 = 19 s; prefill at L_p 2,000 on 8,000
    tokens/s: 0.25 + 9 s. After 3 decode flips from 20, the tick's record holds 17."""
    decode = PoolFacts(Role.DECODE, 20, 20, 0, 1000.0, 250.0, 0.7, 0.05, None, None, None)
    prefill = PoolFacts(Role.PREFILL, 10, 10, 0, 8000.0, 2000.0, 0.7, 2.0, None, None, None)
    assert flip_seconds(decode, 0.04, 9.0) == pytest.approx(19.0)
    assert flip_seconds(prefill, 0.04, 9.0) == pytest.approx(9.25)
    flip = Flip(Role.DECODE, 3, 19.0, 90.0)
    final = {Role.PREFILL: 14, Role.DECODE: 17}
    assert record_flip(((1000.0, 14, 16),), final, flip) == ((1000.0, 14, 17),)
    assert record_flip(((1000.0, 14, 16),), final, None) == ((1000.0, 14, 16),)


# ------------------------------------------------------------------ the offline engine


def test_engine_flip_drains_then_serves_the_other_pool_without_a_cold_start() -> None:
    """The one decode replica, running one 100-token sequence (10 ms steps: ~1 s),
    flips to prefill at t = 0.5 with a 9 s reconfiguration: it finishes its sequence,
    then serves prefill 9 s after it is empty. Meanwhile it counts as asked for in
    prefill (a scale to 2 starts nothing), it is billed all along (one pool then the
    other: 2 replicas x 20 s), and its readiness is no start-up sample. An idle replica
    flips at once."""
    params = EngineParams(
        decode_step_base_s=0.01,
        decode_step_per_seq_s=0.0,
        decode_step_per_kv_token_s=0.0,
        startup_jitter=0.0,
    )
    engine = Engine([0.0], [10], [100], params, startup_s=120.0, initial=(1, 1))
    engine.run_until(0.5)
    (busy,) = engine.pool(Role.DECODE)
    assert busy.work == 1
    assert engine.flip(Role.DECODE, 1, 0.5, 9.0) == 1
    assert (busy.state, busy.flip_to) == (State.DRAINING, Role.PREFILL)
    assert (engine.desired(Role.PREFILL), engine.desired(Role.DECODE)) == (2, 0)
    engine.scale_to(Role.PREFILL, 2, 0.5)
    assert len(engine.pool(Role.PREFILL)) == 1  # no cold start was added
    engine.run_until(math.inf)
    finish = float(engine.times().finish[0])
    assert 1.0 < finish < 1.1
    (joined,) = [r for r in engine.pool(Role.PREFILL) if r.name == busy.name]
    assert joined.state is State.READY
    assert joined.flipped
    assert joined.ready_at == pytest.approx(finish + 9.0)
    assert engine.startup_samples[Role.PREFILL] == []
    billed = engine.gpu_seconds(20.0)
    assert billed[Role.PREFILL] + billed[Role.DECODE] == pytest.approx(2 * 20.0)
    assert engine.flip(Role.PREFILL, 1, 20.0, 9.0) == 1  # idle: in decode at once
    assert (engine.desired(Role.DECODE), engine.ready(Role.DECODE)) == (1, 0)


def test_the_loop_applies_a_flip_before_scaling() -> None:
    """A target of prefill 3 / decode 1 from 1 / 3 with 2 decode flips: the flips go
    first, so only the replicas the flips do not cover start cold (none here), and both
    actions say 2 flipped."""
    engine = Engine([], [], [], EngineParams(startup_jitter=0.0), startup_s=90.0, initial=(1, 3))
    rec = _Recorder()
    target = Target(3, 1, flip=Flip(Role.DECODE, 2, 10.0, 90.0))
    _apply(engine, target, 100.0, rec, 9.0)
    assert rec.actions == [
        Action(100.0, Role.PREFILL, 1, 3, 2),
        Action(100.0, Role.DECODE, 3, 1, 2),
    ]
    engine.run_until(109.0)
    assert engine.ready(Role.PREFILL) == 3
    assert not any(r.state is State.STARTING for r in engine.pool(Role.PREFILL))


def test_the_flip_sentence_agrees_with_its_count() -> None:
    from pdscaler.policy import reasons

    one = reasons.flipped(Role.DECODE, Role.PREFILL, 1, 1.2, 6.0, 30.0)
    assert one.startswith("1 decode replica changes role to prefill: serving in ~1s")
    assert reasons.flipped(Role.PREFILL, Role.DECODE, 2, 40.0, 90.0, 30.0).startswith(
        "2 prefill replicas change role to decode"
    )


@pytest.mark.parametrize(
    ("spec", "change", "said"),
    [
        (chat_spec(), {"rollout_in_progress": True}, "a rollout is in progress"),
        (chat_spec(decode={"gpusPerReplica": 2}), {}, "the pools' replicas have different GPUs"),
        (chat_spec(startupSeconds=20), {}, "one would serve prefill in ~24s, a new one in ~20s"),
        (
            chat_spec(),
            {"memory": PolicyMemory(recommendations=((NOW - 40.0, 14, 18),))},
            "its recommendations of the last 60s ask for all 24 (or do not cover them)",
        ),
    ],
)
def test_the_decision_says_why_no_replica_changes_role(
    spec: PDDeploymentSpec, change: dict[str, Any], said: str
) -> None:
    """Prefill grows by new replicas while decode runs 24: the sentence names why none of
    decode's changes role, so a platform team (and a lab test that waits for a flip)
    can read it in status.lastDecision."""
    inp = tick(spec, SHORT_PREFILL, 14, 24, now=NOW, memory=RECENT)
    d = decide(flipping(inp, **change))
    assert d.flip is None
    assert d.prefill > 14
    assert f"no decode replica changes role: {said}" in d.message


def test_a_gap_in_the_givers_data_is_named() -> None:
    """Decode's queue depth unknown: a gap, so decode gives nothing (it must not shrink
    on missing data) and the decision says so."""
    gapped = snapshot(ttft=3.0, tpot=0.03, prefill_queue=140.0, decode_queue=None)
    d = decide(flipping(tick(chat_spec(), gapped, 14, 24, now=NOW, memory=RECENT)))
    assert d.flip is None
    assert (
        "no decode replica changes role: decode's data has a gap (decode queue depth unknown)"
        in d.message
    )


def test_without_the_actuator_or_a_growing_pool_nothing_is_said() -> None:
    inp = tick(chat_spec(), SHORT_PREFILL, 14, 24, now=NOW, memory=RECENT)
    assert "changes role" not in decide(inp).message  # the live operator without flips
    steady = snapshot(ttft=0.5, tpot=0.03)
    assert (
        "changes role" not in decide(flipping(tick(chat_spec(), steady, 20, 24, now=NOW))).message
    )
