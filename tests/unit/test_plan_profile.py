"""``pdscaler plan profile``: the profile written from aiconfigurator's answers (recorded
in tests/fixtures/aic_qwen3_8b_h100.json) parses as a PDDeployment's pools, has the
database's numbers, and is the profile the simulator gives its spec for that engine;
without aiconfigurator the command says how to install the extra; and the recorded
answers are the real database's (aiconfigurator is in the dev extra)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pdscaler.cli import build_app, plan_profile
from pdscaler.sim.measured import Deployment, Recorded, load_engine
from pdscaler.sim.profiles import with_measured_profile, with_pool_profiles
from pdscaler.sim.setup import sim_spec
from pdscaler.spec import PDDeployment
from support.crd_schema import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "aic_qwen3_8b_h100.json"
MANIFEST = ROOT / "deploy" / "examples" / "chat.yaml"
ENGINES = sorted((ROOT / "bench" / "engines").glob("*.json"))
APP = build_app()
ARGS = ["plan", "profile", "--model", "Qwen/Qwen3-8B", "--system", "h100_sxm", "--tp", "1"]


def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text())
    return data


def run_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str
) -> tuple[dict[str, Any], Path]:
    """The command on the recorded answers; its YAML and the engine record's path."""
    monkeypatch.setattr(plan_profile, "open_answers", lambda d: Recorded(recorded()))
    out, rec = tmp_path / "profile.yaml", tmp_path / "engine.json"
    result = CliRunner().invoke(APP, [*ARGS, "-o", str(out), "--engine-out", str(rec), *extra])
    assert result.exit_code == 0, result.output
    assert "fit max 2.2% (prefill)" in result.output
    return yaml.safe_load(out.read_text()), rec


def manifest_doc(pools: dict[str, Any]) -> dict[str, Any]:
    """deploy/examples/chat.yaml with the written fields merged into its pools."""
    doc: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    for role in ("prefill", "decode"):
        doc["spec"][role].update(pools[role])
    return doc


def manifest_with(pools: dict[str, Any]) -> PDDeployment:
    return PDDeployment.model_validate(manifest_doc(pools))


def test_the_written_profile_is_a_pddeployments_and_has_the_databases_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Qwen3-8B, one H100, vLLM, 50 ms. Prefill at 8,192 tokens (one prompt a batch):
    the database says 203.48 ms, 40,259 tokens/s; at 1,024 (8 a batch) 178.63 ms,
    45,860 tokens/s: the profile within the fit's 2.2% (+ rounding). Decode at a
    2,048-token context (prompt 1,920 + 256 output): the KV (382,705 tokens) holds 175
    sequences; the database's step at 2,048 + 32 tokens is 19.60 ms at 128 and 25.80
    at 181 sequences, 25.10 ms at 175 by interpolation: 6,972 tokens/s, the profile
    within the decode fit's 8.3%. The replica's KV and GPUs are the database's."""
    pools, _ = run_recorded(tmp_path, monkeypatch)
    spec = manifest_with(pools).spec
    prefill = dict(spec.prefill.profile_points())
    decode = dict(spec.decode.profile_points())
    answers = recorded()
    ttft = {(p, b): ms / 1e3 for p, b, ms in answers["prefill_ms"]}
    assert prefill[8192] == pytest.approx(8192 / ttft[(8192, 1)], rel=0.023)
    assert prefill[1024] == pytest.approx(8192 / ttft[(1024, 8)], rel=0.023)
    assert 8192 / ttft[(8192, 1)] == pytest.approx(40_259, abs=1)
    step = {(p, b): ms / 1e3 for p, _, b, ms in answers["decode_ms"]}
    batch = 382_705 // (1920 + 256)
    assert batch == 175
    s = step[(2048, 128)] + (batch - 128) / (181 - 128) * (step[(2048, 181)] - step[(2048, 128)])
    assert decode[2048] == pytest.approx(batch / s, rel=0.084)
    assert spec.decode.kv_cache_tokens == 382_705
    assert (spec.prefill.gpus_per_replica, spec.decode.gpus_per_replica) == (1, 1)
    # the model's context is 40,960: no point past it
    assert max(prefill) == 32_768
    assert max(decode) == 32_768
    # the constant is the profile at 1,024 tokens
    assert spec.prefill.tokens_per_second == prefill[1024]
    assert spec.decode.tokens_per_second == decode[1024]


def test_the_simulator_reads_the_same_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine record written with the profile, loaded as the bench loads it, gives
    the simulated spec exactly the written points (same TPOT, 50 ms)."""
    pools, rec = run_recorded(tmp_path, monkeypatch)
    engine = load_engine(rec)
    spec = with_measured_profile(sim_spec(tpot_s=0.05), engine.params, engine.facts.max_context)
    written = manifest_with(pools).spec
    assert spec.prefill.profile_points() == written.prefill.profile_points()
    assert spec.decode.profile_points() == written.decode.profile_points()
    assert len(written.decode.profile) == 8
    # every written field: the spec a team deploys after measuring
    full = with_pool_profiles(sim_spec(tpot_s=0.05), engine.params, engine.facts.max_context)
    for role in ("prefill", "decode"):
        for field, value in pools[role].items():
            assert getattr(full, role).model_dump(by_alias=True)[field] == value
    assert full.prefill.tokens_per_second == 46_780
    assert full.decode.kv_cache_tokens == 382_705


def test_a_tighter_tpot_lowers_the_decode_points_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 20 ms the step caps the batch below the 175 sequences the KV holds: the
    database's step at 2,048 tokens is 19.60 ms at 128 and 25.80 ms at 181 sequences,
    20 ms at 131.4 by interpolation: 6,570 tokens/s, the profile within the decode
    fit's 8.3% and below the 50 ms point; prefill is unchanged."""
    at50, _ = run_recorded(tmp_path, monkeypatch)
    at20, _ = run_recorded(tmp_path, monkeypatch, "--tpot-ms", "20")
    d50 = dict(manifest_with(at50).spec.decode.profile_points())
    d20 = dict(manifest_with(at20).spec.decode.profile_points())
    step = {(p, b): ms for p, _, b, ms in recorded()["decode_ms"]}
    lo, hi = step[(2048, 128)], step[(2048, 181)]
    batch = 128 + (20.0 - lo) / (hi - lo) * (181 - 128)
    assert batch == pytest.approx(131.4, abs=0.1)
    assert d20[2048] == pytest.approx(batch / 0.020, rel=0.084)
    assert d20[2048] < 0.93 * d50[2048]
    assert at20["prefill"] == at50["prefill"]


def test_without_aiconfigurator_it_says_how_to_install_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("aiconfigurator", "aiconfigurator.cli", "aiconfigurator.cli.api"):
        monkeypatch.setitem(sys.modules, name, None)
    result = CliRunner().invoke(APP, ARGS)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: aiconfigurator is not installed")
    assert "pip install 'pdscaler[profiles]'" in lines[0]


def test_the_recorded_answers_are_the_real_databases() -> None:
    """aiconfigurator 0.12.0 (the dev extra) answers a few of the recorded questions
    the same: prefill of 128 x 1 and 8,192 x 1, decode of 64 and of the KV-bound 351
    sequences of 1,024 tokens, and the replica's KV."""
    from pdscaler.profiling.aic import open_database

    answers = recorded()
    db = open_database(Deployment(**answers["deployment"]))
    assert db.source()["version"] == answers["source"]["version"] == "0.12.0"
    assert db.facts().kv_tokens == answers["facts"]["kv_tokens"] == 382_705
    ttft = {(p, b): ms for p, b, ms in answers["prefill_ms"]}
    for p, b in ((128, 1), (8192, 1)):
        assert db.prefill_s(p, b) * 1e3 == pytest.approx(ttft[(p, b)], rel=1e-9)
    tpot = {(p, o, b): ms for p, o, b, ms in answers["decode_ms"]}
    for b in (64, 351):
        assert db.decode_step_s(1024, 64, b) * 1e3 == pytest.approx(tpot[(1024, 64, b)], rel=1e-9)


@pytest.mark.parametrize("path", ENGINES, ids=[p.stem for p in ENGINES])
def test_a_committed_profile_is_its_engines(path: Path) -> None:
    """bench/engines/<name>.profile.yaml is what the command writes for <name>.json at
    50 ms (both written by bench/engines/regenerate.sh)."""
    engine = load_engine(path)
    assert path.with_suffix(".profile.yaml").read_text() == plan_profile.render(engine, 0.05)


def test_the_operators_planner_reads_the_written_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy/examples/chat.yaml with the measured Qwen3-8B pools, planned by ``plan
    from-file`` at 20 req/s of 2,000 + 500 tokens: prefill is read off the profile at
    2,000 tokens, 46,780 - 976 / 1,024 x 900 = 45,922 tokens/s (not the example's 3,000),
    so 40,000 / (45,922 x 0.7) = 1.24 -> 2 replicas."""
    pools, _ = run_recorded(tmp_path, monkeypatch)
    manifest = tmp_path / "measured.yaml"
    manifest.write_text(yaml.safe_dump(manifest_doc(pools)))
    args = ["--rate", "20", "--prompt-tokens", "2000", "--output-tokens", "500", "--json"]
    result = CliRunner().invoke(APP, ["plan", "from-file", str(manifest), *args])
    assert result.exit_code == 0, result.output
    prefill = json.loads(result.stdout)["prefill"]
    expected = 46_780 - (2000 - 1024) / (2048 - 1024) * (46_780 - 45_880)
    assert prefill["tokens_per_second"] == pytest.approx(expected)
    assert expected == pytest.approx(45_922, abs=1)
    assert prefill["want"] == 2
