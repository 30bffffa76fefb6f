"""CRD skew: a CRD newer than the operator may add fields (with defaults, so the API
server stores them in every object). The strict model (offline validation, ``pdscaler
plan -f``) still refuses unknown fields; the operator's read (``parse_spec_lenient``)
drops them, names them in one Warning Event ``UnknownFields`` per generation, and keeps
scaling. Before, every stored object was an ``InvalidSpec`` to the older operator and no
PDDeployment ticked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from pdscaler import spec as pdspec
from pdscaler.reconcile import reconcile_once
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentSpec, parse_spec_lenient, strip_unknown
from pdscaler.status import unknown_fields_message
from support import builders
from support.fakekube import FakeKube

NS, NAME = "serving", "chat"
PDD_PATH = f"/apis/pdscaler.io/v1alpha1/namespaces/{NS}/pddeployments/{NAME}"
CRD = Path(__file__).resolve().parents[2] / "crds" / "pdscaler.io_pddeployments.yaml"

BASE: dict[str, Any] = {
    "engine": {"image": "img", "version": "v1"},
    "prefill": {"tokensPerSecond": 3000, "replicas": {"min": 1, "max": 8}},
    "decode": {"tokensPerSecond": 800, "replicas": {"min": 1, "max": 8}},
    "scaling": {"interval": "5s", "maxGPUs": 16},
}


def newer(**extra: Any) -> dict[str, Any]:
    """BASE as a newer CRD would store it: defaulted fields this version lacks."""
    doc = {**BASE, "fleetPriority": 3}
    doc["scaling"] = {**BASE["scaling"], "burstGPUs": 4}
    doc["prefill"] = {**BASE["prefill"], "replicas": {"min": 1, "max": 8, "step": 2}}
    doc["metrics"] = {"prometheus": {"url": "http://prometheus.monitoring:9090", "tls": {}}}
    return {**doc, **extra}


UNKNOWN = (
    "spec.fleetPriority",
    "spec.scaling.burstGPUs",
    "spec.prefill.replicas.step",
    "spec.metrics.prometheus.tls",
)


def test_strict_parse_still_refuses_unknown_fields() -> None:
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        PDDeploymentSpec.model_validate(newer())


def test_lenient_parse_drops_and_names_unknown_fields() -> None:
    spec, unknown = parse_spec_lenient(newer())
    assert sorted(unknown) == sorted(UNKNOWN)
    assert spec == PDDeploymentSpec.model_validate({**BASE, "metrics": {}})


def test_free_form_objects_are_kept_whole() -> None:
    """A pod template is plain data: its keys are the pod's, never "unknown"."""
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"anything": {"x": 1}}}
    doc = {**BASE, "decode": {**BASE["decode"], "template": template}}
    spec, unknown = parse_spec_lenient(doc)
    assert unknown == ()
    assert spec.decode.template == template


def test_known_fields_still_validated() -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_spec_lenient(newer(startupSeconds=-1))


def test_strip_unknown_by_name_or_alias_and_in_lists() -> None:
    status = {"conditions": [{"type": "Ready", "status": "True", "why": "x"}], "newThing": 1}
    out, dropped = strip_unknown(pdspec.PDDeploymentStatus, status, "status")
    assert dropped == ["status.conditions[0].why", "status.newThing"]
    assert out == {"conditions": [{"type": "Ready", "status": "True"}]}
    out, dropped = strip_unknown(pdspec.ScalingSpec, {"max_gpus": 3, "maxGPUs": 4}, "s")
    assert dropped == []


def test_the_message_names_at_most_ten_paths() -> None:
    paths = tuple(f"spec.f{i}" for i in range(12))
    msg = unknown_fields_message(paths)
    assert msg.startswith("spec.f0, spec.f1,")
    assert "spec.f9 and 2 more: not known to this pdscaler version" in msg


def manifest(spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "pdscaler.io/v1alpha1",
        "kind": "PDDeployment",
        "metadata": {"name": NAME, "namespace": NS, "generation": generation},
        "spec": spec,
    }


def events(kube: FakeKube, reason: str) -> list[dict[str, Any]]:
    return [e for path, e in kube.store.items() if "/events/" in path and e.get("reason") == reason]


def test_the_operator_keeps_scaling_and_warns_once_per_generation() -> None:
    kube = FakeKube()
    kube.put(PDD_PATH, manifest(newer()))
    now = [1_000_000.0]
    rt = Runtime(
        kube=kube,
        clock=lambda: now[0],
        metrics_source=lambda spec, ns, name, t: builders.snapshot(1.0, ttft=0.3, tpot=0.02),
    )
    for _ in range(3):
        now[0] += 5
        rep = reconcile_once(rt, NS, NAME)
        assert rep.skipped is None
        assert rep.decision is not None
    conditions = {c["type"]: c for c in kube.store[PDD_PATH]["status"]["conditions"]}
    ignored = conditions["FieldsIgnored"]
    assert (ignored["status"], ignored["reason"]) == ("True", "UnknownFields")
    for path in UNKNOWN:
        assert path in ignored["message"]
    (warning,) = events(kube, "UnknownFields")
    assert warning["type"] == "Warning"
    for path in UNKNOWN:
        assert path in warning["message"]
    assert events(kube, "InvalidSpec") == []
    # a new generation with the same skew: one more warning
    stored = kube.store[PDD_PATH]
    stored["metadata"]["generation"] = 2
    now[0] += 5
    reconcile_once(rt, NS, NAME)
    reconcile_once(rt, NS, NAME)
    assert len(events(kube, "UnknownFields")) == 2


def test_the_crd_scope_rule_is_the_models() -> None:
    """The CEL rule's regular expression is ``spec.SCOPE_MATCHER_PATTERN`` (RE2 and
    Python read it alike), on every custom query field."""
    text = CRD.read_text()
    doc = yaml.safe_load(text)
    props = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    queries = props["spec"]["properties"]["metrics"]["properties"]["queries"]
    rules = queries["x-kubernetes-validations"]
    assert {r["fieldPath"] for r in rules} == {f".{f}" for f in queries["properties"]}
    for rule in rules:
        (pattern,) = re.findall(r"r'''(.*?)'''", rule["rule"])
        assert pattern == pdspec.SCOPE_MATCHER_PATTERN
        assert rule["message"] == pdspec.MSG_QUERY_SCOPE


def test_a_spec_this_version_knows_fully_says_so() -> None:
    kube = FakeKube()
    kube.put(PDD_PATH, manifest(builders.chat_spec().model_dump(by_alias=True, exclude_none=True)))
    rt = Runtime(
        kube=kube,
        clock=lambda: 1_000_000.0,
        metrics_source=lambda spec, ns, name, t: builders.snapshot(1.0, ttft=0.3, tpot=0.02),
    )
    reconcile_once(rt, NS, NAME)
    conditions = {c["type"]: c for c in kube.store[PDD_PATH]["status"]["conditions"]}
    ignored = conditions["FieldsIgnored"]
    assert (ignored["status"], ignored["reason"]) == ("False", "AllFieldsKnown")
