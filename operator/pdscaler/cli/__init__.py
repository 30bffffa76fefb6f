"""The ``pdscaler`` command line: one typer app, one module per subcommand group.

Owns: assembling the app and the exit-code convention (0 ok, 1 runtime failure, 2 bad
arguments: a one-line error, never a traceback). Each subcommand lives in its own
module and registers itself through ``register(app)``:

* ``plan``      (``cli/plan.py``): the capacity calculators of docs/models.md;
* ``simulate``  (``cli/simulate.py``): replay a trace against the policy and baselines;
* ``run``       (``cli/run.py``): start the operator;
* ``explain``   (``cli/explain.py``): the last decision of a PDDeployment, readable.
"""

from __future__ import annotations

import sys

import typer

from pdscaler.cli import explain, plan, run, simulate
from pdscaler.cli.common import USAGE_EXIT, usage_line

SUBCOMMAND_MODULES = (plan, simulate, run, explain)


def build_app() -> typer.Typer:
    """The full app: every subcommand module registered, in ``SUBCOMMAND_MODULES``' order."""
    app = typer.Typer(
        name="pdscaler",
        help="Prefill/decode autoscaling operator for disaggregated LLM serving.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for module in SUBCOMMAND_MODULES:
        module.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pdscaler``, ``python -m pdscaler``).

    Usage errors anywhere (unknown command or option, bad value) are one line on stderr
    and exit code 2; a command's own exit code passes through.
    """
    command = typer.main.get_command(build_app())
    args = argv if argv is not None else sys.argv[1:]
    try:
        rc = command.main(args=args, prog_name="pdscaler", standalone_mode=False)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    except typer.TyperException as err:
        code = getattr(err, "exit_code", 1)
        line = usage_line(err, "pdscaler: ") if code == USAGE_EXIT else str(err)
        print(f"Error: {line}", file=sys.stderr)
        sys.exit(code)
    sys.exit(rc if isinstance(rc, int) else 0)
