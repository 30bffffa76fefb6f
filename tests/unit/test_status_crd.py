"""The CRD documents the vocabulary status carries, exactly: the description of
``status.conditions[].reason`` lists every ``ConditionReason`` under the condition type
that writes it (``Ready: Serving, NotServing.``), and ``status.lastDecision.action``'s
lists every ``Action`` (``One of: ScaledPrefill, ...``), and ``status.rollout.phase``'s
every ``RolloutPhase``. A member added to an enum only,
or a name documented that no enum has, fails here."""

from __future__ import annotations

import re
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from pdscaler import status as st
from pdscaler import targets
from pdscaler.spec import RouterSpec
from pdscaler.types import (
    Action,
    ConditionReason,
    ConditionType,
    PoolObservation,
    RolloutPhase,
    Unreachable,
)
from support.status_inputs import HOLD, METRICS, SCALE, SPEC, inp

CRD = Path(__file__).resolve().parents[2] / "crds" / "pdscaler.io_pddeployments.yaml"
#: ``Ready: Serving, NotServing.`` -> ("Ready", "Serving, NotServing")
TYPE_LIST = re.compile(r"\b([A-Z][A-Za-z]*): ([A-Z][A-Za-z0-9]*(?:, [A-Z][A-Za-z0-9]*)*)\.")
NAME = re.compile(r"\b[A-Z][A-Za-z0-9]*\b")


def status_schema() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text())
    props: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(props["properties"]["status"]["properties"])


def documented_reasons() -> dict[str, set[str]]:
    """Condition type -> the reasons the CRD lists for it."""
    text = status_schema()["conditions"]["items"]["properties"]["reason"]["description"]
    return {kind: set(names.split(", ")) for kind, names in TYPE_LIST.findall(text)}


def documented_actions() -> set[str]:
    """The actions the CRD lists after ``One of:``."""
    text = status_schema()["lastDecision"]["properties"]["action"]["description"]
    _, found, tail = text.partition("One of:")
    assert found, "lastDecision.action's description has no 'One of:' list"
    return set(NAME.findall(tail))


def documented_phases() -> set[str]:
    """The rollout phases the CRD lists after ``One of:``."""
    text = status_schema()["rollout"]["properties"]["phase"]["description"]
    _, found, tail = text.partition("One of:")
    assert found, "rollout.phase's description has no 'One of:' list"
    return set(NAME.findall(tail))


def differences(enum: type[StrEnum], documented: set[str]) -> tuple[set[str], set[str]]:
    """(values of ``enum`` not documented, documented names not in ``enum``)."""
    values = {member.value for member in enum}
    return values - documented, documented - values


def with_member(enum: type[StrEnum], name: str, value: str) -> type[StrEnum]:
    """A copy of ``enum`` with one more member, as if it were added to types.py only."""
    members = {m.name: m.value for m in enum} | {name: value}
    return StrEnum(enum.__name__, members)  # type: ignore[return-value]


def test_condition_reasons_are_documented_exactly() -> None:
    """Every condition type has a list, and the lists hold every reason, no other."""
    by_type = documented_reasons()
    assert set(by_type) == {t.value for t in ConditionType}
    listed = [name for names in by_type.values() for name in names]
    assert len(listed) == len(set(listed)), "a reason is listed under two types"
    assert differences(ConditionReason, set(listed)) == (set(), set())


def test_actions_are_documented_exactly() -> None:
    assert differences(Action, documented_actions()) == (set(), set())


def test_rollout_phases_are_documented_exactly() -> None:
    assert differences(RolloutPhase, documented_phases()) == (set(), set())


def test_a_member_added_to_an_enum_only_is_caught() -> None:
    """``Paused`` added to ConditionReason (or ``HoldPaused`` to Action) and not to the
    CRD comes out as undocumented; one removed from the enum comes out as unknown."""
    reasons = {name for names in documented_reasons().values() for name in names}
    assert differences(with_member(ConditionReason, "PAUSED", "Paused"), reasons) == (
        {"Paused"},
        set(),
    )
    actions = documented_actions()
    assert differences(with_member(Action, "HOLD_PAUSED", "HoldPaused"), actions) == (
        {"HoldPaused"},
        set(),
    )
    assert differences(Action, actions | {"ScaledSideways"}) == (set(), {"ScaledSideways"})


def test_each_condition_is_written_with_a_reason_documented_for_its_type() -> None:
    """Every case the status builder distinguishes (metrics unreachable, not allowed,
    refused as an invalid query, incomplete, ok; every rollout phase; pods pending or
    not; deadline feasible or not; TTFT bursts out of reach or not; pools serving or
    not; converged or paused; a refused stored spec) writes each condition with a reason
    the CRD lists under that condition."""
    by_type = documented_reasons()
    no_rate = replace(METRICS, request_rate=None)
    cases = [
        inp(),
        inp(metrics=None, decision=replace(HOLD, metrics_available=False)),
        *(
            inp(
                metrics=None,
                decision=replace(HOLD, metrics_available=False),
                metrics_reason=reason,
            )
            for reason in (
                ConditionReason.PROMETHEUS_NOT_ALLOWED,
                ConditionReason.INVALID_QUERY,
                ConditionReason.SECRET_NOT_FOUND,
                ConditionReason.SECRET_FORBIDDEN,
                ConditionReason.SECRET_KEY_NOT_FOUND,
                ConditionReason.INVALID_SECRET,
                ConditionReason.PROMETHEUS_UNAUTHORIZED,
            )
        ),
        inp(metrics=no_rate),
        inp(decode=PoolObservation(replicas=6, ready=4, unschedulable=2)),
        inp(decision=replace(SCALE, deadline_infeasible=True)),
        *(
            inp(decision=replace(SCALE, slo_unreachable=Unreachable(reason, "TTFT bursts")))
            for reason in (
                ConditionReason.BURST_HEADROOM_OFF,
                ConditionReason.BURST_HEADROOM_LIMITED,
                ConditionReason.BURST_HEADROOM_CAPPED,
            )
        ),
        inp(prefill=PoolObservation(replicas=2, ready=1)),
        inp(spec=SPEC.model_copy(update={"router": RouterSpec(type="external")})),
        replace(inp(), write_failures=("create Deployment x: 403 Forbidden: quota",)),
        replace(inp(), unknown_fields=("spec.scaling.newKnob",)),
        *(inp(progress=st.ProgressFacts(phase=phase)) for phase in RolloutPhase),
        inp(decision=HOLD, decode=PoolObservation(replicas=6, ready=6)),  # reconciled
        replace(inp(), paused=True),
    ]
    refused = st.refused_status(None, 4, 1000.0, "spec.router.args: refused")
    # pools pdscaler does not own (targets.with_check): a refused target, a mixed pair
    checks = [
        targets.Check(refused=(ConditionReason.SCALE_TARGET_CONFLICT, "driven by an HPA")),
        targets.Check(refused=(ConditionReason.SCALE_TARGET_INVALID, "not found")),
        targets.Check(mixed="decode runs 2 engine configurations"),
    ]
    checked = [targets.with_check(st.build_status(inp()), c, 1000.0, 4, None) for c in checks]
    seen: set[str] = set()
    for built in [*(st.build_status(case) for case in cases), refused, *checked]:
        for c in built.conditions or []:
            assert c.reason in by_type[c.type], (c.type, c.reason)
            seen.add(c.reason)
    assert seen == {r.value for r in ConditionReason}
