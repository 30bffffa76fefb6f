"""README.md's quick start ("Running it on a cluster"), run as written against a fresh
lab until the PDDeployment is Ready.

The commands are README's ``cluster`` blocks (tests/support/doccommands.py), taken from
the file at run time and run one by one with bash, in order, with kubectl, helm and
pdscaler on PATH and KUBECONFIG at the fresh lab. What the lab stands in for:

* the cluster: a second lab of its own (``PDLAB_DIR`` in a temporary directory, free
  ports, pod addresses in 127.91.0.0/16), so nothing of the shared lab is there: no
  PDDeployment CRD, no namespace ``serving`` or ``pdscaler-system``;
* kube-prometheus-stack: the Prometheus Operator's CRDs (so the chart renders its
  PodMonitor, as on such a cluster; no Prometheus Operator runs) and the lab's own
  Prometheus, which scrapes every engine pod with the same labels; README's setting
  ``PROMETHEUS_URL`` is that Prometheus' address;
* the images (step 2, which needs a builder and a registry, is not run; ``REGISTRY`` is
  README's example): the chart's operator pod is run by the lab's pod runner
  (``PDSCALER_CHART``: this checkout's ``pdscaler`` with the args and env the chart
  rendered, a token of the chart's ServiceAccount), the cells' router pods by the same
  runner with the real vllm-router, and the engine pods of namespace ``serving`` are
  served by the engine simulator (``python -m pdlab engine-sim``), standing in for GPUs,
  with a synthetic load standing in for the users (``SIM_LOAD``).

Checked: every command exits 0 (``kubectl wait --for=condition=Ready`` included); the
install's NOTES give the same ``kubectl wait`` as README; the PDDeployment is Ready and
its metrics are read (MetricsAvailable True: the allow-list and URL of the settings
work); the PodMonitor the install asked for exists with kube-prometheus-stack's label.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pdlab.cluster.config import DEFAULT_PORTS, helm_path, monitoring_crds_dir
from pdlab.cluster.kubeclient import Kube, apply_crd
from pdlab.cluster.lab import Lab
from pdlab.cluster.podrunner import PDSCALER_CHART, PodRunner
from pdlab.cluster.svcdns import ClusterHttpProxy
from support.doccommands import REPO, of
from support.labkit import free_port, wait_for

README = REPO / "README.md"
POD_CIDR = "127.91.0.0/16"  # distinct from the shared lab's (config.DEFAULT_POD_CIDR)
REGISTRY = "registry.example.com/you"  # README's example: no image is pulled in the lab
MONITORING_PLURALS = ("podmonitors", "servicemonitors", "prometheusrules")
#: The users' traffic, simulated in the engines (the chat scenario at a fifth of its rate,
#: ~4 req/s): without requests the engines' histograms are empty and the operator holds
#: with MetricsAvailable False (MetricsIncomplete), as on an idle cluster.
SIM_LOAD = ("--scenario", "chat", "--rate-scale", "0.2")


def _fresh_lab_env(lab_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PDLAB_DIR"] = str(lab_dir)
    env["PDLAB_POD_CIDR"] = POD_CIDR
    for name in DEFAULT_PORTS:
        env[f"PDLAB_PORT_{name.upper()}"] = str(free_port())
    for key in ("KUBECONFIG", "PDLAB_PROMETHEUS_URL", "PDSCALER_PROMETHEUS_ALLOWED_URLS"):
        env.pop(key, None)  # the shared lab's, set by its fixture
    return env


def _pdlab(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pdlab", *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, f"pdlab {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


def _condition(pdd: dict[str, Any], kind: str) -> str | None:
    for c in (pdd.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


@pytest.mark.timeout(900)
def test_the_readme_quick_start_reaches_ready_in_a_fresh_lab(lab: Lab, tmp_path: Path) -> None:
    commands = [c.shell for b in of(README, "cluster") for c in b.commands]
    assert commands[0] == "kubectl create namespace serving", commands
    assert any(c.startswith("helm install pdscaler charts/pdscaler") for c in commands)
    assert any("--for=condition=Ready" in c for c in commands), commands

    env = _fresh_lab_env(tmp_path / "lab")
    said = _pdlab(env, "env")  # the fresh lab's KUBECONFIG and Prometheus, before it runs
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in said.splitlines()
        if line.startswith("export ")
    )
    kubeconfig, prometheus_url = Path(exports["KUBECONFIG"]), exports["PDLAB_PROMETHEUS_URL"]
    assert kubeconfig != lab.kubeconfig
    _pdlab(env, "up")
    sim: subprocess.Popen[bytes] | None = None
    log: list[str] = []
    try:
        kube = Kube.from_kubeconfig(kubeconfig)
        names = {n.metadata.name for n in kube.core.list_namespace().items if n.metadata}
        assert not names & {"serving", "pdscaler-system"}, names
        crds = monitoring_crds_dir()
        assert (crds / "VERSION").exists(), f"{crds} missing: run `make lab-build`"
        for plural in MONITORING_PLURALS:
            apply_crd(kube, crds / f"monitoring.coreos.com_{plural}.yaml")

        shell_env = {
            **env,
            "KUBECONFIG": str(kubeconfig),
            "REGISTRY": REGISTRY,
            "PROMETHEUS_URL": prometheus_url,
            "PATH": f"{Path(sys.executable).parent}:{helm_path().parent}:{env['PATH']}",
        }
        assert helm_path().exists(), f"{helm_path()} missing: run `make lab-build`"
        with (
            ClusterHttpProxy(kubeconfig, say=log.append) as proxy,
            PodRunner(
                kubeconfig, tmp_path / "pods", ["pdscaler-system"], workload=PDSCALER_CHART,
                env={"http_proxy": proxy.url}, say=log.append,
            ),
        ):  # fmt: skip
            sim = subprocess.Popen(
                [sys.executable, "-m", "pdlab", "engine-sim", "--namespace", "serving",
                 "--port", str(free_port()), *SIM_LOAD],
                cwd=REPO, env={**env, "KUBECONFIG": str(kubeconfig)},
                stdout=(tmp_path / "engine-sim.log").open("w"), stderr=subprocess.STDOUT,
            )  # fmt: skip
            for command in commands:
                t0 = time.monotonic()
                done = subprocess.run(
                    ["bash", "-c", "set -euo pipefail\n" + command],
                    cwd=REPO, env=shell_env, capture_output=True, text=True, timeout=600,
                )  # fmt: skip
                print(f"$ {command}  ({time.monotonic() - t0:.1f}s)\n{done.stdout}{done.stderr}")
                assert done.returncode == 0, (
                    f"{command}\n{done.stdout}\n{done.stderr}\n" + "\n".join(log[-30:])
                )
                if command.startswith("helm install"):
                    assert "kubectl -n serving wait pdd/chat --for=condition=Ready" in done.stdout
                    assert "WARNING" not in done.stdout, done.stdout

            def pdd() -> dict[str, Any]:
                got: Any = kube.custom.get_namespaced_custom_object(
                    "pdscaler.io", "v1alpha1", "serving", "pddeployments", "chat"
                )
                return dict(got)

            assert _condition(pdd(), "Ready") == "True", pdd().get("status")
            wait_for(
                lambda: _condition(pdd(), "MetricsAvailable") == "True",
                180,
                "MetricsAvailable True (the settings' Prometheus, allowed and read)",
            )
            spec = pdd()["spec"]
            assert spec["router"]["image"] == f"{REGISTRY}/vllm-router:0.1.17"
            assert spec["metrics"]["prometheus"]["url"] == prometheus_url
            listed: Any = kube.custom.list_namespaced_custom_object(
                "monitoring.coreos.com", "v1", "pdscaler-system", "podmonitors"
            )
            monitors = listed["items"]
            assert [m["metadata"]["labels"].get("release") for m in monitors] == [
                "kube-prometheus-stack"
            ]
    finally:
        if sim is not None:
            sim.terminate()
            sim.wait(30)
        subprocess.run(
            [sys.executable, "-m", "pdlab", "down", "--purge"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
