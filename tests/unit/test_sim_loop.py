"""The closed loop: what controllers see (the vLLM-preset snapshot from scrapes, with
lag and windows), that decisions take effect only after start-up, GPU billing per run,
determinism, and pdscaler's own policy recovering from a step load."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pytest

from pdscaler.sim.baselines import StaticController
from pdscaler.sim.controllers import PdscalerController, ScheduleController, Target, View
from pdscaler.sim.engine import TTFT_BUCKETS, EngineParams, PodStats, Sample
from pdscaler.sim.loop import LoopConfig, run
from pdscaler.sim.observe import snapshot
from pdscaler.sim.prom import PromView, histogram_quantile
from pdscaler.sim.results import attainment_over_time, summarize
from pdscaler.sim.scenarios import Segment, step_load, synthetic
from pdscaler.sim.setup import sim_spec, warm_start
from pdscaler.sim.traces import Trace
from pdscaler.types import RateSource, Role

NO_JITTER = EngineParams(startup_jitter=0.0)


def sample(t: float, done: float, prompt_sum: float, finished: float, out_sum: float) -> Sample:
    prefill = PodStats(request_success=done, request_prompt_tokens_sum=prompt_sum)
    prefill.ttft_counts[TTFT_BUCKETS.index(0.5)] = done  # every TTFT in (0.25, 0.5]
    prefill.prompt_tokens = prompt_sum
    prefill.waiting = 3.0
    decode = PodStats(request_success=finished, request_generation_tokens_sum=out_sum)
    return Sample(
        time=t,
        requests_arrived=done,
        prefill=prefill,
        decode=decode,
        client_ttft_hist=np.zeros(len(TTFT_BUCKETS)),
        kv_usage=0.4,
        prefill_ready=2,
        decode_ready=2,
        prefill_desired=2,
        decode_desired=2,
        decode_running_by_pod={"decode-1": 5.0},
    )


def test_snapshot_reads_like_the_vllm_preset() -> None:
    spec = sim_spec(window="2m", percentile=0.5)
    prom = PromView(lag=1.0)
    assert snapshot(prom, 100.0, spec) is None  # nothing scraped yet
    prom.scrape(sample(0.0, 100, 115_500, 90, 18_000))
    one = snapshot(prom, 10.0, spec)
    assert one is not None
    assert one.request_rate is None
    assert any("request_rate" in p for p in one.problems)
    prom.scrape(sample(120.0, 700, 808_500, 690, 138_000))
    snap = snapshot(prom, 125.0, spec)
    assert snap is not None
    assert snap.request_rate == pytest.approx(5.0)  # (700 - 100) / 120 s
    assert snap.prompt_tokens == pytest.approx(1155.0)  # 693,000 / 600
    assert snap.output_tokens == pytest.approx(200.0)  # 120,000 / 600
    assert snap.prefill.tokens_per_second == pytest.approx(693_000 / 120)
    assert snap.prefill.latency_seconds == pytest.approx(0.375)  # median inside (0.25, 0.5]
    assert snap.prefill.queue_depth == 3.0
    assert snap.decode.kv_usage == 0.4
    assert snap.decode.running_by_pod == {"decode-1": 5.0}
    # the newest scrape is not visible until `lag` has passed
    early = snapshot(prom, 120.5, spec)
    assert early is not None
    assert early.request_rate is None


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    assert histogram_quantile(0.75, [10, 10, 0], [0.1, 0.5, math.inf]) == pytest.approx(0.3)
    assert histogram_quantile(0.99, [0, 0, 5], [0.1, 0.5, math.inf]) == 0.5
    assert histogram_quantile(0.5, [0, 0, 0], [0.1, 0.5, math.inf]) is None


def steady(rate: float = 8.0, seconds: float = 600.0, seed: int = 1):  # type: ignore[no-untyped-def]
    return synthetic("steady", [Segment(seconds, rate, 1000.0, 100.0)], seed)


def test_static_run_bills_its_replicas_for_the_whole_run() -> None:
    trace = steady()
    cfg = LoopConfig(spec=sim_spec(), params=NO_JITTER, startup_s=30.0)
    result = run(trace, StaticController("static", 2, 3), cfg)
    assert result.actions == ()
    assert result.end >= trace.span
    assert result.gpu_seconds[Role.PREFILL] == pytest.approx(2 * result.end)
    assert result.gpu_seconds[Role.DECODE] == pytest.approx(3 * result.end)
    assert np.all(np.isfinite(result.times.finish))


@dataclass
class Scripted:
    """Asks for ``after`` from ``at`` seconds on; holds (None) before."""

    at: float
    after: tuple[int, int]
    name: str = "scripted"

    def tick(self, view: View) -> Target | None:
        return Target(*self.after, note="scripted") if view.now >= self.at else None


def test_decisions_take_effect_after_the_startup_time() -> None:
    trace = steady()
    cfg = LoopConfig(spec=sim_spec(), params=NO_JITTER, startup_s=45.0, initial=(1, 1))
    result = run(trace, Scripted(at=60.0, after=(4, 2)), cfg)
    assert [(a.time, a.role, a.before, a.after) for a in result.actions] == [
        (60.0, Role.PREFILL, 1, 4),
        (60.0, Role.DECODE, 1, 2),
    ]
    tl = result.timeline
    ready4 = tl.time[tl.prefill_ready == 4]
    assert ready4.min() == pytest.approx(105.0)  # 60 + 45, the first tick after
    assert np.all(tl.prefill_desired[tl.time >= 60.0] == 4)
    # billed from the request at 60 s: 1 replica all along, 3 more from 60 s
    assert result.gpu_seconds[Role.PREFILL] == pytest.approx(result.end + 3 * (result.end - 60))


def test_same_seed_same_run() -> None:
    trace = steady(seconds=300.0)
    cfg = LoopConfig(spec=sim_spec(), startup_s=30.0, seed=4)

    def once() -> tuple[object, ...]:
        r = run(trace, Scripted(at=30.0, after=(3, 2)), cfg)
        return (summarize(r), r.timeline.prefill_ready.tolist(), r.times.finish.tolist())

    assert once() == once()


def test_warm_start_sizes_the_first_two_minutes_with_the_priors() -> None:
    # 20 req/s x 1000 tokens = 20,000 tok/s / (10,000 x 0.7) = 2.86 -> 3 prefill;
    # 20 x 100 = 2,000 tok/s / (1,400 x 0.7) = 2.04 -> 3 decode
    n = 2400
    arrival = np.arange(n) / 20.0
    trace = Trace("w", arrival, np.full(n, 1000), np.full(n, 100), float(arrival[-1]))
    assert warm_start(trace, sim_spec()) == (3, 3)
    assert warm_start(synthetic("idle", [Segment(60.0, 0.0, 1.0, 1.0)]), sim_spec()) == (1, 1)


def test_a_schedule_is_ordered_ahead_by_its_lead() -> None:
    ctrl = ScheduleController("s", [0.0, 60.0, 120.0], [1, 5, 2], [1, 1, 3], lead=60.0)
    assert ctrl.at(0.0) == (5, 1)  # bin 60-120 is within the lead
    assert ctrl.at(61.0) == (5, 3)
    assert ctrl.at(500.0) == (2, 3)


def test_pdscaler_policy_absorbs_a_step_load() -> None:
    trace = step_load(base_rate=10.0, factor=2.5, before_s=300.0, after_s=600.0, seed=3)
    spec = sim_spec(startup_s=30.0)
    cfg = LoopConfig(spec=spec, startup_s=30.0, seed=3)
    ctrl = PdscalerController(spec)
    result = run(trace, ctrl, cfg)
    tl = result.timeline
    before = tl.prefill_desired[(tl.time > 200) & (tl.time <= 300)].max()
    after = tl.prefill_desired[tl.time > 400].max()
    assert after > before  # prefill grew with the step
    assert any(
        a.role is Role.PREFILL and a.after > a.before and a.time > 300 for a in result.actions
    )
    starts, frac = attainment_over_time(result, 60.0)
    settled = frac[(starts >= 600) & (starts < 900)]
    assert np.nanmean(settled) > 0.95  # recovered once the new replicas were up
    assert ctrl.decisions
    assert ctrl.decisions[-1].memory is ctrl.memory


def test_snapshot_can_present_the_routers_arrivals_as_an_option() -> None:
    """``snapshot``'s default: R is completions (the live preset's fall-back). With
    ``arrivals=True`` (what the closed loop passes by default, below) R is what a
    router in front counted, labelled as such."""
    spec = sim_spec(window="2m", percentile=0.5)
    prom = PromView(lag=1.0)
    first, second = sample(0.0, 100, 115_500, 90, 18_000), sample(120.0, 700, 808_500, 690, 1)
    prom.scrape(dataclasses.replace(first, requests_arrived=100.0))
    prom.scrape(dataclasses.replace(second, requests_arrived=1300.0))
    default = snapshot(prom, 125.0, spec)
    assert default is not None
    assert default.request_rate == pytest.approx(5.0)
    assert default.rate_source is RateSource.COMPLETIONS
    arrived = snapshot(prom, 125.0, spec, arrivals=True)
    assert arrived is not None
    assert arrived.request_rate == pytest.approx(10.0)
    assert arrived.rate_source is RateSource.ARRIVALS


@dataclass
class Recorder:
    """Holds, and keeps every view it was shown."""

    views: list[View] = dataclasses.field(default_factory=list)
    name: str = "recorder"

    def tick(self, view: View) -> Target | None:
        self.views.append(view)
        return None


@pytest.mark.parametrize("export", [True, False])
def test_the_loop_shows_arrivals_and_the_engines_kv_capacity(export: bool) -> None:
    """What the live operator reads with a router per cell and vLLM engines: R from the
    routers' arrivals, and M = 100,000 tokens per decode replica from the engines'
    ``vllm:cache_config_info`` (none when the engine does not export it)."""
    params = dataclasses.replace(NO_JITTER, export_kv_capacity=export)
    rec = Recorder()
    run(steady(), rec, LoopConfig(spec=sim_spec(), params=params, startup_s=30.0))
    seen = [v.metrics for v in rec.views if v.metrics is not None and v.now > 60]
    assert seen
    assert {m.rate_source for m in seen} == {RateSource.ARRIVALS}
    capacity = {m.decode.kv_capacity_tokens for m in seen}
    assert capacity == ({100_000.0} if export else {None})
