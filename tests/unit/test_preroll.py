"""The loop's pre-roll (``LoopConfig.preroll_s``): the replay is the same, only the
scoring changes (the scored span's requests, GPU-seconds, actions and timeline, on its
own clock; the pre-roll's apart); a dynamic policy enters the scored span in its own
state, not the cold start; off, the loop's results are those of before the option."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdscaler.sim.baselines import StaticController
from pdscaler.sim.controllers import PdscalerController, Target, View
from pdscaler.sim.engine import EngineParams, RequestTimes
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.profiles import with_measured_profile
from pdscaler.sim.results import preroll_summary, summarize
from pdscaler.sim.scenarios import Segment, synthetic
from pdscaler.sim.setup import sim_spec, warm_start
from pdscaler.sim.traces import Trace
from pdscaler.types import PolicyMemory, Role

PREROLL = 300.0


def _cfg(preroll_s: float = 0.0) -> LoopConfig:
    spec = with_measured_profile(sim_spec(startup_s=60), EngineParams())
    return LoopConfig(spec=spec, startup_s=60, preroll_s=preroll_s)


def _step() -> Trace:
    """300 s of 6 req/s of 6,000-token prompts, then 600 s at 12 req/s (8,990 requests)."""
    return synthetic("p", [Segment(300, 6, 6000, 60), Segment(600, 12, 6000, 60)], seed=3)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


def _times_equal(a: RequestTimes, b: RequestTimes, shift: float) -> bool:
    cols = ("arrival", "prefill_start", "prefill_end", "decode_admit", "first_token", "finish")
    return all(_same(getattr(a, c) + shift, getattr(b, c)) for c in cols) and _same(
        a.prompt, b.prompt
    )


@pytest.mark.parametrize("policy", ["static", "pdscaler"])
def test_the_preroll_scores_only_the_scored_span(policy: str) -> None:
    trace = _step()

    def ctrl() -> StaticController | PdscalerController:
        return (
            StaticController("s", 8, 1) if policy == "static" else PdscalerController(_cfg().spec)
        )

    whole, scored = run(trace, ctrl(), _cfg()), run(trace, ctrl(), _cfg(PREROLL))
    pre = scored.preroll
    assert pre is not None
    assert scored.scored_from == PREROLL
    early = whole.times.arrival < PREROLL
    assert len(scored.times.arrival) == int(np.sum(~early)) == 7_260
    assert len(pre.times.arrival) == int(np.sum(early))
    # the same replay, cut at 300 s: the scored span on its own clock
    assert _times_equal(scored.times, _cut(whole.times, ~early), PREROLL)
    assert _times_equal(pre.times, _cut(whole.times, early), 0.0)
    assert scored.times.arrival.min() >= 0.0
    for role in (Role.PREFILL, Role.DECODE):
        total = pre.gpu_seconds[role] + scored.gpu_seconds[role]
        assert total == pytest.approx(whole.gpu_seconds[role], rel=1e-12)
    assert scored.end == pytest.approx(whole.end - PREROLL)
    assert [a.time + PREROLL for a in scored.actions] == [
        a.time for a in whole.actions if a.time >= PREROLL
    ]
    assert len(pre.actions) + len(scored.actions) == len(whole.actions)
    assert scored.timeline.time[0] == 0.0  # the tick at 300 s
    assert len(pre.timeline.time) + len(scored.timeline.time) == len(whole.timeline.time)
    s, p = summarize(scored), preroll_summary(scored)
    assert p is not None
    assert preroll_summary(whole) is None
    assert (s.requests, p.requests) == (7_260, len(trace) - 7_260)
    assert s.gpu_hours + p.gpu_hours == pytest.approx(summarize(whole).gpu_hours)
    ok = round(s.slo_attainment * s.requests) + round(p.slo_attainment * p.requests)
    assert ok == round(summarize(whole).slo_attainment * len(trace))
    if policy == "static":
        assert p.gpu_hours == pytest.approx(9 * PREROLL / 3600)  # 8P + 1D from t=0


def _cut(t: RequestTimes, keep: np.ndarray) -> RequestTimes:
    return RequestTimes(
        *(getattr(t, c)[keep] for c in ("arrival", "prompt", "output", "prefill_start")),
        *(getattr(t, c)[keep] for c in ("prefill_end", "decode_admit", "first_token", "finish")),
    )


class _Spy:
    """pdscaler, recording what it saw and remembered at its first tick at or after
    ``at`` (on the replay's clock)."""

    name = "pdscaler"

    def __init__(self, at: float) -> None:
        self.inner = PdscalerController(_cfg().spec)
        self.at = at
        self.seen: tuple[View, PolicyMemory] | None = None

    def tick(self, view: View) -> Target:
        if self.seen is None and view.now >= self.at:
            self.seen = (view, self.inner.memory)
        return self.inner.tick(view)


def test_a_dynamic_policy_enters_the_scored_span_in_its_own_state() -> None:
    """900 s of a steady 12 req/s of 6,000-token prompts: cold, on the last 600 s, pdscaler
    starts at the warm start (the priors: 72,000 prompt tokens/s / (10,000 x 0.7) -> 11
    prefill replicas) with empty Prometheus windows and memory; after a 300 s pre-roll
    it has measured the load and sized for it."""
    steady = synthetic("s", [Segment(900, 12, 6000, 60)], seed=4)
    scored_trace = steady.window(PREROLL, steady.span)
    cold_spy, warm_spy = _Spy(0.0), _Spy(PREROLL)
    cold = run(scored_trace, cold_spy, _cfg())
    warm = run(steady, warm_spy, _cfg(PREROLL))
    assert cold_spy.seen is not None
    assert warm_spy.seen is not None
    cold_view, cold_memory = cold_spy.seen
    warm_view, warm_memory = warm_spy.seen
    assert warm_start(scored_trace, _cfg().spec) == (11, 1)
    assert (cold.timeline.prefill_desired[0], cold.timeline.decode_desired[0]) == (11, 1)
    assert cold_view.metrics is None or cold_view.metrics.request_rate is None
    assert cold_memory == PolicyMemory()
    assert warm_view.metrics is not None
    assert warm_view.metrics.request_rate is not None
    assert warm_view.metrics.request_rate == pytest.approx(12.0, rel=0.15)
    assert warm_memory != PolicyMemory()
    entered = (warm.timeline.prefill_desired[0], warm.timeline.decode_desired[0])
    assert entered != (11, 1)
    assert warm_view.prefill.replicas == entered[0]


def test_off_the_loop_gives_the_results_of_before_the_option() -> None:
    """Goldens replayed before ``preroll_s`` existed (same trace, config and seed)."""
    trace = _step()
    static = run(trace, StaticController("s", 8, 1), _cfg())
    policy = run(trace, PdscalerController(_cfg().spec), _cfg())
    for r in (static, policy):
        assert r.preroll is None
        assert r.scored_from == 0.0
    s, p = summarize(static), summarize(policy)
    assert (s.slo_attainment, s.gpu_hours, s.ttft_p99_s) == (
        0.15739710789766406,
        3.3657106428782577,
        438.30421594875986,
    )
    # pdscaler's row re-recorded with decode's observed-KV floor (issue 27, f5c8eed): the
    # same attainment and TTFT, decode held higher after the step (4.65 -> 4.86 GPU-h)
    assert (p.slo_attainment, p.gpu_hours, p.ttft_p99_s, p.scale_actions) == (
        0.6906562847608454,
        4.862510077308448,
        22.596822299071178,
        12,
    )
    assert [(a.time, a.role, a.before, a.after) for a in policy.actions[:3]] == [
        (30.0, Role.PREFILL, 6, 7),
        (30.0, Role.DECODE, 1, 2),
        (315.0, Role.PREFILL, 7, 14),
    ]


def test_a_preroll_must_leave_a_scored_span() -> None:
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="preroll_s"):
            _cfg(bad)
    with pytest.raises(ValueError, match="leaves nothing"):
        run(_step(), StaticController("s", 1, 1), _cfg(900.0))
