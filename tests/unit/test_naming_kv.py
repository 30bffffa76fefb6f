"""A cell's revision covers KV compatibility; versions may be image digests.

Worked example: chat on vllm/vllm-openai v0.11.0; adding ``--max-model-len 8192`` to the
decode engine's args changes ``manifests.kv_config`` and so the revision: a new cell,
rolled to like a new version (prefill and decode of different engine configurations
never pair). Adding a label or a probe keeps the revision: an in-place update.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from pdscaler import manifests, naming
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

DIGEST = "sha256:" + "ab" * 32


def doc() -> dict[str, Any]:
    engine = {
        "name": "engine",
        "args": ["--model", "m"],
        "env": [{"name": "A", "value": "1"}],
        "resources": {"limits": {"memory": "16Gi"}},
    }
    return {
        "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
        "prefill": {
            "tokensPerSecond": 3000,
            "template": {"spec": {"containers": [copy.deepcopy(engine)]}},
        },
        "decode": {
            "tokensPerSecond": 800,
            "template": {"spec": {"containers": [copy.deepcopy(engine)]}},
        },
    }


def rev(d: dict[str, Any]) -> str:
    return manifests.spec_revision(PDDeploymentSpec.model_validate(d))


def _engine(d: dict[str, Any], role: str) -> dict[str, Any]:
    containers: list[dict[str, Any]] = d[role]["template"]["spec"]["containers"]
    return containers[0]


KV_CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "prefill args": lambda d: _engine(d, "prefill")["args"].append("--enforce-eager"),
    "decode args": lambda d: _engine(d, "decode")["args"].append("--max-model-len=8192"),
    "decode command": lambda d: _engine(d, "decode").__setitem__("command", ["python3"]),
    "prefill env": lambda d: _engine(d, "prefill")["env"].append({"name": "B", "value": "2"}),
    "decode resources": lambda d: _engine(d, "decode")["resources"].__setitem__(
        "limits", {"memory": "32Gi"}
    ),
    "decode gpus": lambda d: d["decode"].__setitem__("gpusPerReplica", 2),
    "prefill gpus": lambda d: d["prefill"].__setitem__("gpusPerReplica", 4),
    "image": lambda d: d["engine"].__setitem__("image", "lmsysorg/sglang"),
    "version": lambda d: d["engine"].__setitem__("version", "v0.11.1"),
    # pod-level configuration (identity scheme 3, issue 30 item 7: test_identity_config)
    "tolerations": lambda d: d["decode"]["template"]["spec"].__setitem__(
        "tolerations", [{"key": "k", "operator": "Exists"}]
    ),
}

IN_PLACE: dict[str, Callable[[dict[str, Any]], None]] = {
    "labels": lambda d: d["decode"]["template"].__setitem__("metadata", {"labels": {"t": "a"}}),
    "annotations": lambda d: d["prefill"]["template"].__setitem__(
        "metadata", {"annotations": {"x": "y"}}
    ),
    "probe": lambda d: _engine(d, "decode").__setitem__(
        "readinessProbe", {"httpGet": {"path": "/health", "port": 8000}}
    ),
    "capacity": lambda d: d["decode"].__setitem__("tokensPerSecond", 900),
}


@pytest.mark.parametrize("change", sorted(KV_CHANGES))
def test_a_kv_relevant_change_makes_a_new_revision(change: str) -> None:
    d = doc()
    KV_CHANGES[change](d)
    assert rev(d) != rev(doc())


@pytest.mark.parametrize("change", sorted(IN_PLACE))
def test_other_template_changes_keep_the_revision(change: str) -> None:
    d = doc()
    IN_PLACE[change](d)
    assert rev(d) == rev(doc())


def test_the_revision_stays_readable_and_short() -> None:
    r = rev(doc())
    assert r.startswith("v0-11-0-")
    assert len(r) <= 26
    # a cell rendered before the fingerprint existed keeps its old name
    assert naming.revision("vllm/vllm-openai", "v0.11.0") == "v0-11-0-2152f"


def test_every_pool_deployment_carries_the_cells_fingerprint() -> None:
    s = PDDeploymentSpec.model_validate(doc())
    cell = manifests.spec_cell(s, 1, 1)
    for role in Role:
        dep = manifests.pool_deployment(Meta("chat", "serving", "u"), s, cell, role)
        annotations = dep["metadata"]["annotations"]
        assert annotations[naming.ANNOTATION_CONFIG] == manifests.kv_config(s)
        assert dep["metadata"]["labels"][naming.LABEL_REVISION] == rev(doc())


def test_a_digest_version_renders_repo_at_digest() -> None:
    d = doc()
    d["engine"]["version"] = DIGEST
    s = PDDeploymentSpec.model_validate(d)
    dep = manifests.pool_deployment(
        Meta("chat", "serving", "u"), s, manifests.spec_cell(s, 1, 1), Role.DECODE
    )
    engine = dep["spec"]["template"]["spec"]["containers"][0]
    assert engine["image"] == f"vllm/vllm-openai@{DIGEST}"
    label = dep["metadata"]["labels"][naming.LABEL_VERSION]
    assert label == ("sha256-" + "ab" * 32)[:63]
    assert dep["metadata"]["annotations"][naming.ANNOTATION_VERSION] == DIGEST
    assert naming.split_image_ref(engine["image"], DIGEST) == "vllm/vllm-openai"


@pytest.mark.parametrize("bad", ["sha256:abc", "sha256:" + "AB" * 32, "md5:" + "ab" * 16, ":v1"])
def test_malformed_digests_are_refused(bad: str) -> None:
    d = doc()
    d["engine"]["version"] = bad
    with pytest.raises(ValidationError):
        PDDeploymentSpec.model_validate(d)
