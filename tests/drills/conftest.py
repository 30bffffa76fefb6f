"""The drills run against the lab with the fixtures of tests/lab/conftest.py (``lab``,
``kube``, ``namespace``, ``crd``, ``exporter``), imported here so tests/drills needs no
copy of them."""

from lab.conftest import crd, exporter, kube, lab, namespace  # noqa: F401
