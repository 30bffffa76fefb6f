"""The Grafana dashboard (deploy/grafana/pdscaler.json, and its copy in the chart): the
two files are equal, it is scoped by the template variables ``namespace`` and ``name``,
every operator series it draws is one the operator exports (``telemetry.Telemetry``),
and the chart ships it as a sidecar ConfigMap only when asked. That every expression
parses and returns series is checked against a real Prometheus by
tests/lab/test_lab_grafana_dashboard.py."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.telemetry import Telemetry
from pdscaler.types import Action, Decision, PoolObservation, Role
from support.builders import snapshot
from support.chartkit import read_template, values

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "pdscaler.json"
CHART_COPY = REPO / "charts" / "pdscaler" / "dashboards" / "pdscaler.json"
SPEC = {
    "engine": {"image": "i", "version": "v1"},
    "prefill": {"tokensPerSecond": 3000},
    "decode": {"tokensPerSecond": 800},
}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def ready_status(reason: str, ok: str) -> PDDeploymentStatus:
    return PDDeploymentStatus.model_validate(
        {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ok,
                    "reason": reason,
                    "message": "m",
                    "lastTransitionTime": "2025-01-01T00:00:00Z",
                }
            ]
        }
    )


def test_the_chart_copy_is_the_dashboard() -> None:
    assert CHART_COPY.read_text() == DASHBOARD.read_text()


def test_template_variables() -> None:
    names = [v["name"] for v in dashboard()["templating"]["list"]]
    assert names == ["datasource", "namespace", "name"]


def test_every_expression_is_scoped_to_the_selected_pddeployment() -> None:
    for expr in expressions():
        for selector in re.findall(r"\{([^{}]*)\}", expr):
            if selector.strip() == "le":
                continue
            assert 'namespace="$namespace"' in selector, expr
            assert 'name="$name"' in selector, expr


def test_every_operator_series_drawn_is_exported() -> None:
    tel = Telemetry()
    spec = PDDeploymentSpec.model_validate(SPEC)
    status = ready_status("Serving", "True")
    tel.record_status("ns", "chat", [(c.type, c.status) for c in status.conditions or []], None)
    tel.record_targets("ns", "chat", spec, status)
    tel.errors.labels("ns", "chat").inc()
    tel.decisions.labels("ns", "chat", "decode", "up", "ScaledDecode").inc()
    tel.flips.labels("ns", "chat", "decode", "prefill").inc()
    decision = Decision(prefill=2, decode=3, action=Action.HOLD, message="m")
    ready = {role: PoolObservation(2, 2) for role in Role}
    before = dict.fromkeys(Role, 2)
    tel.record_tick("ns", "chat", decision, before, ready, snapshot(ttft=0.5, tpot=0.04), 0.1)
    exported = set(re.findall(r"^(pdscaler_\w+)", tel.exposition().decode(), re.M))
    drawn = {m for e in expressions() for m in re.findall(r"\b(pdscaler_(?!io_)\w+)", e)}
    assert drawn <= exported, drawn - exported


def test_the_panels_the_brief_asks_for() -> None:
    titles = {p["title"] for p in dashboard()["panels"]}
    assert {
        "Desired vs ready replicas",
        "P:D ratio vs the ratio model",
        "TTFT vs SLO",
        "TPOT vs SLO",
        "Queue depth",
        "Decisions by reason",
        "Conditions",
        "GPUs in use vs budget",
        "Rollout",
        "Role flips",
    } <= titles


def test_the_configmap_is_off_by_default_and_labelled_for_the_sidecar() -> None:
    assert values()["grafana"]["dashboards"]["enabled"] is False
    assert values()["grafana"]["dashboards"]["labels"] == {"grafana_dashboard": "1"}
    (cm,) = read_template("grafana-dashboard.yaml")
    assert cm["kind"] == "ConfigMap"
    text = (REPO / "charts" / "pdscaler" / "templates" / "grafana-dashboard.yaml").read_text()
    assert text.startswith("{{- if .Values.grafana.dashboards.enabled }}")
    assert '.Files.Get "dashboards/pdscaler.json"' in text


def test_record_status_keeps_one_series_per_condition_type_and_forgets() -> None:
    """Ready flips from NotServing to Serving: one series for Ready, the new reason."""
    tel = Telemetry()
    spec = PDDeploymentSpec.model_validate(SPEC)

    tel.record_targets("ns", "chat", spec, ready_status("NotServing", "False"))
    tel.record_targets("ns", "chat", spec, ready_status("Serving", "True"))
    ready = [
        (s.labels["reason"], s.value)
        for m in tel.registry.collect()
        if m.name == "pdscaler_condition_reason"
        for s in m.samples
    ]
    assert ready == [("Serving", 1.0)]
    steps = [
        s.value
        for m in tel.registry.collect()
        if m.name == "pdscaler_rollout_step"
        for s in m.samples
    ]
    assert steps == [0.0]
    slo = {
        s.labels["slo"]: s.value
        for m in tel.registry.collect()
        if m.name == "pdscaler_slo_seconds"
        for s in m.samples
    }
    assert slo == {"ttft": 2.0, "tpot": 0.05}
    tel.forget("ns", "chat")
    left = [s for m in tel.registry.collect() for s in m.samples if s.labels.get("name") == "chat"]
    assert not [s for s in left if not math.isnan(s.value) and "errors" not in s.name]
