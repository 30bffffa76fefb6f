"""The patch planner (plan.py): converged -> nothing; creates, template updates, scales
with pod-deletion-cost before a decode scale-down; objects not ours are refused with a
warning; a retired cell loses its prefill before its decode."""

from __future__ import annotations

import copy
from typing import Any

from pdscaler import manifests, naming
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta
from pdscaler.plan import Observed, Verb, deletion_costs, owned_by, plan
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

UID = "uid-1"
META = Meta(name="chat", namespace="serving", uid=UID)
SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
    }
)
A = CellTarget("img", "v1", prefill=2, decode=4)
B = CellTarget("img", "v2", prefill=1, decode=1)


def desired(*cells: CellTarget) -> list[dict[str, Any]]:
    return manifests.desired_objects(META, SPEC, list(cells))


def as_observed(objs: list[dict[str, Any]], pods: tuple[dict[str, Any], ...] = ()) -> Observed:
    """What the API server would return for ``objs`` (plus server-side noise)."""
    live = copy.deepcopy(objs)
    for o in live:
        o["metadata"]["uid"] = "x-" + o["metadata"]["name"]
        o["metadata"]["resourceVersion"] = "7"
        o.setdefault("status", {})["observedGeneration"] = 1
    return Observed(
        deployments=tuple(o for o in live if o["kind"] == "Deployment"),
        services=tuple(o for o in live if o["kind"] == "Service"),
        pods=pods,
        others=tuple(o for o in live if o["kind"] not in ("Deployment", "Service")),
    )


def pod(name: str, rev: str, role: Role, cost: str | None = None) -> dict[str, Any]:
    ann = {manifests.DELETION_COST_ANNOTATION: cost} if cost is not None else {}
    return {
        "metadata": {
            "name": name,
            "annotations": ann,
            "labels": {
                naming.LABEL_NAME: "chat",
                naming.LABEL_ROLE: role.value,
                naming.LABEL_REVISION: rev,
            },
        }
    }


def test_converged_plans_nothing() -> None:
    want = desired(A)
    result = plan(UID, want, as_observed(want))
    assert result.actions == ()
    assert result.empty


def test_empty_cluster_creates_everything_in_order() -> None:
    result = plan(UID, desired(A), Observed())
    assert [(a.verb, a.kind, a.name) for a in result.actions] == [
        (Verb.CREATE, "Deployment", f"chat-{A.rev}-decode"),
        (Verb.CREATE, "Deployment", f"chat-{A.rev}-prefill"),
        (Verb.CREATE, "Deployment", f"chat-{A.rev}-router"),
        (Verb.CREATE, "ServiceAccount", "chat-router"),
        (Verb.CREATE, "Role", "chat-router"),
        (Verb.CREATE, "RoleBinding", "chat-router"),
        (Verb.CREATE, "Service", "chat"),
    ]


def test_replica_change_is_a_scale_not_an_update() -> None:
    have = as_observed(desired(A))
    bigger = CellTarget("img", "v1", prefill=5, decode=4)
    result = plan(UID, desired(bigger), have)
    (action,) = result.actions
    assert action.verb is Verb.SCALE
    assert action.name == f"chat-{A.rev}-prefill"
    assert action.replicas == 5
    assert action.describe() == f"scale Deployment/chat-{A.rev}-prefill 2->5"


def test_template_change_is_an_update_with_the_whole_body() -> None:
    have = as_observed(desired(A))
    spec2 = SPEC.model_copy(
        update={"decode": SPEC.decode.model_copy(update={"gpus_per_replica": 2})}
    )
    want = manifests.desired_objects(META, spec2, [A])
    result = plan(UID, want, have)
    (action,) = result.actions
    assert action.verb is Verb.UPDATE
    assert action.name == f"chat-{A.rev}-decode"
    assert action.body is not None
    assert action.body["spec"]["replicas"] == 4


def test_object_not_ours_is_never_touched() -> None:
    want = desired(A)
    have = as_observed(want)
    foreign = copy.deepcopy(have.services[-1])  # the front Service "chat"
    foreign["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    foreign["spec"]["selector"] = {"app": "theirs"}
    observed = Observed(have.deployments, (*have.services[:-1], foreign), (), have.others)
    result = plan(UID, want, observed)
    assert result.writes == ()
    (warning,) = result.warnings
    assert warning.startswith("warn Service/chat")
    assert "not controlled" in warning


def test_decode_scale_down_sets_deletion_cost_first() -> None:
    """4 -> 2 with running {p1: 5, p2: 0, p3: 9, p4: 1}: annotate (p3 already says 9),
    then scale; the ReplicaSet removes p2 and p4."""
    pods = (
        pod("p1", A.rev, Role.DECODE),
        pod("p2", A.rev, Role.DECODE),
        pod("p3", A.rev, Role.DECODE, cost="9"),
        pod("p4", A.rev, Role.DECODE),
        pod("q1", A.rev, Role.PREFILL),
    )
    have = as_observed(desired(A), pods)
    smaller = CellTarget("img", "v1", prefill=2, decode=2)
    running = {"p1": 5.2, "p2": 0.0, "p3": 9.0, "p4": 1.4, "q1": 3.0}
    result = plan(UID, desired(smaller), have, running)
    got = [(a.verb, a.name, a.annotations, a.replicas) for a in result.actions]
    cost = manifests.DELETION_COST_ANNOTATION
    assert got == [
        (Verb.ANNOTATE_POD, "p1", {cost: "5"}, None),
        (Verb.ANNOTATE_POD, "p2", {cost: "0"}, None),
        (Verb.ANNOTATE_POD, "p4", {cost: "1"}, None),
        (Verb.SCALE, f"chat-{A.rev}-decode", None, 2),
    ]


def test_decode_scale_up_and_prefill_scale_down_annotate_nothing() -> None:
    pods = (pod("p1", A.rev, Role.DECODE), pod("q1", A.rev, Role.PREFILL))
    have = as_observed(desired(A), pods)
    other = CellTarget("img", "v1", prefill=1, decode=6)
    result = plan(UID, desired(other), have, {"p1": 3.0, "q1": 1.0})
    assert {a.verb for a in result.actions} == {Verb.SCALE}


def test_retired_cell_prefill_goes_first_decode_waits_for_its_pods() -> None:
    """Cell A retired while A's prefill pods still exist: delete A-prefill only; A's
    decode and router Deployments stay until no A prefill pod is left."""
    have = as_observed(desired(A, B), (pod("q1", A.rev, Role.PREFILL),))
    result = plan(UID, desired(B), have)
    assert [(a.verb, a.name) for a in result.actions] == [(Verb.DELETE, f"chat-{A.rev}-prefill")]


def test_retired_cell_decode_and_router_go_once_prefill_is_gone() -> None:
    objs = [o for o in desired(A, B) if o["metadata"]["name"] != f"chat-{A.rev}-prefill"]
    result = plan(UID, desired(B), as_observed(objs))
    assert [(a.verb, a.kind, a.name) for a in result.actions] == [
        (Verb.DELETE, "Deployment", f"chat-{A.rev}-decode"),
        (Verb.DELETE, "Deployment", f"chat-{A.rev}-router"),
    ]


def test_a_decode_service_left_by_an_older_operator_goes_with_its_cell() -> None:
    """Cells of the endpoint-wiring era (0.1.0) had a ``<cell>-decode`` Service, which an
    upgrade leaves behind: it is deleted once the cell's prefill is gone, never while its
    prefill pods may dial it."""
    old = copy.deepcopy(desired(A)[0])
    old.update({"kind": "Service", "apiVersion": "v1", "spec": {"selector": {}}})
    old["metadata"]["name"] = f"chat-{A.rev}-decode"
    have = as_observed([old, *desired(B)])
    result = plan(UID, desired(B), have)
    assert [(a.verb, a.kind, a.name) for a in result.actions] == [
        (Verb.DELETE, "Service", f"chat-{A.rev}-decode")
    ]
    blocked = as_observed([old, *desired(B)], (pod("q1", A.rev, Role.PREFILL),))
    assert plan(UID, desired(B), blocked).actions == ()


def test_terminating_objects_are_not_deleted_again() -> None:
    objs = [o for o in desired(A, B) if o["metadata"]["name"] != f"chat-{A.rev}-prefill"]
    have = as_observed(objs)
    for o in (*have.deployments, *have.services):
        if A.rev in o["metadata"]["name"]:
            o["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert plan(UID, desired(B), have).actions == ()


def test_owned_by_needs_controller_reference() -> None:
    obj = {"metadata": {"ownerReferences": [{"uid": UID, "controller": False}]}}
    assert not owned_by(obj, UID)
    obj["metadata"]["ownerReferences"][0]["controller"] = True
    assert owned_by(obj, UID)


def test_deletion_costs_round_and_skip_unmeasured() -> None:
    pods = [pod("a", "r", Role.DECODE), pod("b", "r", Role.DECODE), pod("c", "r", Role.DECODE)]
    assert deletion_costs(pods, {"a": 0.2, "b": 7.0}) == {"a": "0", "b": "7"}


def test_scales_of_the_serving_cell_come_before_the_new_cells_creates() -> None:
    """v1 serving at 2 / 4 goes to 3 / 6 while the v2 cell is created: the two scales
    are the first writes, so a create the API server refuses (a quota, a name too long)
    cannot delay the capacity of the cell that serves (the shell runs each on its own)."""
    observed = as_observed(desired(A))
    grown = CellTarget("img", "v1", prefill=3, decode=6)
    verbs = [a.verb for a in plan(UID, desired(grown, B), observed).writes]
    assert verbs[:2] == [Verb.SCALE, Verb.SCALE]
    assert Verb.CREATE in verbs[2:]
    assert Verb.SCALE not in verbs[2:]
