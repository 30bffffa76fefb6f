"""Every PromQL expression of the Grafana dashboard (deploy/grafana/pdscaler.json)
parses and returns series while the operator runs a PDDeployment whose pods the engine
simulator serves (vLLM's series, through the lab's Kubernetes service discovery).

The lab's Prometheus scrapes the engine pods only, not an operator, so the test starts
its own Prometheus (``support.promkit``: the lab's binary and the lab's scrape jobs,
plus a static job for the in-process operator's ``/metrics``). The operator reads the
lab's Prometheus as usual; the dashboard's expressions are asked of the test's, with the
template variables substituted (``$namespace``, ``$name``; Grafana's
``$__rate_interval`` -> 30s and ``$__range`` -> 5m).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pdlab.lab import Lab
from pdscaler.prometheus import MetricsUnavailableError, PrometheusClient
from pdscaler.telemetry import MetricsServer
from support.labkit import Kube, engine_simulator, wait_for
from support.opkit import (
    create_pdd,
    operator_runtime,
    pdd_manifest,
    ticking,
    wait_condition,
)
from support.promkit import own_prometheus, static_job

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "pdscaler.json"
NAME = "chat"


def dashboard_queries(namespace: str) -> dict[str, str]:
    """Panel title / legend -> the expression with the template variables filled."""
    doc = json.loads(DASHBOARD.read_text())
    out = {}
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            expr = (
                target["expr"]
                .replace("$namespace", namespace)
                .replace("$name", NAME)
                .replace("$__rate_interval", "30s")
                .replace("$__range", "5m")
            )
            out[f"{panel['title']} / {target['legendFormat']}"] = expr
    return out


def engine_pods(manifest: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with the engine containers serving on a port named ``http`` (8000),
    where the lab's Prometheus scrapes engines and the engine simulator serves them."""
    for role in ("prefill", "decode"):
        container = manifest["spec"][role]["template"]["spec"]["containers"][0]
        container["ports"] = [{"name": "http", "containerPort": 8000}]
    return manifest


@pytest.mark.timeout(300)
def test_every_dashboard_expression_returns_series(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    """The operator's pods served by the engine simulator (chat at 0.05x, ~1 req/s of
    ~1,000 / ~200 tokens, no router processes: no panel reads a router)."""
    rt = operator_runtime(lab)
    server = MetricsServer(rt.telemetry, port=0).start()
    load = ["--scenario", "chat", "--rate-scale", "0.05", "--no-routers"]
    try:
        job = static_job("pdscaler-operator", f"127.0.0.1:{server.port}")
        with own_prometheus(lab, tmp_path, jobs=[job]) as url, engine_simulator(namespace, load):
            create_pdd(kube, namespace, engine_pods(pdd_manifest(NAME, lab.prometheus_url)))
            with ticking(rt, namespace, NAME, period=1.0):
                wait_condition(kube, namespace, NAME, "MetricsAvailable", "True", 90)
                client = PrometheusClient(url)
                queries = dashboard_queries(namespace)
                assert len(queries) >= 20
                empty: dict[str, str] = {}

                def all_answer() -> bool:
                    empty.clear()
                    for label, expr in queries.items():
                        try:  # a parse error is a QueryFailed: fail at once, not retry
                            result = client.query(expr)["data"]["result"]
                        except MetricsUnavailableError as err:
                            pytest.fail(f"{label}: {expr}: {err}")
                        if not result:
                            empty[label] = expr
                    return not empty

                try:
                    wait_for(all_answer, 90, "every dashboard expression answering series")
                except AssertionError:
                    raise AssertionError(f"no series: {json.dumps(empty, indent=1)}") from None
    finally:
        server.stop()
