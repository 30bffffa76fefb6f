"""Measured engines (pdscaler.sim.measured): the fits recover an engine they are given,
the recorded database answers are met within the stated error, the committed engines of
bench/engines/ are the fits of their own answers and load without aiconfigurator, and
the hand-made engine is untouched by the measured-only terms."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pdscaler.sim.engine import EngineParams
from pdscaler.sim.measured import (
    DECODE_OUTPUT,
    DecodeSample,
    Deployment,
    MeasuredEngine,
    ModelFacts,
    PrefillSample,
    Recorded,
    assemble,
    decode_grid,
    engines_in,
    fit_decode,
    fit_prefill,
    from_record,
    load_engine,
    measure,
    prefill_grid,
    to_record,
)
from pdscaler.sim.profiles import measured_profile
from support.crd_schema import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "aic_qwen3_8b_h100.json"
ENGINES = sorted((ROOT / "bench" / "engines").glob("*.json"))


def fixture_engine() -> MeasuredEngine:
    rec: dict[str, Any] = json.loads(FIXTURE.read_text())
    return measure("qwen3-8b", Deployment(**rec["deployment"]), Recorded(rec))


def test_the_fits_recover_an_engine_they_are_given() -> None:
    """Answers made by a known engine with every measured term on (a floor under small
    prefills, a compute line under large decode batches, MoE experts) are fitted back
    to that engine, with no error."""
    true = EngineParams(
        prefill_tps=20_000.0,
        prefill_overhead_s=0.002,
        prefill_attention_tokens=60_000.0,
        prefill_floor_s=0.010,
        prefill_floor_s_per_token=3.6e-5,
        decode_step_base_s=0.004,
        decode_step_per_seq_s=2e-5,
        decode_step_per_kv_token_s=3e-8,
        decode_step_moe_s=0.012,
        decode_moe_miss=0.9375,
        decode_step_compute_s_per_seq=6e-5,
    )
    pre = [
        PrefillSample(p, b, true.prefill_seconds(p * b, b * p * p))
        for p, b in prefill_grid(40_960, 8192)
    ]
    dec = [DecodeSample(p, DECODE_OUTPUT, b, 0.0) for p, b in decode_grid(40_960, 700_000, 1024)]
    dec = [replace(s, step_s=true.decode_step(s.batch, s.kv_tokens)) for s in dec]
    pf = fit_prefill(pre)
    df = fit_decode(dec, 0.9375)
    assert pf.error.max_rel < 1e-6
    assert df.error.max_rel < 1e-6
    assert pf.tps == pytest.approx(20_000.0, rel=1e-6)
    assert pf.attention_tokens == pytest.approx(60_000.0, rel=1e-5)
    assert pf.floor_s == pytest.approx(0.010, rel=1e-5)
    assert df.moe_s == pytest.approx(0.012, rel=1e-6)
    assert df.compute_s_per_seq == pytest.approx(6e-5, rel=1e-6)
    assert df.per_kv_token_s == pytest.approx(3e-8, rel=1e-6)


def test_a_dense_decode_fit_has_no_experts_and_the_closed_form_alone_is_kept() -> None:
    """The hand-made engine's own decode answers: the plain closed form (no compute
    line, no experts) fits them exactly."""
    true = EngineParams()
    dec = [
        DecodeSample(p, DECODE_OUTPUT, b, true.decode_step(b, b * (p + DECODE_OUTPUT / 2)))
        for p, b in decode_grid(100_000, 100_000, 256)
    ]
    df = fit_decode(dec)
    assert (df.moe_s, df.compute_s_per_seq) == (0.0, 0.0)
    assert df.base_s == pytest.approx(0.012, rel=1e-6)
    assert df.per_seq_s == pytest.approx(1e-4, rel=1e-6)


def test_the_hand_made_engine_is_unchanged_by_the_measured_terms() -> None:
    """Defaults: the golden numbers of engine.py (a step of 64 x 1,260 tokens 38.6 ms;
    one 16,000-token prompt 2.461 s); the measured terms act only when set: a compute
    line of 200 us a sequence makes 1,024 sequences take 204.8 ms + their KV."""
    p = EngineParams()
    assert p.decode_step(64, 80_640) == pytest.approx(0.012 + 0.0064 + 0.02016)
    assert p.prefill_seconds(16_000, 16_000**2) == pytest.approx(
        0.015 + 16_000 / 8500 + 16_000**2 / (8500 * 53_400)
    )
    assert p.prefill_batch_tps() == pytest.approx(8192 / (0.015 + 8192 / 8500))
    c = replace(p, decode_step_compute_s_per_seq=2e-4)
    assert c.decode_step(1024, 0.0) == pytest.approx(0.2048)  # not 0.012 + 0.1024
    assert c.decode_step(8, 0.0) == pytest.approx(0.012 + 0.0008)  # memory-bound
    f = replace(p, prefill_floor_s=0.05)
    assert f.prefill_seconds(100, 0.0) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="decode_moe_miss"):
        EngineParams(decode_moe_miss=1.5)
    with pytest.raises(ValueError, match="prefill_floor_s"):
        EngineParams(prefill_floor_s=-1.0)


def test_the_recorded_answers_are_met_within_the_stated_error() -> None:
    """Qwen3-8B on one H100 (aiconfigurator 0.12.0's answers): every answer within the
    fit's stated max error, which is small (prefill 2.2%, decode 8.3%)."""
    engine = fixture_engine()
    p = engine.params
    for ps in engine.prefill_samples:
        assert p.prefill_seconds(ps.tokens, ps.squares) == pytest.approx(ps.seconds, rel=0.023)
    for ds in engine.decode_samples:
        assert p.decode_step(ds.batch, ds.kv_tokens) == pytest.approx(ds.step_s, rel=0.084)
    assert engine.prefill_fit.error.max_rel < 0.023
    assert engine.decode_fit.error.max_rel < 0.084
    # the replica: one GPU, the database's KV, vLLM's slots and budget
    assert (p.prefill_gpus, p.decode_gpus) == (1, 1)
    assert p.decode_kv_tokens == 382_705
    assert (p.decode_max_seqs, p.prefill_token_budget) == (1024, 8192)
    # 144 KiB of KV a token over 25 GB/s
    assert p.kv_handoff_s_per_token == pytest.approx(147_456 / 25e9)


def test_a_record_round_trips() -> None:
    engine = fixture_engine()
    back = from_record(json.loads(json.dumps(to_record(engine))))
    assert back == engine


@pytest.mark.parametrize("path", ENGINES, ids=[p.stem for p in ENGINES])
def test_a_committed_engine_is_the_fit_of_its_answers(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/engines/*.json load with aiconfigurator unimportable, and refitting their
    recorded answers gives their params and fit errors exactly."""
    for name in ("aiconfigurator", "aiconfigurator_core"):
        monkeypatch.setitem(sys.modules, name, None)
    engine = load_engine(path)
    record = json.loads(path.read_text())
    refit = assemble(
        engine.name,
        engine.deployment,
        ModelFacts(**record["facts"]),
        engine.source,
        engine.prefill_samples,
        engine.decode_samples,
    )
    assert refit.params == engine.params
    assert refit.prefill_fit == engine.prefill_fit
    assert refit.decode_fit == engine.decode_fit
    assert engine.source["tool"] == "aiconfigurator"
    assert engine.source["version"] == "0.12.0"
    assert engine.params.decode_gpus == engine.deployment.tp
    assert math.isfinite(engine.params.prefill_tps)
    assert engine.prefill_fit.error.max_rel < 0.05
    assert engine.decode_fit.error.max_rel < 0.125


def test_the_committed_engines_are_the_three_deployments() -> None:
    """A dense model on one GPU, a larger one with TP on another GPU kind, a MoE."""
    engines = engines_in(ROOT / "bench" / "engines")
    assert sorted(engines) == [p.stem for p in ENGINES]
    kinds = {(e.deployment.model, e.deployment.system, e.deployment.tp) for e in engines.values()}
    assert kinds == {
        ("Qwen/Qwen3-8B", "h100_sxm", 1),
        ("Qwen/Qwen3-32B", "h200_sxm", 2),
        ("Qwen/Qwen3-30B-A3B", "h200_sxm", 1),
    }
    moe = [e for e in engines.values() if e.facts.moe_miss < 1.0]
    assert [e.deployment.model for e in moe] == ["Qwen/Qwen3-30B-A3B"]
    assert moe[0].params.decode_step_moe_s > 0.0


def test_the_docs_table_is_the_committed_engines() -> None:
    """docs/models.md §2e's table: each measured engine's GPUs, KV tokens, profile at
    1,024 / 8,192 tokens (TPOT 50 ms) and fit errors are those of its JSON; the
    hand-made row is ``EngineParams()``'s."""
    doc = (ROOT / "docs" / "models.md").read_text()
    rows = {
        cells[0].split(" (")[0]: cells[1:]
        for line in doc.splitlines()
        if line.startswith("| ") and "|---" not in line
        for cells in [[c.strip() for c in line.strip("|").split("|")]]
    }

    def expect(params: EngineParams, context: int | None) -> list[str]:
        pre, dec = measured_profile(params, 0.05, context)
        p, d = dict(pre), dict(dec)
        return [
            str(params.decode_gpus),
            f"{params.decode_kv_tokens:,}",
            f"{p[1024]:,.0f} / {p[8192]:,.0f}",
            f"{d[1024]:,.0f} / {d[8192]:,.0f}",
        ]

    for name, e in engines_in(ROOT / "bench" / "engines").items():
        pe, de = e.prefill_fit.error, e.decode_fit.error
        errors = [
            f"{pe.max_rel:.1%} / {pe.mean_rel:.1%}",
            f"{de.max_rel:.1%} / {de.mean_rel:.1%}",
        ]
        assert rows[name] == [*expect(e.params, e.facts.max_context), *errors]
    assert rows["hand-made"] == [*expect(EngineParams(), None), "-", "-"]


def test_a_record_of_another_version_or_unknown_params_is_refused() -> None:
    """A record whose params name a field EngineParams does not have (renamed since it
    was written) fails loudly instead of building another engine."""
    record = to_record(fixture_engine())
    with pytest.raises(ValueError, match="record_version 0"):
        from_record({**record, "record_version": 0})
    params = {**record["params"], "prefill_tokens_per_s": 1.0}
    with pytest.raises(ValueError, match="unknown EngineParams fields: prefill_tokens_per_s"):
        from_record({**record, "params": params})
