"""kstatus reads a PDDeployment as Flux and kpt do: the status builder's Reconciling and
Stalled (status.py), a refused stored spec's status (``status.refused_status``, written
by the reconcile shell) and the pause annotation.

``kstatus`` (support/kstatus.py) is cli-utils' kstatus ``Compute`` for a custom resource,
rule for rule. Worked cases: converged -> Current; decode 5 Ready of 6 asked ->
InProgress (ScalingInProgress); mid-rollout -> InProgress (RolloutProgressing);
rolled back -> Failed (RolledBack); a stored ``router.args: [--port, ...]`` -> Failed
(InvalidSpec) at the spec's generation; a generation not ticked yet -> InProgress.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pdscaler import status as st
from pdscaler.reconcile import paused, reconcile_once
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentStatus
from pdscaler.types import ConditionReason, ConditionType, PoolObservation, RolloutPhase
from support import builders
from support.fakekube import FakeKube
from support.kstatus import kstatus
from support.status_inputs import HOLD, SPEC, inp

Obj = dict[str, Any]


def as_object(status: PDDeploymentStatus, generation: int = 3) -> Obj:
    return {"metadata": {"generation": generation}, "status": status.to_k8s()}


def cond(status: PDDeploymentStatus, type_: str) -> tuple[str, str]:
    (c,) = [c for c in status.conditions or [] if c.type == type_]
    return c.status, c.reason


CONVERGED = {"decision": HOLD, "decode": PoolObservation(replicas=6, ready=6)}


def test_a_converged_pddeployment_is_current() -> None:
    s = st.build_status(inp(**CONVERGED))
    assert cond(s, "Reconciling") == ("False", "Reconciled")
    assert cond(s, "Stalled") == ("False", "NotStalled")
    assert cond(s, "Paused") == ("False", "NotPaused")
    assert kstatus(as_object(s)) == ("Current", "")


def test_a_scale_up_in_flight_is_in_progress_until_the_pods_are_ready() -> None:
    """Decided decode 6 with 5 Ready: InProgress; the sixth Ready: Current."""
    s = st.build_status(inp())  # SCALE: decode 4 -> 6, 5 ready
    assert cond(s, "Reconciling") == ("True", "ScalingInProgress")
    (c,) = [c for c in s.conditions or [] if c.type == "Reconciling"]
    assert c.message == "prefill 4/4 ready, decode 5/6 ready"
    assert kstatus(as_object(s)) == ("InProgress", "ScalingInProgress")
    later = st.build_status(replace(inp(decode=PoolObservation(6, 6)), previous=s, now=1030.0))
    assert kstatus(as_object(later)) == ("Current", "")


def test_a_recommendation_nobody_applies_is_no_work_in_flight() -> None:
    """Recommend mode (and a paused object): the target is the Deployments' replicas,
    not the decision's, or Reconciling would stay True for ever."""
    recommend = SPEC.model_copy(
        update={"scaling": SPEC.scaling.model_copy(update={"mode": "Recommend"})}
    )
    pools = {"decode": PoolObservation(replicas=4, ready=4)}  # decision says 6
    s = st.build_status(inp(spec=recommend, **pools))
    assert cond(s, "Reconciling") == ("False", "Reconciled")
    assert cond(st.build_status(inp(**pools)), "Reconciling") == ("True", "ScalingInProgress")


def test_a_rollout_is_in_progress_then_current() -> None:
    moving = st.ProgressFacts(RolloutPhase.PROGRESSING, "shifting 1 of 3 steps to v2")
    s = st.build_status(inp(progress=moving, **CONVERGED))
    assert cond(s, "Reconciling") == ("True", "RolloutProgressing")
    assert kstatus(as_object(s)) == ("InProgress", "RolloutProgressing")
    back = st.build_status(inp(progress=st.ProgressFacts("RollingBack"), **CONVERGED))
    assert kstatus(as_object(back)) == ("InProgress", "RollbackProgressing")
    done = st.build_status(inp(progress=st.ProgressFacts("Complete"), **CONVERGED))
    assert kstatus(as_object(done)) == ("Current", "")


def test_a_rollout_recommend_mode_does_not_carry_out_is_no_work_in_flight() -> None:
    """Recommend mode publishes the rollout (Progressing True) and writes nothing: kstatus
    must not wait for it for ever; Reconciled says why."""
    recommend = SPEC.model_copy(
        update={"scaling": SPEC.scaling.model_copy(update={"mode": "Recommend"})}
    )
    moving = st.ProgressFacts(RolloutPhase.PROGRESSING, "v1 -> v2: step 0")
    s = st.build_status(inp(spec=recommend, progress=moving, **CONVERGED))
    assert cond(s, "Progressing") == ("True", "RolloutInProgress")
    assert cond(s, "Reconciling") == ("False", "Reconciled")
    (c,) = [c for c in s.conditions or [] if c.type == "Reconciling"]
    assert c.message.endswith(st.MSG_RECOMMEND_ONLY)
    assert kstatus(as_object(s)) == ("Current", "")


def test_a_rolled_back_rollout_is_stalled_failed() -> None:
    """Flux called this Current before: Ready stays True (v1 serves), but the spec's
    version will not serve without a spec change."""
    why = "v2 not Ready within 10m0s; rolled back to v1"
    s = st.build_status(inp(progress=st.ProgressFacts("RolledBack", why), **CONVERGED))
    assert cond(s, "Stalled") == ("True", "RolledBack")
    assert cond(s, "Reconciling") == ("False", "Blocked")
    assert cond(s, "Ready") == ("True", "Serving")
    assert kstatus(as_object(s)) == ("Failed", "RolledBack")
    (c,) = [c for c in s.conditions or [] if c.type == "Stalled"]
    assert c.message == why


def test_never_both_reconciling_and_stalled() -> None:
    """kstatus reads the first True of the two: a rolled-back object whose pods are
    still starting must read Failed, not InProgress."""
    rolled = st.ProgressFacts("RolledBack", "rolled back")
    s = st.build_status(inp(progress=rolled))  # decode 5 of 6 ready
    assert cond(s, "Reconciling") == ("False", "Blocked")
    assert kstatus(as_object(s)) == ("Failed", "RolledBack")


def test_paused_says_so_and_is_not_reconciling() -> None:
    s = st.build_status(replace(inp(), paused=True))  # decode 5 of 6: would be in flight
    assert cond(s, "Paused") == ("True", "PausedByAnnotation")
    assert cond(s, "Reconciling") == ("False", "ReconcilePaused")
    (c,) = [c for c in s.conditions or [] if c.type == "Paused"]
    assert 'pdscaler.io/paused is "true"' in c.message
    assert kstatus(as_object(s)) == ("Current", "")


def test_the_paused_annotation_is_read_case_insensitively_and_only_true() -> None:
    def obj(value: str | None) -> Obj:
        notes = {} if value is None else {"pdscaler.io/paused": value}
        return {"metadata": {"annotations": notes}}

    assert [paused(obj(v)) for v in ("true", "True", " TRUE ")] == [True, True, True]
    assert [paused(obj(v)) for v in (None, "false", "yes", "1", "")] == [False] * 5
    assert paused({"metadata": {}}) is False


def test_a_refused_spec_keeps_the_status_and_is_failed_at_its_generation() -> None:
    before = st.build_status(inp(**CONVERGED))  # generation 3
    why = "spec.router.args: Value error, router.args must not give a flag pdscaler sets"
    s = st.refused_status(before, 4, 2000.0, why)
    assert s.observed_generation == 4
    assert cond(s, "Stalled") == ("True", "InvalidSpec")
    assert cond(s, "Reconciling") == ("False", "Blocked")
    (c,) = [c for c in s.conditions or [] if c.type == "Stalled"]
    assert why in c.message
    assert c.observed_generation == 4
    # the rest is the last spec acted on: pools, Ready and its generation
    assert s.prefill == before.prefill
    assert cond(s, "Ready") == ("True", "Serving")
    (ready,) = [c for c in s.conditions or [] if c.type == "Ready"]
    assert ready.observed_generation == 3
    assert kstatus(as_object(s, generation=4)) == ("Failed", "InvalidSpec")
    # same inputs later: equal status (one write per generation)
    assert st.refused_status(s, 4, 2060.0, why).to_k8s() == s.to_k8s()
    # the order of conditions stays the builder's
    assert [c.type for c in s.conditions or []] == list(st.CONDITION_TYPES)


def test_without_a_previous_status_a_refusal_is_just_the_two() -> None:
    s = st.refused_status(None, 1, 2000.0, "spec.scaling.roleFlips.enabled: needs vllm-router")
    assert [c.type for c in s.conditions or []] == ["Reconciling", "Stalled"]
    assert kstatus(as_object(s, generation=1)) == ("Failed", "InvalidSpec")


def test_a_generation_not_yet_ticked_is_in_progress() -> None:
    s = st.build_status(inp(**CONVERGED))
    assert kstatus(as_object(s, generation=4)) == ("InProgress", "LatestGenerationNotObserved")


# ---- the reconcile shell, against the in-memory API server --------------------------

NS, NAME = "serving", "chat"
PDD_PATH = f"/apis/pdscaler.io/v1alpha1/namespaces/{NS}/pddeployments/{NAME}"
SPEC_DOC: dict[str, Any] = {
    "engine": {"image": "img", "version": "v1"},
    "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
    "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 8}},
    "scaling": {"interval": "5s", "maxGPUs": 16},
}
#: what a CRD before the router.args rule stored, and this operator refuses
REFUSED = {**SPEC_DOC, "router": {"args": ["--port", "9000"]}}


def manifest(spec: dict[str, Any], generation: int = 1, notes: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "pdscaler.io/v1alpha1",
        "kind": "PDDeployment",
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "generation": generation,
            "annotations": dict(notes or {}),
        },
        "spec": spec,
    }


def runtime(kube: FakeKube, now: list[float]) -> Runtime:
    return Runtime(
        kube=kube,
        clock=lambda: now[0],
        metrics_source=lambda spec, ns, name, t: builders.snapshot(1.0, ttft=0.3, tpot=0.02),
    )


def events(kube: FakeKube, reason: str) -> list[Obj]:
    return [e for path, e in kube.store.items() if "/events/" in path and e.get("reason") == reason]


def conditions(kube: FakeKube) -> dict[str, Obj]:
    return {c["type"]: c for c in kube.store[PDD_PATH]["status"]["conditions"]}


def test_a_refused_stored_spec_is_stalled_with_an_event_and_one_write() -> None:
    kube = FakeKube()
    kube.put(PDD_PATH, manifest(REFUSED, generation=2))
    now = [1_000_000.0]
    rt = runtime(kube, now)
    rep = reconcile_once(rt, NS, NAME)
    assert rep.skipped == "invalid spec"
    stored = kube.store[PDD_PATH]
    assert stored["status"]["observedGeneration"] == 2
    stalled = conditions(kube)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidSpec")
    assert "spec.router.args" in stalled["message"]
    assert kstatus(stored) == ("Failed", "InvalidSpec")
    (event,) = events(kube, "InvalidSpec")
    assert event["type"] == "Warning"
    assert "spec.router.args" in event["message"]
    series = rt.telemetry.condition.labels(NS, NAME, "Stalled", "True")._value.get()
    assert series == 1.0
    # the next ticks write nothing: no status, no second Event
    writes = kube.audit.count
    now[0] += 5
    assert reconcile_once(rt, NS, NAME).writes == 0
    assert kube.audit.count == writes
    assert len(events(kube, "InvalidSpec")) == 1
    # fixed: a valid generation is acted on and Stalled goes False
    stored["spec"] = SPEC_DOC
    stored["metadata"]["generation"] = 3
    now[0] += 5
    assert reconcile_once(rt, NS, NAME).skipped is None
    stalled = conditions(kube)["Stalled"]
    assert (stalled["status"], stalled["reason"]) == ("False", "NotStalled")
    assert kube.store[PDD_PATH]["status"]["observedGeneration"] == 3


def test_a_paused_pddeployment_writes_nothing_but_its_status() -> None:
    """Paused at creation: the tick would create the cell (Deployments, Services); it
    creates none, says Paused, and creates them once the annotation is gone."""
    kube = FakeKube()
    kube.put(PDD_PATH, manifest(SPEC_DOC, notes={"pdscaler.io/paused": "true"}))
    now = [1_000_000.0]
    rt = runtime(kube, now)
    rep = reconcile_once(rt, NS, NAME)
    assert rep.plan is not None
    assert rep.plan.writes
    assert kube.objects("deployments") == []
    paused_c = conditions(kube)["Paused"]
    assert (paused_c["status"], paused_c["reason"]) == ("True", "PausedByAnnotation")
    assert conditions(kube)["Reconciling"]["reason"] == ConditionReason.RECONCILE_PAUSED
    del kube.store[PDD_PATH]["metadata"]["annotations"]["pdscaler.io/paused"]
    now[0] += 5
    reconcile_once(rt, NS, NAME)
    assert len(kube.objects("deployments")) >= 2
    assert conditions(kube)["Paused"]["status"] == "False"
    assert conditions(kube)[ConditionType.RECONCILING]["status"] == "True"  # pods to come
