"""CPU and memory of one running process, read from Linux ``/proc``, and the facts of
the machine the benchmark ran on.

Owns: parsing ``/proc/<pid>/stat`` (``utime`` + ``stime``, fields 14 and 15, in clock
ticks, all threads included) and ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM`` in kB),
``ProcSampler`` (samples over time -> mean CPU % of one core, peak RSS), and
``machine_facts`` (cores, CPU model, Python, kernel, date). Must not: signal, start or
stop the process it watches.

Worked numbers: 30 s of CPU (utime + stime) over a 150 s window is 20% of one core; a
process using two cores fully for that window shows 200%.
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def parse_stat_cpu(text: str, clk_tck: int = CLK_TCK) -> float:
    """CPU seconds (user + system) from a ``/proc/<pid>/stat`` line. The command name
    (field 2) is in parentheses and may hold spaces, so fields are counted after the
    last ``)``: there ``state`` is field 3, ``utime`` 14 and ``stime`` 15."""
    rest = text[text.rindex(")") + 2 :].split()
    utime, stime = int(rest[14 - 3]), int(rest[15 - 3])
    return (utime + stime) / clk_tck


def parse_status_int(text: str, key: str) -> int:
    """The number of a ``/proc/<pid>/status`` line: ``VmRSS:   123456 kB`` -> 123456 for
    key "VmRSS", ``Threads:  12`` -> 12; KeyError if absent (VmRSS of a zombie)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise KeyError(f"{key} not in /proc status")


def cpu_seconds(pid: int) -> float:
    return parse_stat_cpu(Path(f"/proc/{pid}/stat").read_text())


def status_numbers(pid: int) -> tuple[int, int, int]:
    """(VmRSS KiB, VmHWM KiB, threads) of ``pid``: resident now, its peak since start."""
    text = Path(f"/proc/{pid}/status").read_text()
    rss, hwm, threads = (parse_status_int(text, k) for k in ("VmRSS", "VmHWM", "Threads"))
    return rss, hwm, threads


@dataclass(frozen=True)
class ProcSample:
    wall: float  # monotonic seconds
    cpu: float  # CPU seconds since the process started
    rss_kib: int
    hwm_kib: int
    threads: int


@dataclass
class ProcSampler:
    """Samples one process; ``wall`` is injectable for tests (default: monotonic)."""

    pid: int
    wall: Callable[[], float] = time.monotonic
    samples: list[ProcSample] = field(default_factory=list)

    def sample(self) -> ProcSample:
        rss, hwm, threads = status_numbers(self.pid)
        s = ProcSample(self.wall(), cpu_seconds(self.pid), rss, hwm, threads)
        self.samples.append(s)
        return s

    def cpu_percent(self) -> float:
        """Mean CPU % of one core between the first and the last sample."""
        if len(self.samples) < 2:
            raise ValueError("CPU % needs two samples")
        first, last = self.samples[0], self.samples[-1]
        return 100.0 * (last.cpu - first.cpu) / (last.wall - first.wall)

    def cpu_percent_steps(self) -> list[float]:
        """CPU % of one core between consecutive samples (to see the spread)."""
        return [
            100.0 * (b.cpu - a.cpu) / (b.wall - a.wall)
            for a, b in zip(self.samples, self.samples[1:], strict=False)
            if b.wall > a.wall
        ]

    def peak_rss_kib(self) -> int:
        """The highest VmRSS seen in the samples."""
        return max(s.rss_kib for s in self.samples)

    def hwm_kib(self) -> int:
        """The kernel's VmHWM at the last sample: the peak RSS since the process started."""
        return self.samples[-1].hwm_kib

    @property
    def seconds(self) -> float:
        return self.samples[-1].wall - self.samples[0].wall if self.samples else 0.0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_facts(now: datetime.datetime | None = None) -> dict[str, str]:
    """What a reader needs to compare figures: {"date": "2025-11-29 10:40 UTC", "cores":
    "2 (2 usable)", "cpu": "...", "python": "3.11.7", "kernel": "6.1.0", "load": ...}."""
    when = now or datetime.datetime.now(datetime.UTC)
    usable = len(os.sched_getaffinity(0))
    load1, load5, _ = os.getloadavg()
    return {
        "date": when.strftime("%Y-%m-%d %H:%M UTC"),
        "cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "kernel": f"{platform.system()} {platform.release()}",
        "load average at start (1 min / 5 min)": f"{load1:.2f} / {load5:.2f}",
    }
