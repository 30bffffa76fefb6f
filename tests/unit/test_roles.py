"""The live role flip (``pdscaler.roles``, ``observe`` of a role-flip cell, the flip
cell's manifests and one tick on the simulated cluster): which pods change role, what
each Deployment then runs, and that a cell without flips is exactly as before."""

from __future__ import annotations

from typing import Any

from pdscaler import invariants, manifests, naming, observe, roles, tick
from pdscaler.manifests import DELETION_COST_ANNOTATION, CellTarget
from pdscaler.plan import Observed, Verb, plan
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Flip, Role, RolloutPhase
from support.tick_world import OWNER, run

REV = "v1-abcde"


def pod(name: str, owner: Role, serves: Role, *, ready: bool = True) -> dict[str, Any]:
    """A pod made by ``owner``'s Deployment (its ReplicaSet), labelled ``serves``."""
    dep = naming.pool_name(OWNER.name, REV, owner)
    return {
        "metadata": {
            "name": name,
            "labels": {
                naming.LABEL_NAME: OWNER.name,
                naming.LABEL_REVISION: REV,
                naming.LABEL_POOL: owner.value,
                naming.LABEL_ROLE: serves.value,
                observe.POD_TEMPLATE_HASH: "h",
            },
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{dep}-h", "controller": True}],
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def deployment(role: Role, replicas: int) -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "metadata": {
            "name": naming.pool_name(OWNER.name, REV, role),
            "labels": {naming.LABEL_REVISION: REV, naming.LABEL_ROLE: role.value},
            "ownerReferences": [{"uid": OWNER.uid, "controller": True}],
        },
        "spec": {"replicas": replicas},
    }


def cell(prefill: int, decode: int, pods: list[dict[str, Any]]) -> observe.CellObservation:
    seen = Observed(
        deployments=(deployment(Role.PREFILL, prefill), deployment(Role.DECODE, decode)),
        pods=tuple(pods),
    )
    return observe.cells(seen, OWNER.uid)[REV]


def target(prefill: int, decode: int) -> CellTarget:
    return CellTarget("img", "v1", prefill, decode)


P, D = Role.PREFILL, Role.DECODE


def test_the_worked_example_flips_the_least_busy_decode_pod() -> None:
    """The module docstring: decode runs 4 with running 5, 0, 9, 1, prefill 1; 1 decode
    replica flips, prefill is sized 3 and decode 3: d2 (running 0) is relabelled with
    cost 1000000; prefill's Deployment 1 -> 2, decode's stays 4."""
    pods = [pod("p1", P, P), *(pod(f"d{i}", D, D) for i in range(1, 5))]
    running = {"d1": 5.0, "d2": 0.0, "d3": 9.0, "d4": 1.0}
    placed, actions = roles.carry_out(target(3, 3), cell(1, 4, pods), Flip(D, 1, 0.2, 6.0), running)
    assert [(a.verb, a.name, a.labels, a.annotations) for a in actions] == [
        (Verb.RELABEL_POD, "d2", {naming.LABEL_ROLE: "prefill"},
         {DELETION_COST_ANNOTATION: roles.FLIPPED_COST})
    ]  # fmt: skip
    assert (placed.prefill, placed.decode) == (2, 4)


def test_a_flip_takes_pods_home_first_and_never_a_pod_that_is_not_ready() -> None:
    """Prefill serves p1 and d1 (flipped in) and p2 (not Ready); decode grows by 1 with
    1 flip: d1 goes home (cost 0) rather than p1, and p2 is never picked."""
    pods = [pod("p1", P, P), pod("d1", D, P), pod("p2", P, P, ready=False), pod("d2", D, D)]
    placed, actions = roles.carry_out(target(2, 2), cell(2, 1, pods), Flip(P, 1, 1.0, 6.0), {})
    assert [(a.name, a.message, a.annotations) for a in actions] == [
        ("d1", "prefill->decode", {DELETION_COST_ANNOTATION: roles.HOME_COST})
    ]
    assert (placed.prefill, placed.decode) == (2, 2)


def test_a_pool_shrinking_below_its_flipped_in_pods_sends_the_rest_home() -> None:
    """Prefill serves d1, d2 (both flipped in) and p1; it shrinks to 1 while decode
    stays at 2 serving pods: one flipped pod goes home (the not-Ready one first), and
    the Deployments are prefill 1 - 1 + 0 = 0, decode 2 - 0 + 1 = 3."""
    pods = [pod("p1", P, P), pod("d1", D, P), pod("d2", D, P, ready=False), pod("d3", D, D)]
    seen = cell(1, 3, pods)
    assert (seen.prefill.replicas, seen.decode.replicas) == (3, 1)
    placed, actions = roles.carry_out(target(1, 2), seen, None, {})
    assert [(a.name, a.message) for a in actions] == [("d2", "prefill->decode")]
    assert (placed.prefill, placed.decode) == (0, 3)


def test_a_retiring_cell_relabels_nothing_and_a_cell_without_flips_is_left_alone() -> None:
    flipped = cell(1, 2, [pod("p1", P, P), pod("d1", D, P), pod("d2", D, D)])
    placed, actions = roles.carry_out(target(0, 0), flipped, None, {})
    assert (placed.prefill, placed.decode, actions) == (0, 0, [])
    plain = cell(1, 1, [pod("p1", P, P), pod("d1", D, D)])
    assert roles.carry_out(target(5, 7), plain, None, {}) == (target(5, 7), [])


def test_a_flipped_pod_counts_where_it_serves_and_only_its_replica_set_owns_it() -> None:
    """Decode's Deployment runs 3 (d1 serves prefill): prefill 1 + 1 = 2 replicas with
    2 Ready, decode 3 - 1 = 2. A pod labelled pool=decode, role=prefill that no
    ReplicaSet of the cell made is no capacity, whatever its labels say."""
    forged = pod("x", D, P)
    forged["metadata"]["ownerReferences"] = []
    seen = cell(1, 3, [pod("p1", P, P), pod("d1", D, P), pod("d2", D, D), pod("d3", D, D), forged])
    assert (seen.prefill.replicas, seen.prefill.ready) == (2, 2)
    assert (seen.decode.replicas, seen.decode.ready) == (2, 2)
    assert [p.name for p in seen.flipped] == ["d1"]


def flip_spec(**changes: Any) -> PDDeploymentSpec:
    doc: dict[str, Any] = {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
        "decode": {"tokensPerSecond": 800, "replicas": {"min": 4, "max": 8}},
        "scaling": {
            "interval": "5s",
            "maxGPUs": 16,
            "roleFlips": {"enabled": True, "reconfigureSeconds": 0, "window": "10s"},
        },
    }
    for role, low in changes.items():
        doc[role]["replicas"]["min"] = low
    return PDDeploymentSpec.model_validate(doc)


def without_flips() -> PDDeploymentSpec:
    """``flip_spec()`` with ``scaling.roleFlips`` left out."""
    doc = flip_spec().model_dump(by_alias=True)
    return PDDeploymentSpec.model_validate({**doc, "scaling": {"interval": "5s", "maxGPUs": 16}})


def test_a_flip_cell_selects_on_the_pool_and_turning_flips_on_is_a_new_revision() -> None:
    off = without_flips()
    on = flip_spec()
    assert manifests.spec_revision(on) != manifests.spec_revision(off)
    for spec_, flips in ((on, True), (off, False)):
        cell_ = manifests.spec_cell(spec_, 1, 1)
        dep = manifests.pool_deployment(OWNER, spec_, cell_, Role.DECODE)
        selector = dep["spec"]["selector"]["matchLabels"]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert (naming.LABEL_POOL in selector, naming.LABEL_ROLE in selector) == (flips, not flips)
        assert pod_labels[naming.LABEL_ROLE] == "decode"
        assert (pod_labels.get(naming.LABEL_POOL) == "decode") == flips
        assert selector.items() <= pod_labels.items()


def test_one_tick_flips_a_surplus_decode_replica_on_the_simulated_cluster() -> None:
    """Decode at 4 (min 4), prefill at 1; decode's min drops to 1 (the 5-minute
    stabilization holds its 4 pods) for the 10 s flip window, then prefill's min rises
    to 3: one tick relabels one decode pod (a third of 4), keeps decode's Deployment at
    4 and starts one prefill pod; no decode pod is made or removed, and the status
    counts what each pool serves once the new pod is Ready."""
    cluster = SimCluster(startup_seconds=30.0)
    state: dict[str, Any] = {}
    run(cluster, flip_spec(), 1000.0, 20, state)
    decode_pods = {
        n for n, p in cluster.pods.items() if p["metadata"]["ownerName"].endswith("decode")
    }
    assert len(decode_pods) == 4
    run(cluster, flip_spec(decode=1), 1100.0, 3, state)
    (fx,) = run(cluster, flip_spec(decode=1, prefill=3), 1115.0, 1, state)
    relabels = [a for a in fx.writes if a.verb is Verb.RELABEL_POD]
    assert len(relabels) == 1
    assert relabels[0].name in decode_pods
    assert fx.writes[0] is relabels[0]
    assert fx.decision.flip is not None
    assert any(e.reason == "FlippedRole" for e in fx.events)
    replicas = {
        d["metadata"]["labels"][naming.LABEL_ROLE]: d["spec"]["replicas"]
        for d in cluster.deployments.values()
        if d["metadata"]["labels"][naming.LABEL_ROLE] != "router"
    }
    assert replicas == {"prefill": 2, "decode": 4}
    later = run(cluster, flip_spec(decode=1, prefill=3), 1120.0, 8, state)
    assert not [a for fx_ in later for a in fx_.writes if a.verb is Verb.RELABEL_POD]
    now_decode = {
        n for n, p in cluster.pods.items() if p["metadata"]["ownerName"].endswith("decode")
    }
    assert now_decode == decode_pods
    status = later[-1].status
    assert status.prefill is not None
    assert status.decode is not None
    assert (status.prefill.ready_replicas, status.decode.ready_replicas) == (3, 3)


def test_recommend_mode_relabels_nothing() -> None:
    cluster = SimCluster(startup_seconds=30.0)
    state: dict[str, Any] = {}
    run(cluster, flip_spec(), 1000.0, 20, state)
    run(cluster, flip_spec(decode=1), 1100.0, 3, state)
    recommend = flip_spec(decode=1, prefill=3)
    recommend = recommend.model_copy(
        update={"scaling": recommend.scaling.model_copy(update={"mode": "Recommend"})}
    )
    (fx,) = run(cluster, recommend, 1115.0, 1, state)
    assert fx.decision.flip is not None
    assert fx.writes == ()


def test_a_decode_scale_down_never_lowers_a_flipped_pods_cost() -> None:
    """The decode Deployment (selecting on the pool) shrinks: its own pods get their
    running as cost; d1, flipped to prefill, keeps its 1000000 even when a stale running
    figure names it."""
    spec_ = flip_spec()
    cell_ = manifests.spec_cell(spec_, 1, 1)
    want = manifests.pool_deployment(OWNER, spec_, cell_, Role.DECODE)
    have = {**want, "spec": {**want["spec"], "replicas": 3}}
    have["metadata"] = {
        **want["metadata"],
        "ownerReferences": [{"uid": OWNER.uid, "controller": True}],
    }
    labels_ = dict(want["spec"]["template"]["metadata"]["labels"])
    d1 = {"metadata": {"name": "d1", "labels": {**labels_, naming.LABEL_ROLE: "prefill"},
                       "annotations": {DELETION_COST_ANNOTATION: roles.FLIPPED_COST}}}  # fmt: skip
    d2 = {"metadata": {"name": "d2", "labels": labels_}}
    out = plan(OWNER.uid, [want], Observed(deployments=(have,), pods=(d1, d2)), {"d1": 0, "d2": 4})
    costs = {a.name: a.annotations for a in out.writes if a.verb is Verb.ANNOTATE_POD}
    assert costs == {"d2": {DELETION_COST_ANNOTATION: "4"}}


def test_flip_options_follow_the_spec() -> None:
    opts = tick.flip_options(flip_spec())
    assert opts is not None
    assert (opts.reconfigure_seconds, opts.window_seconds) == (0.0, 10.0)
    off = without_flips()
    assert tick.flip_options(off) is None


def _flipped_cluster(state: dict[str, Any]) -> SimCluster:
    """The cluster of the one-tick flip above, a few ticks after it: one decode pod
    serves prefill."""
    cluster = SimCluster(startup_seconds=30.0)
    run(cluster, flip_spec(), 1000.0, 20, state)
    run(cluster, flip_spec(decode=1), 1100.0, 3, state)
    run(cluster, flip_spec(decode=1, prefill=3), 1115.0, 8, state)
    decode = {n for n, p in cluster.pods.items() if p["metadata"]["ownerName"].endswith("decode")}
    serving = [
        n for n in decode if cluster.pods[n]["metadata"]["labels"][naming.LABEL_ROLE] == "prefill"
    ]
    assert len(serving) == 1
    return cluster


def test_an_operator_restarted_every_tick_after_a_flip_changes_nothing() -> None:
    """The flip lives in the pods' labels: with the process memory dropped at every
    tick (only the status and the cluster survive), 12 more ticks write nothing to the
    pools (no replicas, no relabel) and no pool pod is made or removed."""
    state: dict[str, Any] = {}
    cluster = _flipped_cluster(state)
    pods = set(cluster.pods) - {n for n in cluster.pods if "-router-" in n}
    later = run(cluster, flip_spec(decode=1, prefill=3), 1160.0, 12, state, restart_every=1)
    pool = [
        a
        for fx in later
        for a in fx.writes
        if a.kind == "Pod" or (a.kind == "Deployment" and not a.name.endswith("-router"))
    ]
    assert pool == []
    assert {n for n in cluster.pods if "-router-" not in n} == pods


def test_a_rollout_from_a_cell_with_a_flipped_pod_keeps_the_invariants() -> None:
    """v1 with one decode pod serving prefill, then the spec names v2: the rollout
    builds cell v2 and retires v1, and at every tick no Ready prefill lacks a Ready
    decode of its revision and capacity stays at the minimums. Nothing flips during
    the rollout: the only relabel sends v1's flipped pod home to decode (cost 0, so its
    Deployment's next scale-down takes it) once v1's prefill is sized below it."""
    state: dict[str, Any] = {}
    cluster = _flipped_cluster(state)
    v2 = flip_spec(decode=1, prefill=3).model_copy(
        update={"engine_spec": flip_spec().engine.model_copy(update={"version": "v2"})}
    )
    problems: list[str] = []
    relabels: list[tuple[str, dict[str, str] | None]] = []
    for i in range(80):
        (fx,) = run(cluster, v2, 1160.0 + 5 * i, 1, state)
        relabels += [(a.message, a.annotations) for a in fx.writes if a.verb is Verb.RELABEL_POD]
        problems += invariants.violations(cluster.ready_pods(), v2, "chat", check_capacity=True)
    assert problems == []
    revs = {d["metadata"]["labels"][naming.LABEL_REVISION] for d in cluster.deployments.values()}
    assert revs == {manifests.spec_revision(v2)}
    assert fx.step.phase == RolloutPhase.COMPLETE
    assert relabels == [("prefill->decode", {DELETION_COST_ANNOTATION: roles.HOME_COST})]
