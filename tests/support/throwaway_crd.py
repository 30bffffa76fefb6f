"""A throwaway CustomResourceDefinition for a lab test: one namespaced version ``v1``
with the given schema (and subresources), e.g. a stand-in for a CRD the lab does not
install, or the PDDeployment CRD's new fields and rules tried in a real API server
before they land. No I/O."""

from __future__ import annotations

from typing import Any


def namespaced_crd(
    group: str,
    plural: str,
    kind: str,
    schema: dict[str, Any],
    subresources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``<plural>.<group>``, kind ``kind``, version v1 served and stored with ``schema``
    as its openAPIV3Schema: namespaced_crd("x.io", "things", "Thing", {...})."""
    version: dict[str, Any] = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if subresources:
        version["subresources"] = subresources
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [version],
        },
    }
