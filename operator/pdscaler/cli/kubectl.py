"""``kubectl pdd``: the kubectl plugin (the ``kubectl-pdd`` executable the package
installs; kubectl runs any ``kubectl-<name>`` on the PATH as ``kubectl <name>``).

Owns: the plugin's app, the read-only commands for a person at a cluster:

* ``kubectl pdd get [NAME] [-n NS | -A] [-o json|yaml]``: the PDDeployments, one line
  each (``cli/get.py``);
* ``kubectl pdd explain NAME [-n NS] [-o json|yaml]``: the last decision, readable
  (``pdscaler explain``, ``cli/explain.py``);
* ``kubectl pdd why-not-scaling NAME [-n NS] [-o json|yaml]``: why the last decision
  changed no pool (``cli/why.py``);
* ``kubectl pdd completion bash|zsh|fish|powershell`` (``cli/completion.py``);

and ``kubectl_complete-pdd``, which kubectl (1.26+) runs to complete ``kubectl pdd``.
Every command takes ``--kubeconfig`` and ``--context``; the namespace defaults as
kubectl's. The same commands are ``pdscaler get|explain|why-not-scaling``. Errors
follow ``pdscaler``'s convention (one line; exit 2 for bad arguments or a missing
object, 1 for an unreachable cluster). Example: ``kubectl pdd get -A``.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from pdscaler.cli import completion, explain, get, why
from pdscaler.cli.common import run_click

PROG = "kubectl-pdd"


def build_app() -> typer.Typer:
    """The plugin's app: get, explain, why-not-scaling, completion."""
    app = typer.Typer(
        name=PROG,
        help="pdscaler's PDDeployments: list them, explain a decision, say why one did not scale.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for module in (get, explain, why, completion):
        module.register(app)
    return app


def command() -> Any:
    """The plugin's click command (the completion reads it)."""
    from pdscaler.cli import flags_as_flags

    return flags_as_flags(typer.main.get_command(build_app()))


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point ``kubectl-pdd``."""
    completion.enable(PROG)
    run_click(command(), argv if argv is not None else sys.argv[1:], PROG)


def complete(argv: list[str] | None = None) -> None:
    """Console-script entry point ``kubectl_complete-pdd`` (kubectl's plugin
    completion)."""
    completion.kubectl_complete(command(), argv)


if __name__ == "__main__":  # python -m pdscaler.cli.kubectl (= kubectl-pdd)
    main()
