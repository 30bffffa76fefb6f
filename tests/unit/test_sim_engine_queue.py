"""The offline engine's admission and queue order: requests whose context cannot fit one
decode replica are rejected on arrival and block nothing (docs/models.md §2b), and the
two queue disciplines (``fcfs``, ``deadline``) serve in the order their names say."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from pdscaler.sim.engine import Engine, EngineParams, RequestTimes

#: One prefill replica of 1,000 tokens/s linear in tokens (no attention term), one
#: prompt per batch, no overheads or hand-off cost, a decode pool that never queues.
SERIAL: dict[str, Any] = {
    "prefill_tps": 1000.0,
    "prefill_attention_tokens": math.inf,
    "prefill_overhead_s": 0.0,
    "prefill_token_budget": 1,
    "kv_handoff_base_s": 0.0,
    "kv_handoff_s_per_token": 0.0,
    "decode_max_seqs": 100_000,
    "startup_jitter": 0.0,
}


def serve(params: EngineParams, arrival: list[float], prompt: list[int]) -> Engine:
    engine = Engine(arrival, prompt, [1] * len(arrival), params, startup_s=0.0)
    engine.run_until(math.inf)
    assert not engine.pending()
    return engine


def test_unservable_request_is_rejected_and_blocks_nothing() -> None:
    """M = 10,000: the second request (12,000 + 1 tokens) never fits a replica. It is
    rejected on arrival (finish = arrival, no first token), counted, and the two
    requests behind it are served as if it had never come: prefill at 0-1 s, 1-2 s."""
    params = EngineParams(**{**SERIAL, "decode_kv_tokens": 10_000})
    engine = serve(params, [0.0, 0.5, 1.0], [1000, 12_000, 1000])
    t = engine.times()
    assert t.rejected is not None
    assert t.rejected.tolist() == [False, True, False]
    assert t.unservable == engine.unservable == 1
    assert t.finish[1] == 0.5
    assert math.isnan(t.first_token[1])
    assert math.isnan(t.prefill_start[1])
    assert t.prefill_start[2] == pytest.approx(1.0)  # right after the first, not after 12 s
    assert np.isfinite(t.first_token[[0, 2]]).all()


def test_servable_requests_are_not_rejected() -> None:
    """9,999 + 1 tokens fits 10,000 exactly: served, nothing rejected."""
    params = EngineParams(**{**SERIAL, "decode_kv_tokens": 10_000})
    engine = serve(params, [0.0], [9_999])
    assert engine.unservable == 0
    assert np.isfinite(engine.times().first_token).all()


def test_fcfs_serves_in_arrival_order() -> None:
    """1,000-token prompts take 1 s each on the one replica. Arrivals at 0, 0.1, 0.2,
    0.3 s: prefill starts at 0, 1, 2, 3 s in arrival order (the default discipline)."""
    engine = serve(EngineParams(**SERIAL), [0.0, 0.1, 0.2, 0.3], [1000] * 4)
    assert EngineParams().queue_discipline == "fcfs"
    assert engine.times().prefill_start.tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0])


def test_deadline_lets_a_request_that_can_still_make_it_go_first() -> None:
    """TTFT 2 s. A 3,000-token prompt at 0 s keeps the replica busy until 3 s. At 3 s
    the request of 0.5 s has waited 2.5 s (late: 2.5 + 1 s of its own > 2 s), the one of
    2.5 s only 0.5 s (0.5 + 1 <= 2: can still make it). ``fcfs`` serves 0.5 s first
    (both miss: TTFT 3.5 s and 2.5 s); ``deadline`` serves 2.5 s first (TTFT 1.5 s: met)
    and the late one after (TTFT 4.5 s)."""
    arrival, prompt = [0.0, 0.5, 2.5], [3000, 1000, 1000]
    fcfs = serve(EngineParams(**SERIAL), arrival, prompt).times()
    assert fcfs.prefill_start.tolist() == pytest.approx([0.0, 3.0, 4.0])
    params = EngineParams(**SERIAL, queue_discipline="deadline", ttft_deadline_s=2.0)
    deadline = serve(params, arrival, prompt).times()
    assert deadline.prefill_start.tolist() == pytest.approx([0.0, 4.0, 3.0])
    assert (deadline.prefill_end - deadline.arrival)[2] == pytest.approx(1.5)

    def met(t: RequestTimes) -> int:
        return int(np.sum(t.prefill_end - t.arrival <= 2.0))

    assert (met(fcfs), met(deadline)) == (0, 1)


def test_deadline_keeps_arrival_order_while_everyone_can_make_it() -> None:
    """Nobody late (TTFT 10 s): ``deadline`` is ``fcfs``."""
    params = EngineParams(**SERIAL, queue_discipline="deadline", ttft_deadline_s=10.0)
    engine = serve(params, [0.0, 0.1, 0.2, 0.3], [1000] * 4)
    assert engine.times().prefill_start.tolist() == pytest.approx([0.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"queue_discipline": "lifo"}, "queue_discipline"), ({"ttft_deadline_s": 0.0}, "ttft")],
)
def test_bad_discipline_is_an_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        EngineParams(**kwargs)  # type: ignore[arg-type]
