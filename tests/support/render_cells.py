"""Render the spec cell of PDDeployment examples with whichever ``pdscaler`` is on the
path: ``python render_cells.py EXAMPLE.yaml...`` prints, per file, the cell's revision
and the objects ``manifests.desired_objects`` builds for it (JSON).

Owns: one rendering that works with today's operator and with the previous release's
(0fd2242: ``CellTarget(image, version, prefill, decode)``, no ``spec_cell``), so the
identity golden test (tests/unit/test_identity_golden.py) can compare them. Must not
import anything of the tree it runs beside (it runs with an old tree's ``operator/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from pdscaler import manifests
from pdscaler.spec import PDDeploymentSpec

UID = "uid-golden"


def render(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    spec = PDDeploymentSpec.model_validate(doc["spec"])
    meta = manifests.Meta(doc["metadata"]["name"], doc["metadata"]["namespace"], UID)  # type: ignore[attr-defined]
    prefill, decode = spec.prefill.replicas.min, spec.decode.replicas.min
    spec_cell = getattr(manifests, "spec_cell", None)
    if spec_cell is not None:
        cell = spec_cell(spec, prefill, decode)
    else:
        cell = manifests.CellTarget(spec.engine.image, spec.engine.version, prefill, decode)
    return {"revision": cell.rev, "objects": manifests.desired_objects(meta, spec, [cell])}


def main(argv: list[str]) -> None:
    json.dump({Path(a).name: render(Path(a)) for a in argv}, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
