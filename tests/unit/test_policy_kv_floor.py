"""The observed-KV floor of decode (issue 27; ``policy.kvbound.observed_floor``): the
memory term prices the mean request, bursts and heavy-tailed outputs fill the cache it
does not see, so decode is held at no fewer replicas than keep the KV the engines report
in use at ``KV_TARGET`` (0.6) of the ready replicas' cache."""

from __future__ import annotations

import pytest

from pdscaler.policy.kvbound import KV_TARGET, observed_floor
from support.builders import chat_spec, run, snapshot


@pytest.mark.parametrize(
    ("usage", "ready", "floor"),
    [(0.9, 8, 12), (0.3, 8, 4), (0.6, 10, 10), (1.0, 1, 2), (None, 8, 0), (0.0, 8, 0), (0.9, 0, 0)],
)
def test_the_floor_holds_the_kv_in_use_at_the_target(
    usage: float | None, ready: int, floor: int
) -> None:
    """8 ready at 90% in use hold 7.2 caches' worth: at 60% that is ceil(12.0) = 12;
    unknown or empty usage, or nothing ready, sets no floor."""
    assert KV_TARGET == 0.6
    assert observed_floor(usage, ready) == floor


def test_a_full_cache_grows_decode_past_its_models() -> None:
    """The golden chat load (N_D 17.86 -> 18 by throughput) with decode at 20 ready and
    its cache 95% full (over the 90% limit: decode is short): the KV in use needs
    ceil(0.95 x 20 / 0.6) = 32 replicas, and the sentence says why."""
    d = run(chat_spec(), snapshot(kv=0.95), 20, 20)
    assert d.decode == 32
    assert "KV in use holds decode at 32 (95% of 20 ready replicas' cache, target 60%)" in (
        d.message
    )


def test_the_floor_is_the_recommendation_a_shrinking_decode_keeps() -> None:
    """Decode at 30 ready on a load whose models ask 18, the cache 45% full: the floor is
    ceil(0.45 x 30 / 0.6) = 23, so the stabilization window records 23, not 18 (the
    next scale-down stops there)."""
    d = run(chat_spec(), snapshot(kv=0.45), 20, 30)
    recorded = d.memory.recommendations[-1]
    assert recorded[2] == 23
    assert d.model.n_decode == pytest.approx(17.857, abs=1e-3)
