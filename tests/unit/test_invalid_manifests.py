"""Every manifest of the shared invalid table (tests/support/invalid_manifests.py) is rejected by
the pydantic model with the expected location and message, and by the CRD itself: an
OpenAPI constraint (checked with jsonschema on the translated schema) at the field the
API server will name, or a CEL rule (evaluated through its Python twin) whose message and
fieldPath are the table's. The lab re-runs the same table against kube-apiserver."""

from __future__ import annotations

import re
from typing import Any

import pytest
from jsonschema import Draft202012Validator, ValidationError
from pydantic import ValidationError as PydanticError

from pdscaler.spec import CEL_MESSAGES, PDDeployment
from support.crd_schema import (
    CEL_TWINS,
    cel_rules,
    failing_cel_rules,
    normalise_rule,
    openapi_schema,
    rule_error_path,
    to_json_schema,
    walk,
)
from support.invalid_manifests import CASES, CEL, InvalidCase, base_manifest

VALIDATOR = Draft202012Validator(to_json_schema(openapi_schema()))


def reported_path(error: ValidationError) -> list[str]:
    """The field(s) an OpenAPI error is about, dotted from the root, as the API server
    names them: a missing or unknown property is named itself, not its parent."""
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    where = where.removeprefix(".")
    prefix = f"{where}." if where else ""
    instance: Any = error.instance
    if error.validator == "required":
        required: Any = error.validator_value
        return [prefix + name for name in required if name not in instance]
    if error.validator == "additionalProperties":
        schema: Any = error.schema
        return [prefix + name for name in instance if name not in schema.get("properties", {})]
    return [where]


def openapi_errors(manifest: dict[str, Any]) -> list[tuple[str, str]]:
    """(keyword, path) of every OpenAPI violation."""
    return [
        (str(err.validator), path)
        for err in VALIDATOR.iter_errors(manifest)
        for path in reported_path(err)
    ]


def test_the_table_is_large_and_named() -> None:
    ids = [case.id for case in CASES]
    assert len(CASES) >= 25
    assert all(ids)
    assert len(set(ids)) == len(ids)


def test_the_base_manifest_is_valid_everywhere() -> None:
    """The chat example passes pydantic, the OpenAPI schema and every CEL rule, so each
    failure below comes from its mutation."""
    base = base_manifest()
    PDDeployment.model_validate(base)
    assert openapi_errors(base) == []
    assert failing_cel_rules(base) == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_mutation_changes_the_manifest(case: InvalidCase) -> None:
    assert case.manifest() != base_manifest()
    moved = case.manifest(namespace="lab-ns", name="x")
    assert moved["metadata"] == {**base_manifest()["metadata"], "namespace": "lab-ns", "name": "x"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_pydantic_rejects_with_the_expected_message(case: InvalidCase) -> None:
    with pytest.raises(PydanticError) as caught:
        PDDeployment.model_validate(case.manifest())
    found = [(".".join(str(p) for p in err["loc"]), err["msg"]) for err in caught.value.errors()]
    assert any(loc == case.pydantic_loc and case.pydantic_error in msg for loc, msg in found), found


@pytest.mark.parametrize("case", [c for c in CASES if c.keyword != CEL], ids=lambda c: c.id)
def test_openapi_constraint_rejects_at_the_named_field(case: InvalidCase) -> None:
    """The CRD's OpenAPI schema has the constraint (``keyword``) that rejects the field
    the table names; the API server prints that path."""
    errors = openapi_errors(case.manifest())
    assert (case.keyword, case.path) in errors, errors
    assert case.path in case.api_error or case.api_error.startswith("unknown field")
    assert case.strict_only == (case.keyword == "additionalProperties")


@pytest.mark.parametrize("case", [c for c in CASES if c.keyword == CEL], ids=lambda c: c.id)
def test_cel_rule_rejects_with_its_message_at_its_field_path(case: InvalidCase) -> None:
    """OpenAPI lets the manifest through; exactly one CEL rule rejects it, with the
    table's message, reported at the table's path (the rule's path + fieldPath)."""
    manifest = case.manifest()
    assert openapi_errors(manifest) == []
    failing = failing_cel_rules(manifest)
    assert [(rule_error_path(p, r), r["message"]) for p, r in failing] == [
        (case.path, case.api_error)
    ]
    assert case.api_error in CEL_MESSAGES


def test_every_cel_rule_has_a_twin_and_a_case() -> None:
    rules = cel_rules(openapi_schema())
    assert {normalise_rule(r["rule"]) for _, r in rules} == set(CEL_TWINS)
    covered = {c.api_error for c in CASES if c.keyword == CEL}
    assert {r["message"] for _, r in rules} <= covered


def _pool_generic(path: str) -> str:
    """One name for both pools and for every item of a list: ``spec.decode.profile[0]
    .tokens`` -> ``spec.pool.profile[].tokens`` (as ``walk`` names the schema)."""
    path = re.sub(r"\[\d+\]", "[]", path)
    return path.replace(".prefill.", ".pool.").replace(".decode.", ".pool.")


def test_every_pattern_enum_and_exclusive_bound_of_the_spec_has_a_case() -> None:
    """Durations, the version, the URL, the enums and every "> 0" of the spec are each
    broken by at least one case (prefill and decode share one pool schema)."""
    keywords = {"pattern", "enum", "exclusiveMinimum"}
    wanted = set()
    spec_schema = openapi_schema()["properties"]["spec"]
    for path, node in walk(spec_schema, "spec"):
        if "x-kubernetes-preserve-unknown-fields" in node:
            continue
        for key in keywords & set(node):
            if key != "exclusiveMinimum" or node[key] is True:
                wanted.add((key, _pool_generic(path)))
    covered = {(c.keyword, _pool_generic(c.path)) for c in CASES}
    assert wanted <= covered, sorted(wanted - covered)


def test_api_matches_needs_path_and_phrase() -> None:
    (case,) = [c for c in CASES if c.id == "prefill-gpus-per-replica-zero"]
    server = (
        'PDDeployment.pdscaler.io "chat" is invalid: spec.prefill.gpusPerReplica: '
        "Invalid value: 0: spec.prefill.gpusPerReplica in body should be greater than or "
        "equal to 1"
    )
    assert case.api_matches(server)
    assert not case.api_matches(server.replace("prefill", "decode"))
