"""The operator-overhead benchmark (issue 5, item 4): what running pdscaler costs.

Owns: the command line and the order of the three measurements, printing the report
and writing it to ``bench/results/overhead.md``:

1. the policy's decision time (``policy``: pure ``decide``, thousands of calls);
2. one reconcile tick against the shared lab, converged and scaling (``tick``);
3. one operator process with 200 PDDeployments at 15 s in a private lab, its CPU,
   memory, API and Prometheus traffic (``fleet``; 4-7 minutes, with the
   machine's load).

    python -m bench.overhead                      # all three (5 min on 2 cores)
    python -m bench.overhead --only policy        # seconds, no cluster
    python -m bench.overhead --only tick,process --pdds 200 --window 120

Must not: print a figure it did not measure (a section that could not run says
``not measured: <reason>``), or leave anything running.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import provenance
from bench.overhead import fleet, policy, tick
from bench.overhead.process import machine_facts
from bench.overhead.report import Section, render

RESULTS = Path(__file__).resolve().parents[1] / "results" / "overhead.md"
SECTIONS = ("policy", "tick", "process")
TITLES = {
    "policy": policy.TITLE,
    "tick": tick.TITLE,
    "process": fleet.TITLE,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.overhead", description=__doc__.split("\n")[0])
    p.add_argument(
        "--only", default=",".join(SECTIONS), help="comma list of: " + ", ".join(SECTIONS)
    )
    p.add_argument("--calls", type=int, default=5000, help="decide() calls per trace (5000)")
    p.add_argument("--ticks", type=int, default=20, help="lab ticks of each kind (20)")
    p.add_argument("--pdds", type=int, default=200, help="PDDeployments for the process (200)")
    p.add_argument("--interval", default="15s", help="their scaling.interval (15s)")
    p.add_argument("--window", type=float, default=120.0, help="sampling window, s (120)")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"report file ({RESULTS.name})")
    return p


def parse_only(text: str) -> list[str]:
    """ "tick, policy" -> ["policy", "tick"] (run order); ValueError naming a bad one."""
    wanted = {s.strip() for s in text.split(",") if s.strip()}
    unknown = wanted - set(SECTIONS)
    if unknown or not wanted:
        raise ValueError(f"--only takes a comma list of {', '.join(SECTIONS)}; got {text!r}")
    return [s for s in SECTIONS if s in wanted]


def runners(args: argparse.Namespace) -> dict[str, Callable[[], Section]]:
    plan = fleet.Plan(pdds=args.pdds, interval=args.interval, sample_seconds=args.window)
    return {
        "policy": lambda: policy.measure(calls_per_trace=args.calls),
        "tick": lambda: tick.measure(ticks=args.ticks),
        "process": lambda: fleet.measure(plan),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print, write; exit 0 (2 on bad arguments). Sections that could not be
    measured are reported as such and do not fail the run."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(args_list)
    try:
        only = parse_only(args.only)
        if args.calls < 1 or args.ticks < 2 or args.pdds < 1 or args.window < 10:
            raise ValueError("--calls >= 1, --ticks >= 2, --pdds >= 1 and --window >= 10 s")
    except ValueError as err:
        print(f"bench.overhead: {err}", file=sys.stderr)
        return 2
    facts = machine_facts()
    stamp = provenance.measured_at()  # the code measured, before it runs
    run = runners(args)
    sections: list[Section] = []
    for name in SECTIONS:
        if name not in only:
            sections.append(Section.skipped(TITLES[name], "not run in this invocation (--only)"))
            continue
        print(f"bench.overhead: measuring {name} ...", flush=True)
        sections.append(run[name]())
    command = " ".join(["python -m bench.overhead", *map(shlex.quote, args_list)]).strip()
    text = render(facts, sections, command, stamp)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"bench.overhead: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
