"""The Dynamo example (deploy/examples/dynamo.yaml) applied to the lab, scaled down
(small pools, pods Ready 1 s after creation, 1 s ticks): ``router.type: external``, so
the pools are created, and no router and no front Service; until the stack's frontend
runs, nothing exports Dynamo's frontend series (``dynamo_frontend_*``), so
MetricsAvailable stays False and nothing scales. Then a frontend pod labelled as
docs/operator.md asks (``pdscaler.io/name``, ``pdscaler.io/role=frontend``), which the
engine simulator stands in for (``pdlab.engine.frontend``), is scraped by the lab's
Prometheus through the shipped discovery job, and its series size both pools. The
SGLang example (deploy/examples/sglang.yaml)
applied the same way, with the engine simulator serving its pods in SGLang's metric
names: its cell gets an sglang-router, and SGLang's series size both pools.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.types import ConditionType, Role
from support.labkit import Kube, engine_simulator
from support.opkit import (
    create_pdd,
    deployments,
    operator_runtime,
    ticking,
    total,
    wait_both_pools,
    wait_condition,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"


def scaled(path: str, namespace: str, prometheus_url: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / path).read_text())
    doc["metadata"]["namespace"] = namespace
    spec = doc["spec"]
    for role in ("prefill", "decode"):
        pool = spec[role]
        pool["replicas"] = {"min": 1, "max": 6}
        tpl = pool["template"]
        tpl.setdefault("metadata", {})["annotations"] = {"pdscaler.io/startup-delay": "1s"}
        tpl["spec"]["terminationGracePeriodSeconds"] = 0
    spec["startupSeconds"] = 2
    spec["metrics"]["prometheus"]["url"] = prometheus_url
    spec["metrics"]["window"] = "10s"
    spec["scaling"].update({"interval": "1s", "maxGPUs": 16, "scaleDownStabilization": "5m"})
    return copy.deepcopy(doc)


def frontend_deployment(name: str) -> dict[str, Any]:
    """The stack's own frontend of PDDeployment ``name`` (Dynamo's ``python3 -m
    dynamo.frontend``), labelled as docs/operator.md asks; on the lab's CPU node."""
    labels = {naming.LABEL_NAME: name, naming.LABEL_ROLE: "frontend"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"{name}-frontend", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"pdscaler.io/startup-delay": "1s"},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "frontend",
                            "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime",
                            "command": ["python3", "-m", "dynamo.frontend"],
                            "ports": [{"name": "http", "containerPort": 8000}],
                        }
                    ],
                },
            },
        },
    }


def test_the_dynamo_example_holds_without_its_frontend_then_is_sized_from_it(
    lab: Lab, kube: Kube, crd: str, namespace: str, engines: None
) -> None:
    """No frontend: the workers' vLLM series alone leave R, the lengths and the latencies
    unknown (the preset reads them from the frontend): MetricsAvailable False, both
    pools held at 1. With the frontend pod: MetricsAvailable True and both pools sized
    up from its series (10.5 req/s of ~1,000 / ~200 tokens: N_P = 10.5 x 1,000 / (8,000
    x 0.7) = ~1.9, N_D = 10.5 x 200 / (1,500 x 0.7) = ~2.0, at least 2 each once the
    ratio model reads the frontend). The frontend Deployment is neither adopted nor
    scaled."""
    doc = scaled("dynamo.yaml", namespace, lab.prometheus_url)
    name = doc["metadata"]["name"]
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name):
        create_pdd(kube, namespace, doc)
        wait_both_pools(kube, namespace, name, 1, 60, "both pools")
        wait_condition(kube, namespace, name, ConditionType.METRICS_AVAILABLE, "False", 30)
        roles = {
            d["metadata"]["labels"].get(naming.LABEL_ROLE)
            for d in deployments(kube, namespace, name)
        }
        assert roles == {"prefill", "decode"}
        with pytest.raises(ApiException) as missing:
            kube.core.read_namespaced_service(name, namespace)
        assert missing.value.status == 404
        assert all(total(kube, namespace, name, r) == 1 for r in Role)

        kube.apps.create_namespaced_deployment(namespace, frontend_deployment(name))  # type: ignore[arg-type]
        by_role, _ = sized_from_engines(kube, namespace, name, "Dynamo's frontend series")
        assert set(by_role) == {"prefill", "decode", "frontend"}  # by pdscaler.io/name
        front = by_role["frontend"]
        assert front["spec"]["replicas"] == 1
        assert not front["metadata"].get("ownerReferences")


@pytest.fixture
def engines(lab: Lab, namespace: str) -> Iterator[None]:
    """The engine simulator on the test's namespace, chat at 0.5x (10.5 req/s of ~1,000
    prompt / ~200 output tokens): pods whose engine runs SGLang are served in SGLang's
    metric names (``pdlab.engine.pods.engine_dialect``); no router processes (the SGLang
    example's routers are sglang-router, whose P/D protocol the simulator does not
    speak)."""
    with engine_simulator(namespace, ["--scenario", "chat", "--rate-scale", "0.5", "--no-routers"]):
        yield


def sized_from_engines(
    kube: Kube, namespace: str, name: str, what: str
) -> tuple[dict[str, Any], str]:
    """Wait for MetricsAvailable True and both pools sized up to >= 2 from the engines'
    series (``what`` names them); the PDDeployment's Deployments by role label, and the
    True condition's message as it was when reached (read later, it may be False for a
    tick: a pod the scale-up started is Ready before Prometheus has scraped it, which
    the operator rightly reports as ``decode targets: 1 of 2 ready pods scraped``)."""
    ok = wait_condition(kube, namespace, name, ConditionType.METRICS_AVAILABLE, "True", 120)
    wait_both_pools(kube, namespace, name, 2, 90, f"both pools sized up from {what}")
    by_role = {
        d["metadata"]["labels"].get(naming.LABEL_ROLE): d
        for d in deployments(kube, namespace, name)
    }
    return by_role, str(ok["message"])


def test_the_sglang_example_is_read_in_sglang_names_and_sized(
    lab: Lab, kube: Kube, crd: str, namespace: str, engines: None
) -> None:
    """deploy/examples/sglang.yaml applied (scaled to the lab): a cell of prefill, decode
    and an sglang-router Deployment in PD mode, and the front Service; the engines'
    SGLang series (sglang:num_requests_total, ..., read through the lab's Prometheus)
    make MetricsAvailable True, and the ratio model sizes both pools up from 1 (10.5
    req/s: N_P = 10.5 x ~1,000 / (6,000 x 0.7) = ~2.5, N_D = 10.5 x ~200 / (900 x 0.7)
    = ~3.3)."""
    doc = scaled("sglang.yaml", namespace, lab.prometheus_url)
    doc["spec"]["router"]["replicas"] = {"min": 1, "max": 1}
    name = doc["metadata"]["name"]
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name):
        create_pdd(kube, namespace, doc)
        by_role, message = sized_from_engines(kube, namespace, name, "SGLang's series")
        assert set(by_role) == {"prefill", "decode", "router"}
        router = by_role["router"]["spec"]["template"]["spec"]["containers"][0]
        argv = " ".join([*router.get("command", []), *router.get("args", [])])
        assert "sglang" in argv
        assert "--pd-disaggregation" in argv
        assert kube.core.read_namespaced_service(name, namespace) is not None
        assert "sglang:num_requests_total" in message, message


def test_the_llm_d_example_gets_pools_only_and_is_sized_on_vllm_series(
    lab: Lab, kube: Kube, crd: str, namespace: str, engines: None
) -> None:
    """deploy/examples/llm-d.yaml applied (scaled to the lab): llm-d's scheduler and
    routing sidecar are the request path (router.type external), so pdscaler creates the
    two pools with the tenant's llm-d labels and the decode pods' sidecar, and no router
    and no front Service; its engines are vLLM, so the vllm preset reads them (served by
    the engine simulator at the port named http, 8200 on decode) and sizes both pools up
    from 1 (10.5 req/s: N_P = 10.5 x ~1,000 / (8,000 x 0.7) = ~1.9, N_D = 10.5 x ~200 /
    (1,500 x 0.7) = ~2)."""
    doc = scaled("llm-d.yaml", namespace, lab.prometheus_url)
    name = doc["metadata"]["name"]
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name):
        create_pdd(kube, namespace, doc)
        by_role, _ = sized_from_engines(kube, namespace, name, "the engines' vLLM series")
        assert set(by_role) == {"prefill", "decode"}
        for role, d in by_role.items():
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert labels["llm-d.ai/role"] == role
            assert labels["llm-d.ai/inferenceServing"] == "true"
        containers = by_role["decode"]["spec"]["template"]["spec"]["containers"]
        assert [c["name"] for c in containers] == ["engine", "routing-proxy"]
        with pytest.raises(ApiException) as missing:
            kube.core.read_namespaced_service(name, namespace)
        assert missing.value.status == 404
