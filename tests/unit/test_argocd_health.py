"""deploy/argocd/health.lua, the Argo CD health check of a PDDeployment, run by Lua 5.1
(lupa's ``lua51``: the language version of gopher-lua, which Argo CD embeds) on the
statuses the operator's own status code builds (``status.build_status``), as Argo CD
would hand them over: the object's JSON as a Lua table."""

from __future__ import annotations

from typing import Any

import pytest

from pdscaler import status
from pdscaler.types import ConditionReason, PoolObservation
from support.argocd import health
from support.status_inputs import SPEC, inp


def pdd(mode: str = "Auto", **over: Any) -> dict[str, Any]:
    """A PDDeployment at generation 3 whose status ``build_status`` made from
    ``support.status_inputs.inp(**over)`` (prefill 4/4 ready, min 2; decode 5 of 6
    ready, min 1; stable; metrics known unless overridden)."""
    spec = SPEC.model_copy(update={"scaling": SPEC.scaling.model_copy(update={"mode": mode})})
    return {
        "metadata": {"name": "chat", "namespace": "serving", "generation": 3},
        "spec": {"scaling": {"mode": mode}},
        "status": status.build_status(inp(spec=spec, **over)).to_k8s(),
    }


def test_serving_is_healthy() -> None:
    state, message = health(pdd())
    assert state == "Healthy"
    assert message == "Serving: prefill 4 ready (min 2), decode 5 ready (min 1)"


def test_no_status_or_an_unobserved_generation_is_progressing() -> None:
    assert health({"metadata": {"generation": 1}, "spec": {}}) == (
        "Progressing",
        "waiting for pdscaler to observe the PDDeployment",
    )
    obj = pdd()
    obj["metadata"]["generation"] = 4
    assert health(obj) == ("Progressing", "waiting for pdscaler to observe generation 4")


def test_pools_coming_up_are_progressing() -> None:
    state, message = health(pdd(prefill=PoolObservation(4, 1)))
    assert state == "Progressing"
    assert message.startswith("NotServing: prefill 1 ready (min 2)")


def test_a_rollout_in_progress_is_progressing() -> None:
    progress = status.ProgressFacts("Progressing", "v1 -> v2: step 2 of 4")
    assert health(pdd(progress=progress)) == (
        "Progressing",
        "RolloutInProgress: v1 -> v2: step 2 of 4",
    )


@pytest.mark.parametrize(
    ("phase", "reason"),
    [("RollingBack", "RollingBack"), ("RolledBack", "ProgressDeadlineExceeded")],
)
def test_a_rollout_that_failed_is_degraded(phase: str, reason: str) -> None:
    progress = status.ProgressFacts(phase, "v2 not Ready within 10m; v1 serves")
    assert health(pdd(progress=progress)) == (
        "Degraded",
        f"{reason}: v2 not Ready within 10m; v1 serves",
    )


def test_refused_writes_are_degraded() -> None:
    refused = ("create Deployment chat-v2-abcde-decode: 403 Forbidden",)
    state, message = health(pdd(write_failures=refused))
    assert state == "Degraded"
    assert message.startswith("WriteFailed: ")
    assert "403 Forbidden" in message


def test_short_of_gpus_below_the_minimum_is_degraded_above_it_healthy() -> None:
    short = pdd(decode=PoolObservation(4, 0, unschedulable=3))
    state, message = health(short)
    assert state == "Degraded"
    assert "NotServing" in message
    assert "InsufficientGPUs: 3 pod(s) unschedulable" in message
    # serving at the minimum while more pods wait for GPUs: healthy
    assert health(pdd(decode=PoolObservation(6, 4, unschedulable=2)))[0] == "Healthy"


def test_a_metrics_hold_and_recommend_mode_stay_healthy_and_say_so() -> None:
    held = pdd(metrics=None, metrics_error="connection refused")
    state, message = health(held)
    assert state == "Healthy"
    assert "; scaling holds: PrometheusUnreachable" in message
    state, message = health(pdd(mode="Recommend"))
    assert state == "Healthy"
    assert message.endswith("; Recommend mode: pools are not resized")


def test_a_refused_stored_spec_is_degraded_not_healthy() -> None:
    """The refusal moves observedGeneration (kstatus must read Failed, not InProgress):
    the kept Ready True must not make it Healthy."""
    obj = pdd()
    obj["metadata"]["generation"] = 4
    why = "spec.router.args: Value error, router.args must not give a flag pdscaler sets"
    refused = status.refused_status(status.parse_status(obj["status"]), 4, 2000.0, why)
    obj["status"] = refused.to_k8s()
    state, message = health(obj)
    assert state == "Degraded"
    assert message.startswith("InvalidSpec: the stored spec is refused: spec.router.args")


def test_a_paused_pddeployment_is_suspended() -> None:
    from dataclasses import replace

    obj = pdd()
    obj["status"] = status.build_status(replace(inp(), paused=True)).to_k8s()
    state, message = health(obj)
    assert state == "Suspended"
    assert message.startswith('PausedByAnnotation: pdscaler.io/paused is "true"')


def test_every_condition_the_script_reads_is_one_the_operator_writes() -> None:
    """A renamed condition or reason would silently fall through to Healthy."""
    written = {c["type"] for c in pdd()["status"]["conditions"]}
    read = {"Ready", "Progressing", "WritesFailing", "CapacityLimited", "MetricsAvailable"}
    read |= {"Stalled", "Paused"}
    assert read <= written
    reasons = {r.value for r in ConditionReason}
    assert {"RollingBack", "ProgressDeadlineExceeded"} <= reasons
