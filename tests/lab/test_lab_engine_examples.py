"""The Dynamo example (deploy/examples/dynamo.yaml) applied to the lab, scaled down
(small pools, pods Ready 1 s after creation, 1 s ticks): ``router.type: external``, so
the pools are created and sized, and no router and no front Service; the lab's engines
do not export Dynamo's frontend series (``dynamo_frontend_*``), so MetricsAvailable
stays False and nothing scales down. (deploy/examples/sglang.yaml is checked against the
CRD, its CEL rules and the model by tests/unit/test_examples.py and dry-run on the API
server by tests/lab/test_lab_crd.py.)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from pdlab.lab import Lab
from pdscaler import naming
from pdscaler.types import ConditionType, Role
from support.labkit import Kube, wait_for
from support.opkit import (
    create_pdd,
    deployments,
    operator_runtime,
    ticking,
    total,
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


def test_the_dynamo_example_gets_pools_only_and_holds_without_frontend_series(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    doc = scaled("dynamo.yaml", namespace, lab.prometheus_url)
    name = doc["metadata"]["name"]
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name):
        create_pdd(kube, namespace, doc)
        wait_for(lambda: all(total(kube, namespace, name, r) >= 1 for r in Role), 60, "both pools")
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
