"""Start, identify and stop child processes, by PID only: the lab's recorded components
and the short-lived children of the demo and the benchmarks.

Owns: detached starts (``spawn``: own session, so own process group; stdout+stderr to a
log file), the state file (`<lab>/state.json`: the config and, per component, pid, start
time, command line and log file), stops that signal exactly the recorded process group
(a record counts as alive only if the PID exists, is not a zombie, and has the recorded
start time, so a reused PID is never mistaken for, or killed as, ours), and ``Child``: a
process this Python process started and still holds, stopped through its group. Must
never find or kill processes by name.

    op = Child("operator", [sys.executable, "-m", "pdscaler", "run"], out / "operator.log")
    op.start({**os.environ, "KUBECONFIG": str(kubeconfig)})
    ...
    op.stop()                      # SIGTERM its group, SIGKILL after 10 s, reaped
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pdlab.cluster.config import REPO_DIR

# Popen objects of children started by this Python process, kept so they are reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcRecord:
    """One started component."""

    name: str
    pid: int
    start_ticks: int
    argv: list[str]
    log: str


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks); None if gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def is_alive(rec: ProcRecord) -> bool:
    """True if the recorded process still runs (same PID and same start time)."""
    _reap(rec.pid)
    return start_ticks(rec.pid) == rec.start_ticks


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        del _CHILDREN[pid]


class State:
    """The lab's state file: config + process records, rewritten atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.config: dict[str, Any] | None = None
        self.procs: dict[str, ProcRecord] = {}
        if path.exists():
            data = json.loads(path.read_text())
            self.config = data.get("config")
            self.procs = {n: ProcRecord(**r) for n, r in data.get("processes", {}).items()}

    def save(self) -> None:
        """Write the file (tmp + rename, so a crash never leaves half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        doc = {"config": self.config, "processes": {n: asdict(r) for n, r in self.procs.items()}}
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.replace(self.path)

    def alive(self, name: str) -> bool:
        """True if `name` was started and still runs."""
        rec = self.procs.get(name)
        return rec is not None and is_alive(rec)


def spawn(
    argv: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `argv` detached (new session: its PID is its process group), stdin from
    /dev/null, stdout and stderr appended to `log_path`."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start(state: State, name: str, argv: list[str], log_dir: Path, cwd: Path) -> ProcRecord:
    """Start `argv` detached (new session), log to `<log_dir>/<name>.log`, record it."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log:
        log.write(f"\n=== pdlab start {time.strftime('%F %T')}: {' '.join(argv)}\n".encode())
    proc = spawn(argv, log_path, cwd)
    _CHILDREN[proc.pid] = proc
    ticks = None
    for _ in range(50):
        ticks = start_ticks(proc.pid)
        if ticks is not None or proc.poll() is not None:
            break
        time.sleep(0.01)
    if ticks is None:
        raise RuntimeError(f"{name} exited at once (code {proc.poll()}); see {log_path}")
    rec = ProcRecord(name=name, pid=proc.pid, start_ticks=ticks, argv=argv, log=str(log_path))
    state.procs[name] = rec
    state.save()
    return rec


def stop(state: State, name: str, grace_s: float = 10.0) -> bool:
    """SIGTERM the recorded process group of `name`, SIGKILL after `grace_s`.

    Returns True if something was running. The record is removed either way.
    """
    return bool(stop_many(state, [name], grace_s))


def stop_many(state: State, names: list[str], grace_s: float = 10.0) -> list[str]:
    """Stop several recorded components at once; the names that were running.

    All get SIGTERM together (so `down` takes the slowest shutdown, ~3 s, not the sum),
    then SIGKILL whatever group is not empty after `grace_s`. Only groups whose leader was
    seen alive with its recorded start time are signalled: Linux does not reuse a PID
    while it still names a process group, so the group is still ours while it has
    members. Records are removed either way.
    """
    recs = []
    for name in names:
        rec = state.procs.pop(name, None)
        if rec is not None and is_alive(rec):
            recs.append(rec)
    state.save()
    for rec in recs:  # start_new_session=True made each a group leader: pgid == pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rec.pid, signal.SIGTERM)
    left = _wait_groups_empty(recs, grace_s)
    for rec in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(rec.pid, signal.SIGKILL)
    _wait_groups_empty(left, 10.0)
    return [r.name for r in recs]


def _wait_groups_empty(recs: list[ProcRecord], timeout: float) -> list[ProcRecord]:
    """Wait until no live (non-zombie) process is left in the records' groups; the rest."""
    deadline = time.monotonic() + timeout
    left = list(recs)
    while left:
        left = [r for r in left if is_alive(r) or group_members(r.pid)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def group_members(pgid: int) -> list[int]:
    """PIDs (not zombies) whose process group is `pgid`: used to prove `down` left nothing."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


@dataclass
class Child:
    """A process started (detached) and held by this Python process: not recorded in a
    state file, so it lives no longer than its starter (the demo's operator and engine
    simulator, the overhead benchmark's operator)."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], cwd: Path = REPO_DIR) -> None:
        """Start it, its output appended to ``log``."""
        self.proc = spawn(self.argv, self.log, cwd, env)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the child's process group, SIGKILL after ``grace_s``; reap it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5.0)

    def tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of its log ("(no log)" if unreadable)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
