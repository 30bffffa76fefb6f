"""kstatus against the lab's API server (issue 31 item 8, issue 30 item 1): a PDDeployment
reads InProgress (Reconciling True) while its pods start and while a rollout moves cells,
then Current with Ready True; the ``pdscaler.io/paused`` annotation stops every write
(a version change makes no new cell while paused) and says so (Paused True); a stored
spec the operator refuses reads Failed (Stalled True, ``InvalidSpec``, observedGeneration
at the refused generation) with a Warning ``InvalidSpec`` Event, its pools untouched.

A refused spec cannot be stored through the session CRD (its CEL rules are the model's),
so it is stored as an upgrade leaves it: through an older CRD, crds/ without the
``router.args`` rule (the rule came in a74a538), then the current CRD is applied again.

``kstatus`` is cli-utils' pkg/kstatus/status Compute for a custom resource
(tests/unit/test_kstatus.py). Pods are Ready 1 s after creation; interval 2 s, ticks
every 0.5 s; 1 req/s keeps 1 + 1 replicas.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.kubeclient import CRD_PATH, apply_crd
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.spec import GROUP, MSG_ROUTER_ARGS_RESERVED, PLURAL, VERSION
from support.exporter import EngineExporter
from support.kstatus import kstatus
from support.labkit import Kube, wait_for
from support.opkit import (
    condition,
    create_pdd,
    deployments,
    get_pdd,
    operator_runtime,
    patch_spec,
    pdd_manifest,
    serve_light,
    ticking,
)

Obj = dict[str, Any]


def current_and_ready(kube: Kube, namespace: str, name: str, seen: set[tuple[str, str]]) -> bool:
    obj = get_pdd(kube, namespace, name)
    state = kstatus(obj)
    seen.add(state)
    ready = condition(obj, "Ready")
    return state == ("Current", "") and ready is not None and ready["status"] == "True"


def versions(kube: Kube, namespace: str, name: str) -> set[str]:
    return {
        (d["metadata"].get("labels") or {}).get(naming.LABEL_VERSION, "")
        for d in deployments(kube, namespace, name)
        if not d["metadata"].get("deletionTimestamp")
    }


@contextlib.contextmanager
def serving(
    lab: Lab,
    kube: Kube,
    namespace: str,
    exporter: EngineExporter,
    name: str,
    seen: set[tuple[str, str]],
) -> Iterator[None]:
    """``name`` created at 1 req/s with the operator ticking every 0.5 s, once it reads
    Current with Ready True (the kstatus states read meanwhile go to ``seen``)."""
    serve_light(exporter, namespace, name)
    with ticking(operator_runtime(lab), namespace, name, period=0.5):
        create_pdd(kube, namespace, pdd_manifest(name, lab.prometheus_url, interval="2s"))
        wait_for(lambda: current_and_ready(kube, namespace, name, seen), 90, "Current, Ready")
        yield


@pytest.mark.lab
@pytest.mark.timeout(240)
def test_a_rollout_reads_in_progress_then_current_and_a_pause_writes_nothing(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    name = "ks"
    seen: set[tuple[str, str]] = set()
    with serving(lab, kube, namespace, exporter, name, seen):
        # the first cell's pods starting: InProgress (its first cell is a rollout too)
        assert any(state == "InProgress" for state, _ in seen), seen
        # paused: a version change is observed and reported, and no v2 cell is made
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name,
            {"metadata": {"annotations": {naming.ANNOTATION_PAUSED: "true"}}},
        )  # fmt: skip
        wait_for(
            lambda: (
                (c := condition(get_pdd(kube, namespace, name), "Paused")) is not None
                and c["status"] == "True"
            ),
            30,
            "Paused True",
        )
        patch_spec(kube, namespace, name, {"engine": {"version": "v2"}})
        generation = int(get_pdd(kube, namespace, name)["metadata"]["generation"])
        wait_for(
            lambda: get_pdd(kube, namespace, name)["status"]["observedGeneration"] == generation,
            30,
            "the paused generation observed",
        )
        time.sleep(5)  # ten ticks
        obj = get_pdd(kube, namespace, name)
        assert versions(kube, namespace, name) == {"v1"}, versions(kube, namespace, name)
        reconciling = condition(obj, "Reconciling")
        assert reconciling is not None
        assert (reconciling["status"], reconciling["reason"]) == ("False", "ReconcilePaused")
        assert obj["status"]["activeVersion"] == "v1"
        # resumed: the rollout runs, InProgress (RolloutProgressing), then Current on v2
        seen.clear()
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name,
            {"metadata": {"annotations": {naming.ANNOTATION_PAUSED: None}}},
        )  # fmt: skip

        def on_v2() -> bool:
            done = current_and_ready(kube, namespace, name, seen)
            return done and get_pdd(kube, namespace, name)["status"]["activeVersion"] == "v2"

        wait_for(on_v2, 120, "Current, Ready on v2")
    print("kstatus seen during the rollout:", sorted(seen))
    assert ("InProgress", "RolloutProgressing") in seen, seen
    assert not any(state == "Failed" for state, _ in seen), seen
    assert condition(get_pdd(kube, namespace, name), "Paused")["status"] == "False"  # type: ignore[index]


def older_crd() -> Obj:
    """crds/ before the router.args rule: what a PDDeployment stored under an older
    release was validated against."""
    body: Obj = yaml.safe_load(CRD_PATH.read_text())
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    router = schema["properties"]["spec"]["properties"]["router"]
    rules = router["properties"]["args"].get("x-kubernetes-validations") or router.get(
        "x-kubernetes-validations", []
    )
    kept = [r for r in rules if r.get("message") != MSG_ROUTER_ARGS_RESERVED]
    assert len(kept) == len(rules) - 1, "the router.args rule was not found"
    rules[:] = kept
    return body


def refused_by_api(kube: Kube, namespace: str, name: str) -> bool:
    """Whether the API server now refuses router.args --port (a dry run)."""
    try:
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name,
            {"spec": {"router": {"args": ["--host", "0.0.0.0"]}}}, dry_run="All",
        )  # fmt: skip
    except ApiException as err:
        return bool(err.status == 422)
    return False


@pytest.mark.lab
@pytest.mark.timeout(240)
def test_a_refused_stored_spec_reads_stalled_failed_with_an_event(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter, tmp_path: Path
) -> None:
    name = "refused"
    older = tmp_path / "older-crd.yaml"
    older.write_text(yaml.safe_dump(older_crd()))
    seen: set[tuple[str, str]] = set()
    with serving(lab, kube, namespace, exporter, name, seen):
        before = {
            d["metadata"]["name"]: d["spec"]["replicas"] for d in deployments(kube, namespace, name)
        }
        try:
            apply_crd(kube, older)

            def stored() -> bool:
                try:
                    patch_spec(kube, namespace, name, {"router": {"args": ["--port", "9000"]}})
                except ApiException as err:
                    if err.status != 422:
                        raise
                    return False  # the older schema is not served yet
                return True

            wait_for(stored, 30, "router.args --port stored under the older CRD")
        finally:
            apply_crd(kube)  # the session's, crds/
        wait_for(lambda: refused_by_api(kube, namespace, name), 30, "the current CRD served")
        generation = int(get_pdd(kube, namespace, name)["metadata"]["generation"])

        def stalled() -> Obj | None:
            c = condition(get_pdd(kube, namespace, name), "Stalled")
            return c if c is not None and c["status"] == "True" else None

        c = wait_for(stalled, 30, "Stalled True")
        obj = get_pdd(kube, namespace, name)
        assert c["reason"] == "InvalidSpec", c
        assert "spec.router.args" in c["message"], c
        assert obj["status"]["observedGeneration"] == generation
        assert kstatus(obj) == ("Failed", "InvalidSpec")
        ready = condition(obj, "Ready")
        assert ready is not None
        assert ready["status"] == "True"  # the pools keep serving as last reconciled
        sel = f"involvedObject.name={name},reason=InvalidSpec"
        events = kube.core.list_namespaced_event(namespace, field_selector=sel).items
        assert len(events) == 1, events
        assert events[0].type == "Warning"
        assert "spec.router.args" in (events[0].message or "")
        time.sleep(3)  # six ticks: nothing of the PDDeployment written
        after = {
            d["metadata"]["name"]: d["spec"]["replicas"] for d in deployments(kube, namespace, name)
        }
        assert after == before, (before, after)
        assert (
            get_pdd(kube, namespace, name)["metadata"]["resourceVersion"]
            == obj["metadata"]["resourceVersion"]
        )  # no status write either: one per generation
        # fixed through the current CRD: acted on again, Current
        patch_spec(kube, namespace, name, {"router": {"args": None}})
        seen.clear()
        wait_for(lambda: current_and_ready(kube, namespace, name, seen), 60, "Current again")
    fixed = condition(get_pdd(kube, namespace, name), "Stalled")
    assert fixed is not None
    assert (fixed["status"], fixed["reason"]) == ("False", "NotStalled")
