"""Cell identity as data (issue 30, item 1): ``manifests.adopt`` (an existing cell of an
older identity scheme stays the spec's cell), ``manifests.keep_rendered`` (a template-only
change of the operator's rendering restarts no pod of an existing cell) and the stored
scheme (``config_scheme``); replayed through ``tick.compute`` on the simulated cluster:
an operator that renders differently starts no rollout and updates no pool template."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from pdscaler import manifests, naming
from pdscaler.objects import SPEC_HASH_ANNOTATION, stamp
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role
from support.tick_world import OWNER, run, spec


def test_a_stored_config_says_its_scheme() -> None:
    assert manifests.config_scheme("") == 1
    assert manifests.config_scheme("3f2a9c1e0b") == 2
    assert manifests.config_scheme("3.3f2a9c1e0b") == 3
    assert manifests.config_scheme(manifests.kv_config(spec())) == manifests.IDENTITY_SCHEME


def _cell(the_spec: PDDeploymentSpec) -> list[dict[str, Any]]:
    return manifests.desired_objects(OWNER, the_spec, [manifests.spec_cell(the_spec, 1, 1)])


def _deployments(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == "Deployment"]


def test_pool_deployments_store_their_scheme_and_inputs() -> None:
    decode = _deployments(_cell(spec()))[0]
    annotations = decode["metadata"]["annotations"]
    assert annotations[naming.ANNOTATION_SCHEME] == "3"
    assert annotations[naming.ANNOTATION_CONFIG] == manifests.kv_config(spec())
    assert annotations[naming.ANNOTATION_CONFIG].startswith("3.")
    assert annotations[naming.ANNOTATION_INPUTS].startswith("2.")  # INPUTS_SCHEME


def test_a_cell_of_a_retired_scheme_stays_the_specs_while_its_projection_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A later operator (scheme 4: a projection that also covers something new) finds
    the scheme-3 cell by its stored config, computed again by scheme 3's projection:
    same revision, no rollout; a spec whose scheme-3 identity changed gets a new cell."""
    the_spec = spec()
    old = _deployments(_cell(the_spec))
    old_rev = manifests.spec_revision(the_spec)
    scheme3 = manifests.kv_config
    monkeypatch.setattr(manifests, "IDENTITY_SCHEME", 4)
    monkeypatch.setattr(manifests, "kv_config", lambda s: "4." + scheme3(s))
    monkeypatch.setitem(manifests._PROJECTIONS, 3, scheme3)
    assert manifests.spec_revision(the_spec) != old_rev  # the new scheme's name
    adopted = manifests.adopt(the_spec, OWNER, old)
    assert manifests.spec_revision(adopted) == old_rev
    assert _deployments(_cell(adopted))[0]["metadata"]["name"] == old[0]["metadata"]["name"]
    raw = the_spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["decode"]["template"] = {"spec": {"containers": [{"name": "engine", "args": ["--x"]}]}}
    edited = PDDeploymentSpec.model_validate(raw)
    assert manifests.spec_revision(manifests.adopt(edited, OWNER, old)) != old_rev


def _rerendered(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as a later operator would render the same inputs: one more pod
    annotation (an operator-side default)."""
    out = copy.deepcopy(obj)
    pod_meta = out["spec"]["template"]["metadata"]
    pod_meta.setdefault("annotations", {})["example.com/new-default"] = "1"
    out["metadata"]["annotations"].pop(SPEC_HASH_ANNOTATION)
    return stamp(out)


def test_a_template_only_rendering_change_keeps_the_existing_template() -> None:
    observed = _deployments(_cell(spec()))
    desired = [_rerendered(o) for o in observed]
    kept = manifests.keep_rendered(desired, observed, OWNER.uid)
    for was, now in zip(observed, kept, strict=True):
        assert now["spec"]["template"] == was["spec"]["template"]
        assert (
            now["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
            == (was["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
        )


def test_a_spec_edit_or_a_drifted_deployment_takes_the_new_rendering() -> None:
    observed = _deployments(_cell(spec()))
    raw = spec().model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["decode"]["template"] = {"metadata": {"labels": {"team": "a"}}}
    edited = PDDeploymentSpec.model_validate(raw)  # an in-place field: same revision
    desired = [_rerendered(o) for o in _deployments(_cell(edited))]
    kept = manifests.keep_rendered(desired, observed, OWNER.uid)
    assert kept[0]["spec"]["template"] == desired[0]["spec"]["template"]  # decode: edited
    assert kept[1]["spec"]["template"] == observed[1]["spec"]["template"]  # prefill: same
    drifted = copy.deepcopy(observed)
    drifted[1]["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    desired = [_rerendered(o) for o in observed]
    kept = manifests.keep_rendered(desired, drifted, OWNER.uid)
    assert kept[1]["spec"]["template"] == desired[1]["spec"]["template"]


def _pods(cluster: SimCluster) -> set[str]:
    return {str(p["metadata"]["name"]) for p in cluster.observed().pods}


def _converged_then(monkeypatch: pytest.MonkeyPatch, change: Any) -> tuple[Any, ...]:
    """Converge under ``change`` (an older operator), then tick 6 times as this one."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    with monkeypatch.context() as m:
        change(m)
        first = run(cluster, spec(), 1000.0, 12, state)
        rev = {c.rev for c in first[-1].step.cells}
    pods = _pods(cluster)
    after = run(cluster, spec(), 1060.0, 6, state)
    return first, after, rev, pods, cluster


def _pod_templates(cluster: SimCluster) -> dict[str, Any]:
    return {
        str(d["metadata"]["name"]): d["spec"]["template"]
        for d in cluster.observed().deployments
        if d["metadata"]["labels"][naming.LABEL_ROLE] in (Role.PREFILL.value, Role.DECODE.value)
    }


@pytest.mark.parametrize("era", ["scheme 1", "scheme 2", "other defaults"])
def test_an_operator_that_renders_differently_starts_no_rollout_and_keeps_the_pods(
    monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    """scheme 1: the cells an operator before d90a49e made (revision image@version, no
    stored config); scheme 2: the operator before issue 30 item 7 (the engine container
    only: ``kv_config_v2``); other defaults: an operator whose pool rendering differs (a
    45 s default grace period). Switching to this operator: the same revision serves, no
    RolloutStarted, no pool template changes, the same pods."""

    def change(m: pytest.MonkeyPatch) -> None:
        if era == "scheme 1":
            m.setattr(manifests, "spec_config", lambda s: "")
        elif era == "scheme 2":
            m.setattr(manifests, "IDENTITY_SCHEME", 2)
            m.setattr(manifests, "kv_config", manifests.kv_config_v2)
        else:
            m.setattr(manifests, "DEFAULT_GRACE_S", 45)

    _, after, rev, pods, cluster = _converged_then(monkeypatch, change)
    templates = _pod_templates(cluster)
    assert pods
    assert len(rev) == 1
    assert {c.rev for c in after[-1].step.cells} == rev
    assert not [e for fx in after for e in fx.events if e.reason == "RolloutStarted"]
    assert _pod_templates(cluster) == templates
    assert _pods(cluster) == pods
    assert [len(fx.writes) for fx in after[-2:]] == [0, 0]  # converged again
