"""Where the operator's CPU goes: ``python -m bench.overhead.sampled OUT -- ARGV...`` runs
``python -m pdscaler ARGV...`` in this process with a stack sampler thread, and writes
what it saw to ``OUT`` (JSON) when the process exits (SIGTERM included: kopf stops and
returns).

Owns: ``Sampler`` (every ``1/hz`` s, each other thread's CPU seconds since the last
sample, from ``/proc/self/task/<tid>/stat``, charged to its stack now, from
``sys._current_frames``: by the innermost frame's package and function, and by the
innermost pdscaler frame; a thread waiting costs nothing, so waits are not counted as
work), ``share`` (the charges as fractions, pure) and the sampler's own CPU
(``time.thread_time`` of its thread, reported: it is inside the operator's CPU). Must
not: change what the operator does (a daemon thread reading frames and ``/proc``).

Worked numbers: a tick thread that used 30 ms of CPU between two samples and now sits in
``json/decoder.py:raw_decode`` called from ``prometheus/client.py:query`` charges 30 ms to
``json``, ``decoder.py:raw_decode`` and ``prometheus/client.py:query``; 10 Hz is 1,200
samples per thread in 120 s, and the shares are of every charged second.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType

from bench.overhead.process import parse_stat_cpu

HZ = 10.0
DUMP_EVERY_S = 15.0


def package_of(filename: str) -> str:
    """``.../site-packages/kubernetes/client/api_client.py`` -> ``kubernetes``;
    ``.../operator/pdscaler/metricsql/answers.py`` -> ``pdscaler.metricsql``; the
    standard library's ``json/decoder.py`` -> ``json``."""
    parts = Path(filename).parts
    for anchor in ("site-packages", "operator"):
        if anchor in parts:
            rest = parts[parts.index(anchor) + 1 :]
            if rest and rest[0] == "pdscaler" and len(rest) > 2:
                return f"pdscaler.{rest[1]}"
            return rest[0].removesuffix(".py") if rest else filename
    name = Path(filename)
    return name.parent.name if name.parent.name not in ("", "python3.11") else name.stem


def caller_in_pdscaler(frame: FrameType | None) -> str:
    """The innermost frame of pdscaler's own code on the stack, ``tick.py:compute``
    (``-`` when none: kopf's loop, a client's own thread)."""
    while frame is not None:
        parts = Path(frame.f_code.co_filename).parts
        if "pdscaler" in parts:
            return f"{'/'.join(parts[parts.index('pdscaler') + 1 :])}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "-"


def thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process, from
    ``/proc/self/task/<tid>/stat`` (0.0 once it is gone)."""
    try:
        return parse_stat_cpu(Path(f"/proc/self/task/{native_id}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return 0.0


def share(weights: Mapping[str, float], top: int) -> dict[str, float]:
    """The ``top`` largest as fractions of the total: {"a": 3, "b": 1} -> {"a": 0.75,
    "b": 0.25}."""
    total = sum(weights.values()) or 1.0
    ordered = sorted(weights.items(), key=lambda kv: -kv[1])[:top]
    return {k: round(v / total, 4) for k, v in ordered}


class Sampler:
    """Every ``1/hz`` s, each other thread's CPU seconds since the last sample (its
    ``/proc`` task stat) charged to the stack it is on now: its innermost frame's package
    and function, and the innermost pdscaler frame that led there. A thread that used no
    CPU (waiting on a socket, a lock, a sleep) is charged nothing."""

    def __init__(self, hz: float = HZ) -> None:
        self.period = 1.0 / hz
        self.cpu_s = 0.0
        self.charged = 0.0
        self.by_package: defaultdict[str, float] = defaultdict(float)
        self.by_function: defaultdict[str, float] = defaultdict(float)
        self.by_caller: defaultdict[str, float] = defaultdict(float)
        self._last: dict[int, float] = {}
        #: called after each sample (``main`` writes the report every ``DUMP_EVERY_S``:
        #: an operator killed after SIGTERM's grace leaves its last report)
        self.on_tick: Callable[[], None] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def charge(self, frame: FrameType, seconds: float) -> None:
        code = frame.f_code
        self.by_package[package_of(code.co_filename)] += seconds
        self.by_function[f"{Path(code.co_filename).name}:{code.co_name}"] += seconds
        self.by_caller[caller_in_pdscaler(frame)] += seconds
        self.charged += seconds

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.period):
            natives = {t.ident: t.native_id for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                native = natives.get(ident)
                if ident == me or native is None:
                    continue
                cpu = thread_cpu(native)
                used = cpu - self._last.get(native, cpu)
                self._last[native] = cpu
                if used > 0:
                    self.charge(frame, used)
            self.cpu_s = time.thread_time()
            if self.on_tick is not None:
                self.on_tick()

    def report(self) -> dict[str, object]:
        return {
            "hz": 1.0 / self.period,
            "charged_cpu_s": round(self.charged, 2),
            "sampler_cpu_s": round(self.cpu_s, 3),
            "cpu_by_package": share(self.by_package, 12),
            "cpu_by_function": share(self.by_function, 15),
            "cpu_by_pdscaler_caller": share(self.by_caller, 12),
        }


def main(argv: Sequence[str]) -> None:
    out, sep, *rest = argv
    if sep != "--":
        raise SystemExit("usage: python -m bench.overhead.sampled OUT -- ARGV...")
    sampler = Sampler()

    def dump() -> None:
        Path(out).write_text(json.dumps({"pid": os.getpid(), **sampler.report()}, indent=1))

    last = [time.monotonic()]

    def every() -> None:
        if time.monotonic() - last[0] >= DUMP_EVERY_S:
            last[0] = time.monotonic()
            dump()

    sampler.on_tick = every
    atexit.register(dump)
    sampler.start()
    sys.argv = ["pdscaler", *rest]
    runpy.run_module("pdscaler", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
