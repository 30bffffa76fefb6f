"""``pdscaler plan`` run in-process for the tests (no tests here).

ok("ratio --rate 20 --prompt-tokens 2000 --output-tokens 500 ...")  # the table
as_json("drain --arrival 3.5 --startup 10 --service 4.55")            # --json, parsed
"""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner, Result

from pdscaler.cli import build_app

APP = build_app()


def plan(args: str) -> Result:
    """``pdscaler plan <args>`` in-process."""
    return CliRunner().invoke(APP, ["plan", *args.split()])


def ok(args: str) -> str:
    result = plan(args)
    assert result.exit_code == 0, result.output
    return result.stdout


def as_json(args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(f"{args} --json"))
    return data
