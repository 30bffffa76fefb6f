# mypy: ignore-errors
"""Import shim for ``aisimulate`` (0.13.0, not installable here): only ``runner``,
imported at module level by ``dynamo.replay.config`` (see ``runner.py``)."""
