# mypy: ignore-errors
"""Import shim: stands in for ``aisimulate_core`` (AISimulate 0.13.0, whose wheel this
machine cannot download) so that Dynamo 1.6.1's planner can be imported and run.

It replaces exactly two names, both in ``aisimulate_core.sdk`` (see ``sdk.py``):
``ForwardPassPerfModelConfig`` (the config record the planner builds) and
``RustForwardPassPerfModel`` (the forward-pass latency model), the latter delegating to
the predecessor of the same class in ``aiconfigurator-core`` 0.12.0 (NVIDIA's
``aiconfigurator_core.sdk.RustForwardPassPerfModel``, compiled Rust, same method
names). Only the planner's ``estimation_mode="fpm_regression"`` path (the one it takes
without an ``ais_perf_model`` spec: "unprofiled" system, a regression learned from
forward-pass metrics) is provided; any other mode raises ``RuntimeError``, which the
planner treats as "perf model unavailable".
"""
