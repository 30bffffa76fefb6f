"""Drill D8, garbage exporter: NaN, +/-Inf, -1, 1e12, 1e300, a counter reset and a
duplicate target reach the operator; no pool is ever lowered on them, an increase stays
within the spec, and no tick raises (the reconcile error counter stays flat).

Against the lab's API server (real Deployments, kwok pods Ready 1 s after creation), with
the operator in-process (``opkit.ticking``, one tick a second). The values come through
the operator's ``metrics_source`` hook (``runtime.Runtime``), not the exporter: the
drill needs exact garbage in each field of the snapshot, which Prometheus would already
have turned into "no data" (NaN and Inf samples are dropped by its functions). Windows
shortened: scaleDownStabilization 4 s, each garbage phase 3 s (almost a window; the
whole drill takes ~45 s) and at least 2 ticks on it, however slowly a loaded machine ticks.

Worked numbers: at R = 4 req/s of 2000 / 500 tokens (prefill 3000, decode 800 tok/s,
u 0.7) the pools size to ceil(3.81) = 4 and ceil(3.57) = 4; complete data at R = 1
would lower them to 1 / 1 after one window, so any decrease during a phase is the
garbage's doing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import MetricsSnapshot, Role
from support.builders import snapshot
from support.labkit import Kube, wait_for
from support.metrics_feed import (
    IDLE_LOW,
    MAX_REPLICAS,
    Sampler,
    errors,
    fed_runtime,
    manifest,
)
from support.opkit import create_pdd, ticking, total, wait_stable

PHASE_SECONDS = 3.0
#: ticks that read each phase's garbage at least (3 s at 1 tick/s; more on a loaded box)
PHASE_TICKS = 2


def garbage_phases() -> list[tuple[str, MetricsSnapshot]]:
    """(label, snapshot) of each garbage phase, on a load (R 1) that would otherwise
    lower both pools."""
    base = IDLE_LOW
    nan, inf = math.nan, math.inf
    return [
        ("rate NaN", replace(base, request_rate=nan)),
        ("rate +Inf", replace(base, request_rate=inf)),
        ("rate -Inf", replace(base, request_rate=-inf)),
        ("rate -1", replace(base, request_rate=-1.0)),
        ("rate 1e12", replace(base, request_rate=1e12)),
        ("rate 1e300", replace(base, request_rate=1e300)),
        ("queues NaN / -1", snapshot(1.0, ttft=0.3, tpot=0.02, prefill_queue=nan,
                                     decode_queue=-1.0)),
        ("queues 1e12 / 1e300", snapshot(1.0, ttft=0.3, tpot=0.02, prefill_queue=1e12,
                                         decode_queue=1e300)),
        ("latencies +Inf / 1e300", snapshot(1.0, ttft=inf, tpot=1e300)),
        # a counter reset: rate() over the reset reads 0 completions while requests run
        ("counter reset", snapshot(0.0, None, None, ttft=0.3, tpot=0.02, running=6.0)),
    ]  # fmt: skip


def test_drill_d8_garbage_never_lowers_and_never_raises(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    name = "garbage"
    drill.describe(
        "D8",
        fault="garbage metrics: NaN, +-Inf, -1, 1e12, 1e300 in the rate, queues and "
        "latencies; a counter reset; a duplicate target",
        invariant="no pool lowered; no pool above the spec's max; no tick raises",
        shortened="stabilization 4 s, each garbage phase 3 s, in-process operator at 1 tick/s",
    )
    rt, feed = fed_runtime(lab)
    sampler = Sampler(kube, namespace, name)
    broken: list[str] = []
    with ticking(rt, namespace, name), sampler:
        create_pdd(kube, namespace, manifest(name, lab))
        wait_for(lambda: total(kube, namespace, name, Role.DECODE) >= 4, 45, "decode at 4")
        start = wait_stable(kube, namespace, name, hold=2.0, timeout=45)
        assert start == (4, 4)
        errors_before = errors(rt, namespace, name)
        for label, snap in garbage_phases():
            sampler.reset()
            feed.set(snap)
            feed.hold(PHASE_SECONDS, PHASE_TICKS)
            low = (sampler.low[Role.PREFILL], sampler.low[Role.DECODE])
            high = (sampler.high[Role.PREFILL], sampler.high[Role.DECODE])
            if not low >= start:
                broken.append(f"{label}: lowered to {low}")
            if max(high) > MAX_REPLICAS:
                broken.append(f"{label}: above the spec's max: {high}")
        # a duplicate target: every series counted twice (R 8 instead of 4): the rise
        # stays within the spec (the models size 8 req/s: 8 / 8, max 12)
        sampler.reset()
        feed.set(replace(snapshot(8.0, ttft=0.3, tpot=0.02, running=0.0)))
        feed.hold(PHASE_SECONDS, PHASE_TICKS)
        if max(sampler.high.values()) > MAX_REPLICAS or min(sampler.low.values()) < 4:
            broken.append(f"duplicate target: {sampler.low} .. {sampler.high}")
        raised = errors(rt, namespace, name) - errors_before
        # the drill is not vacuous: complete data at R 1 does lower the pools
        feed.set(IDLE_LOW)
        wait_for(lambda: total(kube, namespace, name, Role.DECODE) < 4, 30, "decode lowered")
        sampler.still_sampling()  # alive to the end of the drill
    drill.sampled(sampler.samples, len(broken) + int(raised))
    assert broken == []
    assert raised == 0, "a tick raised"
    sampler.check(at_least=51)  # sampled along, at most a tenth of the reads failed
