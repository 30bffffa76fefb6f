"""The per-condition and rollout-phase gauges (telemetry.py) the chart's PrometheusRule
alerts on: one series per (type, status) with 1 on the current status, bounded to the
known types and phases, set by every tick through ``reconcile_once`` and dropped with
the PDDeployment."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pdscaler.telemetry import Telemetry
from pdscaler.types import ConditionType, RolloutPhase
from support.reconcile_world import NAME, NS, PDD_PATH, World

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(tel: Telemetry) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(tel.exposition().decode()):
        for sm in family.samples:
            out[(sm.name, frozenset(sm.labels.items()))] = sm.value
    return out


def condition(tel: Telemetry, type_: str, status: str) -> float | None:
    key = frozenset({"namespace": NS, "name": NAME, "type": type_, "status": status}.items())
    return samples(tel).get(("pdscaler_condition", key))


def phase(tel: Telemetry, value: str) -> float | None:
    key = frozenset({"namespace": NS, "name": NAME, "phase": value}.items())
    return samples(tel).get(("pdscaler_rollout_phase", key))


def test_one_series_per_status_with_one_on_the_current() -> None:
    tel = Telemetry()
    tel.record_status(NS, NAME, [("MetricsAvailable", "False")], None)
    assert condition(tel, "MetricsAvailable", "False") == 1.0
    assert condition(tel, "MetricsAvailable", "True") == 0.0
    assert condition(tel, "MetricsAvailable", "Unknown") == 0.0
    assert phase(tel, RolloutPhase.STABLE) == 1.0
    tel.record_status(NS, NAME, [("MetricsAvailable", "True")], "RolledBack")
    assert condition(tel, "MetricsAvailable", "False") == 0.0
    assert condition(tel, "MetricsAvailable", "True") == 1.0
    assert phase(tel, RolloutPhase.ROLLED_BACK) == 1.0
    assert phase(tel, RolloutPhase.STABLE) == 0.0


def test_cardinality_is_bounded_to_known_types_and_phases() -> None:
    tel = Telemetry()
    tel.record_status(NS, NAME, [("Invented", "True"), ("Ready", "True")], "Sideways")
    names = [k for k in samples(tel) if k[0] in ("pdscaler_condition", "pdscaler_rollout_phase")]
    assert all(dict(labels).get("type") != "Invented" for _, labels in names)
    assert not any(n == "pdscaler_rollout_phase" for n, _ in names)
    everything = [(t.value, "True") for t in ConditionType]
    tel.record_status(NS, NAME, everything, RolloutPhase.PROGRESSING)
    series = [k for k in samples(tel) if k[0] == "pdscaler_condition"]
    assert len(series) == len(ConditionType) * 3
    assert len([k for k in samples(tel) if k[0] == "pdscaler_rollout_phase"]) == 5


def test_a_tick_exports_its_conditions_and_forgetting_drops_every_series() -> None:
    w = World()
    w.metrics = None  # Prometheus unreachable: MetricsAvailable=False
    w.tick()
    tel = w.rt.telemetry
    assert condition(tel, ConditionType.METRICS_AVAILABLE, "False") == 1.0
    assert condition(tel, ConditionType.READY, "True") is not None
    assert phase(tel, RolloutPhase.STABLE) is not None
    assert samples(tel)  # the tick's series are there
    del w.kube.store[PDD_PATH]
    w.tick()
    per_pdd = [
        (name, labels)
        for name, labels in samples(tel)
        if ("name", NAME) in labels and ("namespace", NS) in labels
    ]
    assert per_pdd == []
