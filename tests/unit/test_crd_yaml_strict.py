"""The CRD files and install.yaml hold no duplicated mapping key: kubectl's strict YAML
decoding refuses one ("mapping key already defined"), while yaml.safe_load keeps the
last silently, so the other tests would not see it (two sessions' edits once left
``scaleToZero`` twice in the spec's properties)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FILES = (
    "crds/pdscaler.io_pddeployments.yaml",
    "charts/pdscaler/files/crds/pdscaler.io_pddeployments.yaml",
    "deploy/install.yaml",
)


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""


def _mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ValueError(f"key {key!r} given twice (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


@pytest.mark.parametrize("path", FILES)
def test_no_key_is_given_twice(path: str) -> None:
    assert list(yaml.load_all((REPO / path).read_text(), Loader=StrictLoader))


def test_a_duplicated_key_is_caught() -> None:
    with pytest.raises(ValueError, match="'scaleToZero' given twice"):
        yaml.load("spec: {scaleToZero: {}, scaleToZero: {}}", Loader=StrictLoader)
