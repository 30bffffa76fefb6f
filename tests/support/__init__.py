"""Support code for the tests, none of it a test: pytest collects nothing here.

* ``builders``: readable builders of the pure core's inputs (the chat spec, metrics
  snapshots, pool observations, tick inputs) shared by the unit tests;
* ``fakekube``: an in-memory API server for ``reconcile_once`` without a cluster;
* ``httpkit``: in-process HTTP servers (a fake Prometheus, engine exporters);
* ``crd_schema`` / ``invalid_manifests``: the CRD's schema read offline, and the table
  of invalid manifests both the unit and the lab tests reject;
* ``labkit``, ``opkit``, ``exporter``: helpers of the lab tests (workloads on fake GPU
  nodes, the operator run in-process, fake engine metrics scraped by the lab).

Imported as ``support.<module>`` (pyproject puts ``tests/`` on pytest's path).
"""
