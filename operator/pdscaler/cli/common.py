"""What every ``pdscaler`` subcommand shares: one-line errors and number formatting.

Owns: the exit-code convention (2 = bad arguments, printed as ONE ``Error: ...`` line on
stderr, never a traceback), the click command class that folds typer's usage errors
into that line, ``num``, the number format of every table, and ``-o json|yaml``
(``FormatOpt``, ``dump``) for the commands that print an object. Must not: know any
subcommand.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from typer.core import TyperCommand

T = TypeVar("T")
USAGE_EXIT = 2


def fail(message: str) -> NoReturn:
    """Print ``Error: <message>`` as ONE line on stderr and exit with code 2."""
    typer.echo(f"Error: {' '.join(message.split())}", err=True)
    raise typer.Exit(USAGE_EXIT)


def usage_line(err: typer.TyperException, default_where: str = "") -> str:
    """A click usage error as one line: ``pdscaler plan ratio: Invalid value for
    '--rate': ... (see --help)``."""
    ctx = getattr(err, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None else default_where
    message = err.format_message() if hasattr(err, "format_message") else str(err)
    return f"{where}{message} (see --help)"


def one_line(call: Callable[[], T]) -> T:
    """Run a parsing step of the command line; a usage error (bad or missing option,
    unknown subcommand: exit code 2) becomes one line on stderr and exit 2."""
    try:
        return call()
    except typer.TyperException as err:
        if getattr(err, "exit_code", None) != USAGE_EXIT:
            raise
        fail(usage_line(err))


class OneLineCommand(TyperCommand):
    """A subcommand whose argument errors are one line, exit 2."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        return one_line(lambda: super(OneLineCommand, self).make_context(*args, **kwargs))


def run_click(command: Any, args: list[str], prog_name: str) -> NoReturn:
    """Run a whole command line (``pdscaler``, ``kubectl-pdd``) and exit: usage errors
    anywhere (unknown command or option, bad value) are one line on stderr and exit
    code 2; a command's own exit code passes through; Ctrl-C is ``Aborted.``, 1."""
    try:
        rc: Any = command.main(args=args, prog_name=prog_name, standalone_mode=False)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as err:
        code = getattr(err, "exit_code", 1)
        line = usage_line(err, f"{prog_name}: ") if code == USAGE_EXIT else str(err)
        print(f"Error: {line}", file=sys.stderr)
        sys.exit(code)
    sys.exit(rc if isinstance(rc, int) else 0)


def num(value: float | None, digits: int = 2, never: str = "never") -> str:
    """``19.047`` -> ``"19.05"``, ``35.0`` -> ``"35"``, ``40000`` -> ``"40,000"``,
    ``None`` -> ``"never"``."""
    if value is None:
        return never
    if math.isinf(value):
        return "inf"
    if math.isnan(value):
        return "n/a"
    text = f"{value:,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def percent(fraction: float) -> str:
    """A share as a table cell: 0.99512 -> ``99.51%``; NaN (nothing to count) -> ``-``."""
    return f"{100.0 * fraction:.2f}%" if math.isfinite(fraction) else "-"


class Output(StrEnum):
    """``-o``: the object as JSON or YAML instead of the human text."""

    json = "json"
    yaml = "yaml"


FormatOpt = Annotated[
    Output | None,
    typer.Option(
        "--output",
        "-o",
        case_sensitive=False,
        help="Print the object as json or yaml.",
        show_default=False,
    ),
]


def output_format(output: Output | None, as_json: bool) -> Output | None:
    """``-o``, with the older ``--json`` meaning ``-o json``."""
    return output or (Output.json if as_json else None)


def dump(obj: Any, fmt: Output) -> str:
    """``obj`` (plain JSON data) as ``fmt``: JSON indented by 2 with sorted keys, or
    YAML in block style, keys in their order: ``dump({"b": 1}, Output.yaml)`` ->
    ``"b: 1"``."""
    if fmt is Output.json:
        return json.dumps(obj, indent=2, sort_keys=True)
    return str(yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)).rstrip("\n")
