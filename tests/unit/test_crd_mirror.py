"""The CRD (crds/pdscaler.io_pddeployments.yaml) and the pydantic mirror
(pdscaler.spec) describe the same resource: same fields, types, required fields, enums,
numeric bounds (inclusive or exclusive), string limits, formats and defaults, for both
spec and status. Any drift fails here with the path of the first disagreement."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from pydantic import BaseModel

from pdscaler import spec as pdspec
from support.crd_schema import apply_defaults, cel_rules, is_opaque, load_crd, openapi_schema, walk

Schema = dict[str, Any]


def _resolve(node: Schema, defs: dict[str, Schema]) -> tuple[Schema, bool]:
    """Follow ``$ref`` and unwrap ``Optional`` (``anyOf [X, null]``); True if nullable."""
    nullable = False
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        nullable = len(branches) < len(node["anyOf"])
        assert len(branches) == 1, f"unsupported union {node}"
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**branches[0], **outer}
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        outer = {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **outer}
    return node, nullable


def _bounds(node: Schema, *, crd: bool) -> dict[str, tuple[str, float]]:
    """Numeric bounds as {"lower": (op, value), "upper": (op, value)}; the CRD spells
    exclusivity as OpenAPI 3.0 booleans, pydantic as JSON Schema numbers."""
    out: dict[str, tuple[str, float]] = {}
    if crd:
        if "minimum" in node:
            out["lower"] = (">" if node.get("exclusiveMinimum") else ">=", node["minimum"])
        if "maximum" in node:
            out["upper"] = ("<" if node.get("exclusiveMaximum") else "<=", node["maximum"])
    else:
        if "exclusiveMinimum" in node:
            out["lower"] = (">", node["exclusiveMinimum"])
        elif "minimum" in node:
            out["lower"] = (">=", node["minimum"])
        if "exclusiveMaximum" in node:
            out["upper"] = ("<", node["exclusiveMaximum"])
        elif "maximum" in node:
            out["upper"] = ("<=", node["maximum"])
    return out


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def compare(crd: Schema, pyd: Schema, defs: dict[str, Schema], path: str) -> list[str]:
    """Every disagreement between a CRD node and a pydantic JSON-schema node."""
    problems: list[str] = []
    pyd, _ = _resolve(pyd, defs)

    def differ(what: str, a: Any, b: Any) -> None:
        if a != b:
            problems.append(f"{path}: {what} differs: CRD {a!r} vs pydantic {b!r}")

    differ("type", crd.get("type"), pyd.get("type"))
    differ("enum", sorted(crd.get("enum", [])), sorted(pyd.get("enum", [])))
    differ("bounds", _bounds(crd, crd=True), _bounds(pyd, crd=False))
    for key in ("minLength", "maxLength", "pattern", "format"):
        differ(key, crd.get(key), pyd.get(key))
    crd_default = apply_defaults(crd, copy.deepcopy(crd["default"])) if "default" in crd else None
    differ("default", crd_default, _drop_none(pyd.get("default")))

    if crd.get("type") == "object":
        if is_opaque(crd):
            if pyd.get("additionalProperties") is not True or "properties" in pyd:
                problems.append(f"{path}: opaque in the CRD but typed in pydantic")
            return problems
        if pyd.get("additionalProperties") is not False:
            problems.append(f"{path}: pydantic model must forbid extra fields")
        crd_props: dict[str, Schema] = crd.get("properties", {})
        pyd_props: dict[str, Schema] = pyd.get("properties", {})
        differ("fields", sorted(crd_props), sorted(pyd_props))
        differ("required", sorted(crd.get("required", [])), sorted(pyd.get("required", [])))
        for name in sorted(set(crd_props) & set(pyd_props)):
            problems += compare(crd_props[name], pyd_props[name], defs, f"{path}.{name}")
    elif crd.get("type") == "array":
        problems += compare(crd["items"], pyd["items"], defs, f"{path}[]")
    return problems


def mirror_problems(schema: Schema, part: str, model: type[BaseModel]) -> list[str]:
    pyd = model.model_json_schema(by_alias=True)
    return compare(schema["properties"][part], pyd, pyd.get("$defs", {}), part)


@pytest.mark.parametrize(
    ("part", "model"), [("spec", pdspec.PDDeploymentSpec), ("status", pdspec.PDDeploymentStatus)]
)
def test_crd_and_pydantic_agree(part: str, model: type[BaseModel]) -> None:
    assert mirror_problems(openapi_schema(), part, model) == []


@pytest.mark.parametrize(
    ("where", "change", "expected"),
    [
        (("spec", "slo", "percentile"), {"maximum": 0.99}, "spec.slo.percentile: bounds"),
        (("spec", "prefill", "gpusPerReplica"), {"minimum": 0}, "gpusPerReplica: bounds"),
        (("spec", "scaling", "mode"), {"enum": ["Auto"]}, "spec.scaling.mode: enum"),
        (("spec", "scaling", "maxGPUs"), {"default": 32}, "spec.scaling.maxGPUs: default"),
        (("spec", "startupSeconds"), {"type": "integer"}, "spec.startupSeconds: type"),
        (("status", "lastDecision", "inputs"), {"properties": {}}, "inputs: fields"),
        (("spec", "engine"), {"required": ["image"]}, "spec.engine: required"),
        (("spec", "metrics", "window"), {"pattern": "^.*$"}, "spec.metrics.window: pattern"),
        (("status", "rollout", "startedAt"), {"format": None}, "startedAt: format"),
    ],
)
def test_the_mirror_check_catches_drift(
    where: tuple[str, ...], change: dict[str, Any], expected: str
) -> None:
    """Each single edit of the CRD is reported, at the right path."""
    schema = copy.deepcopy(openapi_schema())
    node = schema
    for name in where:
        node = node["properties"][name]
    node.update(change)
    model = pdspec.PDDeploymentSpec if where[0] == "spec" else pdspec.PDDeploymentStatus
    problems = mirror_problems(schema, where[0], model)
    assert any(expected in p for p in problems), problems


def test_nested_defaults_are_effective_defaults() -> None:
    """``replicas: {}`` in the CRD defaults to min 1, max 16, exactly pydantic's."""
    replicas = openapi_schema()["properties"]["spec"]["properties"]["prefill"]["properties"][
        "replicas"
    ]
    assert apply_defaults(replicas, replicas["default"]) == {"min": 1, "max": 16}
    assert pdspec.ReplicaBounds().model_dump() == {"min": 1, "max": 16}


def test_cel_messages_are_the_models_messages() -> None:
    """The API server and the model reject with the same sentence."""
    messages = {rule["message"] for _, rule in cel_rules(openapi_schema())}
    assert messages == pdspec.CEL_MESSAGES


def test_cel_rules_carry_field_path_and_reason() -> None:
    for path, rule in cel_rules(openapi_schema()):
        assert rule.get("fieldPath", "").startswith("."), path
        assert rule.get("reason") in {
            "FieldValueInvalid",
            "FieldValueRequired",
            "FieldValueForbidden",
        }, path


def test_every_field_is_described() -> None:
    """``kubectl explain pdd.spec.decode`` needs a description on every field (except the
    root ``metadata``: the API server forbids anything but ``type`` there)."""
    missing = [
        path or "<root>"
        for path, node in walk(openapi_schema())
        if not node.get("description") and path != "metadata"
    ]
    assert missing == []


def test_cel_rules_only_touch_bounded_values() -> None:
    """The API server rejects CEL rules whose estimated cost is unbounded: every string a
    rule reads has a maxLength or an enum, every integer a maximum."""
    schema = openapi_schema()
    for path, node in walk(schema):
        for rule in node.get("x-kubernetes-validations", []):
            for name, sub in node.get("properties", {}).items():
                if f"self.{name}" not in rule["rule"]:
                    continue
                if sub.get("type") == "string":
                    assert "maxLength" in sub or "enum" in sub, f"{path}.{name}"
                if sub.get("type") == "integer":
                    assert "maximum" in sub, f"{path}.{name}"


def test_resource_names_and_columns() -> None:
    crd = load_crd()
    names = crd["spec"]["names"]
    assert crd["spec"]["group"] == pdspec.GROUP
    assert crd["metadata"]["name"] == f"{pdspec.PLURAL}.{pdspec.GROUP}"
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        pdspec.KIND,
        pdspec.PLURAL,
        ["pdd"],
    )
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert version["name"] == pdspec.VERSION
    assert version["served"]
    assert version["storage"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Ready": '.status.conditions[?(@.type=="Ready")].status',
        "Version": ".status.activeVersion",
        "P": ".status.prefill.summary",
        "D": ".status.decode.summary",
        "Ratio": ".status.ratio",
        "TTFT": ".status.ttft",
        "TPOT": ".status.tpot",
        "Last action": ".status.lastDecision.action",
        "Age": ".metadata.creationTimestamp",
    }
    # every column points at a field the status model has
    status = pdspec.PDDeploymentStatus.model_json_schema(by_alias=True)
    for path in columns.values():
        # a JSONPath filter selects one list item: walk it as the list's items
        parts = re.sub(r"\[\?\(.*?\)\]", "[]", path).strip(".").split(".")
        if parts[0] != "status":
            continue
        node, defs = status, status["$defs"]
        for part in parts[1:]:
            node, _ = _resolve(node, defs)
            name = part.removesuffix("[]")
            assert name in node["properties"], path
            node = node["properties"][name]
            if part.endswith("[]"):
                node, _ = _resolve(node, defs)
                node = node["items"]


def test_one_engine_version_for_both_pools() -> None:
    """A P/D version mismatch cannot be written: the pools have no version field."""
    spec = openapi_schema()["properties"]["spec"]["properties"]
    assert "version" in spec["engine"]["properties"]
    for pool in ("prefill", "decode"):
        assert not {"version", "image"} & set(spec[pool]["properties"])
