"""The ``kubectl pdd`` plugin (cli/kubectl.py) and the commands it shares with
``pdscaler``: ``get`` (cli/get.py), ``explain -o``, ``why-not-scaling`` (cli/why.py),
``completion`` (cli/completion.py), on PDDeployments whose status a real tick wrote
(support.reconcile_world: reconcile_once against an in-memory API server); and the
console scripts the package installs."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from datetime import UTC, datetime
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pdscaler.cli import build_app as pdscaler_app
from pdscaler.cli import completion, explain, get
from pdscaler.cli import kubectl as plugin
from pdscaler.cli.why import analyse, render
from pdscaler.naming import ANNOTATION_PAUSED
from support.reconcile_world import World

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 1, 1, 3, 10, tzinfo=UTC)


class FakeKube:
    """What the commands read: ``get_pdd`` and ``list_pdds`` over a few objects."""

    def __init__(self, *pdds: dict[str, Any]) -> None:
        self.pdds = list(pdds)

    def get_pdd(self, namespace: str, name: str) -> dict[str, Any] | None:
        for p in self.pdds:
            if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name):
                return p
        return None

    def list_pdds(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self.pdds if namespace in (None, p["metadata"]["namespace"])]


def converged() -> dict[str, Any]:
    """chat in serving after ticks that brought both pools up: Hold, Ready True."""
    w = World()
    w.tick()
    w.converge()
    pdd = w.pdd()
    pdd["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    pdd["metadata"]["managedFields"] = [{"manager": "pdscaler"}]
    return pdd


def unmeasured() -> dict[str, Any]:
    """chat whose Prometheus does not answer: HoldMetricsUnavailable."""
    w = World()
    w.metrics = None
    w.tick()
    return w.pdd()


def plugin_run(monkeypatch: pytest.MonkeyPatch, kube: FakeKube, *args: str) -> Any:
    monkeypatch.setattr(explain, "connect", lambda _cfg, _ctx: kube)
    monkeypatch.setattr(get, "connect", lambda _cfg, _ctx: kube)
    return CliRunner().invoke(plugin.build_app(), list(args), terminal_width=200)


# why-not-scaling


def test_a_converged_hold_says_the_models_see_no_shortfall() -> None:
    found = analyse(converged())
    assert found["scaled"] is False
    assert found["action"] == "Hold"
    (reason,) = found["reasons"]
    assert reason.startswith("Hold: Hold prefill 1, decode 1: within targets")
    assert "the models see no shortfall" in reason
    text = render(found)
    assert text.startswith("chat (serving): the last decision, Hold at ")
    assert text.endswith(reason)


def test_unknown_metrics_name_the_condition_and_its_message() -> None:
    found = analyse(unmeasured())
    assert found["action"] == "HoldMetricsUnavailable"
    assert found["reasons"][0].startswith("HoldMetricsUnavailable: ")
    (metrics,) = [r for r in found["reasons"] if r.startswith("MetricsAvailable=False")]
    assert "(PrometheusUnreachable)" in metrics
    assert "connection refused" in metrics


def test_recommend_mode_and_the_pause_annotation_hold_a_scaling_decision() -> None:
    pdd = converged()
    pdd["status"]["lastDecision"].update(action="ScaledDecode", message="Scaled decode 1->3")
    assert analyse(pdd)["scaled"] is True
    assert render(analyse(pdd)).splitlines()[-1] == "nothing held it"
    pdd["spec"]["scaling"]["mode"] = "Recommend"
    found = analyse(pdd)
    assert found["scaled"] is False
    assert found["reasons"][0] == "ScaledDecode: Scaled decode 1->3"
    assert found["reasons"][1].startswith("spec.scaling.mode is Recommend")
    assert "changed no pool:" in render(found).splitlines()[0]
    pdd["spec"]["scaling"]["mode"] = "Auto"
    pdd["metadata"]["annotations"] = {ANNOTATION_PAUSED: "true"}
    found = analyse(pdd)
    assert found["scaled"] is False
    assert any(ANNOTATION_PAUSED in r for r in found["reasons"])


def test_pools_not_ready_a_spec_not_observed_and_no_decision_yet() -> None:
    pdd = converged()
    pdd["status"]["decode"].update(desiredReplicas=6, readyReplicas=4)
    pdd["metadata"]["generation"] = 3
    reasons = analyse(pdd)["reasons"]
    assert "decode asks for 6 replicas, 4 are ready (pods starting or unschedulable)" in reasons
    assert any("generation 3, observed 1" in r for r in reasons)
    fresh = {"metadata": {"name": "chat", "namespace": "serving"}, "spec": {}}
    found = analyse(fresh)
    assert found["action"] is None
    assert "has not ticked it" in found["reasons"][0]
    assert render(found).startswith("chat (serving): no decision yet")


# get


def test_get_rows_are_the_printer_columns_and_kubectl_ages() -> None:
    pdd = converged()
    (line,) = get.table([pdd], False, NOW).splitlines()[1:]
    cells = line.split()
    assert cells[0] == "chat"
    assert cells[1] == "True"
    assert cells[2] == "v1"
    assert cells[3:5] == ["1/1", "1/1"]
    assert cells[-2:] == ["Hold", "3h"]
    assert [get.age(t, NOW) for t in ("2026-01-01T03:09:15Z", "2025-12-30T03:10:00Z")] == [
        "45s",
        "2d",
    ]
    assert get.age(None, NOW) == "<unknown>"
    fresh = {"metadata": {"name": "new", "namespace": "batch"}}  # not ticked yet
    both = get.table([pdd, fresh], True, NOW).splitlines()
    assert both[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert both[1].split() == ["batch", "new", *["-"] * 8, "<unknown>"]
    assert both[2].split()[:2] == ["serving", "chat"]


def test_plugin_get_lists_and_prints_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    pdd, other = converged(), unmeasured()
    other["metadata"].update(namespace="batch", name="summarize")
    kube = FakeKube(pdd, other)
    result = plugin_run(monkeypatch, kube, "get", "-n", "serving")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.output.splitlines()] == ["NAME", "chat"]
    result = plugin_run(monkeypatch, kube, "get", "-A", "-o", "json")
    listed = json.loads(result.output)
    assert listed["kind"] == "List"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["summarize", "chat"]
    assert "managedFields" not in listed["items"][1]["metadata"]
    result = plugin_run(monkeypatch, kube, "get", "chat", "-n", "serving", "-o", "yaml")
    one = yaml.safe_load(result.output)
    assert one["status"] == pdd["status"]
    result = plugin_run(monkeypatch, kube, "get", "nosuch", "-n", "serving")
    assert result.exit_code == 2
    assert "PDDeployment serving/nosuch not found" in result.output
    result = plugin_run(monkeypatch, kube, "get", "chat", "-A")
    assert result.exit_code == 2


def test_plugin_explain_and_why_not_scaling(monkeypatch: pytest.MonkeyPatch) -> None:
    pdd = unmeasured()
    kube = FakeKube(pdd)
    result = plugin_run(monkeypatch, kube, "explain", "chat", "-n", "serving")
    assert result.exit_code == 0, result.output
    assert result.output == explain.render(pdd) + "\n"
    result = plugin_run(monkeypatch, kube, "explain", "chat", "-n", "serving", "-o", "yaml")
    assert yaml.safe_load(result.output) == pdd["status"]
    result = plugin_run(monkeypatch, kube, "why-not-scaling", "chat", "-n", "serving")
    assert result.output == render(analyse(pdd)) + "\n"
    result = plugin_run(monkeypatch, kube, "why-not-scaling", "chat", "-n", "serving", "-o", "json")
    assert json.loads(result.output) == analyse(pdd)
    result = plugin_run(monkeypatch, kube, "explain", "chat", "-o", "xml")
    assert result.exit_code == 2


def test_pdscaler_has_the_same_commands() -> None:
    out = CliRunner().invoke(pdscaler_app(), ["--help"], terminal_width=200).output
    for name in ("get", "explain", "why-not-scaling", "completion"):
        assert f" {name} " in out, out


# plan -o


def test_plan_prints_yaml_with_the_numbers_of_its_json() -> None:
    args = ["plan", "ratio", "--rate", "20", "--prompt-tokens", "2000"]
    args += ["--output-tokens", "500", "--prefill-tps", "3000", "--decode-tps", "800"]
    runner = CliRunner()
    as_json = json.loads(runner.invoke(pdscaler_app(), [*args, "--json"]).output)
    assert json.loads(runner.invoke(pdscaler_app(), [*args, "-o", "json"]).output) == as_json
    as_yaml = yaml.safe_load(runner.invoke(pdscaler_app(), [*args, "-o", "yaml"]).output)
    assert as_yaml == as_json
    assert as_yaml["prefill_replicas"] == 20


# completion and the console scripts


def test_completion_scripts_name_the_program_and_reject_other_shells() -> None:
    runner = CliRunner()
    bash = runner.invoke(pdscaler_app(), ["completion", "bash"]).output
    assert "_PDSCALER_COMPLETE=complete_bash" in bash
    assert "complete -o default -F _pdscaler_completion pdscaler" in bash
    zsh = runner.invoke(pdscaler_app(), ["completion", "zsh"]).output
    assert zsh.startswith("#compdef pdscaler")
    kubectl_bash = runner.invoke(plugin.build_app(), ["completion", "bash"]).output
    assert "_KUBECTL_PDD_COMPLETE=complete_bash" in kubectl_bash
    assert runner.invoke(pdscaler_app(), ["completion", "tcsh"]).exit_code == 2


def test_kubectl_plugin_completion_answers_as_kubectl_expects(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plugin.complete(["w"])
    assert capsys.readouterr().out == "why-not-scaling\n:4\n"
    plugin.complete(["get", "-o", ""])
    assert capsys.readouterr().out == "json\nyaml\n:4\n"
    plugin.complete([])
    out = capsys.readouterr().out.split()
    assert out == ["get", "explain", "why-not-scaling", "completion", ":4"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_through_the_sourced_script(tmp_path: Path) -> None:
    """The script ``pdscaler completion bash`` prints, sourced in a real bash, fills
    COMPREPLY by calling the program back (``python -m pdscaler`` as ``pdscaler``)."""
    exe = tmp_path / "pdscaler"
    python = REPO / ".venv" / "bin" / "python"
    exe.write_text(f'#!/bin/sh\nexec "{python}" -m pdscaler "$@"\n')
    exe.chmod(0o755)
    script = tmp_path / "completion.bash"
    script.write_text(completion.script("pdscaler", completion.Shell.bash))
    program = (
        f'export PATH="{tmp_path}:$PATH"; source "{script}"; '
        "COMP_WORDS=(pdscaler why); COMP_CWORD=1; _pdscaler_completion pdscaler; "
        'echo "${COMPREPLY[@]}"; '
        "COMP_WORDS=(pdscaler plan ra); COMP_CWORD=2; _pdscaler_completion pdscaler; "
        'echo "${COMPREPLY[@]}"'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines() == ["why-not-scaling", "ratio"], done.stderr


def test_the_package_installs_the_plugin_executables() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-pdd"] == "pdscaler.cli.kubectl:main"
    assert scripts["kubectl_complete-pdd"] == "pdscaler.cli.kubectl:complete"
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(import_module(module), func))
