"""The `engine-sim` and `demo` subcommands of `python -m pdlab`: their flags and dispatch.

Owns: declaring both subcommands' arguments and handing the parsed arguments to
``pdlab.engine_sim.main`` / ``pdlab.demo.main``. Must stay light (standard library
only): `python -m pdlab up` imports it, and numpy, matplotlib and the kubernetes client
are loaded only when one of these two subcommands actually runs.

    python -m pdlab engine-sim --scenario demo --port 9400
    python -m pdlab engine-sim --trace data/traces/AzureLLMInferenceTrace_conv.csv \\
        --rate-scale 2 --duration 600 --port 9400
    python -m pdlab demo --duration 150
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

COMMANDS = ("engine-sim", "demo")
SCENARIO_NAMES = "chat, long-docs, burst, demo"


def _engine_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", help="only pods of this namespace (default: all)")
    parser.add_argument("--name", help="only pods of this PDDeployment (default: all)")
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--scenario", help=f"built-in scenario: {SCENARIO_NAMES}")
    src.add_argument("--trace", type=Path, help="Azure CSV or Mooncake JSONL trace to replay")
    parser.add_argument(
        "--rate-scale", type=float, default=1.0, help="multiply the request rate (1.0)"
    )
    parser.add_argument(
        "--duration",
        type=float,
        help="scenario: squeeze or stretch its phases to this many seconds; "
        "trace: replay only this many seconds of it",
    )
    parser.add_argument("--trace-start", type=float, default=0.0, help="trace: skip seconds")
    parser.add_argument("--port", type=int, required=True, help="HTTP port of /metrics")
    parser.add_argument("--seed", type=int, default=0, help="scenario seed (0)")
    parser.add_argument(
        "--no-register",
        action="store_true",
        help="do not register scrape targets with the lab's Prometheus",
    )
    parser.add_argument("--step", type=float, default=0.5, help="model step, seconds (0.5)")
    parser.add_argument("--poll", type=float, default=1.0, help="pod poll, seconds (1)")
    parser.add_argument("--run-for", type=float, help="exit after this many seconds")


def _demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="scenario length in seconds (default: the full demo, 300 s)",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="play the scenario this many times faster (2 = half the time)",
    )
    parser.add_argument("--port", type=int, default=29400, help="engine simulator port (29400)")
    parser.add_argument(
        "--out", type=Path, default=Path("demo-results"), help="where the plot and summary go"
    )
    parser.add_argument(
        "--manifest", type=Path, help="PDDeployment to apply (default deploy/demo/demo.yaml)"
    )
    parser.add_argument("--namespace", default="pdscaler-demo", help="namespace (pdscaler-demo)")
    parser.add_argument("--no-live", action="store_true", help="plain log lines, no live view")
    parser.add_argument("--seed", type=int, default=0, help="scenario seed (0)")


def add_subcommands(sub: Any) -> None:
    """Add `engine-sim` and `demo` to `python -m pdlab`'s subparsers."""
    _engine_sim_arguments(
        sub.add_parser(
            "engine-sim",
            help="serve simulated vLLM metrics for the Ready pods of PDDeployments",
        )
    )
    _demo_arguments(
        sub.add_parser(
            "demo", help="lab + operator + engine simulator: pools rebalancing live (make demo)"
        )
    )


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand; its exit code."""
    if args.cmd == "engine-sim":
        from pdlab import engine_sim

        return engine_sim.main(args)
    from pdlab import demo

    code: int = demo.main(args)
    return code
