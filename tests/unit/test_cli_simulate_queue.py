"""``pdscaler simulate --queue fcfs|deadline``: the engine's queue discipline, the same
for every policy; an unknown one is a one-line error (exit 2)."""

from __future__ import annotations

from pathlib import Path

from support.simulate_cli import as_json, azure_csv, simulate


def test_queue_deadline_runs_and_fcfs_is_the_default(tmp_path: Path) -> None:
    """The same small trace replays under both disciplines; fcfs equals no flag."""
    trace = str(azure_csv(tmp_path / "t.csv", seconds=120.0))
    common = ("--trace", trace, "--policy", "pdscaler", "--no-plot")
    plain = as_json(tmp_path, *common)
    fcfs = as_json(tmp_path, *common, "--queue", "fcfs")
    deadline = as_json(tmp_path, *common, "--queue", "deadline")
    assert fcfs["policies"] == plain["policies"]
    assert deadline["policies"]["pdscaler"]["requests"] == plain["policies"]["pdscaler"]["requests"]


def test_unknown_queue_is_an_error(tmp_path: Path) -> None:
    trace = str(azure_csv(tmp_path / "t.csv", seconds=30.0))
    result = simulate(tmp_path, "--trace", trace, "--queue", "lifo")
    assert result.exit_code == 2
    assert "--queue must be one of fcfs, deadline" in result.output
