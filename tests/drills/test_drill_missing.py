"""Drill D9, missing data: half of prefill's targets failing (up = 0), decode's latency
series gone, a frozen counter. Each for two stabilization windows on a load that would
lower both pools: no pool is lowered, and the MetricsAvailable condition says which data
is missing; then complete data lowers them (the drill is not vacuous).

Against the lab's API server with the operator in-process, fed through the operator's
``metrics_source`` hook (``runtime.Runtime``): the snapshots carry what the Prometheus
reader makes of each fault (``metricsql.assemble``: ``targets_up`` from ``sum by role
(up)``, ``missing`` naming a series that came back empty), so the drill checks the
policy and the condition end to end without depending on the exporter (being reworked
for Kubernetes service discovery). Windows shortened: scaleDownStabilization 4 s, each
fault held 8 s (two windows) and at least 6 ticks (on a loaded machine the ticks, not
the seconds, are what the fault must be seen by), the whole drill ~50 s.

Worked numbers: stable at 4 / 4 (R 4 req/s), the load falls to R 1 (wants 1 / 1):
* prefill 2 of its 4 Ready pods scraped -> R under-counted: neither pool lowered;
  condition ``prefill targets: 2 of 4 ready pods scraped (up)``;
* decode's TPOT series empty while R > 0 -> decode not lowered (prefill may be);
  condition ``decode TPOT unknown``;
* a frozen completion counter: R 0, token means 0/0 (unknown), 3 requests running ->
  not idle: hold both; condition ``request_rate 0 beside queued or running requests``.
"""

from __future__ import annotations

from dataclasses import replace

from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import ConditionReason, ConditionType, MetricsSnapshot, Role
from support.builders import snapshot
from support.labkit import Kube, wait_for
from support.metrics_feed import IDLE_LOW, Sampler, errors, fed_runtime, manifest
from support.opkit import (
    condition,
    create_pdd,
    get_pdd,
    ticking,
    total,
    wait_both_pools,
    wait_free_gpus,
    wait_stable,
)

TWO_WINDOWS = 8.0
#: ticks that read each fault at least (8 s at 1 tick/s; more on a loaded box): the
#: condition checked after it was written by a tick that saw the fault
TWO_WINDOWS_TICKS = 6


def with_pool(snap: MetricsSnapshot, role: Role, **fields: object) -> MetricsSnapshot:
    pool = getattr(snap, role.value)
    return replace(snap, **{role.value: replace(pool, **fields)})


def test_drill_d9_missing_data_never_lowers_a_pool(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    name = "missing"
    drill.describe(
        "D9",
        fault="half of a pool's targets down (up=0); one pool's latency series gone; a "
        "frozen counter",
        invariant="no scale-down of the pools concerned for 2 windows; MetricsAvailable=False "
        "names the missing data",
        shortened="stabilization 4 s (two windows = 8 s), in-process operator at 1 tick/s",
    )
    lowered: list[str] = []
    rt, feed = fed_runtime(lab)
    sampler = Sampler(kube, namespace, name)
    phases = [
        (
            "half of prefill's targets down",
            with_pool(IDLE_LOW, Role.PREFILL, targets_up=2),
            (Role.PREFILL, Role.DECODE),
            "prefill targets: 2 of 4 ready pods scraped (up)",
        ),
        (
            "decode's latency series gone",
            with_pool(IDLE_LOW, Role.DECODE, latency_seconds=None, missing=("latency_seconds",)),
            (Role.DECODE,),
            "decode TPOT unknown",
        ),
        (
            "a frozen counter",
            snapshot(0.0, None, None, ttft=0.3, tpot=0.02, running=3.0),
            (Role.PREFILL, Role.DECODE),
            "request_rate 0 beside queued or running requests (not idle)",
        ),
    ]
    # 4 + 4 GPUs: an earlier test's namespace, deleted in the background, may still hold
    # them, and a capacity-limited cluster would lower the pools for a reason of its own
    wait_free_gpus(kube, 8)
    with ticking(rt, namespace, name), sampler:
        create_pdd(kube, namespace, manifest(name, lab))
        wait_for(lambda: total(kube, namespace, name, Role.DECODE) >= 4, 45, "decode at 4")
        assert wait_stable(kube, namespace, name, hold=2.0, timeout=45) == (4, 4)
        errors_before = errors(rt, namespace, name)
        for label, snap, held, says in phases:
            start = {r: total(kube, namespace, name, r) for r in Role}
            sampler.reset()
            feed.set(snap)
            feed.hold(TWO_WINDOWS, TWO_WINDOWS_TICKS)
            lowered += [f"{label}: {r} lowered" for r in held if sampler.low[r] < start[r]]
            assert lowered == []
            c = condition(get_pdd(kube, namespace, name), ConditionType.METRICS_AVAILABLE)
            assert c is not None
            assert (c["status"], c["reason"]) == ("False", ConditionReason.METRICS_INCOMPLETE)
            assert says in c["message"], (label, c["message"])
            # back to 4 / 4 for the next fault (a pool the fault did not hold may have gone)
            feed.set(snapshot(4.0, ttft=0.3, tpot=0.02, running=0.0))
            wait_both_pools(kube, namespace, name, 4, 20, "4 / 4")
        assert errors(rt, namespace, name) == errors_before
        sampler.still_sampling()  # alive through every phase
        sampler.check(at_least=50)  # 3 phases of >= 8 s at 0.2 s, few failed reads
        drill.sampled(sampler.samples, len(lowered))
        feed.set(IDLE_LOW)
        wait_for(lambda: total(kube, namespace, name, Role.DECODE) < 4, 30, "decode lowered")
        c = condition(get_pdd(kube, namespace, name), ConditionType.METRICS_AVAILABLE)
        assert c is not None
        assert c["status"] == "True"
