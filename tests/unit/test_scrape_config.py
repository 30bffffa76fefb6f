"""The scrape job users paste (deploy/prometheus/kubernetes-sd.yaml, also the lab's):
which pods' ports become targets, by its keep/drop rules applied as Prometheus applies
them (source labels joined by ``;``, the regex anchored), and the labels they get.
Engines on their port named ``http``; the cells' routers on their port named
``metrics`` (router.py, METRICS_PORT), where the arrival counter R is read from; a
stack's own frontend pods (``pdscaler.io/role=frontend``) like engines."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdscaler import router
from pdscaler.objects import Meta
from pdscaler.spec import PDDeploymentSpec

SNIPPET = Path(__file__).resolve().parents[2] / "deploy/prometheus/kubernetes-sd.yaml"
ROLE = "__meta_kubernetes_pod_label_pdscaler_io_role"
PORT = "__meta_kubernetes_pod_container_port_name"
SCRAPE = "__meta_kubernetes_pod_annotation_prometheus_io_scrape"
PHASE = "__meta_kubernetes_pod_phase"


def job() -> dict[str, Any]:
    (only,) = yaml.safe_load(SNIPPET.read_text())
    return dict(only)


def kept(meta: dict[str, str]) -> bool:
    """Whether the job's keep/drop rules keep a discovered target with ``meta``."""
    for rule in job()["relabel_configs"]:
        action = rule.get("action", "replace")
        if action not in ("keep", "drop"):
            continue
        value = rule.get("separator", ";").join(meta.get(s, "") for s in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value) is not None
        if match != (action == "keep"):
            return False
    return True


def target(role: str, port: str, scrape: str = "", phase: str = "Running") -> dict[str, str]:
    return {ROLE: role, PORT: port, SCRAPE: scrape, PHASE: phase}


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (target("prefill", "http"), True),
        (target("decode", "http"), True),
        (target("decode", "grpc"), False),
        (target("decode", "grpc", scrape="true"), True),  # any port of an annotated pod
        (target("router", "metrics"), True),  # the router's counters
        (target("router", "http"), False),  # its serving port is not a metrics endpoint
        (target("router", "metrics", scrape="true"), True),
        (target("router", "metrics", phase="Pending"), False),
        (target("holder", "metrics"), True),  # the holding proxy's gauges (scaleToZero)
        (target("holder", "http"), False),  # its serving port: the requests it holds
        (target("", "http"), False),  # not a pdscaler pod
        (target("frontend", "metrics"), False),
        (target("frontend", "http"), True),  # a stack's own frontend, e.g. Dynamo's
        (target("gateway", "http"), False),
    ],
)
def test_engines_on_http_and_routers_on_metrics_are_kept(
    meta: dict[str, str], expected: bool
) -> None:
    assert kept(meta) is expected


def test_the_router_pod_the_operator_renders_is_kept_on_its_metrics_port() -> None:
    spec = PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": "v1"},
            "prefill": {"tokensPerSecond": 3000},
            "decode": {"tokensPerSecond": 800},
        }
    )
    dep = router.router_deployment(Meta("chat", "serving", "u"), spec, "r1", "v1", 1, 8000)
    pod = dep["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    role = pod["metadata"]["labels"]["pdscaler.io/role"]
    got = {p["name"]: kept(target(role, p["name"])) for p in container["ports"]}
    assert got == {"http": False, "metrics": True}
    (metrics,) = [p for p in container["ports"] if p["name"] == "metrics"]
    assert metrics["containerPort"] == router.METRICS_PORT
    args = container["args"]
    assert args[args.index("--prometheus-port") + 1] == str(router.METRICS_PORT)


def test_routers_get_the_labels_the_presets_select_on() -> None:
    copied = {
        r["target_label"]: r["source_labels"][0]
        for r in job()["relabel_configs"]
        if r.get("target_label") and not r["target_label"].startswith("__")
    }
    assert copied["pdscaler_io_role"] == ROLE  # "router" on the routers' series
    assert copied["pdscaler_io_name"] == "__meta_kubernetes_pod_label_pdscaler_io_name"
    assert copied["namespace"] == "__meta_kubernetes_namespace"
    assert copied["pdscaler_io_revision"] == "__meta_kubernetes_pod_label_pdscaler_io_revision"
