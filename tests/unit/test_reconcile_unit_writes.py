"""A refused write never freezes a PDDeployment: ``reconcile._apply`` runs each write on
its own, scales of the serving cell before creates (``plan``), and the WritesFailing
condition names each refused write with the API's reason.

The world is test_reconcile_unit_tick's (chat at 1 req/s, one cell converged at 1 / 1);
at 6 req/s the ratio model wants 8 / 8 (the max). The front Service ``chat`` is gone and
its re-creation refused by a quota (403), as an exhausted Service quota answers.
"""

from __future__ import annotations

from pdscaler.kube import KubeError
from pdscaler.types import ConditionReason, ConditionType, Role
from support.fakekube import RefusingKube
from support.reconcile_world import NAME, NS, World, snapshot

SERVICE = f"/api/v1/namespaces/{NS}/services/{NAME}"
QUOTA = "exceeded quota: svc, requested: services=1, used: services=1, limited: services=1"


def world() -> tuple[World, RefusingKube]:
    """A converged cell on a RefusingKube, its front Service deleted, load at 6 req/s."""
    w = World()
    kube = RefusingKube()
    kube.store = w.kube.store
    w.kube = kube
    w.rt.kube = kube
    w.tick()
    w.converge()
    del kube.store[SERVICE]
    w.metrics = snapshot(6.0)
    return w, kube


def quota(method: str, path: str) -> KubeError | None:
    if method == "PATCH" and path == SERVICE:
        return KubeError(403, "Forbidden", f'services "{NAME}" is forbidden: {QUOTA}')
    return None


def test_a_refused_create_does_not_stop_the_scale_nor_the_status() -> None:
    """The Service create is refused; the decode and prefill scales to 8 still happen,
    first; the status is patched with WritesFailing True naming the create and quoting
    the API; no CreatedService Event, one WriteFailed Warning. (Before: the create ran
    first and its error aborted the tick: no scale, no status, every tick.)"""
    w, kube = world()
    kube.refuse = quota
    before = len(kube.requests)
    rep = w.tick()
    assert w.deployment(Role.DECODE)["spec"]["replicas"] == 8
    assert w.deployment(Role.PREFILL)["spec"]["replicas"] == 8
    writes = [(m, p) for m, p, _ in kube.requests[before:] if m == "PATCH"]
    assert writes.index(("PATCH", SERVICE)) > max(
        i for i, (_, p) in enumerate(writes) if "/deployments/" in p
    )
    c = w.condition(ConditionType.WRITES_FAILING)
    assert (c["status"], c["reason"]) == ("True", ConditionReason.WRITE_FAILED)
    assert c["message"] == (
        f'create Service/{NAME}: 403 Forbidden: services "{NAME}" is forbidden: {QUOTA}'
    )
    assert w.pdd()["status"]["decode"]["desiredReplicas"] == 8
    assert not any(e.startswith("Normal CreatedService") for e in rep.events)
    assert any(e.startswith("Warning WriteFailed: create Service/chat: 403") for e in rep.events)


def test_the_condition_clears_once_the_write_goes_through() -> None:
    w, kube = world()
    kube.refuse = quota
    w.tick()
    first = w.condition(ConditionType.WRITES_FAILING)
    w.tick()
    again = w.condition(ConditionType.WRITES_FAILING)
    assert again["lastTransitionTime"] == first["lastTransitionTime"]
    kube.refuse = lambda method, path: None
    w.tick()
    c = w.condition(ConditionType.WRITES_FAILING)
    assert (c["status"], c["reason"]) == ("False", ConditionReason.WRITES_APPLIED)
    assert SERVICE in kube.store


def test_the_warning_is_published_once_per_write() -> None:
    """The same refused write on every tick: one WriteFailed Event, not one a tick."""
    w, kube = world()
    kube.refuse = quota
    lines = [e for _ in range(3) for e in w.tick().events if "WriteFailed" in e]
    assert len(lines) == 1


def test_a_long_api_message_is_cut() -> None:
    w, kube = world()
    kube.refuse = lambda m, p: (
        KubeError(422, "Invalid", "x" * 5000) if (m, p) == ("PATCH", SERVICE) else None
    )
    w.tick()
    message = w.condition(ConditionType.WRITES_FAILING)["message"]
    assert message.startswith(f"create Service/{NAME}: 422 Invalid: xxx")
    assert message.endswith("...")
    assert len(message) <= len(f"create Service/{NAME}: ") + 300


def test_a_refused_status_patch_or_event_does_not_fail_the_tick() -> None:
    """The status subresource and the Events are refused (an admission webhook): the
    scales still happen and the tick returns."""
    w, kube = world()
    kube.refuse = lambda m, p: (
        KubeError(403, "Forbidden", "denied")
        if m != "GET" and (p.endswith("/status") or "/events" in p)
        else None
    )
    rep = w.tick()
    assert rep is not None
    assert w.deployment(Role.DECODE)["spec"]["replicas"] == 8


def test_a_garbage_snapshot_still_writes_a_json_status() -> None:
    """R NaN, TTFT +Inf, a queue of -Inf: the policy holds, and the status it writes is
    valid JSON (the API server refuses NaN/Infinity: before, every such tick failed
    with ``400 BadRequest: error decoding patch``, and no condition told why)."""
    import json
    import math

    from support import builders

    w, _ = world()
    w.metrics = builders.snapshot(math.nan, ttft=math.inf, decode_queue=-math.inf)
    w.tick()
    st = w.pdd()["status"]
    json.dumps(st, allow_nan=False)
    c = w.condition(ConditionType.METRICS_AVAILABLE)
    assert (c["status"], c["reason"]) == ("False", ConditionReason.METRICS_INCOMPLETE)
    assert "request_rate is invalid (nan)" in c["message"]


def test_the_condition_gauges_say_what_the_status_says_about_refused_writes() -> None:
    """pdscaler_condition{type="WritesFailing",status="True"} (the alert's series) is 1
    while the written status says WritesFailing=True, and 0 again once it clears."""
    w, kube = world()
    kube.refuse = quota

    def gauge(status: str) -> float:
        labels = {"namespace": NS, "name": NAME, "type": "WritesFailing", "status": status}
        value = w.rt.telemetry.registry.get_sample_value("pdscaler_condition", labels)
        return -1.0 if value is None else value

    w.tick()
    assert w.condition(ConditionType.WRITES_FAILING)["status"] == "True"
    assert gauge("True") == 1.0
    assert gauge("False") == 0.0
    kube.refuse = lambda method, path: None
    w.tick()
    assert gauge("True") == 0.0
    assert gauge("False") == 1.0
