"""``router.args`` cannot undo a cell's scoping. Both routers parse with argparse, where
a flag given again later wins and a unique prefix stands for the whole flag, so the
PDDeployment's extra arguments (appended after pdscaler's) could replace the discovery
selectors that hold a request's prefill and decode to one revision. Seen before the
check, with the real parsers: ``--prefill-selector pdscaler.io/name=chat
pdscaler.io/role=prefill`` in ``router.args`` parsed as the router's prefill selector
(no revision): one router paired the pods of every revision."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from pdscaler import manifests, router
from pdscaler import spec as pdspec
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec, reserved_router_flag

REPO = Path(__file__).resolve().parents[2]
PARSERS = {
    "vllm-router": "vllm_router.launch_router",
    "sglang-router": "sglang_router.launch_router",
}
EXAMPLES = {"vllm-router": "chat.yaml", "sglang-router": "sglang.yaml"}


def example(kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "deploy/examples" / EXAMPLES[kind]).read_text())
    spec: dict[str, Any] = doc["spec"]
    return spec


def parser_flags(kind: str) -> set[str]:
    """Every flag of the router's own launcher parser (as ``parse_router_args`` builds it)."""
    parser = argparse.ArgumentParser()
    importlib.import_module(PARSERS[kind]).RouterArgs.add_cli_args(parser, use_router_prefix=False)
    return {s for action in parser._actions for s in action.option_strings}


def rendered_args(kind: str) -> list[str]:
    """The arguments pdscaler gives the router of ``kind``'s example, cell v1-abcde."""
    spec = PDDeploymentSpec.model_validate(example(kind))
    meta = Meta(name="chat", namespace="serving", uid="u")
    port = manifests.engine_port(spec.decode)
    dep = router.router_deployment(meta, spec, "v1-abcde", "v1", 1, port)
    args: list[str] = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.mark.parametrize(
    ("arg", "reserved"),
    [
        ("--prefill-selector", True),
        ("--prefill-selector=pdscaler.io/role=prefill", True),
        ("--prefill-sel", True),  # argparse expands a unique prefix
        ("--decode-sel=a=b", True),
        ("--worker-urls=http://10.0.0.9:8000", True),
        ("--prefill", True),
        ("--port", True),
        ("--service-discovery-names", True),
        ("--prefill-policy", False),
        ("--policy", False),
        ("--request-timeout-secs=600", False),
        ("round_robin", False),
        ("pdscaler.io/role=prefill", False),
        ("--", False),
    ],
)
def test_reserved_router_flag(arg: str, reserved: bool) -> None:
    assert reserved_router_flag(arg) is reserved


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_every_flag_pdscaler_renders_is_reserved(kind: str) -> None:
    """What pdscaler sets cannot be given again: a new flag in ``router_args`` without
    its entry in ``ROUTER_RESERVED_FLAGS`` fails here."""
    flags = [a for a in rendered_args(kind) if a.startswith("--")]
    assert "--prefill-selector" in flags
    assert [f for f in flags if not reserved_router_flag(f)] == []


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_a_tenant_selector_would_have_replaced_the_cells(kind: str) -> None:
    """Why the check exists, with the real parser: appended, the tenant's selector wins."""
    args = rendered_args(kind)
    tenant = ["--prefill-sel", "pdscaler.io/name=chat", "pdscaler.io/role=prefill"]
    parsed = importlib.import_module(PARSERS[kind]).parse_router_args([*args, *tenant])
    assert "pdscaler.io/revision" not in parsed.prefill_selector
    doc = example(kind)
    doc.setdefault("router", {})["args"] = tenant
    with pytest.raises(pydantic.ValidationError, match=re.escape(pdspec.MSG_ROUTER_ARGS_RESERVED)):
        PDDeploymentSpec.model_validate(doc)


@pytest.mark.parametrize("kind", sorted(PARSERS))
def test_tuning_arguments_still_pass(kind: str) -> None:
    doc = example(kind)
    doc.setdefault("router", {})["args"] = [
        "--policy",
        "round_robin",
        "--prefill-policy=cache_aware",
        "--request-timeout-secs",
        "600",
    ]
    spec = PDDeploymentSpec.model_validate(doc)
    assert spec.router.args is not None
    assert "--prefill-policy=cache_aware" in spec.router.args


def test_every_reserved_flag_is_a_flag_of_a_router() -> None:
    """No stale names: each reserved flag is one the vllm-router or sglang-router parses."""
    known = parser_flags("vllm-router") | parser_flags("sglang-router")
    assert "--prefill-selector" in known
    assert sorted(set(pdspec.ROUTER_RESERVED_FLAGS) - known) == []
