"""Drills run against the same lab as tests/lab: its fixtures (``lab``, ``kube``,
``namespace``, ``crd``, ``exporter``), re-exported here. Must not start or stop the lab
itself (tests/lab/conftest.py owns that)."""

from lab.conftest import crd, exporter, kube, lab, namespace  # noqa: F401 - fixtures
