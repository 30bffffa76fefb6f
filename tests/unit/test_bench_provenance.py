"""bench/provenance.py: every results file says the commit and date it was measured at,
and the committed results files do."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from bench import provenance, reliability
from bench.readme import measured

RESULTS = Path(provenance.__file__).parent / "results"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "step.py").write_text("x = 1\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return tmp_path


def test_a_clean_tree_gives_its_short_commit_and_the_utc_date(repo: Path) -> None:
    stamp = provenance.measured_at(repo)
    assert stamp["commit"] == git(repo, "rev-parse", "--short=7", "HEAD")
    assert DATE.match(stamp["date"]), stamp


def test_an_uncommitted_change_to_measured_code_is_dirty_a_new_result_is_not(
    repo: Path,
) -> None:
    (repo / "bench" / "results").mkdir()
    (repo / "bench" / "results" / "step.json").write_text("{}")
    git(repo, "add", ".")
    assert "+dirty" not in provenance.measured_at(repo)["commit"]  # results are not code
    (repo / "bench" / "step.py").write_text("x = 2\n")
    assert provenance.measured_at(repo)["commit"].endswith("+dirty")


def test_without_git_the_commit_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert provenance.measured_at(tmp_path)["commit"] == "unknown"  # not a repository
    monkeypatch.setenv("PATH", str(tmp_path))  # no git binary at all
    stamp = provenance.measured_at(tmp_path)
    assert stamp["commit"] == "unknown"
    assert DATE.match(stamp["date"])


def test_the_header_line_says_commit_date_and_when_it_was_recorded() -> None:
    stamp = {"commit": "0620c79", "date": "2026-12-03 15:57 UTC"}
    assert provenance.line(stamp) == "Measured at commit 0620c79, 2026-12-03 15:57 UTC."
    late = {**stamp, "recorded": "recorded afterwards from git log"}
    assert provenance.line(late).endswith("UTC (recorded afterwards from git log).")
    assert provenance.line(None) == "Measured at: not recorded."
    assert measured({"measured_at": late}) == (
        "measured at commit 0620c79, 2026-12-03 15:57 UTC, recorded afterwards"
    )
    assert measured({}) == "commit not recorded"


@pytest.mark.parametrize("name", ["quality.json", "queue.json", "step.json", "request_path.json"])
def test_every_committed_json_result_names_its_commit_and_date(name: str) -> None:
    stamp = json.loads((RESULTS / name).read_text())[provenance.KEY]
    assert re.match(r"^[0-9a-f]{7}(\+dirty)?$", stamp["commit"]), stamp
    assert DATE.match(stamp["date"]), stamp


@pytest.mark.parametrize("name", ["quality.md", "queue.md", "step.md", "overhead.md"])
def test_every_committed_markdown_result_says_it_in_its_header(name: str) -> None:
    head = (RESULTS / name).read_text().split("\n\n", 2)[1]
    assert re.match(
        r"^Measured at commit [0-9a-f]{7}(\+dirty)?, \d{4}-\d\d-\d\d \d\d:\d\d UTC", head
    )


def test_every_drill_record_names_its_commit() -> None:
    records = reliability.load()
    assert records
    assert all(r.measured_at and r.commit != "not recorded" for r in records)
    text = (RESULTS / "reliability.md").read_text()
    for commit in {r.commit for r in records}:
        assert f"commit {commit}, " in text
