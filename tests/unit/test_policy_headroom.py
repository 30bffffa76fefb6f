"""Burst head-room (docs/models.md §2c): the factor learnt from TTFT breaches that the
mean-rate sizing does not explain, the replicas it holds, and the spec switch."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdscaler.policy import decide
from pdscaler.policy.headroom import MAX_FACTOR, headroom_target, learn_factor
from pdscaler.types import ConditionReason, Decision, PolicyMemory, PoolObservation
from support.builders import chat_spec, snapshot, tick


def test_factor_grows_on_the_burst_signature_and_decays_when_met() -> None:
    """TTFT 3 s of 2 s (r 1.5), prefill not short: 1 -> 1.05, x8 ticks -> 1.477.
    TTFT 0.5 s (r 0.25 < 0.5): decays 1% a tick; 1.5 s (r 0.75): kept; short by load or
    TTFT unknown: kept; never below 1 nor above 3."""
    h = 1.0
    for _ in range(8):
        h = learn_factor(h, 3.0, 2.0, short=False)
    assert h == pytest.approx(1.05**8)
    assert learn_factor(h, 0.5, 2.0, short=False) == pytest.approx(h * 0.99)
    assert learn_factor(h, 3.0, 2.0, short=True) == h  # the models act: no burst learnt
    assert learn_factor(h, None, 2.0, short=False) == h
    assert learn_factor(h, 1.5, 2.0, short=False) == h  # within SLO, not comfortably
    assert learn_factor(1.0, 0.1, 2.0, short=False) == 1.0  # never below 1
    many = 1.0
    for _ in range(200):
        many = learn_factor(many, 10.0, 2.0, short=False)
    assert many == MAX_FACTOR


def test_headroom_target() -> None:
    """N_P 5.2 at h 1.48 -> 8 replicas, 2 of them head-room; h 1 -> 6, none."""
    assert headroom_target(5.2, 1.48) == (8, 2)
    assert headroom_target(5.2, 1.0) == (6, 0)
    assert headroom_target(0.0, 2.0) == (0, 0)


#: The chat service with short bursts: at 20 req/s prefill (20 ready) is within target
#: (40,000 / 60,000 = 67% < 70%), the queue empty at the tick, but TTFT p95 3 s over its
#: 2 s SLO: the breach is a burst that came and went.
BURSTY = snapshot(ttft=3.0, tpot=0.03)


def test_burst_headroom_holds_prefill_above_the_mean_sizing() -> None:
    """With ``burstHeadroom`` and a factor of 1.48 already learnt, prefill is held at
    ceil(19.05 x 1.5) = 29 (1.48 x 1.05 = 1.55 after this tick's breach: ceil(29.5) =
    30), 10 of them head-room, reported in the decision. Without the switch the same
    tick holds 20: this is the test that fails without the head-room."""
    on = chat_spec(scaling={"maxGPUs": 64, "burstHeadroom": True})
    memory = PolicyMemory(burst_factor=1.48)
    d = decide(tick(on, BURSTY, 20, 18, memory=memory))
    assert d.memory.burst_factor == pytest.approx(1.48 * 1.05)
    assert d.prefill == 30
    assert d.model.burst_headroom_replicas == 10
    assert "burst head-room +10" in d.message
    off = decide(tick(chat_spec(), BURSTY, 20, 18, memory=memory))
    assert off.prefill == 20
    assert off.model.burst_headroom_replicas is None


def test_burst_headroom_is_capped_by_the_budget() -> None:
    """maxGPUs 40 with decode at 18: prefill gets at most 22, whatever the factor."""
    spec = chat_spec(scaling={"maxGPUs": 40, "burstHeadroom": True})
    d = decide(tick(spec, BURSTY, 20, 18, memory=PolicyMemory(burst_factor=3.0)))
    assert d.prefill + d.decode <= 40
    assert d.decode >= 18


def test_switch_defaults_off() -> None:
    assert chat_spec().scaling.burst_headroom is False


loads = st.tuples(
    st.floats(min_value=0.1, max_value=40.0),  # rate
    st.floats(min_value=100.0, max_value=4000.0),  # prompt
    st.integers(min_value=1, max_value=30),  # prefill ready
    st.integers(min_value=1, max_value=30),  # decode ready
    st.one_of(st.none(), st.floats(min_value=0.05, max_value=1.9)),  # TTFT within SLO
)


@settings(max_examples=60, deadline=None)
@given(loads)
def test_without_learnt_headroom_the_switch_changes_nothing(
    load: tuple[float, float, int, int, float | None],
) -> None:
    """Switch on, nothing learnt (factor 1, TTFT within its 2 s SLO or unknown): every
    decision is the one with the switch off (replicas, action, sentence)."""
    rate, prompt, p_ready, d_ready, ttft = load
    snap = snapshot(rate, prompt, 300.0, ttft=ttft, tpot=0.03)
    on = chat_spec(scaling={"maxGPUs": 64, "burstHeadroom": True})
    a = decide(tick(chat_spec(), snap, p_ready, d_ready))
    b = decide(tick(on, snap, p_ready, d_ready))
    assert (a.prefill, a.decode, a.action, a.message) == (b.prefill, b.decode, b.action, b.message)
    assert b.model.burst_headroom_replicas == 0


def test_no_burst_is_learnt_while_prefill_replicas_are_starting() -> None:
    """The same breach with 4 of 24 prefill replicas still starting is a shortage being
    fixed, not a burst: the factor stays at 1."""
    on = chat_spec(scaling={"maxGPUs": 64, "burstHeadroom": True})
    starting = PoolObservation(replicas=24, ready=20)
    d = decide(tick(on, BURSTY, starting, 18))
    assert d.memory.burst_factor == 1.0
    learnt = decide(tick(on, BURSTY, 20, 18))
    assert learnt.memory.burst_factor == pytest.approx(1.05)


def unreachable(d: Decision) -> tuple[ConditionReason, str]:
    """The decision's SLOUnreachable reason and sentence (it must have one)."""
    assert d.slo_unreachable is not None
    return d.slo_unreachable.reason, d.slo_unreachable.message


def test_bursts_with_headroom_off_say_what_absorbing_them_costs() -> None:
    """The burst signature with head-room off: SLOUnreachable's sentence names the most
    the head-room would hold, ceil(19.05 x 3) = 58 prefill replicas, 38 more than the
    20 now (1 GPU each). The same tick short by its load (24 asked, 20 Ready: replicas
    starting) or with TTFT met says nothing: the models act, or there is no breach."""
    d = decide(tick(chat_spec(), BURSTY, 20, 18))
    assert d.prefill == 20
    assert unreachable(d) == (
        ConditionReason.BURST_HEADROOM_OFF,
        "TTFT p95 3.0s > 2.0s SLO in bursts the mean load does not explain (prefill 67% "
        "utilised, not short); burst head-room is off: spec.scaling.burstHeadroom holds up "
        "to 58 prefill replicas for them (x3.0), 38 more (38 GPUs) than now",
    )
    starting = PoolObservation(replicas=24, ready=20)
    assert decide(tick(chat_spec(), BURSTY, starting, 18)).slo_unreachable is None
    met = snapshot(ttft=1.5, tpot=0.03)
    assert decide(tick(chat_spec(), met, 20, 18)).slo_unreachable is None


def test_bursts_while_the_headroom_is_learnt_are_within_reach() -> None:
    """Head-room on and the factor growing (1.48 -> 1.55, 30 prefill within maxGPUs 64):
    the condition stays False."""
    on = chat_spec(scaling={"maxGPUs": 64, "burstHeadroom": True})
    d = decide(tick(on, BURSTY, 20, 18, memory=PolicyMemory(burst_factor=1.48)))
    assert d.prefill == 30
    assert d.slo_unreachable is None


@pytest.mark.parametrize(
    ("scaling", "prefill_max", "prefill", "reason", "ending"),
    [
        (
            {"maxGPUs": 40},
            32,
            22,
            ConditionReason.BURST_HEADROOM_LIMITED,
            "burst head-room wants 58 prefill replicas and replicas.max or maxGPUs allow 22: "
            "36 more (36 GPUs) needed",
        ),
        (
            {"maxGPUs": 128},
            64,
            58,
            ConditionReason.BURST_HEADROOM_CAPPED,
            "burst head-room is at its cap (x3.0, 58 prefill replicas): more needs a higher "
            "prefill replicas.min or a looser TTFT SLO",
        ),
    ],
)
def test_headroom_at_its_limits_says_what_is_missing(
    scaling: dict[str, int],
    prefill_max: int,
    prefill: int,
    reason: ConditionReason,
    ending: str,
) -> None:
    """The factor at 3 asks ceil(19.05 x 3) = 58 prefill, 38 of them head-room. maxGPUs
    40 with decode at 18 allows 22 (2 held): 36 more replicas (36 GPUs) are needed.
    Within the budget (maxGPUs 128, max 64) all 58 run, at the cap: more needs a floor
    or a looser SLO."""
    spec = chat_spec(
        scaling={**scaling, "burstHeadroom": True},
        prefill={"replicas": {"min": 1, "max": prefill_max}},
    )
    d = decide(tick(spec, BURSTY, 20, 18, memory=PolicyMemory(burst_factor=3.0)))
    assert d.prefill == prefill
    got, message = unreachable(d)
    assert got == reason
    assert message.endswith(ending)
