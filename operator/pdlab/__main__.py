"""`python -m pdlab up|down|status|env` (also the `pdlab` script).

Owns: argument parsing and printing only; all work is in `pdlab.cluster.lab.Lab`.

    python -m pdlab up --nodes 4 --gpus-per-node 8 --startup-delay 2s
    eval "$(python -m pdlab env)"; kubectl get nodes
    python -m pdlab down            # --purge also deletes etcd/Prometheus data and PKI
"""

from __future__ import annotations

import argparse
import json
import sys

from pdlab import cli
from pdlab.cluster.config import LabConfig
from pdlab.cluster.lab import Lab, LabError
from pdlab.cluster.processes import State


def _config(args: argparse.Namespace) -> LabConfig:
    """The running lab's config (if any) with the flags given on the command line on top."""
    base = LabConfig.from_env()
    st = State(base.lab_dir / "state.json")
    if st.config:
        base = LabConfig.from_json(st.config)
    return LabConfig(
        lab_dir=base.lab_dir,
        ports=base.ports,
        nodes=args.nodes if args.nodes is not None else base.nodes,
        gpus_per_node=args.gpus_per_node if args.gpus_per_node is not None else base.gpus_per_node,
        gpu_product=args.gpu_product or base.gpu_product,
        startup_delay=args.startup_delay or base.startup_delay,
        scrape_interval=args.scrape_interval or base.scrape_interval,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 1 lab error)."""
    parser = argparse.ArgumentParser(prog="pdlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start the lab (idempotent) and wait until it is healthy")
    up.add_argument("--nodes", type=int, help="fake GPU nodes (default 4)")
    up.add_argument("--gpus-per-node", type=int, help="nvidia.com/gpu per node (default 8)")
    up.add_argument("--gpu-product", help="nvidia.com/gpu.product label")
    up.add_argument("--startup-delay", help="default pod start-up delay, Go duration (2s)")
    up.add_argument("--scrape-interval", help="Prometheus scrape interval (2s)")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait (180)")
    down = sub.add_parser("down", help="stop exactly the processes the lab started")
    down.add_argument("--purge", action="store_true", help="also delete data, PKI and logs")
    sub.add_parser("status", help="components, PIDs, health, log files (JSON)")
    sub.add_parser("env", help="print export lines: KUBECONFIG, PDLAB_PROMETHEUS_URL")
    cli.add_subcommands(sub)  # engine-sim, demo: see pdlab.cli
    args = parser.parse_args(argv)
    if args.cmd in cli.COMMANDS:
        return cli.dispatch(args)

    try:
        if args.cmd == "up":
            lab = Lab(_config(args))
            took = lab.ensure_up(
                timeout=args.timeout, progress=lambda line: print(f"pdlab: {line}", file=sys.stderr)
            )
            lab.pin()  # asked for by a person: test sessions must not stop it
            print(f"pdlab: up in {took:.1f}s ({lab.config.nodes} GPU nodes ready)")
            print(lab.env(), end="", flush=True)
            stale = lab.stale_components()
            if stale:
                print(
                    f"pdlab: note: {', '.join(stale)} started with an older command line; "
                    "`python -m pdlab down && python -m pdlab up` applies the new one",
                    file=sys.stderr,
                )
        elif args.cmd == "down":
            stopped = Lab().down(purge=args.purge)
            print(f"pdlab: stopped {', '.join(stopped) if stopped else 'nothing (not running)'}")
        elif args.cmd == "status":
            lab = Lab()
            print(json.dumps(lab.status(), indent=2))
            return 0 if lab.is_up() else 3
        elif args.cmd == "env":
            print(Lab().env(), end="")
    except LabError as err:
        print(err, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
