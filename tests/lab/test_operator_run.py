"""``python -m pdscaler run`` as a process against the lab: it reconciles a PDDeployment
in its namespace, serves /healthz and /metrics on its port, ``pdscaler explain`` prints
the decision it published, so does ``kubectl pdd explain`` through kubectl's plugin
mechanism (with ``get``, ``why-not-scaling`` and ``-o yaml``), its JSON log lines of
the object's ticks carry namespace, name and tick, and SIGTERM stops it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from pdlab.cluster.lab import Lab
from support.exporter import EngineExporter
from support.labkit import Kube, free_port, wait_for
from support.opkit import (
    create_pdd,
    delete_pdd_and_wait,
    get_pdd,
    pdd_manifest,
    serve_light,
    strip_finalizers,
)

NAME = "proc"


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_pdscaler_run_process_reconciles_serves_health_and_explains(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter, tmp_path: Path
) -> None:
    serve_light(exporter, namespace, NAME)
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig)}
    argv = [sys.executable, "-m", "pdscaler", "run", "-n", namespace, "--standalone"]
    argv += ["--metrics-port", str(port), "--log-format", "json"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _get(f"http://127.0.0.1:{port}/healthz")[0] == 200, 30, "/healthz")
        create_pdd(kube, namespace, pdd_manifest(NAME, lab.prometheus_url))
        wait_for(
            lambda: (
                ((get_pdd(kube, namespace, NAME).get("status") or {}).get("decode") or {}).get(
                    "summary"
                )
                == "1/1"
            ),
            60,
            "the decode pool 1/1 in status",
        )
        series = (
            f'pdscaler_reconcile_duration_seconds_count{{name="{NAME}",namespace="{namespace}"}}'
        )
        wait_for(lambda: series in _get(f"http://127.0.0.1:{port}/metrics")[1], 30, series)
        explained = subprocess.run(
            [sys.executable, "-m", "pdscaler", "explain", NAME, "-n", namespace],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        assert explained.startswith(f"{NAME} ({namespace})  version v1  mode Auto")
        assert "last decision" in explained
        assert "conditions      Ready=" in explained
        missing = subprocess.run(
            [sys.executable, "-m", "pdscaler", "explain", "nope", "-n", namespace],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert missing.returncode == 2
        assert missing.stderr.strip() == f"Error: PDDeployment {namespace}/nope not found"
        check_kubectl_pdd(env, namespace, explained, tmp_path)
        delete_pdd_and_wait(kube, namespace, NAME)
    finally:
        strip_finalizers(kube, namespace, NAME)
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    check_json_log_fields(out.decode(errors="replace"), namespace)


def check_kubectl_pdd(env: dict[str, str], namespace: str, explained: str, bin_dir: Path) -> None:
    """kubectl runs the plugin (``kubectl-pdd`` on the PATH, here ``python -m
    pdscaler.cli.kubectl``): ``get`` lists the object with its pools, ``explain`` prints
    what ``pdscaler explain`` does (the same lines; the object ticks on meanwhile),
    ``why-not-scaling`` names the last action, ``-o yaml`` is the object."""
    plugin = bin_dir / "kubectl-pdd"
    plugin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pdscaler.cli.kubectl "$@"\n')
    plugin.chmod(0o755)
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}

    def kubectl_pdd(*args: str) -> str:
        return subprocess.run(
            ["kubectl", "pdd", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout

    header, line = kubectl_pdd("get", "-n", namespace).splitlines()
    assert header.split()[:5] == ["NAME", "READY", "VERSION", "P", "D"]
    assert line.split()[0] == NAME
    assert line.split()[4] == "1/1"  # decode ready/desired
    again = kubectl_pdd("explain", NAME, "-n", namespace).splitlines()  # the object ticks on
    assert again[0] == explained.splitlines()[0]
    assert [line.split()[0] for line in again if line[:1] != " "] == [
        line.split()[0] for line in explained.splitlines() if line[:1] != " "
    ]
    why = kubectl_pdd("why-not-scaling", NAME, "-n", namespace)
    assert why.startswith(f"{NAME} ({namespace}): ")
    obj = yaml.safe_load(kubectl_pdd("get", NAME, "-n", namespace, "-o", "yaml"))
    assert obj["metadata"]["name"] == NAME
    assert obj["status"]["decode"]["summary"] == "1/1"


def check_json_log_fields(out: str, namespace: str) -> None:
    """The process' JSON lines logged in the object's ticks carry its namespace, name
    and tick number."""
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ticked = [line for line in lines if "tick" in line]
    assert ticked, out[-2000:]
    assert {(line["namespace"], line["name"]) for line in ticked} == {(namespace, NAME)}
    assert all(isinstance(line["tick"], int) for line in ticked)
    assert any("Deployment" in str(line["message"]) for line in ticked), ticked[:5]
