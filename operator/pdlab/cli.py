"""The `engine-sim`, `demo`, `proxy` and `pod-runner` subcommands of `python -m pdlab`.

Owns: declaring these subcommands' arguments and handing the parsed arguments to
``pdlab.engine.sim.main`` / ``pdlab.demo.run.main`` / ``pdlab.cluster.svcproxy.main`` /
``pdlab.cluster.podrunner.main``. Must stay light (standard library
only): `python -m pdlab up` imports it, and numpy, matplotlib and the kubernetes client
are loaded only when one of these subcommands actually runs.

    python -m pdlab engine-sim --port 9400          # real requests only
    python -m pdlab engine-sim --scenario demo --port 9400
    python -m pdlab engine-sim --trace data/traces/AzureLLMInferenceTrace_conv.csv \\
        --rate-scale 2 --duration 600 --port 9400
    python -m pdlab demo --duration 150
    python -m pdlab proxy --namespace serving --service chat --port 28000
    python -m pdlab pod-runner --namespace serving
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

COMMANDS = ("engine-sim", "demo", "proxy", "pod-runner")
SCENARIO_NAMES = "chat, long-docs, burst, demo"


def _engine_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", help="only pods of this namespace (default: all)")
    parser.add_argument("--name", help="only pods of this PDDeployment (default: all)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument(
        "--scenario", help=f"synthetic load, a built-in scenario: {SCENARIO_NAMES} (default: none)"
    )
    src.add_argument(
        "--trace", type=Path, help="synthetic load, an Azure CSV or Mooncake JSONL trace to replay"
    )
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
    parser.add_argument(
        "--port", type=int, required=True, help="control port on 127.0.0.1 (/status, /requests)"
    )
    parser.add_argument("--seed", type=int, default=0, help="scenario seed (0)")
    parser.add_argument("--step", type=float, default=0.5, help="model step, seconds (0.5)")
    parser.add_argument("--poll", type=float, default=1.0, help="pod poll, seconds (1)")
    parser.add_argument(
        "--prefill-tps",
        type=float,
        help="one prefill replica's speed, prompt tokens/s (default: the simulator's, ~8,500)",
    )
    parser.add_argument("--run-for", type=float, help="exit after this many seconds")
    parser.add_argument(
        "--no-routers",
        action="store_true",
        help="do not run the router pods (pdlab.cluster.podrunner) of the namespace",
    )


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


def _proxy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", required=True, help="the Service's namespace")
    parser.add_argument("--service", required=True, help="the Service's name")
    parser.add_argument("--port", type=int, required=True, help="local port on 127.0.0.1")
    parser.add_argument("--service-port", help="the Service port's name or number (first)")


def _pod_runner_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace", action="append", help="run router pods of this namespace (repeatable; "
        "default: all)"
    )  # fmt: skip


def add_subcommands(sub: Any) -> None:
    """Add `engine-sim`, `demo`, `proxy` and `pod-runner` to `python -m pdlab`'s
    subparsers."""
    _engine_sim_arguments(
        sub.add_parser(
            "engine-sim",
            help="serve the Ready prefill/decode pods of PDDeployments at their pod IPs "
            "(simulated vLLM: OpenAI API, P/D hand-off, metrics)",
        )
    )
    _demo_arguments(
        sub.add_parser(
            "demo", help="lab + operator + engine simulator: pools rebalancing live (make demo)"
        )
    )
    _proxy_arguments(
        sub.add_parser(
            "proxy", help="kube-proxy stand-in: a Service's ready endpoints on 127.0.0.1:PORT"
        )
    )
    _pod_runner_arguments(
        sub.add_parser("pod-runner", help="run the Ready router pods' routers at their pod IPs")
    )


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen subcommand; its exit code."""
    if args.cmd == "engine-sim":
        from pdlab.engine import sim as engine_sim

        return engine_sim.main(args)
    if args.cmd == "proxy":
        from pdlab.cluster import svcproxy

        return svcproxy.main(args.namespace, args.service, args.port, args.service_port)
    if args.cmd == "pod-runner":
        from pdlab.cluster import podrunner

        return podrunner.main(args.namespace)
    from pdlab.demo import run as demo

    code: int = demo.main(args)
    return code
