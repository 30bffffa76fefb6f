"""D12's judge of mixed configurations (``drills.samplers.mixed_pairs``) on made-up pods:
one pool of a cell whose Ready pods differ in an init container or a nodeSelector is
mixed, and so is one cell whose Ready pool pods were created on both sides of an edit of
the ConfigMap they read (issue 30, item 7); a pod within 1.5 s of the edit (the
timestamps' one-second resolution) is not judged, and Ready pods of two cells on the two
sides are not mixed (each cell's router pairs its own).

Worked: edit at 12:00:10; cell a's decode created 12:00:00 and its prefill 12:00:20 ->
``a: Ready pods from both sides of a ConfigMap edit``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from drills.samplers import mixed_pairs
from pdscaler import naming
from support.opkit import IMAGE

EDIT = datetime(2026, 12, 5, 12, 0, 10, tzinfo=UTC).timestamp()


def pod(
    name: str, rev: str, role: str, created_s: int, pod_spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Ready pool pod of cell ``rev`` created at 12:00:<created_s>."""
    return {
        "metadata": {
            "name": name,
            "labels": {naming.LABEL_ROLE: role, naming.LABEL_REVISION: rev},
            "annotations": {naming.ANNOTATION_VERSION: "v1"},
            "creationTimestamp": f"2026-12-05T12:00:{created_s:02d}Z",
        },
        "spec": {"containers": [{"name": "engine", "image": f"{IMAGE}:v1"}], **(pod_spec or {})},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_one_cell_across_a_configmap_edit_is_mixed() -> None:
    pods = [pod("d", "a", "decode", 0), pod("p", "a", "prefill", 20)]
    assert mixed_pairs(pods, (EDIT,)) == ["a: Ready pods from both sides of a ConfigMap edit"]
    assert mixed_pairs(pods) == []  # no edit: nothing to judge


def test_two_cells_on_the_two_sides_and_pods_at_the_edit_are_not() -> None:
    cells = [pod("d1", "a", "decode", 0), pod("p1", "a", "prefill", 1)]
    cells += [pod("d2", "b", "decode", 20), pod("p2", "b", "prefill", 21)]
    assert mixed_pairs(cells, (EDIT,)) == []
    near = [pod("d", "a", "decode", 0), pod("p", "a", "prefill", 11)]  # 1 s after: unjudged
    assert mixed_pairs(near, (EDIT,)) == []


def test_one_pool_with_two_init_containers_or_node_selectors_is_mixed() -> None:
    init = {"initContainers": [{"name": "fetch", "image": "f:1"}]}
    assert mixed_pairs([pod("d1", "a", "decode", 0), pod("d2", "a", "decode", 1, init)])
    gpu = {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}
    assert mixed_pairs([pod("d1", "a", "decode", 0), pod("d2", "a", "decode", 1, gpu)])
    assert mixed_pairs([pod("d1", "a", "decode", 0, gpu), pod("d2", "a", "decode", 1, gpu)]) == []
