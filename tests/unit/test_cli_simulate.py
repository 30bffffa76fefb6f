"""``pdscaler simulate``: the table, the JSON result (printed with --json and written to
--out), the PNG plot, both trace formats, --duration and --rate-scale, and the error
convention (one line on stderr, exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support.simulate_cli import as_json, azure_csv, simulate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_all_policies_table_json_and_plot(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv")
    result = simulate(tmp_path, "--trace", str(trace), "--policy", "all", "--startup", "30")
    assert result.exit_code == 0, result.output
    for name in ("pdscaler", "static-peak", "static-mean", "hpa-queue", "fixed-ratio"):
        assert name in result.stdout
    assert "forecast-only" in result.stdout
    assert "oracle (SLO-feasible)" in result.stdout
    assert "lower bound" in result.stdout
    assert "work floor" in result.stdout
    assert "replayed" in result.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert set(doc["policies"]) == {
        "pdscaler",
        "static-best",
        "hpa-tuned",
        "dynamo-planner",
        "static-peak",
        "static-mean",
        "hpa-queue",
        "fixed-ratio",
        "forecast-only",
    }
    for row in doc["policies"].values():
        assert 0.0 <= row["slo_attainment"] <= 1.0
        assert row["gpu_hours"] > 0
        for key in ("ttft_p99_s", "tpot_p99_s", "scale_actions", "reversals"):
            assert key in row
    assert doc["oracle"]["gpu_hours"] > doc["work_floor"]["gpu_hours"] > 0
    # the SLO-feasible oracle: its replay meets the target (capped at the ceiling)
    assert doc["oracle"]["slo_attainment"] >= doc["oracle"]["target"]
    assert doc["oracle"]["target"] == min(0.99, doc["feasibility_ceiling"])
    assert doc["oracle"]["gpu_hours"] >= doc["lower_bound"]["gpu_hours"]
    assert doc["static_best"][0]["target"] == 0.99
    assert doc["hpa_tuned"]["tried"]
    # the Dynamo-style planner is tuned on the SLO targets handed to it, and runs the
    # chosen one
    tried = doc["dynamo_tuned"]["tried"]
    assert [t["config"]["slo_scale"] for t in tried] == [1.0, 0.7, 0.5, 0.35]
    assert all(t["config"]["load_based"] for t in tried)
    assert doc["meta"]["dynamo_slo_scale"] == doc["dynamo_tuned"]["config"]["slo_scale"]
    assert doc["meta"]["replay_seconds"] > 0
    assert (tmp_path / "r.png").read_bytes().startswith(PNG_MAGIC)


def test_json_flag_prints_only_json(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv")
    doc = as_json(tmp_path, "--trace", str(trace), "--policy", "static-peak,hpa-queue")
    assert list(doc["policies"]) == ["static-peak", "hpa-queue"]
    assert doc["meta"]["requests"] > 0
    assert (
        json.loads((tmp_path / "r.json").read_text())["policies"].keys() == doc["policies"].keys()
    )


def test_rate_scale_multiplies_requests_not_time(tmp_path: Path) -> None:
    trace = azure_csv(tmp_path / "t.csv")
    base = as_json(tmp_path, "--trace", str(trace), "--policy", "static-mean", "--no-plot")
    double = as_json(
        tmp_path, "--trace", str(trace), "--policy", "static-mean", "--rate-scale", "2"
    )
    assert double["meta"]["requests"] == 2 * base["meta"]["requests"]
    assert double["meta"]["span_s"] == base["meta"]["span_s"]


def test_duration_and_mooncake_format(tmp_path: Path) -> None:
    lines = [
        json.dumps({"timestamp": int(ms), "input_length": 800, "output_length": 50})
        for ms in np.arange(0, 240_000, 400)
    ]
    trace = tmp_path / "m.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    doc = as_json(tmp_path, "--trace", str(trace), "--policy", "pdscaler", "--duration", "60")
    assert doc["meta"]["requests"] == 150  # one every 0.4 s for 60 s
    assert doc["policies"]["pdscaler"]["slo_attainment"] > 0.9


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--policy", "magic"], "unknown policy magic"),
        (["--rate-scale", "0"], "--rate-scale must be > 0"),
        (["--startup", "-5"], "--startup must be > 0"),
        (["--slo-percentile", "1.5"], "percentile"),
        (["--interval", "0.2s"], "interval"),
        (["--rate-scale", "abc"], "--rate-scale"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(tmp_path: Path, args: list[str], phrase: str) -> None:
    trace = azure_csv(tmp_path / "t.csv", seconds=30.0)
    result = simulate(tmp_path, "--trace", str(trace), *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error:"), result.stderr
    assert phrase in lines[0]
    assert "Traceback" not in result.output


def test_missing_or_malformed_trace_is_exit_2(tmp_path: Path) -> None:
    missing = simulate(tmp_path, "--trace", str(tmp_path / "nope.csv"))
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b,c\n1,2,3\n", encoding="utf-8")
    result = simulate(tmp_path, "--trace", str(bad))
    assert result.exit_code == 2
    assert "not an Azure trace header" in result.stderr


def test_requests_that_fit_no_replica_are_counted_and_named(tmp_path: Path) -> None:
    """Two requests of 126,000 prompt tokens cannot fit one decode replica's 100,000
    tokens of KV: every policy's row counts them, the table's caption says so; a trace
    without any says nothing."""
    trace = azure_csv(tmp_path / "t.csv", seconds=120.0)
    lines = trace.read_text().splitlines()
    for i in (5, 9):
        stamp = lines[i].split(",")[0]
        lines[i] = f"{stamp},126000,300"
    trace.write_text("\n".join(lines) + "\n")
    policies = "static-peak,hpa-queue"
    doc = as_json(tmp_path, "--trace", str(trace), "--policy", policies, "--no-plot")
    assert {row["unservable"] for row in doc["policies"].values()} == {2}
    table = simulate(tmp_path, "--trace", str(trace), "--policy", policies, "--no-plot")
    assert "2 requests never servable" in " ".join(table.stdout.split())
    clean = azure_csv(tmp_path / "clean.csv", seconds=120.0)
    plain = simulate(tmp_path, "--trace", str(clean), "--policy", policies, "--no-plot")
    assert "never servable" not in plain.stdout
