"""``pdscaler plan ratio --kv-cache-tokens``: the decode memory bound (docs/models.md §2b)
through the command line, golden long-context numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from support.crd_schema import EXAMPLES_DIR
from support.plan_cli import as_json, ok, plan

LONG = (
    "ratio --rate 3.5 --prompt-tokens 12000 --output-tokens 350 --prefill-tps 8500 "
    "--decode-tps 1400"
)
WITH_KV = f"{LONG} --kv-cache-tokens 100000 --tpot 0.03"


def test_memory_bound_golden_table() -> None:
    """t_d 10.5 s, 36.75 sequences of 12,175 tokens = 447,431 tokens over 90,000 per
    replica: N_D 4.97 -> 5, against 1.25 -> 2 by throughput."""
    out = ok(WITH_KV)
    for phrase in (
        "Decode memory bound (docs/models.md §2b)",
        "10.5 s",
        "36.75",
        "447,431",
        "N_D 4.97 -> 5",
        "decode sized by memory: N_D 4.97 -> 5 (throughput 1.25, memory 4.97)",
        "N_P / N_D by KV memory; 8:5 replicas",
    ):
        assert phrase in out, phrase


def test_memory_bound_json() -> None:
    data = as_json(WITH_KV)
    assert data["n_decode"] == pytest.approx(1.25)  # the ratio model's own figure
    assert data["memory"]["n_decode"] == pytest.approx(4.9715, abs=1e-4)
    assert data["decode"] == {
        "n_decode": pytest.approx(4.9715, abs=1e-4),
        "decode_replicas": 5,
        "bound": "memory",
    }
    assert data["inputs"]["kv_cache_tokens"] == 100_000


def test_without_kv_the_output_is_the_ratio_models() -> None:
    """No --kv-cache-tokens: no memory table, no ``memory`` in the JSON."""
    assert "memory" not in ok(LONG)
    assert "memory" not in as_json(LONG)


def test_bad_kv_is_a_one_line_error() -> None:
    result = plan(f"{LONG} --kv-cache-tokens 0")
    assert result.exit_code == 2
    assert "--kv-cache-tokens must be > 0, got 0.0" in result.output


def test_from_file_uses_the_decode_kv_cache_tokens(tmp_path: Path) -> None:
    """The chat example with ``decode.kvCacheTokens: 20000`` at 20 req/s, 2000/500
    tokens: memory needs 20 x 25 s (500 x 50 ms, the TPOT SLO) x 2,250 tokens / 18,000 =
    62.5 decode replicas, above the 17.86 of throughput: decode wants 63, capped at its
    max 24 and the budget; the plan says memory binds. Without it: 18, throughput."""
    doc = yaml.safe_load((EXAMPLES_DIR / "chat.yaml").read_text(encoding="utf-8"))
    doc["spec"]["decode"]["kvCacheTokens"] = 20_000
    path = tmp_path / "chat-kv.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    load = "--rate 20 --prompt-tokens 2000 --output-tokens 500"
    data = as_json(f"from-file {path} {load}")
    assert data["decode_bound"] == "memory"
    assert data["decode"]["n"] == pytest.approx(62.5)
    assert data["decode"]["want"] == 63
    plain = as_json(f"from-file {EXAMPLES_DIR / 'chat.yaml'} {load}")
    assert plain["decode_bound"] is None
    assert plain["decode"]["want"] == 18


def test_from_file_reads_the_pools_profile_at_the_mix(tmp_path: Path) -> None:
    """The chat example (P_prefill 3,000) with a prefill profile (1,000: 3,000), (8,000:
    2,000) at 2 req/s of 6,000-token prompts: the profile says 2,000 + 2/7 x 1,000 =
    2,285.7 tok/s there, so N_P = 12,000 / (2,285.7 x 0.7) = 7.5 -> 8, not the
    constant's 5.71 -> 6 (docs/models.md §2d)."""
    doc = yaml.safe_load((EXAMPLES_DIR / "chat.yaml").read_text(encoding="utf-8"))
    doc["spec"]["prefill"]["profile"] = [
        {"tokens": 1000, "tokensPerSecond": 3000},
        {"tokens": 8000, "tokensPerSecond": 2000},
    ]
    path = tmp_path / "chat-profile.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    load = "--rate 2 --prompt-tokens 6000 --output-tokens 500"
    data = as_json(f"from-file {path} {load}")
    assert data["prefill"]["tokens_per_second"] == pytest.approx(2285.714, abs=1e-3)
    assert data["prefill"]["n"] == pytest.approx(7.5)
    assert data["prefill"]["want"] == 8
    plain = as_json(f"from-file {EXAMPLES_DIR / 'chat.yaml'} {load}")
    assert plain["prefill"]["tokens_per_second"] == 3000
    assert plain["prefill"]["want"] == 6
