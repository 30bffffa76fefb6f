"""What one drill reports, for ``make drill`` (bench/results/reliability.md).

Owns: the record a drill fills while it runs (``DrillRecord``: which drill, the fault,
the invariant, how many samples its samplers took, how many violated the invariant, how
long recovery took) and writing it as JSON when ``PDSCALER_DRILL_OUT`` names a
directory. Must not: decide whether the drill passed (its asserts do; the record only
carries the outcome pytest reports) or render anything (bench/reliability.py does).

    def test_x(drill: DrillRecord, ...) -> None:
        drill.describe("D7", fault="Prometheus stopped 20 s", invariant="no scale-down")
        with Sampler(...) as s:
            ...
        drill.sampled(s.samples, len(s.violations))
        drill.recovered("first tick after restart", 3.2)
    # -> {"drill": "D7", "samples": 212, "violations": 0,
    #     "recovery_s": {"first tick after restart": [3.2]}, "outcome": "passed", ...}
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import provenance

#: The directory ``make drill`` collects records in (unset: records are not written).
OUT_ENV = "PDSCALER_DRILL_OUT"


@dataclass
class DrillRecord:
    """One drill case's report; ``case`` is the pytest node id."""

    case: str
    drill: str = ""
    fault: str = ""
    invariant: str = ""
    shortened: str = ""
    samples: int = 0
    violations: int = 0
    recovery_s: dict[str, list[float]] = field(default_factory=dict)
    outcome: str = ""
    duration_s: float = 0.0

    def describe(self, drill: str, fault: str, invariant: str, shortened: str = "") -> None:
        """Which drill (``D7``), the fault injected, the invariant checked, and what was
        shortened from the issue's windows to fit CI (empty: nothing)."""
        self.drill, self.fault, self.invariant, self.shortened = drill, fault, invariant, shortened

    def sampled(self, samples: int, violations: int) -> None:
        """Add a sampler's count of samples and of samples that broke the invariant."""
        self.samples += samples
        self.violations += violations

    def recovered(self, what: str, seconds: float) -> None:
        """One measured recovery (``what``: "first write after restart")."""
        self.recovery_s.setdefault(what, []).append(round(seconds, 2))

    def missing(self) -> str | None:
        """What a drill forgot to fill (None: complete)."""
        if not (self.drill and self.fault and self.invariant):
            return "describe() was not called"
        if self.samples <= 0:
            return "no samples recorded (sampled() was not called or the sampler never ran)"
        return None

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", self.case) + ".json")
        record = {**asdict(self), provenance.KEY: provenance.measured_at()}
        path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        return path


def out_dir() -> Path | None:
    value = os.environ.get(OUT_ENV, "")
    return Path(value) if value else None
