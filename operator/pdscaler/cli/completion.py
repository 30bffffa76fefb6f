"""Shell completion: ``pdscaler completion bash|zsh|fish|powershell`` prints the script
to source, and ``kubectl_complete-pdd`` answers kubectl's plugin completion.

Owns: the completion scripts (typer's own, through its copy of click's completion
protocol: the shell calls the program back with ``_PDSCALER_COMPLETE=complete_bash``
and the words typed, the program prints the candidates), ``enable`` (what a program's
``main`` calls before parsing when the shell calls it back), and the answer kubectl
(1.26+) expects from a plugin's ``kubectl_complete-<plugin>`` executable: one candidate
a line, then ``:4`` (cobra's "no file completion" directive). No dependency beyond
typer. Must not: know any subcommand (it completes whatever the app has).

    source <(pdscaler completion bash)          # in ~/.bashrc
    pdscaler completion zsh > "${fpath[1]}/_pdscaler"
    kubectl pdd <TAB>                            # kubectl_complete-pdd on the PATH
"""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from typer._completion_classes import BashComplete, completion_init
from typer._completion_shared import get_completion_script

from pdscaler.cli.common import OneLineCommand

#: cobra's ShellCompDirectiveNoFileComp: kubectl offers no file names after ours.
NO_FILE_COMPLETION = ":4"


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


def complete_var(prog_name: str) -> str:
    """The variable the shell sets when it calls the program back:
    ``kubectl-pdd`` -> ``_KUBECTL_PDD_COMPLETE``."""
    return f"_{prog_name.replace('-', '_').upper()}_COMPLETE"


def script(prog_name: str, shell: Shell) -> str:
    """The completion script of ``prog_name`` for ``shell``."""
    completion_init()
    return get_completion_script(
        prog_name=prog_name, complete_var=complete_var(prog_name), shell=shell.value
    )


def enable(prog_name: str) -> None:
    """Before parsing: when the shell is calling ``prog_name`` back for candidates,
    register typer's completion classes (the app's ``main`` then answers and exits)."""
    if os.environ.get(complete_var(prog_name)):
        completion_init()


def candidates(command: Any, args: list[str]) -> list[str]:
    """What completes the last of ``args`` (the word being typed, maybe empty) after
    the others: ``candidates(kubectl_pdd, ["w"])`` -> ``["why-not-scaling"]``."""
    *done, incomplete = args or [""]
    found = BashComplete(command, {}, "kubectl-pdd", complete_var("kubectl-pdd"))
    return [item.value for item in found.get_completions(done, incomplete)]


def cmd_completion(
    ctx: typer.Context,
    shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell.")],
) -> None:
    """Print the shell completion script (source it, or save it where the shell looks)."""
    prog_name = ctx.find_root().info_name or "pdscaler"
    typer.echo(script(prog_name, shell))


def register(app: typer.Typer) -> None:
    """Add ``completion`` to an app (``pdscaler``, ``kubectl pdd``)."""
    app.command("completion", cls=OneLineCommand)(cmd_completion)


def kubectl_complete(command: Any, argv: list[str] | None = None) -> None:
    """``kubectl_complete-pdd ARGS... WORD``: the candidates, then ``:4``."""
    args = list(sys.argv[1:] if argv is None else argv)
    for value in candidates(command, args):
        print(value)
    print(NO_FILE_COMPLETION)
