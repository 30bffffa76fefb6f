"""Drills run against the shared lab with the lab tests' fixtures (``lab``, ``kube``,
``namespace``, ``crd``, ``exporter``: tests/lab/conftest.py)."""

from lab.conftest import crd, exporter, kube, lab, namespace

__all__ = ["crd", "exporter", "kube", "lab", "namespace"]
