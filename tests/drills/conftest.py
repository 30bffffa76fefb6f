"""Drills run against the lab with the lab tests' fixtures (``lab``, ``kube``,
``namespace``, ``crd``, ``exporter``: tests/lab/conftest.py), plus ``drill``: the
record each drill fills for ``make drill`` (tests/drills/report.py). A drill that passes
without describing itself and counting samples fails at teardown: a report of 0
samples would claim an invariant nobody checked."""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator

import pytest

from drills.report import DrillRecord, out_dir
from lab.conftest import crd, exporter, kube, lab, namespace

__all__ = ["crd", "drill", "exporter", "kube", "lab", "namespace"]

#: Drill modules run after every other one: the fleet drill leaves hundreds of
#: PDDeployments and namespaces being garbage-collected, which loaded the lab under the
#: drill after it (D8 failed right after it in two full runs, and passes alone).
LAST = ("test_drill_fleet.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.path.name in LAST)  # stable: the rest keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_OUTCOME] = report.outcome
    return report


_CALL_OUTCOME = pytest.StashKey[str]()


@pytest.fixture
def drill(request: pytest.FixtureRequest) -> Iterator[DrillRecord]:
    """This drill's record; written to ``$PDSCALER_DRILL_OUT`` after the test."""
    record = DrillRecord(case=request.node.nodeid)
    t0 = time.monotonic()
    yield record
    record.duration_s = round(time.monotonic() - t0, 1)
    record.outcome = request.node.stash.get(_CALL_OUTCOME, "error")
    directory = out_dir()
    if directory is not None:
        record.write(directory)
    if record.outcome == "passed":
        gap = record.missing()
        assert gap is None, f"drill record incomplete: {gap}"
