"""pdlab.demo.report: a phase's two TPOTs (aiperf's p95, the operator's) agree when they
differ by at most the width of the TPOT histogram bucket holding the operator's figure,
and aiperf's output-token count is read against the engines'.

The figures are a shortened demo's at a18852c's parent, when the engines streamed
``" tok<i>"`` (3-4 tokens each for aiperf's tokenizer): chat 25 ms against 99 ms, long
documents 24 ms against 94 ms, aiperf counting 19,523 output tokens where the engines
produced 5,752."""

from __future__ import annotations

import pytest

from pdlab.demo.report import Row, summarize_phase, token_counts, tpot_agrees, tpot_tolerance_s


@pytest.mark.parametrize(
    ("operator_s", "width"),
    [(0.099, 0.025), (0.1, 0.025), (0.1001, 0.05), (0.154, 0.05), (0.005, 0.01), (0.06, 0.025)],
)
def test_the_tolerance_is_the_operators_bucket_width(operator_s: float, width: float) -> None:
    assert tpot_tolerance_s(operator_s) == pytest.approx(width)


def test_the_two_tpots_agree_within_the_bucket_and_the_old_text_did_not() -> None:
    assert tpot_agrees(0.090, 0.099) is True
    assert tpot_agrees(0.124, 0.099) is True
    assert tpot_agrees(0.125, 0.099) is False
    assert tpot_agrees(0.130, 0.154) is True
    # " tok<i>": aiperf divided decode time by 3.4x the tokens
    assert tpot_agrees(0.0255, 0.099) is False  # chat
    assert tpot_agrees(0.0243, 0.094) is False  # long documents
    assert tpot_agrees(None, 0.099) is None
    assert tpot_agrees(0.09, None) is None


def row(t: float, client: float | None, operator: float | None) -> Row:
    return Row(t, "chat", 4, 4, 4, 4, 3.0, 1.0, client, 0.0, 0.0, 2.0, operator)


def test_a_phase_summary_says_whether_its_settled_half_agrees() -> None:
    """Medians over the second half (t in [45, 90)): aiperf 0.088, the operator 0.099."""
    rows = [row(t, 0.02 if t < 45 else 0.088, 0.099) for t in range(90)]
    s = summarize_phase("chat", 0.0, 90.0, rows)
    assert (s.tpot_p95_s, s.operator_tpot_s, s.tpot_agrees) == (0.088, 0.099, True)
    rows = [row(t, 0.025, 0.099) for t in range(90)]
    assert summarize_phase("chat", 0.0, 90.0, rows).tpot_agrees is False
    rows = [row(t, None, 0.099) for t in range(90)]
    assert summarize_phase("chat", 0.0, 90.0, rows).tpot_agrees is None


def test_token_counts_read_aiperfs_count_against_the_engines() -> None:
    before = {
        "total_osl": {"unit": "tokens", "avg": 19523.0},
        "total_usage_completion_tokens": {"unit": "tokens", "avg": 5752.0},
        "osl_mismatch_diff_pct": {"unit": "%", "avg": 225.92, "p50": 225.0},
        "osl_mismatch_count": {"unit": "requests", "avg": 453.0},
    }
    assert token_counts(before) == {
        "client": 19523.0,
        "server": 5752.0,
        "osl_mismatch_pct": 225.92,
        "osl_mismatch_requests": 453.0,
    }
    # no mismatch: aiperf writes no osl_mismatch_count (0); an export without usage: None
    assert token_counts({"total_osl": {"avg": 10}})["osl_mismatch_requests"] == 0.0
    assert token_counts({})["server"] is None
