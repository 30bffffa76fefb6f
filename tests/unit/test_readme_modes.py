"""README's table of modes ("Pools it creates, pools you already run, groups, and zero"):
a row marked Y names a lab test that exists and sets the row's field, so the table
cannot claim a mode no test applies (issue 29's done-when: the rows "works on existing
stacks", "gang / multi-node replicas" and "scale-to-zero" marked Y from the tests)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Pools it creates, pools you already run, groups, and zero"


def rows() -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]]


def test_the_three_rows_the_issue_names_are_there_and_marked_y() -> None:
    table = rows()
    assert len(table) == 4
    for words in ("works on existing stacks", "gang / multi-node replicas", "scale-to-zero"):
        row = next(r for r in table if words in r[0])
        assert row[3] == "Y", row


def test_a_y_row_names_a_lab_test_that_sets_its_field() -> None:
    for name, fields, _writes, works, proof in rows():
        if works != "Y":
            continue
        tests = re.findall(r"\]\((tests/lab/[\w/]+\.py)\)", proof)
        assert tests, f"{name}: no lab test named"
        field = re.findall(r"`spec\.(?:<pool>\.)?(\w+)", fields)[0]
        for test in tests:
            source = (REPO / test).read_text()
            used = field in source or any(
                field in (REPO / "tests" / "support" / f"{m}.py").read_text()
                for m in re.findall(r"from support\.(\w+) import", source)
            )
            assert used, f"{test} does not set {field}"
