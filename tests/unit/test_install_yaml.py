"""deploy/install.yaml, the static manifest for kubectl users, is what ``make
install-yaml`` renders from the chart now, and the chart packages under the versioning
policy of docs/install.md ("Packaging and versions").

* ``make install-yaml INSTALL_YAML=<tmp>`` with the pinned helm gives deploy/install.yaml
  byte for byte (a chart change without ``make install-yaml`` fails here);
* it starts with the operator's Namespace, holds no Helm hook (the ``helm test`` pod is
  left out: kubectl would create it as a plain pod), and its operator watches ``serving``,
  where deploy/examples/ live;
* ``helm package`` gives ``pdscaler-<version>.tgz``, and the chart's ``appVersion`` is the
  operator's version (pyproject.toml), which is also the image tag ``make images`` builds.

Needs the helm ``make lab-build`` builds: skipped without it locally, failed in CI.
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import yaml

from pdlab.cluster.config import helm_path
from support.chartkit import CHART, helm, tool

REPO = CHART.parents[1]
INSTALL = REPO / "deploy" / "install.yaml"


def _render(out: Path) -> str:
    env = {**os.environ, "HELM": str(tool(helm_path()))}
    done = subprocess.run(
        ["make", "-s", "install-yaml", f"INSTALL_YAML={out}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    return out.read_text()


def test_install_yaml_is_the_chart_rendered_now(tmp_path: Path) -> None:
    rendered = _render(tmp_path / "install.yaml")
    assert rendered == INSTALL.read_text(), "deploy/install.yaml is stale: run make install-yaml"


def test_install_yaml_is_complete_for_kubectl() -> None:
    docs = [d for d in yaml.safe_load_all(INSTALL.read_text()) if d]
    assert docs[0] == {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "pdscaler-system"}}  # fmt: skip
    kinds = [d["kind"] for d in docs]
    for kind in ("CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Deployment"):
        assert kind in kinds, kinds
    assert "Pod" not in kinds
    assert not [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=serving" in args, args
    bindings = [d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"]
    assert "serving" in bindings, bindings
    namespaced = {d["metadata"].get("namespace") for d in docs} - {None}
    assert namespaced <= {"pdscaler-system", "serving"}, namespaced


def test_the_chart_packages_at_its_version_and_app_version_is_the_operators(
    tmp_path: Path,
) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert str(chart["appVersion"]) == project["version"]
    out = helm("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / f"pdscaler-{chart['version']}.tgz"
    assert package.exists(), out
    listing = subprocess.run(
        ["tar", "tzf", str(package)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "pdscaler/Chart.yaml" in listing
    assert "pdscaler/templates/deployment.yaml" in listing
    assert "pdscaler/files/crds/pdscaler.io_pddeployments.yaml" in listing


def test_plain_helm_template_renders_and_an_old_cluster_is_refused() -> None:
    """Helm's offline default (v1.20.0) is not refused, a real 1.29 is (the chart's own
    check, templates/_helpers.tpl ``pdscaler.kubeVersion``), 1.30 renders."""
    plain = helm("template", "pds", str(CHART))
    assert "kind: Deployment" in plain
    assert "kind: Deployment" in helm("template", "pds", str(CHART), "--kube-version", "1.30.0")
    done = subprocess.run(
        [str(tool(helm_path())), "template", "pds", str(CHART), "--kube-version", "1.29.0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "pdscaler needs Kubernetes >= 1.30 (this cluster: v1.29.0)" in done.stderr
