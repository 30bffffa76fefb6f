"""Fixtures for tests against the lab (real control plane, fake GPU nodes, Prometheus).

Owns the fixtures every lab test uses; the helpers behind them are in tests/support/labkit.py
and pdlab.cluster.kubeclient.

* `lab` (session): the shared lab, a `pdlab.cluster.lab.Lab`. Reused if it already runs (started
  by `python -m pdlab up` or another test session); otherwise started once for this
  session and stopped at its end, unless another live test session registered itself as
  a user, someone ran `python -m pdlab up` meanwhile (the lab is pinned), or PDLAB_KEEP=1
  is set. Never stops a lab it did not start. Sets KUBECONFIG and
  PDLAB_PROMETHEUS_URL in os.environ for subprocesses (operators under test), and allows
  the lab's Prometheus for them (PDSCALER_PROMETHEUS_ALLOWED_URLS).
* `kube` (session): `pdlab.cluster.kubeclient.Kube`, typed clients as the lab admin.
* `namespace` (per test): a fresh namespace `t-<test name>-<random>`, deleted afterwards.
  A session that is the lab's only user first deletes the test namespaces that killed
  sessions left (``support.leftovers``): their pods hold GPUs.
* `crd` (session): the PDDeployment CRD from crds/ applied and Established; its name.
* `exporter` (per test): a started `support.exporter.EngineExporter` (fake engine pods'
  metrics scraped by the lab's Prometheus); its targets are removed afterwards.

Must not stop a lab other sessions use, and must not skip: if the lab cannot start, the
fixture fails with pdlab's message (component + log file).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from pdlab.cluster.kubeclient import Kube, apply_crd
from pdlab.cluster.lab import Lab
from support.exporter import EngineExporter
from support.leftovers import delete_namespace, labelled_namespace, sweep_leftovers

LAB_START_TIMEOUT_S = 300.0


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The shared lab, started if needed and stopped at the end only if we started it."""
    the_lab = Lab()
    missing = the_lab.missing_binaries()
    if missing:  # a cold build takes 14-26 min on 2 cores: far past pytest's per-test timeout
        pytest.fail(
            f"lab binaries {missing} are not built in {the_lab.bin}: run `make lab-build` first",
            pytrace=False,
        )
    the_lab.register_user()
    started_here = not the_lab.running_components()
    try:
        if not the_lab.is_up():
            the_lab.ensure_up(timeout=LAB_START_TIMEOUT_S)
        os.environ["KUBECONFIG"] = str(the_lab.kubeconfig)
        os.environ["PDLAB_PROMETHEUS_URL"] = the_lab.prometheus_url
        # operators under test may read the lab's Prometheus (the operator's allow-list)
        os.environ["PDSCALER_PROMETHEUS_ALLOWED_URLS"] = the_lab.prometheus_url
        if not the_lab.other_users():  # what killed sessions left holds GPUs (leftovers.py)
            swept = sweep_leftovers(Kube.from_kubeconfig(the_lab.kubeconfig))
            if swept:
                print(f"pdlab: deleting {len(swept)} namespaces earlier sessions left: {swept}")
        yield the_lab
    finally:
        the_lab.unregister_user()
        keep = os.environ.get("PDLAB_KEEP", "") not in ("", "0")
        if started_here and not keep and not the_lab.pinned() and not the_lab.other_users():
            the_lab.down()


@pytest.fixture(scope="session")
def kube(lab: Lab) -> Kube:
    """Typed Kubernetes clients authenticated as the lab admin."""
    return Kube.from_kubeconfig(lab.kubeconfig)


def namespace_name(test_name: str) -> str:
    """`t-<sanitised test name, <= 40 chars>-<6 hex>`: "test_x[a-1]" -> "t-test-x-a-1-3f9a0c"."""
    stem = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test; deleted (in the background) afterwards."""
    name = namespace_name(request.node.name)
    body: Any = labelled_namespace(name)
    kube.core.create_namespace(body)
    try:
        yield name
    finally:
        delete_namespace(kube, name)


@pytest.fixture(scope="session")
def crd(kube: Kube) -> str:
    """The PDDeployment CRD from crds/, installed (or updated) and Established."""
    return apply_crd(kube)


@pytest.fixture
def exporter(lab: Lab) -> Iterator[EngineExporter]:
    """A started fake-engine exporter; its scrape targets are removed afterwards."""
    with EngineExporter(lab) as exp:
        yield exp
