"""A cell's configuration beyond its engine container (issue 30, item 7): identity
scheme 3 (``manifests.kv_config``) covers the pod-level fields (``identity.pod_part``)
and the contents of the ConfigMaps the templates read (``identity.configmap_names``,
``identity.configmap_digest``, ``manifests.with_configmaps``), so a change of any of
them is a new cell: a same-version rollout, never an in-place roll that pairs pods of
two configurations under one router. Cells of scheme 2 keep their revision on the
upgrade (``adopt``) until the user's next edit.

Worked numbers: the ConfigMap ``engine-flags`` with ``MAX_MODEL_LEN: "8192"`` digests to
``be81628e5c``; the chat spec below names ``v1-1bba1`` while it reads that, and
``v1-66b4e`` once the ConfigMap says ``"4096"``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from pdscaler import identity, manifests, naming
from pdscaler.sim.cluster import SimCluster
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role
from support.tick_world import OWNER, run

FLAGS_8192: dict[str, Any] = {
    "metadata": {"name": "engine-flags"},
    "data": {"MAX_MODEL_LEN": "8192"},
}
FLAGS_4096: dict[str, Any] = {
    "metadata": {"name": "engine-flags"},
    "data": {"MAX_MODEL_LEN": "4096"},
}


def template() -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"team": "a"}},
        "spec": {
            "initContainers": [{"name": "fetch", "image": "fetch:1", "args": ["--model", "m"]}],
            "containers": [
                {
                    "name": "engine",
                    "envFrom": [{"configMapRef": {"name": "engine-flags"}}],
                    "env": [
                        {
                            "name": "TOKEN",
                            "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}},
                        }
                    ],
                    "volumeMounts": [{"name": "weights", "mountPath": "/models"}],
                },
                {"name": "log-shipper", "image": "shipper:1"},
            ],
            "volumes": [{"name": "weights", "persistentVolumeClaim": {"claimName": "w-70b"}}],
            "nodeSelector": {"nvidia.com/gpu.product": "H100"},
        },
    }


def doc() -> dict[str, Any]:
    return {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000, "template": template()},
        "decode": {"tokensPerSecond": 800, "template": template()},
        "scaling": {"interval": "5s", "maxGPUs": 16},
        "rollout": {"maxSurgeGPUs": 2, "progressDeadline": "10m"},
    }


def spec_of(d: dict[str, Any], flags: dict[str, Any] | None = FLAGS_8192) -> PDDeploymentSpec:
    the_spec = PDDeploymentSpec.model_validate(d)
    return manifests.with_configmaps(the_spec, {"engine-flags": identity.configmap_digest(flags)})


def rev(d: dict[str, Any], flags: dict[str, Any] | None = FLAGS_8192) -> str:
    return manifests.spec_revision(spec_of(d, flags))


def test_the_configmaps_a_template_reads() -> None:
    tpl = template()
    engine = tpl["spec"]["containers"][0]
    engine["env"].append({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}})
    tpl["spec"]["initContainers"][0]["envFrom"] = [{"configMapRef": {"name": "fetch-cfg"}}]
    tpl["spec"]["volumes"] += [
        {"name": "t", "configMap": {"name": "chat-template"}},
        {"name": "p", "projected": {"sources": [{"configMap": {"name": "proj"}}, {"secret": {}}]}},
    ]
    assert identity.configmap_names(tpl) == [
        "chat-template",
        "engine-flags",
        "fetch-cfg",
        "proj",
        "x",
    ]
    assert identity.configmap_names({"spec": {"containers": [{"name": "engine"}]}}) == []


def test_a_configmaps_digest_is_its_contents() -> None:
    assert identity.configmap_digest(FLAGS_8192) == "be81628e5c"
    assert identity.configmap_digest(FLAGS_4096) != "be81628e5c"
    relabelled = copy.deepcopy(FLAGS_8192)
    relabelled["metadata"]["labels"] = {"owner": "b"}
    assert identity.configmap_digest(relabelled) == "be81628e5c"  # metadata: not contents
    assert identity.configmap_digest(None) == identity.ABSENT


def test_the_worked_revisions() -> None:
    assert rev(doc()) == "v1-1bba1"
    assert rev(doc(), FLAGS_4096) == "v1-66b4e"
    assert rev(doc(), None) not in ("v1-1bba1", "v1-66b4e")  # deleted: a third identity


def _pod(d: dict[str, Any], role: str) -> dict[str, Any]:
    pod: dict[str, Any] = d[role]["template"]["spec"]
    return pod


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "initContainer image": lambda d: _pod(d, "decode")["initContainers"][0].__setitem__(
        "image", "fetch:2"
    ),
    "sidecar": lambda d: _pod(d, "prefill")["containers"][1].__setitem__("image", "shipper:2"),
    "volume (weights PVC)": lambda d: _pod(d, "decode")["volumes"][0].__setitem__(
        "persistentVolumeClaim", {"claimName": "w-70b-fp8"}
    ),
    "engine volumeMounts": lambda d: _pod(d, "decode")["containers"][0]["volumeMounts"][
        0
    ].__setitem__("mountPath", "/m"),
    "nodeSelector": lambda d: _pod(d, "decode").__setitem__(
        "nodeSelector", {"nvidia.com/gpu.product": "H200"}
    ),
    "affinity": lambda d: _pod(d, "prefill").__setitem__("affinity", {"podAntiAffinity": {}}),
    "tolerations": lambda d: _pod(d, "decode").__setitem__(
        "tolerations", [{"key": "k", "operator": "Exists"}]
    ),
    "runtimeClassName": lambda d: _pod(d, "decode").__setitem__("runtimeClassName", "nvidia"),
    "config-revision (a Secret's new contents)": lambda d: d["decode"]["template"]["metadata"][
        "annotations"
    ].__setitem__(naming.ANNOTATION_CONFIG_REVISION, "2"),
}
IN_PLACE: dict[str, Callable[[dict[str, Any]], None]] = {
    "pod label": lambda d: d["decode"]["template"]["metadata"].__setitem__("labels", {"t": "b"}),
    "other annotation": lambda d: d["decode"]["template"]["metadata"]["annotations"].__setitem__(
        "team", "b"
    ),
    "probe": lambda d: _pod(d, "decode")["containers"][0].__setitem__(
        "readinessProbe", {"httpGet": {"path": "/health", "port": 8000}}
    ),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_pod_level_change_is_a_new_cell(change: str) -> None:
    d = doc()
    CHANGES[change](d)
    assert rev(d) != rev(doc())


@pytest.mark.parametrize("change", sorted(IN_PLACE))
def test_labels_annotations_and_probes_stay_in_place(change: str) -> None:
    d = doc()
    IN_PLACE[change](d)
    assert rev(d) == rev(doc())


def _deployments(the_spec: PDDeploymentSpec) -> list[dict[str, Any]]:
    cell = manifests.spec_cell(the_spec, 1, 1)
    objs = manifests.desired_objects(OWNER, the_spec, [cell])
    return [o for o in objs if o["kind"] == "Deployment" and "router" not in o["metadata"]["name"]]


def _scheme2(monkeypatch: pytest.MonkeyPatch, the_spec: PDDeploymentSpec) -> list[dict[str, Any]]:
    """The pool Deployments the operator before scheme 3 rendered for ``the_spec``."""
    with monkeypatch.context() as m:
        m.setattr(manifests, "IDENTITY_SCHEME", 2)
        m.setattr(manifests, "kv_config", manifests.kv_config_v2)
        return _deployments(the_spec)


def test_an_upgrade_keeps_a_scheme_2_cell_until_the_users_next_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheme-2 cell (engine container only) stays the spec's after the upgrade, its
    ConfigMap read or not (no rollout); an edit of the spec's inputs (a nodeSelector)
    names the scheme-3 cell: the migration rides on the user's own rollout."""
    old = _scheme2(monkeypatch, spec_of(doc()))
    old_rev = old[0]["metadata"]["labels"][naming.LABEL_REVISION]
    assert old[0]["metadata"]["annotations"][naming.ANNOTATION_SCHEME] == "2"
    for flags in (FLAGS_8192, FLAGS_4096):
        assert manifests.spec_revision(manifests.adopt(spec_of(doc(), flags), OWNER, old)) == (
            old_rev
        )
    d = doc()
    CHANGES["nodeSelector"](d)
    edited = manifests.adopt(spec_of(d), OWNER, old)
    assert manifests.spec_revision(edited) == rev(d) != old_rev
    assert manifests.config_scheme(manifests.spec_config(edited)) == 3


def _pool_revs(cluster: SimCluster) -> set[str]:
    return {
        str(d["metadata"]["labels"][naming.LABEL_REVISION])
        for d in cluster.observed().deployments
        if d["metadata"]["labels"][naming.LABEL_ROLE] in (Role.PREFILL.value, Role.DECODE.value)
    }


def test_an_edited_configmap_rolls_out_a_new_cell() -> None:
    """tick.compute on the simulated cluster: converged on the 8192 ConfigMap, the edit
    to 4096 starts a rollout to the cell v1-66b4e and retires v1-1bba1; no tick ever
    changed the template of a cell's pool Deployment (nothing rolls in place)."""
    cluster = SimCluster(startup_seconds=10.0)
    state: dict[str, Any] = {}
    run(cluster, spec_of(doc()), 1000.0, 8, state)
    assert _pool_revs(cluster) == {"v1-1bba1"}
    templates = {
        d["metadata"]["name"]: d["spec"]["template"] for d in cluster.observed().deployments
    }
    after = run(cluster, spec_of(doc(), FLAGS_4096), 1040.0, 30, state)
    reasons = [e.reason for fx in after for e in fx.events]
    assert "RolloutStarted" in reasons
    assert _pool_revs(cluster) == {"v1-66b4e"}
    for fx in after:
        for action in fx.writes:
            if action.kind == "Deployment" and action.name in templates and action.body:
                assert action.body["spec"]["template"] == templates[action.name], action.name
