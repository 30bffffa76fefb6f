"""The ``pdscaler`` entry point: usage errors anywhere are one line and exit code 2."""

from __future__ import annotations

import pytest

from pdscaler.cli import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--bogus"], "No such option: --bogus"),
        (["nosuch"], "No such command 'nosuch'"),
        (["plan", "ratio", "--rate", "x"], "Invalid value for '--rate'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_success_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """The drain golden example: 35 requests of backlog, drained at 43.3 s."""
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "drain", "--arrival", "3.5", "--startup", "10", "--service", "4.55"])
    assert exit_info.value.code == 0
    assert "43.3" in capsys.readouterr().out
