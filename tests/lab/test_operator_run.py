"""``python -m pdscaler run`` as a process against the lab: it reconciles a PDDeployment
in its namespace, serves /healthz and /metrics on its port, ``pdscaler explain`` prints
the decision it published, and SIGTERM stops it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request

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
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
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
