"""``tick.compute``: a whole reconcile tick as data in, data out, and a rollout replayed
through it on the simulated cluster (``pdscaler.sim.cluster``), restarts included.

Worked numbers: prefill 3000 tok/s, decode 800 tok/s, u = 0.7, min 1 / max 8 each. At
R = 1 req/s, L_p = 2000, L_d = 500 the ratio model wants N_P = 2000/2100 = 0.95 -> 1 and
N_D = 500/560 = 0.89 -> 1; at R = 3 it wants N_P = 2.86 -> 3 and N_D = 2.68 -> 3.
"""

from __future__ import annotations

from typing import Any

from pdscaler import invariants, manifests, naming, tick
from pdscaler.plan import Observed, Verb
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role, RolloutPhase
from support.tick_world import INTERVAL, OWNER, facts, run, snapshot, spec


def test_a_new_pddeployment_gets_its_first_cell_created_and_a_status() -> None:
    """No objects yet: both pools at the ratio model's 1 replica, seven creates (decode,
    prefill and router Deployments, the routers' ServiceAccount, Role and RoleBinding,
    the front Service), one Event per create."""
    fx = tick.compute(facts(1000.0, Observed()))
    assert [(a.verb, a.kind) for a in fx.writes] == [
        (Verb.CREATE, "Deployment"),
        (Verb.CREATE, "Deployment"),
        (Verb.CREATE, "Deployment"),
        (Verb.CREATE, "ServiceAccount"),
        (Verb.CREATE, "Role"),
        (Verb.CREATE, "RoleBinding"),
        (Verb.CREATE, "Service"),
    ]
    rev = manifests.spec_revision(spec("v1"))
    assert fx.writes[0].name == naming.pool_name("chat", rev, Role.DECODE)
    assert fx.writes[2].name == naming.router_name("chat", rev)
    assert fx.writes[2].body is not None
    assert fx.writes[2].body["spec"]["replicas"] == 0  # no Ready worker yet: no router
    assert (fx.decision.prefill, fx.decision.decode) == (1, 1)
    assert fx.status.prefill is not None
    assert fx.status.prefill.desired_replicas == 1
    assert fx.status_changed
    created = [e for e in fx.events if e.reason.startswith("Created")]
    assert len(created) == 7
    assert fx.rollout is not None


def test_recommend_mode_writes_nothing_and_keeps_no_scale_time() -> None:
    """Recommend: the same decision and status, no writes, no Created Events, and the
    policy's memory does not believe anything was scaled."""
    fx = tick.compute(facts(1000.0, Observed(), spec(mode="Recommend")))
    assert fx.writes == ()
    assert fx.plan.writes  # the plan is still computed (and published)
    assert not any(e.reason.startswith("Created") for e in fx.events)
    assert fx.memory.last_scale_time is None
    assert fx.rollout is None


def test_a_converged_pddeployment_costs_no_writes() -> None:
    """Once the pods are Ready at the wanted size (decode, then prefill, then the router
    once both pools have a Ready pod), a tick plans zero writes."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    effects = run(cluster, spec(), 1000.0, 12, state)
    assert effects[0].writes
    assert [len(fx.writes) for fx in effects[-3:]] == [0, 0, 0]
    assert effects[-1].status_changed is False


def _replay_rollout(restart_every: int) -> tuple[list[tick.TickEffects], list[str], SimCluster]:
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec("v1"), 1000.0, 8, state, rate=3.0)
    v1 = manifests.spec_revision(spec("v1"))
    assert {
        d["metadata"]["labels"][naming.LABEL_REVISION] for d in cluster.deployments.values()
    } == {v1}
    problems: list[str] = []
    effects: list[tick.TickEffects] = []
    for i in range(60):
        now = 1040.0 + i * INTERVAL
        effects += run(cluster, spec("v2"), now, 1, state, rate=3.0, restart_every=restart_every)
        problems += invariants.violations(
            cluster.ready_pods(), spec("v2"), "chat", check_capacity=True
        )
    return effects, problems, cluster


def test_the_simulator_replays_a_rollout_through_the_pure_tick() -> None:
    """v1 at 3/3 replicas, then the spec names v2: the rollout creates cell v2, shifts
    capacity and retires v1, and at every tick of the replay the invariants hold (no
    ready prefill without a ready decode of its version, capacity >= min, GPUs within
    maxGPUs + surge)."""
    effects, problems, cluster = _replay_rollout(restart_every=0)
    v2 = manifests.spec_revision(spec("v2"))
    assert problems == []
    revs = {d["metadata"]["labels"][naming.LABEL_REVISION] for d in cluster.deployments.values()}
    assert revs == {v2}
    phases = [fx.step.phase for fx in effects]
    assert RolloutPhase.PROGRESSING in phases
    assert phases[-1] == RolloutPhase.COMPLETE
    ready = [
        p for p in cluster.ready_pods() if p["metadata"]["labels"][naming.LABEL_ROLE] == "prefill"
    ]
    assert len(ready) == 3


def test_a_rollout_replayed_with_an_operator_restart_every_third_tick_completes() -> None:
    """The same rollout with the process memory dropped every 3 ticks (only status and
    cluster survive, with metrics available): it still completes, invariants intact."""
    effects, problems, _cluster = _replay_rollout(restart_every=3)
    assert problems == []
    assert effects[-1].step.phase == RolloutPhase.COMPLETE
    assert (effects[-1].decision.prefill, effects[-1].decision.decode) == (3, 3)


# ---------------------------------------------------------------- restarts, Prometheus down


WIDE = (16, 15)


def wide_spec(version: str) -> PDDeploymentSpec:
    """Room for the 16 / 15 the policy wants at R = 12 req/s, with a 4-GPU surge, so a
    rollout takes several levels."""
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": version},
            "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 32}},
            "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 32}},
            "scaling": {"mode": "Auto", "interval": "5s", "maxGPUs": 64},
            "rollout": {"maxSurgeGPUs": 4, "progressDeadline": "10m"},
        }
    )


def serving(cluster: SimCluster) -> tuple[int, int]:
    """Ready prefill in cells with a Ready decode pod, Ready decode, over all cells."""
    ready = cluster.ready_pods()
    by_rev: dict[str, dict[str, int]] = {}
    for pod in ready:
        lab = pod["metadata"]["labels"]
        role = by_rev.setdefault(lab[naming.LABEL_REVISION], {})
        role[lab[naming.LABEL_ROLE]] = role.get(lab[naming.LABEL_ROLE], 0) + 1
    prefill = sum(r.get("prefill", 0) for r in by_rev.values() if r.get("decode", 0) >= 1)
    return prefill, sum(r.get("decode", 0) for r in by_rev.values())


def faulty_replay(
    restarts: set[int], down: set[int], wiped: frozenset[int] = frozenset()
) -> tuple[list[tick.TickEffects], list[tuple[int, int]], SimCluster]:
    """v1 serving at R = 12, then v2 rolled out over 80 ticks; at the ticks in
    ``restarts`` the process memory is dropped, at those in ``wiped`` the status too,
    at those in ``down`` Prometheus does not answer (metrics None). Returns the effects
    and the serving capacity per tick."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, wide_spec("v1"), 1000.0, 8, state, rate=12.0)
    effects: list[tick.TickEffects] = []
    capacity: list[tuple[int, int]] = []
    for i in range(80):
        now = 1040.0 + i * INTERVAL
        cluster.advance(now)
        if i in restarts or i in wiped:
            state["memory"], state["rollout"] = None, None
        if i in wiped:
            state["status"] = None
        fx = tick.compute(
            tick.TickFacts(
                now=now,
                owner=OWNER,
                generation=1,
                spec=wide_spec("v2"),
                observed=cluster.observed(),
                metrics=None if i in down else snapshot(now, 12.0),
                metrics_error="connection refused" if i in down else None,
                raw_status=state.get("status"),
                memory=state.get("memory"),
                rollout=state.get("rollout"),
            )
        )
        cluster.apply(fx.writes, now)
        state["memory"] = fx.memory
        state["rollout"] = fx.rollout
        if fx.status_changed:
            state["status"] = fx.status.to_k8s()
        effects.append(fx)
        capacity.append(serving(cluster))
    return effects, capacity, cluster


def test_a_restart_with_prometheus_down_mid_rollout_keeps_the_totals() -> None:
    """16 / 15 rolling v1 -> v2; from tick 6 on Prometheus is down for 30 ticks and the
    operator restarts at ticks 6, 9, 12, 15: the policy holds 16 / 15 (restored from
    ``status.rollout.required``, not one cell's size), Ready capacity never drops below
    16 / 15 once the rollout shifted capacity, and the rollout completes on v2."""
    effects, capacity, cluster = faulty_replay({6, 9, 12, 15}, set(range(6, 36)))
    assert (effects[5].decision.prefill, effects[5].decision.decode) == WIDE
    both = {d["metadata"]["labels"][naming.LABEL_REVISION] for d in cluster.deployments.values()}
    held = [(fx.decision.prefill, fx.decision.decode) for fx in effects[6:36]]
    assert set(held) == {WIDE}
    assert all(p >= WIDE[0] and d >= WIDE[1] for p, d in capacity[3:]), capacity
    assert effects[-1].step.phase == RolloutPhase.COMPLETE
    assert both == {manifests.spec_revision(wide_spec("v2"))}


def test_a_wiped_status_mid_rollout_keeps_the_totals_from_the_front_service() -> None:
    """As above, but at tick 6 the status is wiped too (a restore without status): the
    required totals come back from the front Service's mark (``rollout.to_marks``), so
    the held totals stay 16 / 15 (before the mark, the policy took both cells' Ready
    pods, the new cell's reserved decode included, for the size) and the rollout
    completes."""
    effects, capacity, _cluster = faulty_replay({6}, set(range(6, 36)), frozenset({6}))
    held = [(fx.decision.prefill, fx.decision.decode) for fx in effects[6:36]]
    assert set(held) == {WIDE}, held
    assert all(p >= WIDE[0] and d >= WIDE[1] for p, d in capacity[3:]), capacity
    assert effects[-1].step.phase == RolloutPhase.COMPLETE


def test_a_restart_every_tick_with_prometheus_down_completes_the_rollout() -> None:
    """The operator restarts before every tick and Prometheus is down for the whole
    rollout: totals held at 16 / 15 from status, capacity kept, rollout complete."""
    effects, capacity, _cluster = faulty_replay(set(range(80)), set(range(80)))
    assert {(fx.decision.prefill, fx.decision.decode) for fx in effects} == {WIDE}
    assert all(p >= WIDE[0] and d >= WIDE[1] for p, d in capacity[3:]), capacity
    assert effects[-1].step.phase == RolloutPhase.COMPLETE


# ---------------------------------------------------------------- drift


def _engine_image(dep: dict[str, Any]) -> str:
    return str(dep["spec"]["template"]["spec"]["containers"][0]["image"])


def _set_image(dep: dict[str, Any], image: str) -> None:
    """What ``kubectl set image`` does: the template changes, the annotations do not."""
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = image


def test_kubectl_set_image_on_the_spec_cell_is_reverted_and_reported() -> None:
    """Converged on v1; someone sets the decode Deployment's image to another tag: the
    next tick applies the rendered Deployment again (a Warning Event DriftReverted),
    the image is back, and the tick after that leaves it alone."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec(), 1000.0, 12, state)
    name = f"chat-{manifests.spec_revision(spec())}-decode"
    rendered = _engine_image(cluster.deployments[name])
    _set_image(cluster.deployments[name], "img:v9")
    fx = run(cluster, spec(), 1100.0, 1, state)[0]
    assert [(a.verb, a.name) for a in fx.writes] == [(Verb.UPDATE, name)]
    assert [e.reason for e in fx.events if e.type == "Warning"] == ["DriftReverted"]
    assert _engine_image(cluster.deployments[name]) == rendered
    later = run(cluster, spec(), 1105.0, 3, state)
    assert [e.reason for e in later[-1].events if e.type == "Warning"] == []
    assert later[-1].writes == ()


def test_kubectl_set_image_on_an_old_cell_mid_rollout_is_reverted() -> None:
    """Rolling v1 -> v2; someone sets v1's decode image to v2's: the old cell keeps the
    template it was rendered with, its image put back (no v1 prefill pairs with a v2
    decode of the v1 cell), reported once, and the rollout completes."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec("v1"), 1000.0, 8, state, rate=3.0)
    name = f"chat-{manifests.spec_revision(spec('v1'))}-decode"
    rendered = _engine_image(cluster.deployments[name])
    run(cluster, spec("v2"), 1040.0, 2, state, rate=3.0)
    _set_image(cluster.deployments[name], "img:v2")
    fx = run(cluster, spec("v2"), 1050.0, 1, state, rate=3.0)[0]
    assert (Verb.UPDATE, name) in [(a.verb, a.name) for a in fx.writes]
    assert "DriftReverted" in [e.reason for e in fx.events]
    assert _engine_image(cluster.deployments[name]) == rendered
    effects = run(cluster, spec("v2"), 1055.0, 60, state, rate=3.0)
    assert effects[-1].step.phase == RolloutPhase.COMPLETE


def test_drift_in_recommend_mode_is_reported_not_reverted() -> None:
    """Recommend mode applies nothing: the drift is a DriftDetected Warning, not a
    DriftReverted one."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec(), 1000.0, 12, state)
    name = f"chat-{manifests.spec_revision(spec())}-decode"
    _set_image(cluster.deployments[name], "img:v9")
    fx = run(cluster, spec(mode="Recommend"), 1100.0, 1, state)[0]
    assert fx.writes == ()
    assert [e.reason for e in fx.events if e.type == "Warning"] == ["DriftDetected"]
    assert _engine_image(cluster.deployments[name]) == "img:v9"


def test_a_retiring_cells_routers_leave_the_front_before_its_prefill() -> None:
    """Replay v1 -> v2 (prefill min 2, one router per Ready prefill): no tick removes or
    zeroes a v1 prefill Deployment while a v1 router pod is still Ready, so no router is
    left without a prefill to send to; v1's routers do go to 0 first; and the front
    Service always has a Ready router (v1's leave only once v2 has one)."""
    the_spec = PDDeploymentSpec.model_validate(
        {
            **spec("v1").model_dump(by_alias=True, exclude_none=True),
            "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 2, "max": 8}},
            "router": {"prefillPerRouter": 1},
        }
    )
    v2 = PDDeploymentSpec.model_validate(
        {
            **the_spec.model_dump(by_alias=True, exclude_none=True),
            "engine": {"image": "img", "version": "v2"},
        }
    )
    cluster = SimCluster(startup_seconds=2.0)
    state: dict[str, Any] = {}
    run(cluster, the_spec, 1000.0, 12, state)
    old = f"chat-{naming.revision('img', 'v1', manifests.kv_config(the_spec))}"
    routers_left_first = False
    for i in range(40):
        cluster.advance(1060.0 + i * INTERVAL)  # what this tick will observe
        ready_routers = [
            p for p in cluster.ready_pods() if p["metadata"]["ownerName"] == f"{old}-router"
        ]
        front = [p for p in cluster.ready_pods() if p["metadata"]["ownerName"].endswith("-router")]
        assert front, f"tick {i}: no Ready router behind the front Service"
        (fx,) = run(cluster, v2, 1060.0 + i * INTERVAL, 1, state)
        for action in fx.writes:
            if action.name != f"{old}-prefill":
                continue
            gone = action.verb is Verb.DELETE or (action.replicas == 0)
            assert not (gone and ready_routers), f"tick {i}: {action.describe()} with routers up"
            routers_left_first = routers_left_first or gone
    assert routers_left_first
    assert f"{old}-prefill" not in cluster.deployments


def _engine(dep: dict[str, Any]) -> dict[str, Any]:
    return dict(dep["spec"]["template"]["spec"]["containers"][0])


def test_kubectl_set_resources_on_the_spec_cell_is_reverted_and_reported() -> None:
    """``kubectl set resources`` (a CPU limit and another GPU count) on the decode
    Deployment: KV-relevant, so the next tick applies the rendered Deployment again
    (DriftReverted) and the tick after that leaves it alone."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec(), 1000.0, 12, state)
    name = f"chat-{manifests.spec_revision(spec())}-decode"
    rendered = _engine(cluster.deployments[name])["resources"]
    container = cluster.deployments[name]["spec"]["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"cpu": "4", "nvidia.com/gpu": "2"}}
    fx = run(cluster, spec(), 1100.0, 1, state)[0]
    assert [(a.verb, a.name) for a in fx.writes] == [(Verb.UPDATE, name)]
    assert [e.reason for e in fx.events if e.type == "Warning"] == ["DriftReverted"]
    assert _engine(cluster.deployments[name])["resources"] == rendered
    later = run(cluster, spec(), 1105.0, 3, state)
    assert [e.reason for e in later[-1].events if e.type == "Warning"] == []
    assert later[-1].writes == ()


def test_an_env_from_edit_on_an_old_cell_mid_rollout_is_reported() -> None:
    """Rolling v1 -> v2; someone adds an envFrom to v1's decode Deployment: the operator
    keeps no copy of an old cell's template, so it cannot restore it, and says so once
    (DriftDetected)."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec("v1"), 1000.0, 8, state, rate=3.0)
    name = f"chat-{manifests.spec_revision(spec('v1'))}-decode"
    run(cluster, spec("v2"), 1040.0, 2, state, rate=3.0)
    container = cluster.deployments[name]["spec"]["template"]["spec"]["containers"][0]
    container["envFrom"] = [{"secretRef": {"name": "other-flags"}}]
    fx = run(cluster, spec("v2"), 1050.0, 1, state, rate=3.0)[0]
    assert "DriftDetected" in [e.reason for e in fx.events]
    assert "DriftReverted" not in [e.reason for e in fx.events]
