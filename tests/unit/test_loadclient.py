"""pdlab.cluster.loadclient's pure parts: the Mooncake trace aiperf replays and the reading of
aiperf's export (the shape aiperf 0.13.0 writes: top-level metrics with unit and stats;
``error_request_count`` only when some requests failed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pdlab.cluster.loadclient import AiPerf, TraceRow, parse_export, write_mooncake


def test_the_trace_keeps_times_in_ms_and_lengths(tmp_path: Path) -> None:
    rows = [TraceRow(0.0, 300, 40), TraceRow(1.25, 1100, 7)]
    lines = write_mooncake(rows, tmp_path / "t.jsonl").read_text().splitlines()
    first, second = (json.loads(x) for x in lines)
    assert (first["timestamp"], first["input_length"], first["output_length"]) == (0, 300, 40)
    assert (second["timestamp"], second["input_length"]) == (1250, 1100)
    assert len(second["hash_ids"]) == 2  # 1100 tokens -> two 512-token blocks
    assert not set(first["hash_ids"]) & set(second["hash_ids"])  # no shared prefix


def test_the_export_gives_counts_errors_and_percentiles() -> None:
    export = {
        "schema_version": "1.4",
        "request_count": {"unit": "requests", "avg": 20},
        "error_request_count": {"unit": "requests", "avg": 3},
        "time_to_first_token": {"unit": "ms", "avg": 7.5, "p50": 6.6, "p99": 19.0},
        "inter_token_latency": {"unit": "ms", "avg": 2.4, "p50": 2.4},
        "request_latency": {"unit": "ms", "p50": 40.0},
    }
    result = parse_export(export)
    assert (result.requests, result.errors) == (20, 3)
    assert result.ttft_ms == {"avg": 7.5, "p50": 6.6, "p99": 19.0}
    assert result.itl_ms["p50"] == 2.4
    assert result.latency_ms == {"p50": 40.0}
    assert parse_export({"request_count": {"avg": 5}}).errors == 0


def test_a_relative_workdir_gives_aiperf_paths_that_resolve_in_its_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiperf runs with its workdir as cwd, so the trace and artifact paths it is given
    must resolve from there: ``make demo``'s default ``--out demo-results`` (relative)
    once gave it ``demo-results/aiperf/trace.jsonl``, which it looked for under
    ``demo-results/aiperf/`` and refused."""
    seen: dict[str, Any] = {}

    def popen(args: list[str], cwd: Path, **_: Any) -> None:
        seen["args"], seen["cwd"] = args, cwd

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(subprocess, "Popen", popen)
    client = AiPerf(venv=tmp_path / "venv", hf_home=tmp_path / "hf")
    client.start("http://127.0.0.1:1", [TraceRow(0.0, 10, 2)], Path("demo-results") / "aiperf")
    args, cwd = seen["args"], Path(seen["cwd"])
    trace = Path(args[args.index("--input-file") + 1])
    artifacts = Path(args[args.index("--artifact-dir") + 1])
    assert (cwd / trace).is_file()
    assert (cwd / artifacts).parent == tmp_path / "demo-results" / "aiperf"
