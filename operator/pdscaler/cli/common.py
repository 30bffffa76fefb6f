"""What every ``pdscaler`` subcommand shares: one-line errors and number formatting.

Owns: the exit-code convention (2 = bad arguments, printed as ONE ``Error: ...`` line on
stderr, never a traceback), the click command class that folds typer's usage errors
into that line, and ``num``, the number format of every table. Must not: know any
subcommand.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer
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
