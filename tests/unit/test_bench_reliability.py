"""bench/reliability.py: the drill records rendered into reliability.md and the README
summary, and the committed files current with the committed records."""

from __future__ import annotations

import json
from pathlib import Path

from bench import reliability
from drills.report import DrillRecord


def _write(
    directory: Path, case: str, drill: str, samples: int, violations: int, **rec: float
) -> None:
    r = DrillRecord(case=case)
    r.describe(drill, fault=f"fault of {drill}", invariant="holds", shortened="10 s")
    r.sampled(samples, violations)
    for what, secs in rec.items():
        r.recovered(what, secs)
    r.outcome = "passed"
    r.write(directory)


def test_the_summary_counts_drills_cases_samples_and_the_slowest_recovery(tmp_path: Path) -> None:
    _write(tmp_path, "tests/drills/a.py::test_a[x]", "D1", 100, 0, restart=3.25)
    _write(tmp_path, "tests/drills/a.py::test_a[y]", "D1", 50, 0, restart=4.0)
    _write(tmp_path, "tests/drills/b.py::test_b", "D10", 7, 0, gap=1.5)
    records = reliability.load(tmp_path)
    assert [r.drill for r in records] == ["D1", "D1", "D10"]  # by number, not as text
    assert reliability.summary(records) == (
        "2 drills (D1, D10; 3 cases): 157 samples, 0 violations; slowest recovery 4.0 s "
        "(D1: restart)."
    )
    text = reliability.report(records)
    assert "| D10 | test_b | fault of D10 | holds | 7 | 0 | gap: max 1.5 s (n=1) | passed |" in text
    assert "- D1: 10 s" in text


def test_a_violation_or_a_failed_case_shows_in_the_summary(tmp_path: Path) -> None:
    _write(tmp_path, "t.py::test_ok", "D2", 10, 0)
    bad = DrillRecord(case="t.py::test_bad")
    bad.describe("D4", fault="f", invariant="i")
    bad.sampled(5, 2)
    bad.outcome = "failed"
    bad.write(tmp_path)
    summary = reliability.summary(reliability.load(tmp_path))
    assert "15 samples, 2 violations" in summary
    assert summary.endswith("; FAILED: test_bad.")


def test_an_incomplete_record_says_what_is_missing() -> None:
    r = DrillRecord(case="x")
    assert r.missing() == "describe() was not called"
    r.describe("D1", "f", "i")
    assert r.missing() is not None
    r.sampled(1, 0)
    assert r.missing() is None


def test_the_readme_block_is_replaced_between_the_markers() -> None:
    readme = f"a\n{reliability.BEGIN}\nold\n{reliability.END}\nb\n"
    assert reliability.with_block(readme, "NEW") == "a\nNEW\nb\n"


def test_reliability_md_and_the_readme_are_generated_from_the_committed_records() -> None:
    """Whatever the last recorded run found, failures included (the summary names them):
    the report and the README say exactly that."""
    records = list(reliability.RECORDS.glob("*.json"))
    assert records, "no drill records committed: run `make drill`"
    for path in records:
        assert json.loads(path.read_text())["drill"], path
    assert reliability.main(["--check"]) == 0
