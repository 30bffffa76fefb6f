"""The identity golden test (issue 30, item 1): the previous release's operator and
this one render the examples' cells; any change of a fresh cell's revision or pool
template must be listed in CHANGELOG.md, and an upgrade must change neither the
revision nor the pod templates of the cells the previous release made.

The previous release is ``PREVIOUS`` (no tag yet: 0fd2242, the commit issue 30 names,
before d90a49e put the engine configuration into the revision). Its ``operator/`` and
``deploy/examples/`` are read from git (``git archive``) and rendered in a subprocess
(tests/support/render_cells.py) with that tree's ``pdscaler`` on the path.

Worked case: ``chat.yaml`` of 0fd2242 renders the cell ``v0-11-0-2152f``; this operator
names a new cell of it ``v0-11-0-17c3f`` (listed), but given the old cell's Deployments
it keeps ``v0-11-0-2152f`` (``manifests.adopt``) and their pod templates as they are
(``manifests.keep_rendered``): no rollout, no pod restart.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
import tarfile
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdscaler import manifests, naming
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "0fd2242"
SCRIPT = ROOT / "tests" / "support" / "render_cells.py"
UID = "uid-golden"  # render_cells.UID
EXAMPLES = ("chat.yaml", "custom-preset.yaml", "long-docs.yaml")  # those PREVIOUS had


@cache
def old_tree() -> Path:
    """PREVIOUS's operator/ and deploy/examples/ under a fresh directory (git archive);
    a clone without that commit fails here, it does not skip."""
    out = Path(
        subprocess.run(
            [sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "operator", "deploy/examples"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out


@cache
def rendered(tree: str) -> dict[str, Any]:
    """The examples of PREVIOUS rendered by the ``operator/`` of ``tree``."""
    files = [str(old_tree() / "deploy" / "examples" / name) for name in EXAMPLES]
    run = subprocess.run(
        [sys.executable, str(SCRIPT), *files],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(tree) / "operator"), "PATH": "/usr/bin:/bin"},
    )
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def old() -> dict[str, Any]:
    return rendered(str(old_tree()))


def new() -> dict[str, Any]:
    return rendered(str(ROOT))


def template_hash(dep: dict[str, Any]) -> str:
    """What restarts pods: the hash of a Deployment's pod template (10 hex digits)."""
    text = json.dumps(dep["spec"]["template"], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def pools(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pool Deployments by role."""
    return {
        o["metadata"]["labels"][naming.LABEL_ROLE]: o
        for o in objects
        if o["kind"] == "Deployment"
        and o["metadata"]["labels"][naming.LABEL_ROLE] in (Role.PREFILL.value, Role.DECODE.value)
    }


def listed(before: str, after: str) -> bool:
    """Whether CHANGELOG.md lists the change ``before`` -> ``after`` (line breaks read
    as spaces)."""
    text = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    return f"`{before}` -> `{after}`" in text


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_fresh_cells_revision_changed_only_as_the_changelog_lists(example: str) -> None:
    before, after = old()[example]["revision"], new()[example]["revision"]
    assert before == after or listed(before, after), (
        f"{example}: a new cell's revision {before} -> {after} is not in CHANGELOG.md"
    )


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_fresh_cells_pod_templates_changed_only_as_the_changelog_lists(example: str) -> None:
    before, after = pools(old()[example]["objects"]), pools(new()[example]["objects"])
    assert set(before) == set(after) == {"prefill", "decode"}
    unlisted = [
        f"{role} `{template_hash(before[role])}` -> `{template_hash(after[role])}`"
        for role in sorted(before)
        if template_hash(before[role]) != template_hash(after[role])
        and not listed(template_hash(before[role]), template_hash(after[role]))
    ]
    assert not unlisted, f"{example}: new cells' pod templates not in CHANGELOG.md: {unlisted}"


def _spec_and_owner(example: str) -> tuple[PDDeploymentSpec, Meta]:
    doc = yaml.safe_load((old_tree() / "deploy" / "examples" / example).read_text())
    meta = doc["metadata"]
    return PDDeploymentSpec.model_validate(doc["spec"]), Meta(meta["name"], meta["namespace"], UID)


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_upgrade_keeps_the_previous_releases_revision_and_pod_templates(
    example: str,
) -> None:
    """This operator, given the cell the previous release made for the same spec, names
    it the spec's cell (no rollout) and keeps its pool Deployments' pod templates (no
    restart); what it re-stamps is metadata (identity annotations, spec-hash)."""
    spec, owner = _spec_and_owner(example)
    observed = copy.deepcopy(old()[example]["objects"])
    deployments = [o for o in observed if o["kind"] == "Deployment"]
    adopted = manifests.adopt(spec, owner, deployments)
    assert manifests.spec_revision(adopted) == old()[example]["revision"]
    cell = manifests.spec_cell(adopted, spec.prefill.replicas.min, spec.decode.replicas.min)
    desired = manifests.keep_rendered(
        manifests.desired_objects(owner, adopted, [cell]), deployments, UID
    )
    for role, was in pools(observed).items():
        now = pools(desired)[role]
        assert now["metadata"]["name"] == was["metadata"]["name"]
        assert now["spec"]["template"] == was["spec"]["template"], f"{example} {role} restarts"
        assert now["spec"]["selector"] == was["spec"]["selector"]


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_changed_engine_configuration_after_the_upgrade_is_a_new_cell(example: str) -> None:
    """The kept revision lasts while the spec's identity does: new engine args name the
    current scheme's cell (a rollout), not the previous release's."""
    spec, owner = _spec_and_owner(example)
    deployments = [o for o in old()[example]["objects"] if o["kind"] == "Deployment"]
    raw = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    raw["decode"]["template"]["spec"]["containers"][0].setdefault("args", []).append("--x=1")
    changed = PDDeploymentSpec.model_validate(raw)
    adopted = manifests.adopt(changed, owner, deployments)
    assert manifests.spec_revision(adopted) == manifests.spec_revision(changed)
    assert manifests.spec_revision(adopted) != old()[example]["revision"]
