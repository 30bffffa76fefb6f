"""Render the Helm chart (charts/pdscaler) with the helm binary the lab build caches,
for unit tests that need real Helm (``helm lint``, ``helm template``) or promtool.

Owns: finding helm and promtool in ~/.cache/pdscaler/tools (``make lab-build`` builds
both; CI runs it first) and rendering the chart into parsed documents. Without them a
test is skipped locally, but fails in CI (``$CI`` set): CI skips nothing. Must not: talk
to a cluster (tests/lab does). Also, without helm: ``read_template`` (a template's
documents with the template actions blanked), ``values``, ``schema`` and ``grants`` (RBAC
rules as (group, resource) -> verbs). Example::

    docs = template("--set", "monitoring.prometheusRule.enabled=true", monitoring=True)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pdlab.cluster.config import REPO_DIR, helm_path, promtool_path, read_versions
from support.skips import skip_unless_ci

if TYPE_CHECKING:
    from pdlab.cluster.lab import Lab

CHART = REPO_DIR / "charts" / "pdscaler"
KUBE = read_versions()["KUBE_VERSION"]  # helm template's default would be v1.20
MONITORING_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")
RELEASE, NAMESPACE = "pds", "pdscaler-system"
ACTION_LINE = re.compile(r"^\s*\{\{-?.*-?\}\}\s*$")
INLINE = re.compile(r"\{\{-?.*?-?\}\}")


def tool(path: Path) -> Path:
    """``path`` if it is built; else skip (fail under ``$CI``: ``support.skips``)."""
    if not path.exists():
        skip_unless_ci(f"{path} missing: run `make lab-build`")
    return path


def helm(*args: str) -> str:
    done = subprocess.run(
        [str(tool(helm_path())), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr or done.stdout}"
    return done.stdout


def lab_helm(*args: str, lab: Lab | None = None) -> str:
    """``helm <args>`` for the lab tests (against ``lab``'s cluster when given): a
    missing helm fails the test, it is never skipped."""
    helm = helm_path()
    assert helm.exists(), f"{helm} missing: run `make lab-build`"
    argv = [str(helm), *args] + (["--kubeconfig", str(lab.kubeconfig)] if lab else [])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr or done.stdout}"
    return done.stdout


def install_watching(lab: Lab, release: str, namespace: str, *args: str) -> str:
    """``helm install <release>`` of the chart into ``namespace``, watching only it, the
    CRD left to the lab tests' ``crd`` fixture (``crds.install=false``); its NOTES."""
    return lab_helm(
        "install", release, str(CHART), "-n", namespace, "--set", "crds.install=false",
        "--set", f"watchNamespaces={{{namespace}}}", *args, lab=lab,
    )  # fmt: skip


def template(*args: str, monitoring: bool = False) -> list[dict[str, Any]]:
    """``helm template`` of the chart (release ``pds`` in ``pdscaler-system``), parsed;
    ``monitoring``: the cluster serves the monitoring.coreos.com/v1 kinds."""
    apis: list[str] = []
    if monitoring:
        for kind in MONITORING_KINDS:
            apis += ["--api-versions", f"monitoring.coreos.com/v1/{kind}"]
    text = helm(
        "template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", KUBE, *apis, *args
    )
    return [d for d in yaml.safe_load_all(text) if d]


def promtool() -> Path:
    return tool(promtool_path())


# ---------------------------------------------- the chart's files, read without helm


def read_template(name: str) -> list[dict[str, Any]]:
    lines = []
    for line in (CHART / "templates" / name).read_text().splitlines():
        if ACTION_LINE.match(line):
            continue
        lines.append(INLINE.sub("X", line))
    return [d for d in yaml.safe_load_all("\n".join(lines)) if d]


def values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return data


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out
