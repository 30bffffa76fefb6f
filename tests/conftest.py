"""Shared pytest configuration for the whole suite.

Owns: the `lab` marker's behaviour. A test that uses the `lab` fixture (directly, or
through `kube`, `namespace`, ... from tests/lab/conftest.py) is marked `lab`
automatically, so `pytest -m "not lab"` runs exactly the tests that need no cluster and
`pytest -m lab` exactly those that do. Lab tests are never skipped: if the lab cannot
start, the `lab` fixture errors with the component and its log file. The marker itself
is declared in pyproject.toml. Must not start the lab (tests/lab/conftest.py does).
"""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)  # before -m filtering (the mark plugin's own hook)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test whose fixture closure includes `lab` with `pytest.mark.lab`."""
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()) and item.get_closest_marker("lab") is None:
            item.add_marker(pytest.mark.lab)
