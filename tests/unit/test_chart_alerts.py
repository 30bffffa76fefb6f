"""The chart's PrometheusRule, evaluated by a real Prometheus: the rules rendered by
``helm template`` go to ``promtool test rules`` with input series forcing each
condition, and each alert must fire (with its labels and annotations) after its ``for``
and not before; a replica that lost the Lease (``pdscaler_leader`` 0) and still exports
its last values raises nothing; a PDDeployment that ticks raises no NotTicking.

Series are what telemetry.py exports, with the labels the chart's ServiceMonitor gives
(honorLabels: the PDDeployment's ``namespace``; ``instance`` per replica; the release
namespace on ``pdscaler_leader``). Every rendered alert must have a case here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from support.chartkit import NAMESPACE, promtool, template

LEADER, FOLLOWER = "10.0.0.1:8080", "10.0.0.2:8080"
PDD = {"namespace": "serving", "name": "chat"}


def rule_groups(*args: str) -> list[dict[str, Any]]:
    docs = template("--set", "monitoring.prometheusRule.enabled=true", *args, monitoring=True)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def alerts_of(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def leader(instance: str = LEADER, value: str = "1x90") -> dict[str, str]:
    return series("pdscaler_leader", {"namespace": NAMESPACE, "instance": instance}, value)


def condition(ctype: str, status: str, instance: str = LEADER, **pdd: str) -> dict[str, str]:
    labels = {**PDD, **pdd, "type": ctype, "status": status, "instance": instance}
    return series("pdscaler_condition", labels, "1x90")


def phase(value: str, instance: str = LEADER, **pdd: str) -> dict[str, str]:
    return series(
        "pdscaler_rollout_phase", {**PDD, **pdd, "phase": value, "instance": instance}, "1x90"
    )


def expand(text: str, labels: dict[str, str]) -> str:
    """The annotation as Prometheus renders it (only ``{{ $labels.x }}`` is used)."""
    return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)


def firing(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "exp_labels": {**labels, **rule["labels"]},
        "exp_annotations": {k: expand(v, labels) for k, v in rule["annotations"].items()},
    }


def minutes(text: str) -> int:
    value, unit = int(text[:-1]), text[-1]
    return value * {"m": 1, "h": 60}[unit]


def cases(alerts: dict[str, dict[str, Any]]) -> dict[str, tuple[list[dict[str, str]], int]]:
    """Per alert: the input series, and the minute from which it fires (a ``for`` of 0
    fires at once). The follower's stale values name another PDDeployment, serving/old."""
    stale = {"instance": FOLLOWER, "name": "old"}
    return {
        "PdscalerMetricsUnavailable": (
            [
                leader(),
                leader(FOLLOWER, "0x90"),
                condition("MetricsAvailable", "False"),
                condition("MetricsAvailable", "False", **stale),
            ],
            minutes(alerts["PdscalerMetricsUnavailable"]["for"]),
        ),
        "PdscalerCapacityLimited": (
            [
                leader(),
                leader(FOLLOWER, "0x90"),
                condition("CapacityLimited", "True"),
                condition("CapacityLimited", "True", **stale),
            ],
            minutes(alerts["PdscalerCapacityLimited"]["for"]),
        ),
        "PdscalerDeadlineInfeasible": (
            [leader(), condition("DeadlineInfeasible", "True")],
            minutes(alerts["PdscalerDeadlineInfeasible"]["for"]),
        ),
        "PdscalerSLOUnreachable": (
            [leader(), condition("SLOUnreachable", "True")],
            minutes(alerts["PdscalerSLOUnreachable"]["for"]),
        ),
        "PdscalerWritesFailing": (
            [leader(), condition("WritesFailing", "True")],
            minutes(alerts["PdscalerWritesFailing"]["for"]),
        ),
        "PdscalerRolloutStuck": (
            [
                leader(),
                leader(FOLLOWER, "0x90"),
                phase("Progressing"),
                phase("Progressing", **stale),
            ],
            minutes(alerts["PdscalerRolloutStuck"]["for"]),
        ),
        "PdscalerRolloutRolledBack": (
            [leader(), leader(FOLLOWER, "0x90"), phase("RolledBack"), phase("RolledBack", **stale)],
            0,
        ),
        "PdscalerStalled": (
            [
                leader(),
                leader(FOLLOWER, "0x90"),
                condition("Stalled", "True"),
                condition("Stalled", "True", **stale),
            ],
            minutes(alerts["PdscalerStalled"]["for"]),
        ),
        "PdscalerPaused": (
            [leader(value="1x1600"), condition("Paused", "True") | {"values": "1x1600"}],
            minutes(alerts["PdscalerPaused"]["for"]),
        ),
        "PdscalerNotTicking": (
            [
                leader(),
                leader(FOLLOWER, "0x90"),
                condition("Ready", "True"),
                # chat's ticks stopped; "busy" keeps ticking; "old" is only on the follower
                series(
                    "pdscaler_reconcile_duration_seconds_count", {**PDD, "instance": LEADER}, "5x90"
                ),
                condition("Ready", "True", name="busy"),
                series(
                    "pdscaler_reconcile_duration_seconds_count",
                    {**PDD, "name": "busy", "instance": LEADER},
                    "0+4x90",
                ),
                condition("Ready", "True", **stale),
                series("pdscaler_reconcile_duration_seconds_count", {**PDD, **stale}, "7x90"),
            ],
            # increase() over a flat counter is 0 from its second sample on
            1 + minutes(alerts["PdscalerNotTicking"]["for"]),
        ),
        "PdscalerNoLeader": (
            [leader(value="0x90"), leader(FOLLOWER, "0x90")],
            minutes(alerts["PdscalerNoLeader"]["for"]),
        ),
        "PdscalerReconcileErrors": (
            [series("pdscaler_reconcile_errors_total", {**PDD, "instance": LEADER}, "0+1x90")],
            1 + minutes(alerts["PdscalerReconcileErrors"]["for"]),
        ),
    }


def fired_labels(name: str) -> dict[str, str]:
    return {"namespace": NAMESPACE} if name == "PdscalerNoLeader" else dict(PDD)


def unit_tests(groups: list[dict[str, Any]]) -> dict[str, Any]:
    alerts = alerts_of(groups)
    tests = []
    for name, (inputs, fires_at) in cases(alerts).items():
        expect = [{"eval_time": f"{fires_at + 2}m", "alertname": name,
                   "exp_alerts": [firing(alerts[name], fired_labels(name))]}]  # fmt: skip
        if fires_at >= 3:  # pending, not firing, before its `for` has passed
            expect.append({"eval_time": f"{fires_at - 2}m", "alertname": name, "exp_alerts": []})
        tests.append({"name": name, "interval": "1m", "input_series": inputs,
                      "alert_rule_test": expect})  # fmt: skip
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}


def run_promtool(groups: list[dict[str, Any]], tests: dict[str, Any], tmp: Path) -> str:
    (tmp / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [str(promtool()), "test", "rules", "tests.yaml"],
        cwd=tmp, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return f"rc={done.returncode}\n{done.stdout}{done.stderr}"


def test_every_alert_fires_on_its_condition_and_not_before(tmp_path: Path) -> None:
    groups = rule_groups()
    assert set(alerts_of(groups)) == set(cases(alerts_of(groups)))  # every alert has a case
    out = run_promtool(groups, unit_tests(groups), tmp_path)
    assert out.startswith("rc=0"), out


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The harness can fail: an alert expected where the rule cannot fire is reported."""
    groups = rule_groups()
    tests = unit_tests(groups)
    for case in tests["tests"]:
        if case["name"] == "PdscalerCapacityLimited":
            case["input_series"][2] = condition("CapacityLimited", "False")
    out = run_promtool(groups, tests, tmp_path)
    assert out.startswith("rc=1"), out
    assert "PdscalerCapacityLimited" in out, out


def test_for_durations_severity_and_disabled_alerts_come_from_values() -> None:
    groups = rule_groups(
        "--set", "monitoring.prometheusRule.for.capacityLimited=42m",
        "--set", "monitoring.prometheusRule.severity=page",
        "--set", "monitoring.prometheusRule.disabled.PdscalerRolloutStuck=true",
    )  # fmt: skip
    alerts = alerts_of(groups)
    assert alerts["PdscalerCapacityLimited"]["for"] == "42m"
    assert alerts["PdscalerCapacityLimited"]["labels"]["severity"] == "page"
    assert "PdscalerRolloutStuck" not in alerts
    assert alerts["PdscalerNoLeader"]["labels"]["severity"] == "critical"


def test_every_alert_has_a_runbook_url_from_values() -> None:
    """runbook_url is runbookBaseURL#<the alert's name in lower case> (the entry's anchor
    in docs/troubleshooting.md: tests/unit/test_troubleshooting.py checks it exists)."""
    alerts = alerts_of(rule_groups("--set", "monitoring.prometheusRule.runbookBaseURL=https://x/t"))
    assert {a["annotations"]["runbook_url"] for a in alerts.values()} == {
        f"https://x/t#{name.lower()}" for name in alerts
    }


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}))
    done = subprocess.run(
        [str(promtool()), "check", "rules", str(tmp_path / "rules.yaml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
