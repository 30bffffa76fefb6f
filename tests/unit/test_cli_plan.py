"""``pdscaler plan``: every golden number of docs/models.md through the command line (human
tables and ``--json``), the pools of the example manifests, and the error convention
(one line on stderr, exit code 2, never a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import Result

from support.crd_schema import EXAMPLES_DIR, ROOT
from support.invalid_manifests import CASES
from support.plan_cli import as_json, ok, plan

CHAT_RATIO = (
    "ratio --rate 20 --prompt-tokens 2000 --output-tokens 500 --prefill-tps 3000 --decode-tps 800"
)
DRAIN = "drain --arrival 3.5 --startup 10"
CHAT_LOAD = "--rate 20 --prompt-tokens 2000 --output-tokens 500"


def shows(out: str, *phrases: str) -> None:
    """Every phrase appears in the human output."""
    missing = [p for p in phrases if p not in out]
    assert not missing, (missing, out)


# ------------------------------------------------------------------ ratio (docs/models.md §2)


def test_ratio_prints_the_chat_golden_numbers() -> None:
    """N_P = 40000/2100 = 19.05 -> 20, N_D = 10000/560 = 17.86 -> 18, with units."""
    out = ok(f"{CHAT_RATIO} --utilization 0.7")
    shows(out, "N_P 19.05 -> 20", "N_D 17.86 -> 18", "40,000", "tok/s", "P:D ratio 1.07")


def test_ratio_json_golden() -> None:
    data = as_json(f"{CHAT_RATIO} --utilization 0.7")
    assert data["n_prefill"] == pytest.approx(19.0476, abs=1e-4)
    assert data["n_decode"] == pytest.approx(17.8571, abs=1e-4)
    assert (data["prefill_replicas"], data["decode_replicas"]) == (20, 18)
    assert data["ratio"] == pytest.approx(1.0667, abs=1e-4)
    assert data["inputs"]["prefill_utilization"] == data["inputs"]["decode_utilization"] == 0.7


def test_ratio_defaults_to_70_percent_and_takes_per_pool_utilisations() -> None:
    """u defaults to 0.7; u_P 0.6, u_D 0.8: 40000/1800 = 22.2 -> 23, 10000/640 = 15.6 -> 16."""
    assert as_json(CHAT_RATIO)["prefill_replicas"] == 20
    data = as_json(f"{CHAT_RATIO} --prefill-utilization 0.6 --decode-utilization 0.8")
    assert (data["prefill_replicas"], data["decode_replicas"]) == (23, 16)
    mixed = as_json(f"{CHAT_RATIO} --utilization 0.8 --prefill-utilization 0.6")
    assert mixed["inputs"]["decode_utilization"] == 0.8
    assert mixed["decode_replicas"] == 16


def test_long_document_mix_moves_the_ratio_by_an_order_of_magnitude() -> None:
    """8000 in / 100 out on the chat service: 8000/2100 / (100/560) = 21.3 vs 1.07."""
    chat = as_json(CHAT_RATIO)["ratio"]
    long_docs = as_json(CHAT_RATIO.replace("2000", "8000").replace("500 ", "100 "))["ratio"]
    assert long_docs == pytest.approx(21.333, abs=1e-3)
    assert long_docs / chat > 10


def test_no_output_tokens_gives_a_null_ratio_in_json() -> None:
    """L_d = 0: N_P / N_D is infinite; JSON has no inf, so it is null; the table says inf."""
    args = CHAT_RATIO.replace("--output-tokens 500", "--output-tokens 0")
    assert as_json(args)["ratio"] is None
    assert "P:D ratio inf" in ok(args)


# ------------------------------------------------------------------ drain (docs/models.md §3)


def test_drain_prints_the_disaggregated_row() -> None:
    out = ok(f"{DRAIN} --service 4.55 --deadline 60")
    shows(out, "= 35 requests", "drained at 43.3 s, meets the 60 s deadline")


def test_drain_golden_table_in_one_call() -> None:
    """4.55 -> 43.3 s yes; 4.17 -> 62.2 s no; 3.02 -> never, no."""
    data = as_json(f"{DRAIN} --service 4.55 --service 4.17 --service 3.02 --deadline 60")
    assert data["backlog"] == pytest.approx(35.0)
    rows = [(s["service"], s["drain_seconds"], s["meets_deadline"]) for s in data["scenarios"]]
    assert rows == [
        (4.55, pytest.approx(43.33, abs=0.01), True),
        (4.17, pytest.approx(62.24, abs=0.01), False),
        (3.02, None, False),
    ]
    out = ok(f"{DRAIN} --service 4.55 --service 4.17 --service 3.02 --deadline 60")
    shows(out, "43.3", "yes", "62.2", "never", "no")


def test_drain_inverse_gives_mu_min_and_replicas() -> None:
    """mu_min = 3.5 + 35 / (60 - 10) = 4.2 req/s; at 0.65 req/s per replica: 7 replicas."""
    data = as_json(f"{DRAIN} --deadline 60")
    assert data["min_service_rate"] == pytest.approx(4.2)
    assert data["feasible"] is True
    assert data["scenarios"] == []
    assert as_json(f"{DRAIN} --deadline 60 --per-replica 0.65")["replicas"] == 7
    out = ok(f"{DRAIN} --deadline 60 --per-replica 0.65")
    shows(out, "4.2 req/s", "7 replicas")


def test_drain_deadline_not_after_startup_is_infeasible_not_an_error() -> None:
    data = as_json(f"{DRAIN} --deadline 10 --per-replica 0.65")
    assert (data["feasible"], data["min_service_rate"], data["replicas"]) == (False, None, None)
    assert "infeasible" in ok(f"{DRAIN} --deadline 10")


def test_drain_counts_the_queue_and_the_current_capacity() -> None:
    """12 queued + (3.5 - 2) x 10 = 27; 5 queued with 4 req/s served meanwhile -> 0."""
    assert as_json(f"{DRAIN} --queue 12 --current-service 2 --deadline 60")["backlog"] == 27
    assert as_json(f"{DRAIN} --queue 5 --current-service 4 --service 4.55")["backlog"] == 0
    assert "12 queued + (3.5 - 2) req/s x 10 s = 27 requests" in ok(
        f"{DRAIN} --queue 12 --current-service 2 --deadline 60"
    )


# ------------------------------------------------ migrate, reconfigure (docs/models.md §5)


def test_migrate_issue_example() -> None:
    """41.1 / (25 - 0.172) = 1.655 s; 0.172 x 1.655 = 0.285 GB added."""
    args = "migrate --state-gb 41.1 --growth-gbps 0.172 --bandwidth-gbps 25"
    data = as_json(args)
    assert data["catch_up_seconds"] == pytest.approx(41.1 / (25 - 0.172))
    assert data["added_gb"] == pytest.approx(0.172 * 41.1 / (25 - 0.172))
    out = ok(args)
    shows(out, "1.655 s", "0.285 GB")


def test_migrate_from_the_golden_setup() -> None:
    """32 x 8,704 tokens x 144 KiB = 41.1 GB; 1,166 tok/s x 144 KiB = 0.172 GB/s;
    catch-up over 25 GB/s in 1.654 s adding 0.284 GB."""
    data = as_json(
        "migrate --requests 32 --context-tokens 8704 --kv-kib-per-token 144 "
        "--decode-tps 1166 --bandwidth-gbps 25"
    )
    assert round(data["state_gb"], 1) == 41.1
    assert round(data["growth_gbps"], 3) == 0.172
    assert data["catch_up_seconds"] == pytest.approx(1.654, abs=1e-3)
    assert data["added_gb"] == pytest.approx(0.284, abs=1e-3)


def test_migrate_never_when_the_link_is_slower_than_growth() -> None:
    args = "migrate --state-gb 41.1 --growth-gbps 0.172 --bandwidth-gbps 0.1"
    data = as_json(args)
    assert (data["catch_up_seconds"], data["added_gb"]) == (None, None)
    assert "never" in ok(args).lower()


def test_reconfigure_prep_is_the_floor() -> None:
    """66 GB / 25 GB/s + 9 s = 11.64 s; 4x the bandwidth: 9.66 s, only ~17% shorter."""
    args = "reconfigure --bytes-gb 66 --bandwidth-gbps 25 --prep 9"
    data = as_json(args)
    assert data["seconds"] == pytest.approx(11.64)
    (four,) = data["speedups"]
    assert (four["factor"], four["seconds"]) == (4, pytest.approx(9.66))
    assert four["gain"] == pytest.approx(0.17, abs=0.005)
    out = ok(args)
    shows(out, "11.64", "9.66", "17%")
    twice = as_json(f"{args} --speedup 2 --speedup 10")["speedups"]
    assert [s["factor"] for s in twice] == [2, 10]
    assert twice[1]["seconds"] == pytest.approx(9.264)


# ------------------------------------------------------------------ from-file


def test_from_file_plans_the_chat_example() -> None:
    """The chat manifest at 20 req/s, 2000/500 tokens: 20 + 18 replicas, 38 of 48 GPUs."""
    data = as_json(f"--from-file {EXAMPLES_DIR / 'chat.yaml'} {CHAT_LOAD}")
    assert (data["prefill"]["replicas"], data["decode"]["replicas"]) == (20, 18)
    assert (data["gpus_used"], data["max_gpus"], data["limited"]) == (38, 48, False)
    assert data["prefill"]["n"] == pytest.approx(19.0476, abs=1e-4)
    # the subcommand spelling is the same plan
    assert as_json(f"from-file {EXAMPLES_DIR / 'chat.yaml'} {CHAT_LOAD}") == data
    out = ok(f"--from-file {EXAMPLES_DIR / 'chat.yaml'} {CHAT_LOAD}")
    shows(out, "19.05 -> 20", "GPUs used: 38 of maxGPUs 48")


def test_from_file_long_docs_example() -> None:
    """2 req/s of 30000/300 tokens: N_P = 60000/7200 = 8.33 -> 9 replicas of 2 GPUs,
    N_D = 600/720 = 0.83 -> 1 (2 GPUs); ratio 10:1."""
    data = as_json(
        f"from-file {EXAMPLES_DIR / 'long-docs.yaml'} --rate 2 --prompt-tokens 30000 "
        "--output-tokens 300"
    )
    assert (data["prefill"]["replicas"], data["decode"]["replicas"]) == (9, 1)
    assert (data["prefill"]["gpus"], data["decode"]["gpus"], data["gpus_used"]) == (18, 2, 20)
    assert data["ratio"] == pytest.approx(10.0)


def test_from_file_clamps_to_the_replica_bounds() -> None:
    """At 40 req/s the chat pools want 39 and 36 but replicas.max is 24."""
    args = (
        f"from-file {EXAMPLES_DIR / 'chat.yaml'} --rate 40 --prompt-tokens 2000 --output-tokens 500"
    )
    data = as_json(args)
    assert (data["prefill"]["want"], data["decode"]["want"]) == (39, 36)
    assert (data["prefill"]["replicas"], data["decode"]["replicas"]) == (24, 24)
    assert data["prefill"]["utilization"] == pytest.approx(80000 / (24 * 3000))
    assert "held at replicas.max 24" in ok(args)
    idle = as_json(args.replace("--rate 40", "--rate 0"))
    assert (idle["prefill"]["replicas"], idle["decode"]["replicas"]) == (2, 2)


def _chat_with(tmp_path: Path, **scaling: Any) -> Path:
    manifest = yaml.safe_load((EXAMPLES_DIR / "chat.yaml").read_text())
    manifest["spec"]["scaling"].update(scaling)
    for pool in ("prefill", "decode"):
        manifest["spec"][pool]["replicas"] = {"min": 1, "max": 32}
    path = tmp_path / "chat-32.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def test_from_file_splits_a_short_budget(tmp_path: Path) -> None:
    """maxGPUs 32 for wants 20 + 18: both pools at 119% with 16/15, the 32nd GPU to
    prefill by default (17/15) or to decode with --prefer decode (16/16)."""
    path = _chat_with(tmp_path, maxGPUs=32)
    data = as_json(f"from-file {path} {CHAT_LOAD}")
    assert (data["prefill"]["replicas"], data["decode"]["replicas"]) == (17, 15)
    assert (data["gpus_used"], data["limited"]) == (32, True)
    preferred = as_json(f"from-file {path} {CHAT_LOAD} --prefer decode")
    assert (preferred["prefill"]["replicas"], preferred["decode"]["replicas"]) == (16, 16)
    assert "Limited by maxGPUs" in ok(f"--from-file {path} {CHAT_LOAD}")


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.id in {"max-gpus-below-minimums", "slo-ttft-zero"}]
)
def test_from_file_rejects_an_invalid_manifest_in_one_line(tmp_path: Path, case: Any) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(case.manifest()))
    result = plan(f"from-file {path} {CHAT_LOAD}")
    assert result.exit_code == 2
    assert_one_line_error(result)
    assert case.pydantic_loc in result.stderr
    assert case.pydantic_error.split(",")[0] in result.stderr


# ------------------------------------------------------------------ errors


def assert_one_line_error(result: Result) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (f"{CHAT_RATIO.replace('20', '-20', 1)}", "--rate must be >= 0"),
        (f"{CHAT_RATIO} --utilization 1.5", "--utilization must be in (0, 1]"),
        (f"{CHAT_RATIO} --decode-utilization 0", "--decode-utilization must be in (0, 1]"),
        (CHAT_RATIO.replace("3000", "0"), "--prefill-tps must be > 0"),
        (CHAT_RATIO.replace("20", "nan", 1), "--rate must be a finite number"),
        ("ratio --rate abc", "Invalid value for '--rate'"),
        ("ratio --rate 20", "Missing option '--prompt-tokens'"),
        (f"{CHAT_RATIO} --rat 3", "No such option: --rat"),
        ("nosuch", "No such command 'nosuch'"),
        (DRAIN, "give --service"),
        (f"{DRAIN} --service -1", "--service must be >= 0"),
        (f"{DRAIN} --deadline 60 --per-replica 0", "--per-replica must be > 0"),
        (f"{DRAIN} --deadline 0", "--deadline must be > 0"),
        (f"{DRAIN} --queue -3 --deadline 60", "--queue must be >= 0"),
        ("migrate --bandwidth-gbps 25 --growth-gbps 1", "give --state-gb"),
        ("migrate --state-gb 1 --bandwidth-gbps 25", "give --growth-gbps"),
        ("migrate --state-gb -4 --growth-gbps 1 --bandwidth-gbps 25", "--state-gb must be >= 0"),
        ("migrate --state-gb 4 --growth-gbps 1 --bandwidth-gbps 0", "--bandwidth-gbps must be > 0"),
        ("reconfigure --bytes-gb 66 --bandwidth-gbps 0", "--bandwidth-gbps must be > 0"),
        ("reconfigure --bytes-gb 66 --bandwidth-gbps 25 --prep -1", "--prep must be >= 0"),
        ("reconfigure --bytes-gb 66 --bandwidth-gbps 25 --speedup 0", "--speedup must be > 0"),
        (f"from-file /no/such.yaml {CHAT_LOAD}", "cannot read /no/such.yaml"),
        (f"--from-file {EXAMPLES_DIR / 'chat.yaml'}", "--from-file needs --rate"),
        (f"--from-file {EXAMPLES_DIR / 'chat.yaml'} {CHAT_LOAD} --rate -1", "--rate must be"),
        ("--json", "give a subcommand"),
        (f"--rate 3 {CHAT_RATIO}", "without a subcommand"),
        (f"from-file {ROOT / 'pyproject.toml'} {CHAT_LOAD}", "not valid YAML"),
        (f"from-file {ROOT / 'crds' / 'pdscaler.io_pddeployments.yaml'} {CHAT_LOAD}", "found 0"),
        (f"from-file {EXAMPLES_DIR / 'chat.yaml'} {CHAT_LOAD} --prefer both", "'--prefer'"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: str, phrase: str) -> None:
    result = plan(args)
    assert_one_line_error(result)
    assert phrase in result.stderr


def test_plan_without_arguments_prints_help() -> None:
    result = plan("")
    assert result.exit_code == 0
    for name in ("ratio", "drain", "migrate", "reconfigure", "from-file", "--from-file"):
        assert name in result.stdout


def test_python_dash_m_pdscaler_runs_the_calculator() -> None:
    """The installed entry point, as a user runs it: golden JSON, then a bad argument."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}

    def run(args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pdscaler", "plan", *args.split()],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    good = run(f"{CHAT_RATIO} --utilization 0.7 --json")
    assert good.returncode == 0, good.stderr
    data = json.loads(good.stdout)
    assert (data["prefill_replicas"], data["decode_replicas"]) == (20, 18)
    bad = run("drain --arrival 3.5 --startup ten --deadline 60")
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "Invalid value for '--startup'" in bad.stderr
    assert "Traceback" not in bad.stderr
