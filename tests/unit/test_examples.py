"""Every manifest under deploy/examples/ is valid: against the CRD's OpenAPI schema
(jsonschema on the translated schema, unknown fields rejected like ``kubectl apply``),
against every CEL rule of the CRD (through its Python twin, after the API server's
defaulting), and against the pydantic model; and the CRD's defaults and pydantic's give
the same spec. (tests/lab/test_lab_crd.py dry-runs the same files on the real server.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from pdscaler.spec import KIND, PDDeployment
from support.crd_schema import (
    EXAMPLES_DIR,
    apply_defaults,
    failing_cel_rules,
    openapi_schema,
    to_json_schema,
)

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
VALIDATOR = Draft202012Validator(to_json_schema(openapi_schema()))


def load(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert len(docs) == 1, f"{path.name}: one PDDeployment per example file"
    doc: dict[str, Any] = docs[0]
    return doc


def test_there_are_the_chat_and_long_document_services() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"chat.yaml", "long-docs.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_matches_the_openapi_schema(path: Path) -> None:
    manifest = load(path)
    assert manifest["kind"] == KIND
    errors = [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in VALIDATOR.iter_errors(manifest)
    ]
    assert errors == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_every_cel_rule(path: Path) -> None:
    assert failing_cel_rules(load(path)) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_matches_the_pydantic_model_with_the_same_defaults(path: Path) -> None:
    manifest = load(path)
    parsed = PDDeployment.model_validate(manifest)
    defaulted = PDDeployment.model_validate(apply_defaults(openapi_schema(), manifest))
    assert parsed == defaulted
    assert parsed.metadata["name"] == manifest["metadata"]["name"]


def test_the_validation_would_catch_a_broken_example() -> None:
    """The checks above are not vacuous: the chat example with a typo fails all three."""
    manifest = load(EXAMPLES_DIR / "chat.yaml")
    manifest["spec"]["scaling"]["maxGpus"] = manifest["spec"]["scaling"].pop("maxGPUs")
    manifest["spec"]["scaling"]["interval"] = "0.5s"
    assert any(e.validator == "additionalProperties" for e in VALIDATOR.iter_errors(manifest))
    assert failing_cel_rules(manifest)
    with pytest.raises(ValueError, match="Extra inputs are not permitted"):
        PDDeployment.model_validate(manifest)
