"""``reconcile_once`` against an in-memory API server (fakekube.FakeKube) and a metrics
source set by the test: the whole tick (the kube package's requests included) without a cluster.

Worked numbers: prefill 3000 tok/s, decode 800 tok/s, u = 0.7, min 1 / max 8 each.
At R = 1 req/s, L_p = 2000, L_d = 500 the ratio model wants N_P = 2000/2100 = 0.95 -> 1
and N_D = 500/560 = 0.89 -> 1: one replica each, which is where a new cell starts.
"""

from __future__ import annotations

import copy

import pytest

from pdscaler import manifests, status
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import ConditionReason, ConditionType, Role
from support.reconcile_world import NAME, NS, PDD_PATH, REV, World, snapshot


def test_first_tick_creates_the_cell_with_field_manager_and_status() -> None:
    w = World()
    rep = w.tick()
    kinds = sorted((r.verb, r.kind) for r in w.kube.audit.records if r.verb != "event")
    assert kinds == [
        ("create", "Deployment"),
        ("create", "Deployment"),
        ("create", "Deployment"),
        ("create", "Role"),
        ("create", "RoleBinding"),
        ("create", "Service"),
        ("create", "ServiceAccount"),
        ("status", "PDDeployment"),
    ]
    # decode first: prefill pods start once a decode pod of the cell is Ready
    assert w.deployment(Role.PREFILL)["spec"]["replicas"] == 0
    assert w.deployment(Role.DECODE)["spec"]["replicas"] == 1
    assert (
        w.deployment(Role.DECODE)["metadata"]["ownerReferences"][0]["uid"]
        == (w.pdd()["metadata"]["uid"])
    )
    st = w.pdd()["status"]
    assert st["activeVersion"] == "v1"
    assert st["decode"]["summary"] == "0/1"
    assert rep.applied
    assert any(e.startswith("Normal CreatedDeployment") for e in rep.events)


def test_converged_tick_makes_zero_writes() -> None:
    w = World()
    w.tick()
    w.converge()
    before = w.kube.audit.count
    for _ in range(3):
        rep = w.tick()
        assert rep.writes == 0
        assert rep.plan is not None
        assert rep.plan.empty
    assert w.kube.audit.count == before
    assert all(method == "GET" for method, _, _ in w.kube.requests[-12:])


def test_load_rise_scales_and_publishes_the_decision() -> None:
    """R 1 -> 8 req/s: N_D = 8*500/560 = 7.1 -> 8 decode replicas (max 8)."""
    w = World()
    w.tick()
    w.converge()
    w.metrics = snapshot(rate=8.0)
    rep = w.tick()
    assert rep.decision is not None
    assert rep.decision.decode > 1
    assert w.deployment(Role.DECODE)["spec"]["replicas"] == rep.decision.decode
    ld = w.pdd()["status"]["lastDecision"]
    assert ld["action"] == rep.decision.action
    assert ld["inputs"]["requestRate"] == 8.0
    assert any(rep.decision.action in e for e in rep.events)


def test_recommend_mode_writes_only_status_and_events() -> None:
    w = World()
    w.tick()
    w.converge()
    spec_dep = copy.deepcopy(w.deployment(Role.DECODE))
    pdd = w.kube.store[PDD_PATH]
    pdd["spec"]["scaling"]["mode"] = "Recommend"
    w.metrics = snapshot(rate=8.0)
    count = w.kube.audit.count
    rep = w.tick()
    verbs = {(r.verb, r.kind) for r in w.kube.audit.since(count)}
    assert verbs <= {("status", "PDDeployment"), ("event", "Event")}
    assert w.deployment(Role.DECODE)["spec"] == spec_dep["spec"]
    assert rep.decision is not None
    assert rep.decision.decode > 1
    assert w.pdd()["status"]["decode"]["desiredReplicas"] == rep.decision.decode
    assert any("RecommendScaled" in e for e in rep.events)
    again = w.tick()  # the same recommendation again: no new status, no new Event
    assert again.writes == 0


def test_prometheus_unreachable_holds_and_sets_condition() -> None:
    w = World()
    w.tick()
    w.converge()
    w.metrics = snapshot(rate=8.0)
    w.tick()
    replicas = w.deployment(Role.DECODE)["spec"]["replicas"]
    w.metrics = None
    rep = w.tick(advance=600.0)  # well past any stabilization window
    assert w.deployment(Role.DECODE)["spec"]["replicas"] == replicas
    c = w.condition(ConditionType.METRICS_AVAILABLE)
    assert (c["status"], c["reason"]) == ("False", ConditionReason.PROMETHEUS_UNREACHABLE)
    assert "connection refused" in c["message"]
    assert rep.metrics_error == "connection refused"
    w.metrics = snapshot(rate=8.0)
    w.tick()
    assert w.condition(ConditionType.METRICS_AVAILABLE)["status"] == "True"


def test_foreign_object_is_left_alone_with_one_warning() -> None:
    w = World()
    foreign = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NS, "labels": {"app": "theirs"}},
        "spec": {"selector": {"app": "theirs"}},
    }
    w.kube.put(f"/api/v1/namespaces/{NS}/services/{NAME}", foreign)
    first = w.tick()
    assert any(e.startswith("Warning NotOwned") for e in first.events)
    svc = w.kube.store[f"/api/v1/namespaces/{NS}/services/{NAME}"]
    assert svc["spec"] == {"selector": {"app": "theirs"}}
    second = w.tick()
    assert not any("NotOwned" in e for e in second.events)


def test_deleted_or_missing_pdd_is_a_no_op() -> None:
    w = World()
    del w.kube.store[PDD_PATH]
    rep = w.tick()
    assert rep.skipped == "not found"
    assert rep.writes == 0


def test_template_change_updates_the_deployment() -> None:
    """A template change that does not touch KV compatibility (an annotation) is an
    in-place update of the pool's Deployment."""
    w = World()
    w.tick()
    w.converge()
    pdd = w.kube.store[PDD_PATH]
    pdd["spec"]["decode"]["template"] = {"metadata": {"annotations": {"x": "new"}}}
    count = w.kube.audit.count
    w.tick()
    applied = [(r.verb, r.name) for r in w.kube.audit.since(count) if r.kind == "Deployment"]
    assert applied == [("update", f"{NAME}-{REV}-decode")]
    template = w.deployment(Role.DECODE)["spec"]["template"]
    assert template["metadata"]["annotations"]["x"] == "new"


def test_a_kv_config_change_makes_a_new_cell() -> None:
    """gpusPerReplica (like the engine's args, env, resources) decides KV compatibility:
    changing it creates a new cell rolled to like a new version; the old cell's
    Deployments keep their template."""
    w = World()
    w.tick()
    w.converge()
    before = copy.deepcopy(w.deployment(Role.DECODE)["spec"]["template"])
    pdd = w.kube.store[PDD_PATH]
    pdd["spec"]["decode"]["gpusPerReplica"] = 2
    count = w.kube.audit.count
    w.tick()
    applied = [(r.verb, r.name) for r in w.kube.audit.since(count) if r.kind == "Deployment"]
    assert ("update", f"{NAME}-{REV}-decode") not in applied
    assert w.deployment(Role.DECODE)["spec"]["template"] == before
    doc = copy.deepcopy(pdd["spec"])
    new_rev = manifests.spec_revision(PDDeploymentSpec.model_validate(doc))
    assert new_rev != REV
    new = w.kube.store[f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-{new_rev}-decode"]
    engine = new["spec"]["template"]["spec"]["containers"][0]
    assert engine["resources"]["limits"][manifests.GPU_RESOURCE] == "2"


@pytest.mark.parametrize("mode", ["Auto", "Recommend"])
def test_status_has_every_condition(mode: str) -> None:
    w = World(mode)
    w.tick()
    types = {c["type"] for c in w.pdd()["status"]["conditions"]}
    assert types == set(status.CONDITION_TYPES)


def test_version_change_keeps_the_old_cells_template() -> None:
    """v1 -> v2 with a new start-up annotation in the template: the v2 cell gets it,
    the serving v1 cell keeps its own template (only its replicas may change)."""
    w = World()
    w.tick()
    w.converge()
    v1_template = copy.deepcopy(w.deployment(Role.DECODE)["spec"]["template"])
    pdd = w.kube.store[PDD_PATH]
    pdd["spec"]["engine"]["version"] = "v2"
    pdd["spec"]["decode"]["template"] = {"metadata": {"annotations": {"x": "new"}}}
    rep = w.tick()
    assert rep.decision is not None
    assert w.deployment(Role.DECODE)["spec"]["template"] == v1_template
    rev2 = manifests.spec_revision(PDDeploymentSpec.model_validate(pdd["spec"]))
    new = w.kube.store[f"/apis/apps/v1/namespaces/{NS}/deployments/{NAME}-{rev2}-decode"]
    assert new["spec"]["template"]["metadata"]["annotations"]["x"] == "new"
    assert new["spec"]["replicas"] >= 1
    assert w.pdd()["status"]["rollout"]["toVersion"] == "v2"


def test_a_deleted_pdd_is_forgotten() -> None:
    w = World()
    w.tick()
    uid = w.pdd()["metadata"]["uid"]
    assert uid in w.rt.memory
    del w.kube.store[PDD_PATH]
    w.tick()
    assert uid not in w.rt.memory
    assert (NS, NAME) not in w.rt.last
