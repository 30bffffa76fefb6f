"""pdlab.loadclient's pure parts: the Mooncake trace aiperf replays and the reading of
aiperf's export (the shape aiperf 0.13.0 writes: top-level metrics with unit and stats;
``error_request_count`` only when some requests failed)."""

from __future__ import annotations

import json
from pathlib import Path

from pdlab.loadclient import TraceRow, parse_export, write_mooncake


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
