"""D12: drift and config changes against the lab. A foreign Service squats the front
Service's name; ``kubectl set image`` changes the decode Deployment's engine image; a
template-only change (an annotation) follows; then a KV-relevant change (the decode
engine's args); then configuration outside the engine container (issue 30, item 7): an
edit of the ConfigMap both pools' engines read (``envFrom``), and an init container
plus a nodeSelector added to the decode template. Checked: 0 mixed pairs (a Ready pod
whose engine image is not its cell's version, one pool of a cell with Ready pods of
different images, args, init containers or nodeSelectors, or one cell with Ready pods
created on both sides of the ConfigMap edit, sampled every 200 ms); the drift reverted
(image back, Warning Event DriftReverted) within 2 ticks; the squatter left alone and
reported (Warning NotOwned); the template-only change updates the cell in place (same
revision); the args change, the ConfigMap edit and the init container + nodeSelector
change each go through a new cell (a new revision, the old cell gone).

``make drill`` runs every phase (114 s here); ``make test`` leaves out the init
container + nodeSelector phase (a template change like the args one; each pod-level
field is a new cell in tests/unit/test_identity_config.py). Shortened: 2 s interval,
1 + 1 replicas; pods Ready 5 s after creation, longer than the revert takes, so a
drifted pod never gets Ready (with pods that start faster than two ticks, the drifted
pod can serve until the revert replaces it: reported, not prevented).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from drills.faults import full_windows
from drills.operator_process import OperatorProcess
from drills.report import DrillRecord
from drills.samplers import MixSampler, engine_of
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.observe import is_ready
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    create_pdd,
    deployments,
    get_pdd,
    patch_spec,
    pdd_manifest,
    pod_dicts,
    serve_light,
    wait_stable,
)

INTERVAL = 2.0


def pools(kube: Kube, namespace: str, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Live pool Deployments by (revision, role)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for d in deployments(kube, namespace, name):
        lab = d["metadata"]["labels"]
        if lab.get(naming.LABEL_ROLE) in ("prefill", "decode") and not d["metadata"].get(
            "deletionTimestamp"
        ):
            out[(lab[naming.LABEL_REVISION], lab[naming.LABEL_ROLE])] = d
    return out


def warnings(kube: Kube, namespace: str, reason: str) -> list[str]:
    events = kube.core.list_namespaced_event(namespace).items
    return [str(e.message) for e in events if e.reason == reason and e.type == "Warning"]


def rolled_away(kube: Kube, namespace: str, name: str, rev: str) -> Callable[[], bool]:
    """One cell left, not ``rev``, and the rollout Complete."""

    def moved() -> bool:
        revs = {r for r, _ in pools(kube, namespace, name)}
        st = get_pdd(kube, namespace, name).get("status") or {}
        return (
            len(revs) == 1
            and rev not in revs
            and (st.get("rollout") or {}).get("phase") == "Complete"
        )

    return moved


def only_rev(kube: Kube, namespace: str, name: str) -> str:
    ((rev,),) = {(r,) for r, _ in pools(kube, namespace, name)}
    return rev


def pod_level_change(kube: Kube, namespace: str, name: str, drill: DrillRecord) -> None:
    """An init container and a nodeSelector (the GPU nodes' product) on the decode pods:
    a new cell, the old one gone (``make drill`` only: ``make test`` covers the template
    path with the args change, and tests/unit/test_identity_config.py each field)."""
    rev = only_rev(kube, namespace, name)
    node = kube.core.read_node("gpu-node-0").metadata
    assert node is not None
    assert node.labels is not None
    product = node.labels["nvidia.com/gpu.product"]
    template = get_pdd(kube, namespace, name)["spec"]["decode"]["template"]
    template["spec"]["initContainers"] = [{"name": "fetch", "image": "pdlab.invalid/f:1"}]
    template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": product}
    patch_spec(kube, namespace, name, {"decode": {"template": template}})
    t0 = time.monotonic()
    wait_for(rolled_away(kube, namespace, name, rev), 50, "the pod-level change rolled")
    drill.recovered("init container + nodeSelector rolled out to a new cell", time.monotonic() - t0)
    wait_stable(kube, namespace, name, hold=1.0, timeout=20)


@pytest.mark.lab
@pytest.mark.timeout(180)
def test_drift_squatter_template_and_config_changes(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    name = "d12"
    drill.describe(
        "D12",
        fault="kubectl set image on a decode Deployment; a foreign Service squatting the front "
        "name; a template-only change; an engine-args change; an edit of the ConfigMap the "
        "engines read; an init container and a nodeSelector added",
        invariant="0 mixed pairs; drift reverted within 2 ticks and reported; the squatter "
        "untouched and reported; an args change, a ConfigMap edit and an init container + "
        "nodeSelector change each go through a new cell",
        shortened="2 s interval, 1 + 1 replicas; make test: no init container + nodeSelector phase",
    )
    serve_light(exporter, namespace, name)
    squatter = client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(ports=[client.V1ServicePort(port=80)], selector={"app": "x"}),
    )
    kube.core.create_namespaced_service(namespace, squatter)
    flags = f"{name}-flags"  # the ConfigMap both pools' engines read (envFrom)
    kube.core.create_namespaced_config_map(
        namespace,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=flags), data={"MAX_MODEL_LEN": "8192"}
        ),
    )
    manifest = pdd_manifest(name, lab.prometheus_url, interval="2s", startup_delay="5s")
    for role in ("prefill", "decode"):  # one template object: both pools
        engine = manifest["spec"][role]["template"]["spec"]["containers"][0]
        engine["envFrom"] = [{"configMapRef": {"name": flags}}]
    create_pdd(kube, namespace, manifest)
    op = OperatorProcess(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    op.start()
    try:
        wait_for(
            lambda: sum(is_ready(p) for p in pod_dicts(kube, namespace, name)) >= 2,
            40,
            "1 + 1 Ready pods",
        )
        wait_stable(kube, namespace, name, hold=2.0, timeout=40)
        ((rev, _),) = [k for k in pools(kube, namespace, name) if k[1] == "decode"]
        decode = f"{name}-{rev}-decode"
        rendered = engine_of(pools(kube, namespace, name)[(rev, "decode")])["image"]
        with MixSampler(kube, namespace, name) as sampler:
            # kubectl set image deployment/<decode> engine=<another tag>
            patch = {"spec": {"template": {"spec": {"containers": [
                {"name": "engine", "image": "pdlab.invalid/engine:v9"}]}}}}  # fmt: skip
            kube.apps.patch_namespaced_deployment(decode, namespace, patch)
            t0 = time.monotonic()
            wait_for(
                lambda: (
                    engine_of(pools(kube, namespace, name)[(rev, "decode")])["image"] == rendered
                ),
                2 * INTERVAL + 10,
                "the drifted image reverted",
            )
            reverted_after = time.monotonic() - t0
            drill.recovered("drifted image reverted", reverted_after)
            wait_for(lambda: warnings(kube, namespace, "DriftReverted"), 10, "DriftReverted")

            # a template-only change: an annotation on the decode pods
            spec = get_pdd(kube, namespace, name)["spec"]
            template = spec["decode"]["template"]
            template["metadata"]["annotations"]["drill"] = "template-only"
            patch_spec(kube, namespace, name, {"decode": {"template": template}})
            wait_for(
                lambda: (
                    pools(kube, namespace, name)[(rev, "decode")]["spec"]["template"]["metadata"][
                        "annotations"
                    ].get("drill")
                    == "template-only"
                ),
                10,
                "the template-only change applied in place",
            )
            assert {r for r, _ in pools(kube, namespace, name)} == {rev}

            # a KV-relevant change: the decode engine's args
            template["spec"]["containers"][0]["args"] = ["--max-model-len=8192"]
            patch_spec(kube, namespace, name, {"decode": {"template": template}})

            wait_for(rolled_away(kube, namespace, name, rev), 50, "the args change rolled")
            wait_stable(kube, namespace, name, hold=1.0, timeout=20)

            # the ConfigMap the engines read, edited (issue 30, item 7)
            rev = only_rev(kube, namespace, name)
            sampler.edits.append(time.time())
            kube.core.patch_namespaced_config_map(
                flags, namespace, {"data": {"MAX_MODEL_LEN": "4096"}}
            )
            t0 = time.monotonic()
            wait_for(rolled_away(kube, namespace, name, rev), 50, "the ConfigMap edit rolled")
            drill.recovered("ConfigMap edit rolled out to a new cell", time.monotonic() - t0)
            wait_stable(kube, namespace, name, hold=1.0, timeout=20)

            if full_windows():  # make drill: the same path as the args change, in the lab
                pod_level_change(kube, namespace, name, drill)
            sampler.still_sampling()  # alive through the whole drill
    finally:
        op.stop()
    drill.sampled(sampler.samples, len(sampler.mixed))
    assert reverted_after <= 2 * INTERVAL + 3, reverted_after
    sampler.check(at_least=20)  # ~10 s at least of 200 ms samples, few failed reads
    assert sampler.mixed == [], sampler.mixed[:5]
    assert warnings(kube, namespace, "NotOwned"), "the squatter was not reported"
    service = kube.core.read_namespaced_service(name, namespace).spec
    assert service is not None
    assert service.selector == {"app": "x"}
