"""The operator-overhead benchmark (issue 5, item 4): what running pdscaler costs.

Owns: the command line and the order of the three measurements, printing the report
and writing it to ``bench/results/overhead.md``:

1. the policy's decision time (``policy``: pure ``decide``, thousands of calls);
2. one reconcile tick against the shared lab, converged and scaling (``tick``);
3. one operator process with 200, then 1,000 PDDeployments at 15 s, each in a fresh
   private lab whose pods serve real series (``bench.overhead.exporter``), its CPU,
   memory, API and Prometheus traffic and tick lateness (``fleet``; ~7 minutes at 200,
   ~20 at 1,000, with the machine's load).

Writes ``overhead.md`` and, beside it, ``overhead.json`` (the fleet figures as numbers,
``bench.provenance``'s commit and date: what README and docs/operator.md quote).

    python -m bench.overhead                      # all three (~30 min on 2 cores)
    python -m bench.overhead --only policy        # seconds, no cluster
    python -m bench.overhead --only tick,process --pdds 200 --window 120

Must not: print a figure it did not measure (a section that could not run says
``not measured: <reason>``), or leave anything running.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import provenance
from bench.overhead import fleet, policy, tick
from bench.overhead.process import machine_facts
from bench.overhead.report import Section, render

RESULTS = Path(__file__).resolve().parents[1] / "results" / "overhead.md"
SECTIONS = ("policy", "tick", "process")
#: The fleet before the tick section: the tick waits for the shared lab's lock, the
#: fleet (its own lab, the long part) need not wait behind it.
RUN_ORDER = ("policy", "process", "tick")
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
    p.add_argument(
        "--pdds", default="200,1000", help="PDDeployments for the process, a comma list (200,1000)"
    )
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


def parse_sizes(text: str) -> list[int]:
    """ "200, 1000" -> [200, 1000]; ValueError for a size < 1 or no number."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--pdds takes a comma list of sizes >= 1; got {text!r}")
    return sizes


def fleets(args: argparse.Namespace, numbers: list[dict[str, Any]]) -> list[Section]:
    """One section per size (3, 4, ...), each run in its own private lab; the measured
    ones' numbers appended to ``numbers``."""
    out = []
    for k, size in enumerate(parse_sizes(args.pdds)):
        plan = fleet.Plan(pdds=size, interval=args.interval, sample_seconds=args.window)
        section, figures = fleet.measure_with_numbers(plan, number=3 + k)
        out.append(section)
        if figures is not None:
            numbers.append(figures)
    return out


#: The lock that serialises the shared lab's users on a shared machine (taken around lab
#: test runs: ``flock /tmp/pdscaler-lab.lock pytest tests/lab/...``): the tick section
#: waits for it, so it never measures beside a lab test (the fleet runs in its own lab).
LAB_LOCK = Path(os.environ.get("PDSCALER_LAB_LOCK", "/tmp/pdscaler-lab.lock"))


def under_lab_lock(measure: Callable[[], Section]) -> Section:
    """``measure()`` holding ``LAB_LOCK`` (flock, waiting for it)."""
    with LAB_LOCK.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            return measure()
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def runners(
    args: argparse.Namespace, numbers: list[dict[str, Any]]
) -> dict[str, Callable[[], list[Section]]]:
    return {
        "policy": lambda: [policy.measure(calls_per_trace=args.calls)],
        "tick": lambda: [under_lab_lock(lambda: tick.measure(ticks=args.ticks))],
        "process": lambda: fleets(args, numbers),
    }


def document(
    stamp: dict[str, str], facts: dict[str, str], command: str, numbers: list[dict[str, Any]]
) -> dict[str, Any]:
    """overhead.json: where and how it was measured, and each fleet's figures."""
    return {provenance.KEY: stamp, "command": command, "machine": facts, "fleets": numbers}


REPO = RESULTS.parents[2]


def shown_command(args_list: Sequence[str]) -> str:
    """The command line as the results print it, naming no machine path: an ``--out``
    inside the repository relative to it, elsewhere ``<scratch dir>/<name>``:
    ["--out", "/tmp/x/overhead.md"] -> "python -m bench.overhead --out <scratch
    dir>/overhead.md"."""
    shown = [shlex.quote(a) for a in args_list]
    for k, arg in enumerate(args_list[:-1]):
        if arg == "--out":
            path = Path(args_list[k + 1]).resolve()
            inside = path.is_relative_to(REPO)
            shown[k + 1] = str(path.relative_to(REPO)) if inside else f"<scratch dir>/{path.name}"
    return " ".join(["python -m bench.overhead", *shown]).strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print, write; exit 0 (2 on bad arguments). Sections that could not be
    measured are reported as such and do not fail the run."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(args_list)
    try:
        only = parse_only(args.only)
        parse_sizes(args.pdds)
        if args.calls < 1 or args.ticks < 2 or args.window < 10:
            raise ValueError("--calls >= 1, --ticks >= 2 and --window >= 10 s")
    except ValueError as err:
        print(f"bench.overhead: {err}", file=sys.stderr)
        return 2
    facts = machine_facts()
    stamp = provenance.measured_at()  # the code measured, before it runs
    numbers: list[dict[str, Any]] = []
    run = runners(args, numbers)
    done: dict[str, list[Section]] = {}
    for name in RUN_ORDER:
        if name in only:
            print(f"bench.overhead: measuring {name} ...", flush=True)
            done[name] = run[name]()
    sections: list[Section] = []
    for name in SECTIONS:
        skipped = Section.skipped(TITLES[name], "not run in this invocation (--only)")
        sections.extend(done.get(name, [skipped]))
    command = shown_command(args_list)
    text = render(facts, sections, command, stamp)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if "process" in only:
        doc = document(stamp, facts, command, numbers)
        json_out = args.out.with_suffix(".json")
        json_out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"bench.overhead: wrote {json_out}")
    print(f"bench.overhead: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
