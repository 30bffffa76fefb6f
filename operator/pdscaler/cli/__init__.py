"""The ``pdscaler`` command line: one typer app, one module per subcommand group.

Owns: assembling the app, ``pdscaler --version`` (from the installed package's
metadata), the help rendering of boolean flags (``--json``, not ``--json <bool>``) and
the exit-code convention (0 ok, 1 runtime failure, 2 bad arguments: a one-line error,
never a traceback). Each subcommand lives in its own module and registers itself
through ``register(app)``:

* ``plan``      (``cli/plan.py``): the capacity calculators of docs/models.md;
* ``simulate``  (``cli/simulate.py``): replay a trace against the policy and baselines;
* ``run``       (``cli/run.py``): start the operator;
* ``get``       (``cli/get.py``): the PDDeployments, one line each (or ``-o json|yaml``);
* ``explain``   (``cli/explain.py``): the last decision of a PDDeployment, readable;
* ``why-not-scaling`` (``cli/why.py``): why the last decision changed no pool;
* ``healthcheck`` (``cli/healthcheck.py``): GET an operator's ``/healthz`` (helm test);
* ``completion`` (``cli/completion.py``): the shell completion script.

``get``, ``explain``, ``why-not-scaling`` and ``completion`` are also the ``kubectl pdd``
plugin (``cli/kubectl.py``, the ``kubectl-pdd`` executable).

``simulate`` is loaded only when it is asked for (or listed by ``--help``): it needs
numpy and matplotlib, the ``pdscaler[sim]`` extra, which the operator image leaves
out, so ``pdscaler run`` never imports them. Without the extra, ``pdscaler simulate``
says how to install it (exit 1). Example: ``pdscaler --version`` prints
``pdscaler 0.1.0``.
"""

from __future__ import annotations

import importlib
import sys
from importlib import metadata
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from pdscaler.cli import completion, explain, get, healthcheck, plan, run, why
from pdscaler.cli.common import run_click

#: Registered at once, in this order (``simulate`` is listed first, loaded lazily).
SUBCOMMAND_MODULES = (plan, run, get, explain, why, healthcheck, completion)
LAZY_SUBCOMMANDS = {"simulate": ("pdscaler.cli.simulate", 0)}  # name -> (module, position)
SIM_EXTRA_HINT = (
    "pdscaler simulate needs the simulator extra (numpy, matplotlib): pip install 'pdscaler[sim]'"
)
SIM_MODULES = ("numpy", "matplotlib")


def package_version() -> str:
    """The installed distribution's version (``pyproject.toml``'s), e.g. ``0.1.0``."""
    try:
        return metadata.version("pdscaler")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def flags_as_flags(command: Any) -> Any:
    """Give every boolean flag of ``command`` (and its subcommands, and ``--help``) an
    empty metavar, so help shows ``--json`` rather than ``--json <bool>``. Duck-typed:
    typer builds its commands on its own copy of click."""
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, *([help_option] if help_option else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        flags_as_flags(sub)
    return command


def _missing_extra(app: typer.Typer) -> None:
    """Register a ``simulate`` that only says how to install the extra (exit 1)."""

    @app.command(
        "simulate",
        help=f"(not installed) {SIM_EXTRA_HINT}",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=False,
    )
    def simulate_missing(args: Annotated[list[str] | None, typer.Argument()] = None) -> None:
        typer.echo(f"Error: {SIM_EXTRA_HINT}", err=True)
        raise typer.Exit(1)


def _load(name: str) -> Any:
    """The click command of a lazy subcommand, imported now (or the stand-in that says
    how to install the extra it needs)."""
    module_name, _ = LAZY_SUBCOMMANDS[name]
    holder = typer.Typer(add_completion=False)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] not in SIM_MODULES:
            raise
        _missing_extra(holder)
    else:
        module.register(holder)
    holder.command("placeholder", hidden=True)(lambda: None)  # two commands: a group
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class PdscalerGroup(TyperGroup):
    """The root group: lazy subcommands, and flags rendered as flags."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = [n for n in super().list_commands(ctx) if n not in LAZY_SUBCOMMANDS]
        for name, (_, position) in LAZY_SUBCOMMANDS.items():
            names.insert(position, name)
        return names

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in LAZY_SUBCOMMANDS and cmd_name not in self.commands:
            self.add_command(_load(cmd_name), cmd_name)
        command = super().get_command(ctx, cmd_name)
        return flags_as_flags(command) if command is not None else None

    def get_params(self, ctx: Any) -> Any:
        flags_as_flags(self)
        return super().get_params(ctx)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"pdscaler {package_version()}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Prefill/decode autoscaling operator for disaggregated LLM serving."""


def build_app() -> typer.Typer:
    """The full app: every subcommand module registered, in ``SUBCOMMAND_MODULES``' order
    (``simulate`` lazily)."""
    app = typer.Typer(
        name="pdscaler",
        help="Prefill/decode autoscaling operator for disaggregated LLM serving.",
        cls=PdscalerGroup,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for module in SUBCOMMAND_MODULES:
        module.register(app)
    return app


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``pdscaler``, ``python -m pdscaler``).

    Usage errors anywhere (unknown command or option, bad value) are one line on stderr
    and exit code 2; a command's own exit code passes through.
    """
    completion.enable("pdscaler")
    command = typer.main.get_command(build_app())
    run_click(command, argv if argv is not None else sys.argv[1:], "pdscaler")
