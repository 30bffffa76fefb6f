# mypy: ignore-errors
"""``aisimulate.runner`` shim: ``canonical_performance_config`` is imported by
``dynamo.replay.config`` but called only when a replay is given an AISimulate
performance config for its mocker engines, which this bench never does (its engines are
the pdscaler simulator's, profiled from ``EngineParams``). Calling it raises."""


def canonical_performance_config(config, *, worker_type):
    raise RuntimeError(
        "aisimulate shim: canonical_performance_config is not available "
        "(the bench's profiles come from the pdscaler simulator's engine)"
    )
