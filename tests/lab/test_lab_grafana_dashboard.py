"""Every PromQL expression of the Grafana dashboard (deploy/grafana/pdscaler.json)
parses and returns series while the operator runs a PDDeployment whose pods the engine
simulator serves (vLLM's series, through the lab's Kubernetes service discovery).

The lab's Prometheus scrapes the engine pods only, not an operator, so the test starts
its own Prometheus (``support.promkit``: the lab's binary and the lab's scrape jobs,
plus a static job for the in-process operator's ``/metrics``). The operator reads the
lab's Prometheus as usual; the dashboard's expressions are asked of the test's, with the
template variables substituted (``$namespace``, ``$name``; Grafana's
``$__rate_interval`` -> 30s and ``$__range`` -> 5m).

Then the same expressions are asked for their range since the PDDeployment was made and
drawn as the dashboard lays them out (``pdlab.dashboard_preview``): into the test's
directory, or into ``$PDSCALER_DASHBOARD_PREVIEW`` (``make dashboard-preview`` draws the
README's docs/img/dashboard-preview.png this way).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pdlab import dashboard_preview
from pdlab.cluster.lab import Lab
from pdscaler.prometheus import MetricsUnavailableError, PrometheusClient
from pdscaler.telemetry import MetricsServer
from support.labkit import Kube, WaitTimeoutError, engine_simulator, wait_for
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


def variables(namespace: str) -> dict[str, str]:
    """The template variables as Grafana would fill them for this test's PDDeployment."""
    return {"namespace": namespace, "name": NAME, "__rate_interval": "30s", "__range": "5m"}


def dashboard_queries(namespace: str) -> dict[str, str]:
    """Panel title / legend -> the expression with the template variables filled."""
    board = dashboard_preview.panels(json.loads(DASHBOARD.read_text()))
    return {
        f"{panel.title} / {fmt}": dashboard_preview.fill(expr, variables(namespace))
        for panel in board
        for fmt, expr in panel.targets
    }


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
            created = time.time()
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
                preview = os.environ.get("PDSCALER_DASHBOARD_PREVIEW")
                if preview:
                    time.sleep(20)  # some history for the README's preview lines
                board = dashboard_preview.panels(json.loads(DASHBOARD.read_text()))
                lines = [p for p in board if p.kind in ("timeseries", "state-timeline")]

                def two_points_a_line() -> bool | None:
                    now = time.time()
                    dashboard_preview.fetch(url, board, variables(namespace), created, now)
                    return all(any(len(v) >= 2 for v in p.series.values()) for p in lines) or None

                # make test: only as long as it takes each line to have 2 points
                with contextlib.suppress(WaitTimeoutError):  # the assert below says which
                    wait_for(two_points_a_line, 40, "2 points on every line panel", interval=2.0)
                out = Path(preview or tmp_path / "p.png")
                drawn = dashboard_preview.render(board, out, "Engine simulator: chat at 0.05x.")
                assert drawn == len([p for p in board if p.kind != "row"])
                assert all(any(len(v) >= 2 for v in p.series.values()) for p in lines), [
                    (p.title, {k: len(v) for k, v in p.series.items()}) for p in lines
                ]
    finally:
        server.stop()
