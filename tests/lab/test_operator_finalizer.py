"""No finalizer: the operator adds none, removes the one older versions added
(``pdscaler.io/finalizer``) on the next event, and a PDDeployment is deleted at once
once the operator is gone (so is its namespace: the owner references garbage-collect
the Deployments)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from pdlab.cluster.lab import Lab
from support.exporter import EngineExporter
from support.labkit import Kube, not_found, wait_for
from support.opkit import (
    create_pdd,
    delete_pdd_and_wait,
    get_pdd,
    pdd_manifest,
    serve_light,
    strip_finalizers,
)

STALE = "pdscaler.io/finalizer"


def test_stale_finalizer_removed_and_none_added(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    serve_light(exporter, namespace, "old")
    old = pdd_manifest("old", lab.prometheus_url)
    old["metadata"]["finalizers"] = [STALE, "example.com/keep"]
    create_pdd(kube, namespace, old)
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig)}
    argv = [sys.executable, "-m", "pdscaler", "run", "-n", namespace, "--standalone"]
    argv += ["--metrics-port", "0", "--log-format", "plain"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for(
            lambda: (
                get_pdd(kube, namespace, "old")["metadata"].get("finalizers")
                == ["example.com/keep"]
            ),
            30,
            "the stale finalizer removed, a foreign one kept",
        )
        create_pdd(kube, namespace, pdd_manifest("new", lab.prometheus_url))
        wait_for(
            lambda: (get_pdd(kube, namespace, "new").get("status") or {}).get("observedGeneration"),
            60,
            "the new PDDeployment reconciled",
        )
        assert not get_pdd(kube, namespace, "new")["metadata"].get("finalizers")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        strip_finalizers(kube, namespace, "old")
    assert proc.returncode == 0, out.decode(errors="replace")[-2000:]
    # the operator is gone: deleting is immediate, nothing waits for it
    delete_pdd_and_wait(kube, namespace, "new", timeout=10)
    assert not_found(lambda: get_pdd(kube, namespace, "new"))
