"""``pdscaler simulate`` run in-process for the tests, and a small Azure-format trace to
feed it (no tests here).

    trace = azure_csv(tmp_path / "t.csv")                 # 300 s at 4 req/s, seeded
    as_json(tmp_path, "--trace", str(trace))    # the --json report, parsed
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner, Result

from pdscaler.cli import build_app

APP = build_app()


def azure_csv(
    path: Path, seconds: float = 300.0, rate: float = 4.0, seed: int = 0, prompt: int | None = None
) -> Path:
    """A small Azure-format trace: Poisson arrivals, chat-like lengths (every prompt
    ``prompt`` tokens when given)."""
    rng = np.random.default_rng(seed)
    t0 = datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, int(rate * seconds)))
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in arrivals[arrivals < seconds]:
        stamp = (t0 + timedelta(seconds=float(t))).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
        context = prompt if prompt is not None else rng.integers(200, 3000)
        rows.append(f"{stamp},{context},{rng.integers(10, 400)}")
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def simulate(tmp_path: Path, *args: str) -> Result:
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    return CliRunner().invoke(
        APP, ["simulate", *args, "--out", str(out), "--plot", str(plot)], catch_exceptions=False
    )


def as_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    result = simulate(tmp_path, *args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data
