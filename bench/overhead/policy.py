"""Measurement 1: how long the pure policy takes to decide (``pdscaler.policy.decide``).

Owns: recording realistic ``TickInput``s (every tick the policy sees while the
simulator's closed loop replays a real trace with pdscaler in charge: the same inputs
the live operator builds, with a growing memory, rate history, scale-ups, holds and
scale-downs), then timing ``decide`` on them round-robin with ``time.perf_counter``,
one call at a time. Must not: touch the cluster, or time anything but ``decide``.

Worked numbers: the 58-min conversation trace gives 232 ticks at a 15 s interval, the
code trace 229; 5,000 calls round-robin call each input ~11 times.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.overhead.report import Section
from bench.overhead.stats import Summary, fmt_seconds, summarize
from bench.quality import TRACE_DIR
from pdscaler.policy import decide
from pdscaler.sim.controllers import PdscalerController
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.setup import sim_spec
from pdscaler.sim.traces import load_trace
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import Decision, TickInput

TITLE = "1. Policy decision time (pure `pdscaler.policy.decide`)"
#: Where the traces live: the project's copy (the decision-quality benchmark's too).
TRACE_DIRS = (TRACE_DIR,)
TRACE_GLOB = "AzureLLMInferenceTrace_*.csv"
WARMUP_CALLS = 200


@dataclass(frozen=True)
class Recorded:
    """The inputs the policy saw on one trace, with the decisions it made then."""

    trace: str
    inputs: tuple[TickInput, ...]
    actions: tuple[str, ...]


def find_traces(dirs: Sequence[Path] = TRACE_DIRS) -> list[Path]:
    """The Azure trace CSVs of the first directory holding any, sorted by name."""
    for d in dirs:
        found = sorted(d.glob(TRACE_GLOB)) if d.is_dir() else []
        if found:
            return found
    return []


def record_inputs(trace_path: Path, spec: PDDeploymentSpec | None = None) -> Recorded:
    """Replay ``trace_path`` in the closed loop with pdscaler deciding; every
    ``TickInput`` it was given, in order."""
    the_spec = spec or sim_spec()
    inputs: list[TickInput] = []
    decisions: list[Decision] = []

    def recording(ti: TickInput) -> Decision:
        inputs.append(ti)
        d = decide(ti)
        decisions.append(d)
        return d

    trace = load_trace(trace_path)
    run(trace, PdscalerController(the_spec, decide=recording), LoopConfig(spec=the_spec))
    return Recorded(trace.name, tuple(inputs), tuple(d.action for d in decisions))


def time_calls(
    inputs: Sequence[TickInput],
    calls: int,
    fn: Callable[[TickInput], object] = decide,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Seconds of each of ``calls`` calls of ``fn``, round-robin over ``inputs`` (call k
    gets ``inputs[k % len(inputs)]``), after ``WARMUP_CALLS`` untimed ones."""
    if not inputs:
        raise ValueError("no inputs to time")
    for k in range(min(WARMUP_CALLS, calls)):
        fn(inputs[k % len(inputs)])
    out: list[float] = []
    for k in range(calls):
        ti = inputs[k % len(inputs)]
        t0 = clock()
        fn(ti)
        out.append(clock() - t0)
    return out


def _row(label: str, n_inputs: int, s: Summary) -> list[str]:
    return [
        label,
        str(n_inputs),
        str(s.n),
        fmt_seconds(s.p50),
        fmt_seconds(s.p99),
        fmt_seconds(s.mean),
        fmt_seconds(s.max),
    ]


def measure(calls_per_trace: int = 5000, traces: Sequence[Path] | None = None) -> Section:
    """The section: one row per trace and one for all calls together."""
    paths = list(traces) if traces is not None else find_traces()
    if not paths:
        dirs = ", ".join(str(d) for d in TRACE_DIRS)
        return Section.skipped(TITLE, f"no {TRACE_GLOB} found in {dirs}")
    rows: list[list[str]] = []
    every: list[float] = []
    mix: Counter[str] = Counter()
    total_inputs = 0
    for path in paths:
        rec = record_inputs(path)
        seconds = time_calls(rec.inputs, calls_per_trace)
        every += seconds
        mix.update(rec.actions)
        total_inputs += len(rec.inputs)
        rows.append(_row(rec.trace, len(rec.inputs), summarize(seconds)))
    if len(paths) > 1:
        rows.append(_row("all", total_inputs, summarize(every)))
    actions = ", ".join(f"{a} {n}" for a, n in mix.most_common())
    return Section(
        TITLE,
        "Inputs: every tick the policy saw while the simulator replayed each trace with "
        "pdscaler in charge (15 s interval, 60 s start-up, the simulator's spec). Each call"
        " timed alone with `time.perf_counter`, round-robin over the inputs, after "
        f"{WARMUP_CALLS} warm-up calls; garbage collection left on, as in the operator.",
        ["trace", "inputs", "calls", "p50", "p99", "mean", "max"],
        rows,
        notes=[f"decisions among the inputs: {actions}"],
    )
