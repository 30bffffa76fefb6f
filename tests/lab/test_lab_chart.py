"""The Helm chart against the lab's real API server: it lints, renders and installs in
namespaced mode, and its least-privilege RBAC is exactly enough. The operator, run with
ONLY the token of the chart's ServiceAccount, reconciles a PDDeployment whose engines
read a ConfigMap (cell created, status written, finalizer released on delete); the same
ServiceAccount may not read Secrets, list ConfigMaps, delete pods, or touch Deployments
in another namespace.

helm is built once by build-bins.sh into ~/.cache/pdscaler/tools (pinned in
versions.env); the chart's own pod stays Pending (its image is not pulled in the lab),
which does not matter: the test runs the operator from this checkout instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from pdlab.cluster.lab import Lab
from support.chartkit import CHART, KUBE, install_watching, lab_helm
from support.labkit import Kube, rbac_allows, wait_for
from support.opkit import create_pdd, delete_pdd_and_wait, get_pdd, pdd_manifest

NAME = "charted"


def _sa_kubeconfig(kube: Kube, namespace: str, sa: str, path: Path) -> Path:
    status = kube.core.create_namespaced_service_account_token(
        sa,
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    ).status
    assert status is not None
    token = status.token
    admin = kube.api.configuration
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {"server": admin.host, "certificate-authority": admin.ssl_ca_cert},
            }
        ],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "lab", "user": sa}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_chart_lints_and_renders() -> None:
    lab_helm("lint", str(CHART), "--strict")
    # (values, the workload role's RoleBinding namespaces, bound cluster-wide?): by
    # default the release namespace only (helm template's is "default"); cluster-wide
    # only when asked
    cases: list[tuple[list[str], list[str], bool]] = [
        ([], ["default"], False),
        (["--set", "watchNamespaces={a,b}", "--set", "leaderElection.enabled=false"],
         ["a", "b"], False),
        (["--set", "clusterWide=true", "--set", "leaderElection.enabled=false"], [], True),
    ]  # fmt: skip
    for values, namespaces, wide in cases:
        docs = [
            d
            for d in yaml.safe_load_all(
                lab_helm("template", "pds", str(CHART), "--kube-version", KUBE, *values)
            )
            if d
        ]
        kinds = {d["kind"] for d in docs}
        assert {"Deployment", "ServiceAccount", "ClusterRole"} <= kinds, kinds
        workload = [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
                    and d["roleRef"]["name"] == "pds-pdscaler"]  # fmt: skip
        binds = [b for b in workload if b["kind"] == "RoleBinding"]
        assert sorted(b["metadata"]["namespace"] for b in binds) == namespaces
        assert any(b["kind"] == "ClusterRoleBinding" for b in workload) == wide
        assert "ClusterRoleBinding" in kinds  # discovery at least (CRDs, namespaces)
        (dep,) = [d for d in docs if d["kind"] == "Deployment"]
        args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
        assert ("--all-namespaces" in args) == wide
        watched = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")]
        assert sorted(watched) == namespaces


def test_chart_installs_and_its_rbac_is_exactly_enough(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    release = f"pds-{namespace[-6:]}"
    # the chart's CRD template is tested in test_lab_chart_monitoring.py
    install_watching(lab, release, namespace)
    try:
        deployment = kube.apps.read_namespaced_deployment(f"{release}-pdscaler", namespace)
        pod = deployment.spec.template.spec
        assert pod is not None
        sa = pod.service_account_name
        assert pod.security_context is not None
        assert pod.security_context.run_as_non_root is True
        container_context = pod.containers[0].security_context
        assert container_context is not None
        assert container_context.read_only_root_filesystem is True
        user = f"system:serviceaccount:{namespace}:{sa}"
        for verb, resource in [
            ("patch", "pdscaler.io/pddeployments/status"),
            ("watch", "pdscaler.io/pddeployments"),
            ("create", "apps/deployments"),
            ("delete", "apps/deployments"),
            ("patch", "pods"),
            ("create", "events"),
            ("create", "coordination.k8s.io/leases"),  # leader election, own namespace
            ("get", "configmaps"),  # those the pool templates read (cell identity)
        ]:
            assert rbac_allows(kube, user, namespace, verb, resource), (verb, resource)
        for ns, verb, resource in [
            (namespace, "get", "secrets"),
            (namespace, "list", "configmaps"),  # by name only
            (namespace, "delete", "pods"),
            (namespace, "update", "apps/deployments"),
            ("default", "create", "apps/deployments"),
            ("default", "patch", "pdscaler.io/pddeployments"),
            ("default", "create", "coordination.k8s.io/leases"),  # a Role, not a ClusterRole
        ]:
            assert not rbac_allows(kube, user, ns, verb, resource), (ns, verb, resource)

        assert sa is not None
        kubeconfig = _sa_kubeconfig(kube, namespace, sa, tmp_path / "sa.kubeconfig")
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        argv = [sys.executable, "-m", "pdscaler", "run", "-n", namespace, "--standalone"]
        argv += ["--metrics-port", "0", "--log-format", "plain"]
        log = tmp_path / "operator.log"
        with log.open("w") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            # the engines read a ConfigMap: the SA gets it by name (issue 30, item 7)
            flags = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"{NAME}-flags"))
            kube.core.create_namespaced_config_map(namespace, flags)
            manifest = pdd_manifest(NAME, lab.prometheus_url)
            engine = manifest["spec"]["decode"]["template"]["spec"]["containers"][0]
            engine["envFrom"] = [{"configMapRef": {"name": f"{NAME}-flags"}}]
            create_pdd(kube, namespace, manifest)

            def summary() -> Any:
                status = get_pdd(kube, namespace, NAME).get("status") or {}
                return (status.get("decode") or {}).get("summary")

            wait_for(lambda: summary() == "1/1", 90, "the cell up, status written by the SA")
            delete_pdd_and_wait(kube, namespace, NAME)  # the SA releases kopf's finalizer
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        text = log.read_text()
        assert "Forbidden" not in text, text[-2000:]
        assert " 403" not in text, text[-2000:]
    finally:
        lab_helm("uninstall", release, "-n", namespace, "--wait", lab=lab)
    with pytest.raises(client.ApiException) as gone:
        kube.apps.read_namespaced_deployment(f"{release}-pdscaler", namespace)
    assert gone.value.status == 404
