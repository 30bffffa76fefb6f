"""Where the operator's CPU goes: ``python -m bench.overhead.sampled OUT -- ARGV...`` runs
``python -m pdscaler ARGV...`` in this process with a stack sampler thread, and writes
what it saw to ``OUT`` (JSON) when the process exits (SIGTERM included: kopf stops and
returns).

Owns: ``Sampler`` (every ``1/hz`` s, each other thread's Python stack from
``sys._current_frames``; a stack whose innermost frame is a wait, in threading,
selectors, socket, ssl, queue or asyncio's loop, counts as idle, the rest as busy),
``busy_by`` (busy samples per package and per innermost function, pure) and the
sampler's own CPU (``time.thread_time`` of its thread: the bench subtracts it from the
operator's). Must not: change what the operator does (a daemon thread reading frames).

Worked numbers: 20 Hz for 120 s is 2,400 samples per thread; with 8 tick threads mostly
waiting for Prometheus and one kopf loop, a busy share of 40% "pdscaler.metricsql" means
that package was the innermost busy frame's in 40% of the busy samples.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType

IDLE_FILES = ("threading.py", "selectors.py", "socket.py", "ssl.py", "queue.py")
IDLE_FUNCS = frozenset({"wait", "select", "_worker", "sleep", "_run_once", "poll", "acquire"})
HZ = 20.0


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


def idle(frame: FrameType) -> bool:
    """The innermost frame waits (a lock, a socket, a selector, the executor's queue)."""
    code = frame.f_code
    return code.co_filename.endswith(IDLE_FILES) or code.co_name in IDLE_FUNCS


def busy_by(stacks: Iterable[tuple[str, str, int]]) -> tuple[Counter[str], Counter[str]]:
    """(busy samples per package, per ``file:function``) from innermost frames given as
    (filename, function, line): ``[("/x/operator/pdscaler/tick.py", "compute", 3)]`` ->
    ({"pdscaler.tick.py"...}) as ``package_of`` names them."""
    packages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    for filename, func, _line in stacks:
        packages[package_of(filename)] += 1
        functions[f"{Path(filename).name}:{func}"] += 1
    return packages, functions


class Sampler:
    def __init__(self, hz: float = HZ) -> None:
        self.period = 1.0 / hz
        self.samples = 0
        self.idle = 0
        self.busy: list[tuple[str, str, int]] = []
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.period):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                self.samples += 1
                if idle(frame):
                    self.idle += 1
                else:
                    code = frame.f_code
                    self.busy.append((code.co_filename, code.co_name, frame.f_lineno))
            self.cpu_s = time.thread_time()

    def report(self) -> dict[str, object]:
        packages, functions = busy_by(self.busy)
        n = max(1, len(self.busy))
        return {
            "hz": 1.0 / self.period,
            "thread_samples": self.samples,
            "idle_samples": self.idle,
            "busy_samples": len(self.busy),
            "sampler_cpu_s": round(self.cpu_s, 3),
            "busy_by_package": {k: round(v / n, 4) for k, v in packages.most_common(15)},
            "busy_by_function": {k: round(v / n, 4) for k, v in functions.most_common(20)},
        }


def main(argv: Sequence[str]) -> None:
    out, sep, *rest = argv
    if sep != "--":
        raise SystemExit("usage: python -m bench.overhead.sampled OUT -- ARGV...")
    sampler = Sampler()

    def dump() -> None:
        Path(out).write_text(json.dumps({"pid": os.getpid(), **sampler.report()}, indent=1))

    atexit.register(dump)
    sampler.start()
    sys.argv = ["pdscaler", *rest]
    runpy.run_module("pdscaler", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
