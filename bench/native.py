"""The benchmark's compiled simulator: the same sources, compiled with mypyc.

Owns: building, once per source tree, a copy of the ``pdscaler`` package in
``~/.cache/pdscaler/native/<key>/`` whose hot simulator modules (``COMPILED``: the
engine's event loop, the replay loop and the simulated scrape) are
compiled to C extensions by mypyc (which ships with mypy, a dev dependency; it needs
gcc and Python's headers); proving that the build replays bit-identically to the pure
modules (``check``); and the ``PYTHONPATH`` that makes ``python -m bench`` run on it.
Must not: change a result (a build whose replay differs is never used), or fail the
benchmark (without a compiler it runs on the pure modules and says so).

Why: the matrix is ~2,000 trace replays (115 seed-cases of 8 policies, the oracle's
replays and 5 ablations, plus tuning), each a pure-Python discrete-event simulation of
up to ~194,000 requests; the engine is ~80% of a replay with no single hot spot
(cProfile: run_until, _dispatch_decode, _decode_event, _dispatch_prefill,
_reschedule). One conv-10x, start-up 90 s pdscaler replay measured on this machine:
4.11 s pure, 2.17 s compiled (1.9x), with the same attainment (98.52%), GPU-hours
(27.65) and TTFT p99 (2.41 s).

The key is a SHA-256 over every ``.py`` file of the package (path and bytes), the
Python version and mypy's version: an edit anywhere rebuilds, and a stale build is
never imported. ``check`` runs, in both builds, what the matrix runs, on
``CHECK_SECONDS`` of three cases (``fingerprint``): the full comparison (every policy of
a case, the tuning searches and the SLO-feasible oracle's replays) of the conversation
trace at 4x, and pdscaler with the deadline queue and role flips, and on the
long-context variant; it compares every request's timings and each summary exactly.

Two runs at once: a build is made under an exclusive lock on ``<key>.lock`` (a second
run of the same sources waits, then finds it checked), and a run holds a shared lock on
the build it uses for as long as it runs (the descriptor survives its re-exec). Builds
of other source trees are removed once no run holds them, the ``KEEP`` newest excepted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "operator" / "pdscaler"
CACHE = Path(os.environ.get("PDSCALER_CACHE", Path.home() / ".cache" / "pdscaler")) / "native"
#: Modules compiled (relative to the package); the rest of the package stays Python.
#: (Not ``sim/controllers.py``: the oracle's replay subclasses its ScheduleController,
#: and an interpreted class cannot inherit from a compiled one.)
COMPILED = ("sim/engine.py", "sim/loop.py", "sim/observe.py", "sim/prom.py")
#: Set in the environment of a run that already uses a build (or chose not to).
MARKER = "PDSCALER_BENCH_NATIVE"
CHECK_SECONDS = 240.0
OK = "check-ok"
#: Builds of other source trees kept (the newest), besides the current one.
KEEP = 2


def key(package: Path = PACKAGE) -> str:
    """The build's name: SHA-256 over the package's sources, Python and mypy versions."""
    import mypy.version

    h = hashlib.sha256()
    h.update(f"{sys.version}\0{mypy.version.__version__}\0{COMPILED}\0".encode())
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def copy_package(into: Path, package: Path = PACKAGE) -> None:
    """``package`` copied to ``into/pdscaler``, without its bytecode caches."""
    shutil.copytree(package, into / "pdscaler", ignore=shutil.ignore_patterns("__pycache__"))


def compile_build(into: Path, package: Path = PACKAGE) -> None:
    """Copy the package into ``into`` and compile ``COMPILED`` there (raises
    ``RuntimeError`` with mypyc's last lines when it fails)."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    copy_package(into, package)
    cmd = [sys.executable, "-c", "from mypyc.__main__ import main; main()"]
    cmd += [f"pdscaler/{m}" for m in COMPILED]
    done = subprocess.run(cmd, cwd=into, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " ".join((done.stdout + done.stderr).split()[-40:])
        raise RuntimeError(f"mypyc exited {done.returncode}: {tail}")
    shutil.rmtree(into / "build", ignore_errors=True)


def fingerprint(seconds: float = CHECK_SECONDS) -> str:
    """Digest of what the matrix runs (module docstring) on the first ``seconds`` of
    each trace, in this process's build of ``pdscaler``: every request's timings,
    exactly, and each summary's JSON."""
    from dataclasses import replace

    import numpy as np

    from bench import quality
    from pdscaler.sim.compare import compare
    from pdscaler.sim.controllers import PdscalerController
    from pdscaler.sim.loop import Run, run
    from pdscaler.sim.results import summarize
    from pdscaler.types import FlipOptions

    plan = quality.Plan(duration=seconds)
    h = hashlib.sha256()

    def digest(result: Run) -> None:
        t = result.times
        for arr in (t.prefill_start, t.prefill_end, t.decode_admit, t.first_token, t.finish):
            h.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
        h.update(json.dumps(summarize(result).to_json(1.0), sort_keys=True).encode())

    chat = quality.Group("conv", 4.0)
    trace, cfg = quality.load(chat, plan, 1), quality.config(chat, 30.0, 1)
    comp = compare(trace, quality.CASE_POLICIES, cfg)
    for r in (*comp.runs, comp.oracle.run):
        digest(r)
    h.update(json.dumps(comp.to_json(), sort_keys=True).encode())
    flips = replace(cfg, params=replace(cfg.params, queue_discipline="deadline"))
    flips = replace(flips, flips=FlipOptions())
    digest(run(trace, PdscalerController(flips.spec, flips=flips.flips), flips))
    long = quality.Group("conv", 1.0, True)
    trace, cfg = quality.load(long, plan, 1), quality.config(long, 30.0, 1)
    digest(run(trace, PdscalerController(cfg.spec), cfg))
    return h.hexdigest()


def _child_fingerprint(path: Path, seconds: float) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(REPO)])}
    code = f"from bench.native import fingerprint; print(fingerprint({seconds!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(" ".join(done.stderr.split()[-40:]))
    return done.stdout.strip().splitlines()[-1]


def same_replay(path: Path, seconds: float = CHECK_SECONDS) -> None:
    """Raise ``RuntimeError`` unless the package at ``path`` replays exactly as this
    process's (pure) package does (on the first ``seconds`` of each trace)."""
    pure, built = fingerprint(seconds), _child_fingerprint(path, seconds)
    if pure != built:
        raise RuntimeError(f"the compiled replay differs from the pure one ({built} != {pure})")


def check(path: Path) -> None:
    """Raise ``RuntimeError`` unless the build at ``path`` really is compiled and
    replays exactly as the pure modules do."""
    if not list((path / "pdscaler" / "sim").glob("engine.*.so")):
        raise RuntimeError(f"no compiled engine in {path}")
    same_replay(path)


def _lock(name: str, exclusive: bool, wait: bool = True) -> int | None:
    """A descriptor holding ``flock`` on ``CACHE/<name>.lock`` (exclusive or shared), or
    None when ``wait`` is False and another process holds a conflicting lock."""
    CACHE.mkdir(parents=True, exist_ok=True)
    fd = os.open(CACHE / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    flags = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, flags)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def prune(current: str, keep: int = KEEP) -> list[str]:
    """Remove the builds of other source trees that no run holds, all but the ``keep``
    newest; returns the names removed. A build in use (a shared lock on its
    ``.lock``) is never touched."""
    others = [p for p in CACHE.iterdir() if p.is_dir() and p.name != current]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in others[keep:]:
        fd = _lock(old.name, exclusive=True, wait=False)
        if fd is None:
            continue
        try:
            shutil.rmtree(old, ignore_errors=True)
            (CACHE / f"{old.name}.lock").unlink(missing_ok=True)
            removed.append(old.name)
        finally:
            os.close(fd)
    return removed


def ensure(log: Callable[[str], None] = print) -> Path | None:
    """The checked build for the current sources (built and checked when missing), or
    None (with the reason logged) when it cannot be built or does not replay
    identically: the benchmark then runs on the pure modules. The build is returned
    under a shared lock this process (and what it re-executes) keeps; a concurrent run
    of the same sources waits for the one building it."""
    name = key()
    path = CACHE / name
    try:
        fd = _lock(name, exclusive=True)
    except OSError as err:  # no cache to build in (read-only home, say)
        log(f"bench: running on the pure-Python simulator: {err}")
        return None
    assert fd is not None  # a waiting lock is always taken
    try:
        if not (path / OK).exists():
            log(f"bench: compiling the simulator with mypyc into {path} (once per source tree)")
            compile_build(path)
            check(path)
            (path / OK).write_text("replays identically to the pure modules\n", encoding="utf-8")
    except (OSError, RuntimeError) as err:
        log(f"bench: running on the pure-Python simulator: {err}")
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)
        return None
    # In use: kept from ``prune`` until this run ends. (flock converts by releasing
    # first; the build just made is the newest, which no other run prunes meanwhile.)
    fcntl.flock(fd, fcntl.LOCK_SH)
    os.set_inheritable(fd, True)
    for gone in prune(name):
        log(f"bench: removed the unused build {CACHE / gone}")
    return path


def reexec(argv: list[str], module: str = "bench") -> None:
    """Run ``python -m <module> argv`` (``bench``; ``bench.diurnal``...) again on the
    compiled build, unless this process already runs on one (or chose not to:
    ``PDSCALER_BENCH_NATIVE=off``). Returns only when it does not re-execute."""
    if os.environ.get(MARKER):
        return
    path = ensure()
    if path is None:
        return
    env = {**os.environ, MARKER: str(path)}
    env["PYTHONPATH"] = os.pathsep.join([str(path), str(REPO)])
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
