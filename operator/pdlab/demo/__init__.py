"""`python -m pdlab demo`: the lab, the operator, the engine simulator and real requests.

Owns: the demo's steps (``run``), the engine simulator as the demo runs it (``engine``),
the scenario's traffic (``traffic``), what it reads and writes in the cluster
(``cluster_io``), the summary and figure (``report``) and the live view (``view``). Uses
the lab (``pdlab.cluster``) and the engine simulator (``pdlab.engine``); nothing below
imports it.
"""
