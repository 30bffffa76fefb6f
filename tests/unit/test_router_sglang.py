"""The operator's sglang-router rendering is what the real sglang-router 0.3.2 (PyPI,
the dev extra) accepts: the arguments rendered for deploy/examples/sglang.yaml go
through the router's own launcher parser and validation (``parse_router_args``,
``_validate_router_args``; an unknown flag exits), with the cell's selectors parsed as
the router will match them; and the prefill pods carry the
``sglang.ai/bootstrap-port`` annotation its Kubernetes discovery reads (the port the
prefill engine's ``--disaggregation-bootstrap-port`` binds), which the router hands to
the decode with each request (without it: ``bootstrap_port: null``, and each decode
would look for the KV at its OWN bootstrap port)."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdscaler import manifests, naming, router
from pdscaler.manifests import CellTarget
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Role

REPO = Path(__file__).resolve().parents[2]
META = Meta(name="sglang-chat", namespace="serving", uid="uid-1")
CELL = CellTarget(image="lmsysorg/sglang", version="v0.5.4", prefill=2, decode=1, router=1)


def example() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "deploy/examples/sglang.yaml").read_text())
    spec: dict[str, Any] = doc["spec"]
    return spec


def spec_of(doc: dict[str, Any]) -> PDDeploymentSpec:
    return PDDeploymentSpec.model_validate(doc)


def launcher() -> Any:
    return importlib.import_module("sglang_router.launch_router")


def test_the_rendered_arguments_parse_and_validate_in_the_real_router() -> None:
    spec = spec_of(example())
    port = manifests.engine_port(spec.decode)
    dep = router.router_deployment(META, spec, CELL.rev, CELL.version, 1, port)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python3", "-m", "sglang_router.launch_router"]
    args = launcher().parse_router_args(container["args"])
    args._validate_router_args()
    assert args.pd_disaggregation is True
    assert args.service_discovery is True
    assert args.service_discovery_namespace == "serving"
    assert args.service_discovery_port == port == 30000
    assert args.prefill_selector == naming.pool_selector(META.name, Role.PREFILL, CELL.rev)
    assert args.decode_selector == naming.pool_selector(META.name, Role.DECODE, CELL.rev)
    assert (args.host, args.port) == ("0.0.0.0", spec.router.port)
    assert (args.prometheus_host, args.prometheus_port) == ("0.0.0.0", router.METRICS_PORT)
    # the annotation the router's discovery reads is the one the operator writes
    assert args.bootstrap_port_annotation == router.BOOTSTRAP_ANNOTATION


def test_the_real_router_refuses_a_flag_it_does_not_know() -> None:
    """The check above would catch a renamed flag: the launcher exits on it."""
    with pytest.raises(SystemExit):
        launcher().parse_router_args(["--pd-disaggregation", "--no-such-flag"])


def _pool(doc: dict[str, Any], role: Role) -> dict[str, Any]:
    template: dict[str, Any] = manifests.pool_deployment(META, spec_of(doc), CELL, role)["spec"][
        "template"
    ]
    return template


def _args(doc: dict[str, Any], role: str) -> list[str]:
    args: list[str] = doc[role]["template"]["spec"]["containers"][0]["args"]
    return args


def test_sglang_prefill_pods_carry_their_bootstrap_port() -> None:
    doc = example()
    assert "--disaggregation-bootstrap-port=8998" in _args(doc, "prefill")
    prefill = _pool(doc, Role.PREFILL)["metadata"]["annotations"]
    assert prefill[router.BOOTSTRAP_ANNOTATION] == "8998"
    assert router.BOOTSTRAP_ANNOTATION not in _pool(doc, Role.DECODE)["metadata"]["annotations"]
    # another port: the annotation follows the engine's flag (either spelling)
    other = copy.deepcopy(doc)
    flags = _args(other, "prefill")
    flags[flags.index("--disaggregation-bootstrap-port=8998")] = "--disaggregation-bootstrap-port"
    flags.append("9100")  # the flag's value as the next word
    annotations = _pool(other, Role.PREFILL)["metadata"]["annotations"]
    assert annotations[router.BOOTSTRAP_ANNOTATION] == "9100"


def test_a_templates_own_bootstrap_annotation_wins_and_vllm_gets_none() -> None:
    doc = example()
    doc["prefill"]["template"]["metadata"] = {"annotations": {router.BOOTSTRAP_ANNOTATION: "7"}}
    assert _pool(doc, Role.PREFILL)["metadata"]["annotations"][router.BOOTSTRAP_ANNOTATION] == "7"
    vllm = example()
    vllm["router"] = {"type": "vllm-router"}
    vllm["metrics"]["preset"] = "vllm"
    assert router.BOOTSTRAP_ANNOTATION not in _pool(vllm, Role.PREFILL)["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("words", "port"),
    [
        (["python3", "-m", "sglang.launch_server", "--disaggregation-bootstrap-port=9001"], 9001),
        (["--disaggregation-bootstrap-port", "9002", "--port", "30000"], 9002),
        (["--port", "30000"], router.DEFAULT_BOOTSTRAP_PORT),
        (["--disaggregation-bootstrap-port"], router.DEFAULT_BOOTSTRAP_PORT),
        (["--disaggregation-bootstrap-port=x"], router.DEFAULT_BOOTSTRAP_PORT),
    ],
)
def test_bootstrap_port_of_an_engine_command(words: list[str], port: int) -> None:
    assert router.bootstrap_port(words) == port
