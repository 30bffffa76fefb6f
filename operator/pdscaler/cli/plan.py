"""``pdscaler plan``: the capacity calculators of docs/models.md on the command line.

Owns: the ``plan`` group: its subcommands, the ``--from-file`` shortcut and the
group's one-line errors. The calculators are in ``plan_calc``, the manifest planner in
``plan_file``, the output in ``plan_render``. Must not: hold a formula (the models
compute), talk to a cluster or to Prometheus, or print a traceback: bad arguments are
one line on stderr (``Error: ...``) and exit code 2; click's usage errors are folded to
one line by ``PlanGroup`` / ``OneLineCommand``, a model's ``ValueError`` names the
offending option.

Worked examples (the golden numbers of docs/models.md)::

    pdscaler plan ratio --rate 20 --prompt-tokens 2000 --output-tokens 500 \\
        --prefill-tps 3000 --decode-tps 800 --utilization 0.7
        prefill N_P 19.05 -> 20, decode N_D 17.86 -> 18, P:D 1.07
    pdscaler plan drain --arrival 3.5 --startup 10 --service 4.55 --deadline 60
        backlog 35 requests, drained at 43.3 s, meets 60 s: yes
        (--service 4.17 -> 62.2 s, no; --service 3.02 -> never)
    pdscaler plan drain --arrival 3.5 --startup 10 --deadline 60 --per-replica 0.65
        smallest service rate 4.2 req/s = 7 replicas
    pdscaler plan migrate --state-gb 41.1 --growth-gbps 0.172 --bandwidth-gbps 25
        catch-up 1.655 s, 0.285 GB added meanwhile
    pdscaler plan reconfigure --bytes-gb 66 --bandwidth-gbps 25 --prep 9
        11.64 s; at 4x the bandwidth 9.66 s, only 17% shorter
    pdscaler plan --from-file deploy/examples/chat.yaml --rate 20 \\
        --prompt-tokens 2000 --output-tokens 500
        prefill 20, decode 18 replicas, 38 of 48 GPUs
        (``pdscaler plan from-file MANIFEST ...`` is the same as a subcommand)
    pdscaler plan profile --model Qwen/Qwen3-32B --system h200_sxm --backend vllm \\
        --tp 2 -o qwen3-32b.yaml
        the prefill and decode profile from aiconfigurator's database (``plan_profile``)

Units: rates in req/s, throughputs in tokens/s, times in seconds, sizes in GB and
bandwidths in GB/s (1 GB = 10^9 bytes; ``--*-gbps`` are gigaBYTES per second).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from pdscaler.cli.common import FormatOpt, OneLineCommand, fail, one_line, output_format
from pdscaler.cli.plan_calc import JsonOpt, cmd_drain, cmd_migrate, cmd_ratio, cmd_reconfigure
from pdscaler.cli.plan_file import PreferOpt, cmd_from_file, run_from_file
from pdscaler.cli.plan_profile import cmd_profile


class PlanGroup(TyperGroup):
    """The ``plan`` group: its own option errors and unknown subcommands are one line."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        return one_line(lambda: super(PlanGroup, self).make_context(*args, **kwargs))

    def resolve_command(self, *args: Any, **kwargs: Any) -> Any:
        return one_line(lambda: super(PlanGroup, self).resolve_command(*args, **kwargs))


def plan_callback(
    ctx: typer.Context,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file", help="Plan a PDDeployment manifest (with --rate and token lengths)."
        ),
    ] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="With --from-file.")] = None,
    prompt_tokens: Annotated[
        float | None, typer.Option("--prompt-tokens", help="With --from-file.")
    ] = None,
    output_tokens: Annotated[
        float | None, typer.Option("--output-tokens", help="With --from-file.")
    ] = None,
    prefer: PreferOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = None,
) -> None:
    """Capacity calculators of docs/models.md; --from-file plans a PDDeployment manifest.

    pdscaler plan --from-file MANIFEST --rate R --prompt-tokens Lp --output-tokens Ld
    """
    given = [from_file, rate, prompt_tokens, output_tokens, prefer, output]
    if ctx.invoked_subcommand is not None:
        if any(v is not None for v in given) or as_json:
            fail(
                f"--from-file and its options go without a subcommand; "
                f"put options after '{ctx.invoked_subcommand}'"
            )
        return
    if from_file is None and not any(v is not None for v in given) and not as_json:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if from_file is None:
        fail(
            "give a subcommand (ratio, drain, migrate, reconfigure, from-file, profile) "
            "or --from-file"
        )
    missing = [
        flag
        for flag, value in (
            ("--rate", rate),
            ("--prompt-tokens", prompt_tokens),
            ("--output-tokens", output_tokens),
        )
        if value is None
    ]
    if missing:
        fail(f"--from-file needs {', '.join(missing)}")
    load = (rate or 0.0, prompt_tokens or 0.0, output_tokens or 0.0)  # all given (checked)
    run_from_file(from_file, *load, prefer, output_format(output, as_json))


def register(app: typer.Typer) -> None:
    """Add ``plan`` and its subcommands to the ``pdscaler`` app."""
    plan = typer.Typer(
        name="plan",
        cls=PlanGroup,
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    plan.callback()(plan_callback)
    for name, func in (
        ("ratio", cmd_ratio),
        ("drain", cmd_drain),
        ("migrate", cmd_migrate),
        ("reconfigure", cmd_reconfigure),
        ("from-file", cmd_from_file),
        ("profile", cmd_profile),
    ):
        plan.command(name, cls=OneLineCommand)(func)
    app.add_typer(plan, name="plan")
