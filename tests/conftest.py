"""Shared pytest configuration for the whole suite.

Owns: the `lab` marker's behaviour. A test that uses the `lab` fixture (directly, or
through `kube`, `namespace`, ... from tests/lab/conftest.py) is marked `lab`
automatically, so `pytest -m "not lab"` runs exactly the tests that need no cluster and
`pytest -m lab` exactly those that do. Lab tests are never skipped: if the lab cannot
start, the `lab` fixture errors with the component and its log file. The marker itself
is declared in pyproject.toml. And under CI (``$CI``, ``support.skips``) a skipped or
xfailed test is reported failed unless the platform cannot run it: CI skips nothing the
machine can run. Must not start the lab (tests/lab/conftest.py does).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from support.skips import ci_refuses


@pytest.hookimpl(tryfirst=True)  # before -m filtering (the mark plugin's own hook)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test whose fixture closure includes `lab` with `pytest.mark.lab`."""
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()) and item.get_closest_marker("lab") is None:
            item.add_marker(pytest.mark.lab)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Under CI, a skip (or xfail) that is not a platform's fails the test, with its reason."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.skipped:
        return
    reason = getattr(report, "wasxfail", "") or (
        report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    )
    if ci_refuses(reason):
        report.outcome = "failed"
        report.longrepr = f"CI skips nothing the machine can run; this test skipped: {reason}"
