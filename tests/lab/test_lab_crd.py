"""The PDDeployment CRD from crds/ installs on the lab's API server; every example under
deploy/examples/ is accepted by a server-side dry run; and the API server itself rejects
each manifest of the shared invalid table (tests/support/invalid_manifests.py) with 422 and a
message naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from support.invalid_manifests import CASES, InvalidCase
from support.labkit import REPO, Kube

GROUP, VERSION, PLURAL = "pdscaler.io", "v1alpha1", "pddeployments"
EXAMPLES = sorted((REPO / "deploy" / "examples").glob("*.yaml"))


def dry_run_create(kube: Kube, namespace: str, manifest: dict[str, Any]) -> object:
    """Create `manifest` (a PDDeployment) in `namespace` with dryRun=All; raises on refusal."""
    body = copy.deepcopy(manifest)
    body.setdefault("metadata", {})["namespace"] = namespace
    return kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, dry_run="All"
    )


def test_crd_is_established_and_served(kube: Kube, crd: str) -> None:
    assert crd == f"{PLURAL}.{GROUP}"
    served: Any = kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert served["kind"] == "PDDeploymentList"


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: Path(p).name)
def test_example_is_accepted_by_server_dry_run(
    kube: Kube, crd: str, namespace: str, path: Path
) -> None:
    manifest = yaml.safe_load(path.read_text())
    created: Any = dry_run_create(kube, namespace, manifest)
    assert created["metadata"]["name"] == manifest["metadata"]["name"]
    # Dry run: nothing was stored.
    listing: Any = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    assert listing["items"] == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_invalid_manifest_is_rejected_by_the_api_server(
    kube: Kube, crd: str, namespace: str, case: InvalidCase
) -> None:
    body = case.manifest(namespace=namespace)
    with pytest.raises(ApiException) as refused:
        kube.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All", field_validation="Strict"
        )
    expected_status = 400 if case.strict_only else 422
    message = json.loads(refused.value.body or "{}").get("message", "")  # Status, unescaped
    assert refused.value.status == expected_status, message
    assert case.api_matches(message), f"want {case.path!r} and {case.api_error!r} in {message}"


def test_unknown_field_is_pruned_without_strict_validation(
    kube: Kube, crd: str, namespace: str
) -> None:
    """Why the table asks for fieldValidation=Strict: without it a typo is dropped silently."""
    case = next(c for c in CASES if c.strict_only)
    created: Any = kube.custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, case.manifest(namespace=namespace), dry_run="All"
    )
    node = created
    *parents, leaf = case.path.split(".")
    for key in parents:
        node = node[key]
    assert leaf not in node
