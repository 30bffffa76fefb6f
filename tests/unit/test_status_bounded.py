"""Every status is bounded (issue 30, item 3): ``status.memory.recommendations`` kept
every change point of the scale-down stabilization window, so a flapping recommendation
under a long window grew a status by 187 KB in 12,000 ticks (past etcd's 1.5 MiB object
limit in about 28 h at 1 s). ``status.memory_to_status`` now keeps at most
``MAX_RECOMMENDATION_POINTS`` change points, merging the oldest into their maximum (a
restarted operator scales down no earlier than the full history would have let it)."""

from __future__ import annotations

import json

from pdscaler import status
from pdscaler.policy.stabilize import prune
from pdscaler.types import PolicyMemory

STATUS_LIMIT = 64 * 1024


def flapping(ticks: int, interval: float = 1.0) -> PolicyMemory:
    """A recommendation that changes every tick: 4/4, 5/4, 4/5, 6/4, ... (t = 0, 1, ...)."""
    recs = tuple((i * interval, 4 + (i % 3), 4 + (i % 2)) for i in range(ticks))
    return PolicyMemory(recommendations=recs)


def test_a_flapping_recommendation_under_a_long_window_stays_small() -> None:
    memory = flapping(12_000)
    out = status.memory_to_status(memory, 12_000.0, 3600.0 * 1000)
    assert len(out["recommendations"]) <= status.MAX_RECOMMENDATION_POINTS
    assert len(json.dumps(out)) < 16 * 1024  # of the status's 64 KiB


def test_the_cap_keeps_the_windows_highest_recommendations() -> None:
    """Merged points keep the maximum: a restart sees recommendations at least as high
    as the full history's over the window, so it scales down no earlier."""
    recs = [(float(i), 4, 4) for i in range(2000)]
    recs[10] = (10.0, 30, 4)  # an old peak, long ago but inside the window
    recs[1500] = (1500.0, 4, 25)
    memory = PolicyMemory(recommendations=tuple(recs))
    kept = status.memory_to_status(memory, 2000.0, 5000.0)["recommendations"]
    assert len(kept) <= status.MAX_RECOMMENDATION_POINTS
    assert max(p for _, p, _ in kept) == 30
    assert max(d for _, _, d in kept) == 25
    assert kept[0][0] <= 10.0  # the peak is still dated inside the window
    back = status.memory_from_status({"recommendations": kept}, 2000.0)
    for pool in (1, 2):
        full = max(r[pool] for r in prune(memory.recommendations, 2000.0, 5000.0))
        restarted = max(r[pool] for r in prune(back.recommendations, 2000.0, 5000.0))
        assert restarted >= full


def test_a_short_history_is_kept_as_it_was() -> None:
    memory = flapping(50)
    out = status.memory_to_status(memory, 50.0, 300.0)
    assert len(out["recommendations"]) == 50
