"""The status builder (status.py): conditions with kept transition times, printer
columns, a lastDecision that does not churn on a steady Hold, and the policy memory
round-tripping through status."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from pdscaler import status as st
from pdscaler.policy.stabilize import prune
from pdscaler.spec import Condition, PDDeploymentSpec, PDDeploymentStatus
from pdscaler.types import (
    ConditionReason,
    ConditionType,
    PolicyMemory,
    PoolObservation,
    RolloutPhase,
    Unreachable,
)
from support.status_inputs import HOLD, METRICS, SCALE, SPEC, inp


def cond(status: PDDeploymentStatus, type_: str) -> Condition:
    (c,) = [c for c in status.conditions or [] if c.type == type_]
    return c


def test_printer_columns_and_pools() -> None:
    s = st.build_status(inp())
    assert s.prefill is not None
    assert s.prefill.summary == "4/4"
    assert s.decode is not None
    assert s.decode.summary == "5/6"
    assert s.ratio == "1:1.5"
    assert s.ttft == "850ms"
    assert s.tpot == "42ms"
    assert s.last_decision is not None
    assert s.last_decision.action == "ScaledDecode"
    assert s.observed_generation == 3
    assert s.active_version == "v1"


def test_all_condition_types_present_once() -> None:
    s = st.build_status(inp())
    assert sorted(c.type for c in s.conditions or []) == sorted(st.CONDITION_TYPES)
    assert cond(s, ConditionType.READY).status == "True"
    assert cond(s, ConditionType.METRICS_AVAILABLE).status == "True"
    assert cond(s, ConditionType.CAPACITY_LIMITED).status == "False"


def test_prometheus_unreachable_condition() -> None:
    s = st.build_status(inp(metrics=None, decision=replace(HOLD, metrics_available=False)))
    c = cond(s, ConditionType.METRICS_AVAILABLE)
    assert (c.status, c.reason) == ("False", ConditionReason.PROMETHEUS_UNREACHABLE)


def test_incomplete_metrics_condition_names_the_problem() -> None:
    m = replace(METRICS, request_rate=None, problems=("request rate: empty answer",))
    c = cond(st.build_status(inp(metrics=m)), ConditionType.METRICS_AVAILABLE)
    assert (c.status, c.reason) == ("False", ConditionReason.METRICS_INCOMPLETE)
    assert "request rate: empty answer" in c.message


def test_capacity_limited_from_unschedulable_pods() -> None:
    s = st.build_status(inp(decode=PoolObservation(replicas=6, ready=4, unschedulable=2)))
    c = cond(s, ConditionType.CAPACITY_LIMITED)
    assert (c.status, c.reason) == ("True", ConditionReason.INSUFFICIENT_GPUS)
    assert c.message.startswith("2 pod(s) unschedulable")


def test_ready_false_below_minimum() -> None:
    s = st.build_status(inp(prefill=PoolObservation(replicas=2, ready=1)))
    assert cond(s, ConditionType.READY).status == "False"


def _spec(**over: Any) -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate({**SPEC.model_dump(by_alias=True), **over})


def test_ready_says_pairing_is_the_stacks_job_when_the_router_is_external() -> None:
    """router.type external (set, or the dynamo preset's default): Ready True is
    RouterExternal and the message says pairing is the stack's job, whether or not the
    pools serve; a pdscaler router keeps Serving and no such text."""
    for external in (_spec(router={"type": "external"}), _spec(metrics={"preset": "dynamo"})):
        c = cond(st.build_status(inp(spec=external)), ConditionType.READY)
        assert (c.status, c.reason) == ("True", ConditionReason.ROUTER_EXTERNAL)
        assert c.message == (
            "prefill 4 ready (min 2), decode 5 ready (min 1); router.type external: "
            "pdscaler deploys no router and no front Service; pairing each request's "
            "prefill and decode (and keeping the pair in one version) is the stack's job"
        )
        low = inp(spec=external, prefill=PoolObservation(replicas=2, ready=1))
        c = cond(st.build_status(low), ConditionType.READY)
        assert (c.status, c.reason) == ("False", ConditionReason.NOT_SERVING)
        assert c.message.endswith(st.MSG_ROUTER_EXTERNAL)
    own = cond(st.build_status(inp()), ConditionType.READY)
    assert (own.reason, own.message) == (
        ConditionReason.SERVING,
        "prefill 4 ready (min 2), decode 5 ready (min 1)",
    )


def test_transition_time_kept_while_status_unchanged() -> None:
    first = st.build_status(inp(now=1000.0))
    later = st.build_status(inp(now=1300.0, previous=first))
    assert (
        cond(later, ConditionType.READY).last_transition_time
        == cond(first, ConditionType.READY).last_transition_time
    )
    flipped = st.build_status(
        inp(now=1300.0, previous=first, prefill=PoolObservation(replicas=2, ready=0))
    )
    assert cond(flipped, ConditionType.READY).last_transition_time == st.rfc3339(1300.0)


def test_progressing_phases() -> None:
    cases = {
        RolloutPhase.PROGRESSING: ("True", ConditionReason.ROLLOUT_IN_PROGRESS),
        RolloutPhase.ROLLING_BACK: ("True", ConditionReason.ROLLING_BACK),
        RolloutPhase.ROLLED_BACK: ("False", ConditionReason.ROLLED_BACK),
        RolloutPhase.COMPLETE: ("False", ConditionReason.ROLLOUT_COMPLETE),
        RolloutPhase.STABLE: ("False", ConditionReason.STABLE),
    }
    for phase, expected in cases.items():
        s = st.build_status(inp(progress=st.ProgressFacts(phase=phase)))
        c = cond(s, ConditionType.PROGRESSING)
        assert (c.status, c.reason) == expected, phase


def test_steady_hold_yields_identical_status() -> None:
    """A Hold after a Hold with new noisy numbers: same status, so zero writes."""
    first = st.build_status(inp(decision=HOLD, now=1000.0))
    noisy = replace(METRICS, request_rate=4.3, time=1015.0)
    second = st.build_status(inp(decision=HOLD, metrics=noisy, now=1015.0, previous=first))
    assert second.to_k8s() == first.to_k8s()
    assert not st.status_changed(second, first.to_k8s())


def test_scale_decision_replaces_last_decision() -> None:
    first = st.build_status(inp(decision=HOLD, now=1000.0))
    second = st.build_status(inp(decision=SCALE, now=1015.0, previous=first))
    assert second.last_decision is not None
    assert second.last_decision.action == "ScaledDecode"
    assert second.last_decision.model is not None
    assert second.last_decision.model.drain_seconds == 38.0
    assert st.status_changed(second, first.to_k8s())


def test_status_changed_compares_json_forms() -> None:
    s = st.build_status(inp())
    observed = s.to_k8s()
    observed["prefill"]["replicas"] = 4.0  # the API may hand back floats for ints
    assert not st.status_changed(s, observed)
    assert st.status_changed(s, None)
    assert st.status_changed(s, {"observedGeneration": "garbage"})


def test_duration_and_ratio_text() -> None:
    assert st.duration_text(0.85) == "850ms"
    assert st.duration_text(2.5) == "2.5s"
    assert st.duration_text(None) is None
    assert st.ratio_text(4, 6) == "1:1.5"
    assert st.ratio_text(0, 6) is None


def test_memory_compacts_to_change_points_inside_window() -> None:
    mem = PolicyMemory(
        recommendations=((100.0, 4, 4), (115.0, 4, 4), (130.0, 5, 4), (145.0, 5, 4)),
        prefill_tps=2987.4,
    )
    out = st.memory_to_status(mem, now=145.0, window_seconds=300.0)
    assert out == {"recommendations": [[100, 4, 4], [130, 5, 4]], "prefillTps": 2990.0}
    old = st.memory_to_status(mem, now=1000.0, window_seconds=300.0)
    assert old["recommendations"] == [[130, 5, 4]]


def test_memory_round_trip() -> None:
    data = {"recommendations": [[100, 4, 4], [130, 5, 4]], "decodeTps": 812.0}
    mem = st.memory_from_status(data, now=200.0)
    assert mem.recommendations == (
        (100.0, 4, 4),
        (130.0, 4, 4),
        (130.0, 5, 4),
        (200.0, 5, 4),
    )
    assert mem.decode_tps == 812.0
    assert mem.prefill_tps is None
    assert st.memory_from_status({"recommendations": [["x"]]}, 0.0) == PolicyMemory()
    assert st.memory_from_status(None, 0.0) == PolicyMemory()


def test_memory_stable_across_ticks() -> None:
    """Persist -> restore -> persist gives the same object (no status churn)."""
    mem = PolicyMemory(recommendations=((100.0, 4, 4), (130.0, 5, 4)), decode_tps=800.0)
    once = st.memory_to_status(mem, 145.0, 300.0)
    again = st.memory_to_status(st.memory_from_status(once, 160.0), 160.0, 300.0)
    assert once == again


def test_memory_stable_once_the_window_is_covered() -> None:
    """A steady recommendation persists the same memory every tick, also after the
    stabilization window is covered (the anchor is where the steady value began, not
    the newest record at or before the window start, which moves every tick: a status
    write per tick on a converged PDDeployment; CI saw it in the lab at window 20 s)."""
    records: tuple[tuple[float, int, int], ...] = ((990.0, 2, 3),)
    persisted = []
    for i in range(40):
        now = 1000.0 + 2 * i
        records = prune((*records, (now, 1, 1)), now, 20.0)
        persisted.append(st.memory_to_status(PolicyMemory(recommendations=records), now, 20.0))
    assert persisted[-1]["recommendations"] == [[1000, 1, 1]]
    assert all(p == persisted[-1] for p in persisted[10:]), persisted[10:]
    # The window still reads as covered, with the steady value only.
    assert records[0][0] <= records[-1][0] - 20.0
    assert {r[1:] for r in records} == {(1, 1)}


def test_repeated_scale_to_same_target_keeps_last_decision() -> None:
    """Recommend mode (or Pending pods): ScaledDecode to 6 again -> same status."""
    first = st.build_status(inp(decision=SCALE, now=1000.0))
    noisy = replace(METRICS, request_rate=4.4)
    again = st.build_status(inp(decision=SCALE, metrics=noisy, now=1015.0, previous=first))
    assert again.to_k8s() == first.to_k8s()
    further = replace(SCALE, decode=7)
    moved = st.build_status(inp(decision=further, now=1030.0, previous=first))
    assert moved.last_decision is not None
    assert moved.last_decision.time == st.rfc3339(1030.0)


def test_unreachable_message_carries_the_error() -> None:
    s = st.build_status(
        inp(
            metrics=None,
            decision=replace(HOLD, metrics_available=False),
            metrics_error="cannot connect to http://127.0.0.1:1: connection refused",
        )
    )
    assert cond(s, ConditionType.METRICS_AVAILABLE).message.startswith(
        "cannot connect to http://127.0.0.1:1"
    )


def test_progress_phase_is_a_rollout_phase() -> None:
    """A phase given as its value is the enum member; an unknown phase is refused."""
    assert st.ProgressFacts().phase is RolloutPhase.STABLE
    assert st.ProgressFacts(phase="RollingBack").phase is RolloutPhase.ROLLING_BACK
    with pytest.raises(ValueError, match="Paused"):
        st.ProgressFacts(phase="Paused")


def test_memory_keeps_learnt_capacity() -> None:
    mem = PolicyMemory(capacity_gpus=16, capacity_time=900.0)
    out = st.memory_to_status(mem, 1000.0, 300.0)
    assert (out["capacityGPUs"], out["capacityTime"]) == (16, 900.0)
    back = st.memory_from_status(out, 1000.0)
    assert (back.capacity_gpus, back.capacity_time) == (16, 900.0)


def test_status_with_fields_of_a_newer_crd_still_reads() -> None:
    """A newer CRD defaults fields this operator does not know (``schemaRevision``,
    ``rollout.paused``): the API server hands them back in every read. The status
    still parses (the rollout state, the memory, the conditions' transition times
    survive a restart), and a status equal in the known fields is not rewritten."""
    previous = st.build_status(
        inp(progress=st.ProgressFacts(phase=RolloutPhase.ROLLED_BACK), now=1000.0)
    )
    observed = previous.to_k8s()
    observed["schemaRevision"] = 2
    observed["prefill"]["burst"] = 0
    parsed = st.parse_status(observed)
    assert parsed is not None
    assert parsed.to_k8s() == previous.to_k8s()
    assert not st.status_changed(previous, observed)
    assert st.parse_status({"observedGeneration": "garbage"}) is None


def test_slo_unreachable_carries_the_decisions_reason_and_sentence() -> None:
    """A decision whose TTFT bursts are beyond the head-room (``policy.reach``): True,
    its reason, its sentence; the next tick's figures move but the reason does not: the
    message stays (no status write per tick); a new reason brings its own sentence.
    Without one: False, SLOWithinReach."""
    first = Unreachable(ConditionReason.BURST_HEADROOM_OFF, "TTFT p95 3.0s ...: 38 more")
    s1 = st.build_status(inp(decision=replace(SCALE, slo_unreachable=first)))
    c = cond(s1, "SLOUnreachable")
    assert (c.status, c.reason, c.message) == ("True", "BurstHeadroomOff", first.message)
    moved = Unreachable(ConditionReason.BURST_HEADROOM_OFF, "TTFT p95 3.2s ...: 41 more")
    s2 = st.build_status(inp(decision=replace(SCALE, slo_unreachable=moved), previous=s1))
    assert cond(s2, "SLOUnreachable").message == first.message
    assert not st.status_changed(s2, s1.to_k8s())
    capped = Unreachable(ConditionReason.BURST_HEADROOM_CAPPED, "... at its cap")
    s3 = st.build_status(inp(decision=replace(SCALE, slo_unreachable=capped), previous=s2))
    c3 = cond(s3, "SLOUnreachable")
    assert (c3.reason, c3.message) == ("BurstHeadroomCapped", capped.message)
    ok = cond(st.build_status(inp()), "SLOUnreachable")
    assert (ok.status, ok.reason) == ("False", "SLOWithinReach")


def test_slo_unreachable_holds_true_for_a_stabilization_window() -> None:
    """Bursty TTFT crosses the SLO on and off from tick to tick: the condition, once True,
    stays True (same reason, same message) until a whole scale-down stabilization window
    (300 s here) has passed since it turned True, so a flapping p95 costs at most one
    status write pair per window, not one per tick. Then a tick without a breach turns
    it False."""
    why = Unreachable(ConditionReason.BURST_HEADROOM_OFF, "TTFT p95 3.0s ...: 38 more")
    on = st.build_status(inp(decision=replace(SCALE, slo_unreachable=why), now=1000.0))
    calm = replace(SCALE, slo_unreachable=None)
    held = st.build_status(inp(decision=calm, previous=on, now=1200.0))
    c = cond(held, "SLOUnreachable")
    assert (c.status, c.reason, c.message) == ("True", "BurstHeadroomOff", why.message)
    assert c.last_transition_time == cond(on, "SLOUnreachable").last_transition_time
    released = cond(
        st.build_status(inp(decision=calm, previous=held, now=1300.0)), "SLOUnreachable"
    )
    assert (released.status, released.reason) == ("False", "SLOWithinReach")
