"""The chart's ecosystem objects against the lab's real API server.

* With the prometheus-operator CRDs installed (ServiceMonitor, PodMonitor,
  PrometheusRule: the CRDs alone, fetched by operator/pdlab/cluster/fetch-monitoring-crds.sh at
  the version of versions.env), ``helm install`` with the monitors on sees them through
  discovery (Capabilities) and creates all three; the API server stores every rendered
  field as rendered (a misspelt field would be pruned by the CRD's structural schema
  and be missing here; the CRDs' own defaults may be added).
* ``helm upgrade`` updates the PDDeployment CRD (it is a template: Helm never upgrades a
  chart's crds/), after the one-time adoption of a CRD created outside the release
  (docs/install.md, "Upgrading"); ``helm uninstall`` keeps it (crds.keep).
* ``kubectl get pdd`` shows the Ready column: the API server's Table answer has a Ready
  column holding the Ready condition's status.

``helm test`` itself runs in tests/lab/test_lab_helm_test.py, against the chart's own
operator pod (run by pdlab.cluster.podrunner); here the test pod's manifest is accepted by the
API server (server-side dry run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import yaml
from kubernetes.client import ApiException

from pdlab.cluster.config import helm_path, monitoring_crds_dir
from pdlab.cluster.kubeclient import apply_crd, crd_established, wait_until
from pdlab.cluster.lab import Lab
from pdscaler.spec import GROUP, PLURAL, VERSION
from support.chartkit import CHART, KUBE, install_watching, lab_helm
from support.labkit import Kube
from support.opkit import create_pdd, pdd_manifest

CRD_NAME = f"{PLURAL}.{GROUP}"
MONITORS = [
    "--set", "monitoring.serviceMonitor.enabled=true",
    "--set", "monitoring.podMonitor.enabled=true",
    "--set", "monitoring.prometheusRule.enabled=true",
]  # fmt: skip
KINDS = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors",
         "PrometheusRule": "prometheusrules"}  # fmt: skip


def _helm(lab: Lab, *args: str) -> str:
    return lab_helm(*args, lab=lab)


def _install_monitoring_crds(kube: Kube) -> None:
    folder = monitoring_crds_dir()
    assert (folder / "VERSION").exists(), f"{folder} missing: run `make lab-build`"
    for kind, plural in KINDS.items():
        body = yaml.safe_load((folder / f"monitoring.coreos.com_{plural}.yaml").read_text())
        assert body["spec"]["names"]["kind"] == kind
        try:
            kube.apiext.create_custom_resource_definition(cast(Any, body))
        except ApiException as err:
            if err.status != 409:  # already there (an earlier run of this lab)
                raise
        name = body["metadata"]["name"]

        def established(n: str = name) -> bool:
            return crd_established(kube, n)

        wait_until(established, 30, f"CRD {name} Established")


def missing(rendered: Any, stored: Any, path: str = "") -> list[str]:
    """Where ``stored`` lacks or changed what was rendered; fields the API server added
    (the CRD's defaults, e.g. a relabelling's ``action: replace``) are fine, a pruned
    (unknown, misspelt) field is not."""
    if isinstance(rendered, dict):
        if not isinstance(stored, dict):
            return [path]
        return [p for k, v in rendered.items() for p in missing(v, stored.get(k), f"{path}.{k}")]
    if isinstance(rendered, list):
        if not isinstance(stored, list) or len(stored) != len(rendered):
            return [path]
        return [
            p
            for i, (a, b) in enumerate(zip(rendered, stored, strict=True))
            for p in missing(a, b, f"{path}[{i}]")
        ]
    return [] if rendered == stored else [f"{path}: {rendered!r} -> {stored!r}"]


def test_monitoring_objects_are_created_and_stored_as_rendered(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    _install_monitoring_crds(kube)
    release = f"mon-{namespace[-6:]}"
    # the same release rendered offline, with the kinds said to be served
    apis = [a for kind in KINDS for a in ("--api-versions", f"monitoring.coreos.com/v1/{kind}")]
    rendered = {
        d["kind"]: d
        for d in yaml.safe_load_all(
            _helm(
                lab,
                "template",
                release,
                str(CHART),
                "-n",
                namespace,
                "--kube-version",
                KUBE,
                "--set",
                "crds.install=false",
                *MONITORS,
                *apis,
            )
        )
        if d
    }
    notes = install_watching(lab, release, namespace, *MONITORS)
    try:
        assert "WARNING" not in notes, notes  # every kind was found by discovery
        assert f"helm test {release}" in notes
        for kind, plural in KINDS.items():
            name = rendered[kind]["metadata"]["name"]
            stored = cast(  # the object's JSON
                dict[str, Any],
                kube.custom.get_namespaced_custom_object(
                    "monitoring.coreos.com", "v1", namespace, plural, name
                ),
            )
            expected = rendered[kind]["spec"]
            if kind == "PodMonitor":  # rendered without watchNamespaces
                expected["namespaceSelector"] = {"matchNames": [namespace]}
            assert missing(expected, stored["spec"]) == [], kind
        # the helm test pod is a valid Pod for this API server (it is created by
        # `helm test` only; run in test_lab_helm_test.py)
        pods = [d for d in yaml.safe_load_all(_helm(
            lab, "template", release, str(CHART), "-n", namespace, "--kube-version", KUBE,
            "-s", "templates/tests/test-healthz.yaml")) if d]  # fmt: skip
        (pod,) = pods
        kube.core.create_namespaced_pod(namespace, pod, dry_run="All")
    finally:
        _helm(lab, "uninstall", release, "-n", namespace, "--wait")
    for kind, plural in KINDS.items():
        left = cast(  # the list's JSON
            dict[str, Any],
            kube.custom.list_namespaced_custom_object(
                "monitoring.coreos.com", "v1", namespace, plural
            ),
        )
        assert left["items"] == [], kind


def _adopt(kube: Kube, release: str, namespace: str) -> None:
    """The documented one-time adoption of a CRD created outside the release."""
    patch = {"metadata": {
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": release,
                        "meta.helm.sh/release-namespace": namespace},
    }}  # fmt: skip
    kube.apiext.patch_custom_resource_definition(CRD_NAME, patch)


def _served_columns(kube: Kube) -> list[str]:
    crd_obj = kube.apiext.read_custom_resource_definition(CRD_NAME)
    (version,) = crd_obj.spec.versions
    columns = version.additional_printer_columns
    assert columns is not None
    return [c.name for c in columns]


def test_helm_upgrade_updates_the_crd_and_uninstall_keeps_it(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    release = f"crd-{namespace[-6:]}"
    changed = tmp_path / "pdscaler"
    shutil.copytree(CHART, changed)
    crd_file = changed / "files" / "crds" / "pdscaler.io_pddeployments.yaml"
    text = crd_file.read_text()
    marker = "        - name: Age\n"
    assert marker in text
    probe = ("        - name: Probe\n          type: string\n"
             "          jsonPath: .status.activeVersion\n"
             "          description: A column only the upgraded chart has.\n")  # fmt: skip
    crd_file.write_text(text.replace(marker, probe + marker))
    try:
        _adopt(kube, release, namespace)
        _helm(lab, "install", release, str(CHART), "-n", namespace,
              "--set", f"watchNamespaces={{{namespace}}}")  # fmt: skip
        assert "Ready" in _served_columns(kube)
        assert "Probe" not in _served_columns(kube)
        _helm(lab, "upgrade", release, str(changed), "-n", namespace,
              "--set", f"watchNamespaces={{{namespace}}}")  # fmt: skip
        wait_until(lambda: "Probe" in _served_columns(kube), 30, "the upgraded CRD served")
        _helm(lab, "upgrade", release, str(CHART), "-n", namespace,
              "--set", f"watchNamespaces={{{namespace}}}")  # fmt: skip
        wait_until(lambda: "Probe" not in _served_columns(kube), 30, "the CRD back")
        _helm(lab, "uninstall", release, "-n", namespace, "--wait")
        kept = kube.apiext.read_custom_resource_definition(CRD_NAME)  # not deleted
        assert kept.metadata is not None
        assert kept.metadata.annotations is not None
        assert kept.metadata.annotations["helm.sh/resource-policy"] == "keep"
    finally:
        subprocess.run([str(helm_path()), "uninstall", release, "-n", namespace,
                        "--kubeconfig", str(lab.kubeconfig)], capture_output=True)  # fmt: skip
        apply_crd(kube)  # the source CRD, as the other lab tests expect it


def test_the_api_server_serves_the_ready_column(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    create_pdd(kube, namespace, pdd_manifest("tabled", lab.prometheus_url))
    status = {"conditions": [{
        "type": "Ready", "status": "True", "reason": "Serving", "message": "serving",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}  # fmt: skip
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, "tabled", {"status": status}
    )
    # what kubectl get asks for: the server-side Table with the printer columns
    method, url, headers, _, _ = kube.api.param_serialize(
        method="GET",
        resource_path=f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
        header_params={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
        auth_settings=["BearerToken"],
    )
    resp = kube.api.call_api(method, url, header_params=headers)
    resp.read()  # type: ignore[no-untyped-call]
    table = json.loads(cast(bytes, resp.data))  # what read() loaded
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:2] == ["Name", "Ready"], names
    (row,) = table["rows"]
    assert row["cells"][:2] == ["tabled", "True"]


def test_explain_defaults_the_namespace_from_the_kubeconfig_context(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path
) -> None:
    """``pdscaler explain NAME`` without ``-n`` reads the context's namespace, as kubectl
    does; ``--context`` picks another context of the same file."""
    create_pdd(kube, namespace, pdd_manifest("explained", lab.prometheus_url))
    config = yaml.safe_load(Path(lab.kubeconfig).read_text())
    (context,) = config["contexts"]
    scoped = {"name": "scoped", "context": {**context["context"], "namespace": namespace}}
    config["contexts"].append(scoped)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))

    def explain(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "pdscaler", "explain", "explained", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)

    found = explain("--kubeconfig", str(kubeconfig), "--context", "scoped")
    assert found.returncode == 0, found.stderr
    assert f"explained ({namespace})" in found.stdout
    config["current-context"] = "scoped"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert explain("--kubeconfig", str(kubeconfig)).returncode == 0
    other = explain("--kubeconfig", str(kubeconfig), "--context", context["name"])
    assert other.returncode == 2  # that context's namespace is default: not found there
    assert "default/explained not found" in other.stderr
