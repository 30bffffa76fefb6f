"""``helm test`` in the lab, against the chart's own operator pod.

The lab runs the chart's pods as a kubelet would (``pdlab.cluster.podrunner`` with the
``PDSCALER_CHART`` workload): the operator pod's ``pdscaler run`` (this checkout's
``pdscaler``, the image's entrypoint) at its pod IP, with a token of the chart's
ServiceAccount, and the helm test pod's ``pdscaler healthcheck
http://<release>-pdscaler-metrics.<ns>.svc:8080/healthz``, which reaches the metrics
Service by its DNS name through ``pdlab.cluster.svcdns`` (the cluster-DNS + kube-proxy
stand-in, given to the pod's process as ``http_proxy``). When the test pod's process
exits, the runner writes its phase (Succeeded on exit 0, else Failed), which is what
``helm test`` waits for.

Checked (the last test needs no cluster: what the runner runs and how names resolve):
``helm test`` passes while the operator runs (the request went through the
Service; the pod was Succeeded, then deleted by its hook-succeeded policy), and fails
once the operator is scaled to 0 (the pod Failed with exit code 1, kept for a look).
"""

from __future__ import annotations

import re
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from pdlab.cluster.config import helm_path
from pdlab.cluster.lab import Lab
from pdlab.cluster.podrunner import (
    PDSCALER_CHART,
    NotAllowedError,
    PodRunner,
    container_env,
    resolve_pdscaler,
    with_host,
)
from pdlab.cluster.svcdns import ClusterHttpProxy, service_of
from support.chartkit import install_watching, lab_helm
from support.labkit import Kube, wait_for


def helm_test(lab: Lab, release: str, namespace: str) -> subprocess.CompletedProcess[str]:
    argv = [str(helm_path()), "test", release, "-n", namespace, "--timeout", "90s"]
    argv += ["--kubeconfig", str(lab.kubeconfig)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=150)


def test_helm_test_passes_against_the_running_operator_and_fails_without_it(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    release = f"pds-{namespace[-6:]}"
    install_watching(lab, release, namespace)
    said: list[str] = []
    try:
        with (
            ClusterHttpProxy(lab.kubeconfig, say=said.append) as proxy,
            PodRunner(
                lab.kubeconfig, tmp_path / "pods", [namespace], workload=PDSCALER_CHART,
                env={"http_proxy": proxy.url}, say=said.append,
            ) as runner,
        ):  # fmt: skip
            url = f"http://{release}-pdscaler-metrics.{namespace}.svc:8080/healthz"
            via_proxy = urllib.request.build_opener(
                urllib.request.ProxyHandler({"http": proxy.url})
            )

            def healthz() -> bool:
                with via_proxy.open(url, timeout=5) as resp:
                    return bool(resp.status == 200)

            wait_for(healthz, 120, f"the chart's operator answering {url}")
            (operator,) = runner.running.values()
            assert "--metrics-address" in " ".join(operator.argv)
            assert f"--metrics-address={operator.ip}" in operator.argv  # the pod IP, not 0.0.0.0

            before = proxy.requests
            passed = helm_test(lab, release, namespace)
            assert passed.returncode == 0, passed.stderr + passed.stdout + "\n".join(said[-20:])
            assert re.search(r"Phase:\s+Succeeded", passed.stdout), passed.stdout
            assert proxy.requests > before  # the test pod asked through the Service's name
            assert any("test-healthz: Succeeded (exit code 0)" in line for line in said), said
            test_pod = f"{release}-pdscaler-test-healthz"
            wait_for(
                lambda: (
                    not kube.core.list_namespaced_pod(
                        namespace, field_selector=f"metadata.name={test_pod}"
                    ).items
                ),
                30,
                "the passed test pod deleted (hook-succeeded)",
            )

            kube.apps.patch_namespaced_deployment_scale(
                f"{release}-pdscaler", namespace, {"spec": {"replicas": 0}}
            )

            def others() -> list[str]:
                pods: list[Any] = kube.core.list_namespaced_pod(namespace).items
                return [p.metadata.name for p in pods if p.metadata.name != test_pod]

            wait_for(lambda: not others(), 60, "the operator pod gone")
            failed = helm_test(lab, release, namespace)
            assert failed.returncode != 0, failed.stdout
            assert "failed" in (failed.stderr + failed.stdout).lower()
            pod: Any = kube.core.read_namespaced_pod(test_pod, namespace)
            assert pod.status.phase == "Failed"
            (status,) = pod.status.container_statuses
            assert status.state.terminated.exit_code == 1
    finally:
        lab_helm("uninstall", release, "-n", namespace, "--wait", lab=lab)


def test_the_chart_workload_runs_only_pdscaler_at_the_pod_ip_with_its_downward_env() -> None:
    argv = resolve_pdscaler([], ["healthcheck", "http://x.y.svc:8080/healthz"])
    assert Path(argv[0]).name == "pdscaler"
    assert Path(argv[0]).exists()
    assert argv[1:] == ["healthcheck", "http://x.y.svc:8080/healthz"]
    assert resolve_pdscaler(["/usr/local/bin/pdscaler"], ["run"])[1:] == ["run"]
    for command in (["sh"], ["python"], ["vllm-router"]):
        with pytest.raises(NotAllowedError):
            resolve_pdscaler(command, ["-c", "echo owned"])
    ip = "127.64.0.7"
    flags, add = PDSCALER_CHART.host_flags, PDSCALER_CHART.add_host
    assert with_host(["p", "run", "--metrics-address=0.0.0.0"], ip, flags, add) == [
        "p", "run", f"--metrics-address={ip}",
    ]  # fmt: skip
    assert with_host(["p", "healthcheck", "u"], ip, flags, add) == ["p", "healthcheck", "u"]
    ref = client.V1EnvVarSource
    container = client.V1Container(
        name="operator",
        env=[
            client.V1EnvVar(name="A", value="1"),
            client.V1EnvVar(name="POD_NAME", value_from=ref(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.name"))),
            client.V1EnvVar(name="NS", value_from=ref(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.namespace"))),
            client.V1EnvVar(name="IP", value_from=ref(
                field_ref=client.V1ObjectFieldSelector(field_path="status.podIP"))),
            client.V1EnvVar(name="SECRET", value_from=ref(
                secret_key_ref=client.V1SecretKeySelector(name="s", key="k"))),
        ],
    )  # fmt: skip
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="op-1", namespace="ops"),
        spec=client.V1PodSpec(containers=[container]),
        status=client.V1PodStatus(pod_ip=ip),
    )
    assert container_env(container, pod) == {"A": "1", "POD_NAME": "op-1", "NS": "ops", "IP": ip}


def test_cluster_dns_names_stand_for_services() -> None:
    assert service_of("pds-pdscaler-metrics.ops.svc") == ("ops", "pds-pdscaler-metrics")
    assert service_of("chat.serving.svc.cluster.local.") == ("serving", "chat")
    for host in ("prometheus.example.com", "ops.svc", "a.b.c.svc", "127.0.0.1"):
        assert service_of(host) is None, host
