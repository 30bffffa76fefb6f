"""D7: the lab's real Prometheus stopped for twice the scale-down stabilization window,
steady and mid-rollout, then started again; the load drops while it is down, so the
first data after it returns ask for less.

The operator runs as a real process (``OperatorProcess``) against the lab's
Prometheus; the drill stops that Prometheus process (``Lab.stop_prometheus``: the
lab's own recorded PID, nothing else) and starts it again (``Lab.start_prometheus``,
waiting for /-/ready). The engine exporter serves 2 req/s before the fault (2 + 2
replicas) and 0.5 req/s from the moment Prometheus stops (1 + 1 would do). A
``Timeline`` samples every 150 ms: pairing (``pdscaler.invariants``), Ready serving
capacity against the 2 + 2 published before the fault, the published desired totals
and ``spec.replicas`` of every pool Deployment.

Checked: MetricsAvailable=False (PrometheusUnreachable) within one tick of the stop
(counted: at most 2 successful ticks after it, the one in flight and the next, read
with the condition from one scrape of the operator's /metrics; the seconds recorded);
no replica count and no published total goes down while Prometheus is down nor in the
first stabilization window after it is ready again (steady: every Deployment; mid-
rollout: the published totals, since a rollout's old cell shrinks by design as the new
one becomes Ready); capacity never below 2 + 2 and 0 pairing violations throughout;
MetricsAvailable=True again after the restart; in the steady case the lower load does
scale the pools down once a whole window has been observed (the drill could see one).

Shortened (each case < 90 s): stabilization window 10 s (default 5 m), so the outage
is 20 s; metrics window 10 s, interval 2 s; pods Ready 1 s after creation (the
mid-rollout case gives v2 8 s so the rollout is still moving when Prometheus stops).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from drills.faults import DrillOperator
from drills.operator_process import settled_two_by_two, start_on_new_pdd, wait_ready
from drills.report import DrillRecord
from drills.samplers import Timeline
from pdlab.cluster.lab import Lab
from pdscaler.types import ConditionReason, ConditionType, RolloutPhase
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    condition,
    get_pdd,
    patch_spec,
    serve_two_by_two,
    spec_of,
    wait_stable,
)

INTERVAL = 2.0
WINDOW = 10.0  # scale-down stabilization (and the metrics window)
OUTAGE = 2 * WINDOW
SLOW_V2 = {"template": {"metadata": {"annotations": {"pdscaler.io/startup-delay": "8s"}}}}


def _metrics(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    return condition(get_pdd(kube, namespace, name), ConditionType.METRICS_AVAILABLE.value)


def _ticks_when_false(op: DrillOperator, name: str) -> float | None:
    """The operator's successful ticks of ``name`` when its /metrics first reports
    MetricsAvailable False (both from one scrape); None before."""
    ticks, conditions = op.ticks_and_conditions()
    if (name, ConditionType.METRICS_AVAILABLE.value, "False") in conditions:
        return ticks.get(name, 0.0)
    return None


def _wait_seconds(check: Any, timeout: float, what: str) -> float:
    t0 = time.time()
    wait_for(check, timeout, what, interval=0.1)
    return time.time() - t0


@pytest.mark.lab
@pytest.mark.timeout(180)
@pytest.mark.parametrize("when", ["steady", "mid-rollout"])
def test_prometheus_stopped_twice_the_window(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
    when: str,
) -> None:
    drill.describe(
        "D7",
        fault=(
            f"the lab's Prometheus stopped for {OUTAGE:g} s (2x the stabilization window), "
            f"{when}, while the load drops 2 -> 0.5 req/s; then started again"
        ),
        invariant=(
            "replicas never decrease during the outage nor in the first window after; "
            "MetricsAvailable=False within 1 tick; capacity never below the published "
            "totals; 0 mixed pairs"
        ),
        shortened=(
            f"stabilization {WINDOW:g} s (5 m) so the outage is {OUTAGE:g} s, metrics window "
            f"{WINDOW:g} s, interval {INTERVAL:g} s (15 s), pods Ready 1 s after creation"
        ),
    )
    name = "d7"
    serve_two_by_two(exporter, namespace, name, 2.0)
    op = DrillOperator(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    op.allowed = lab.prometheus_url
    start_on_new_pdd(
        op,
        kube,
        lab.prometheus_url,
        name,
        interval=INTERVAL,
        progress_deadline="120s",
        window=f"{WINDOW:g}s",
        stabilization=f"{WINDOW:g}s",
    )
    stopped = False
    try:
        wait_ready(kube, namespace, name, 2, 2, 60)
        sizes = settled_two_by_two(wait_stable(kube, namespace, name, hold=2.0, timeout=30))
        spec = spec_of(get_pdd(kube, namespace, name))
        with Timeline(kube, namespace, name, spec) as tl:
            if when == "mid-rollout":
                patch_spec(
                    kube,
                    namespace,
                    name,
                    {"engine": {"version": "v2"}, "prefill": SLOW_V2, "decode": SLOW_V2},
                )
                wait_for(
                    lambda: (
                        (
                            (get_pdd(kube, namespace, name).get("status") or {}).get("rollout")
                            or {}
                        ).get("phase")
                        == RolloutPhase.PROGRESSING
                    ),
                    30,
                    "the rollout to v2 under way",
                    interval=0.1,
                )
            assert lab.stop_prometheus()
            stopped = True
            t_stop = time.time()
            ticks_at_stop = op.ticks().get(name, 0.0)
            serve_two_by_two(exporter, namespace, name, 0.5)
            at_false = wait_for(
                lambda: _ticks_when_false(op, name), 15, "/metrics: MetricsAvailable False",
                interval=0.05,
            )  # fmt: skip
            ticks_to_false = at_false - ticks_at_stop
            unavailable = _wait_seconds(
                lambda: (
                    (c := _metrics(kube, namespace, name)) is not None
                    and c["status"] == "False"
                    and c.get("reason") == ConditionReason.PROMETHEUS_UNREACHABLE
                ),
                15,
                "MetricsAvailable=False (PrometheusUnreachable)",
            )
            time.sleep(max(0.0, t_stop + OUTAGE - time.time()))
            lab.start_prometheus()
            stopped = False
            t_back = time.time()
            available = _wait_seconds(
                lambda: (
                    (c := _metrics(kube, namespace, name)) is not None and c["status"] == "True"
                ),
                30,
                "MetricsAvailable=True after Prometheus restarted",
            )
            time.sleep(max(0.0, t_back + WINDOW - time.time()))
            t_window = time.time()
            scaled_down: float | None = None
            if when == "steady":  # the low load does shrink the pools once observed
                scaled_down = _wait_seconds(
                    lambda: any(tl.totals(s) < sizes for s in tl.points[-3:]), 30,
                    "a scale-down once a whole window after the outage was observed",
                )  # fmt: skip
            tl.still_sampling()  # alive to the end of the drill
    finally:
        if stopped:
            lab.start_prometheus()
        op.stop()
    drops = tl.replica_drops(since=t_stop, until=t_window) if when == "steady" else []
    desired = [s.desired for s in tl.points if t_stop <= s.t <= t_window and s.desired]
    desired_drops = [(a, b) for a, b in itertools.pairwise(desired) if b[0] < a[0] or b[1] < a[1]]
    pairing = tl.pairing()
    below = [s for s in tl.below(sizes) if s.t <= t_window]
    drill.sampled(tl.samples, len(drops) + len(desired_drops) + len(pairing) + len(below))
    drill.recovered("MetricsAvailable=False after the stop", unavailable)
    drill.recovered("MetricsAvailable=True after Prometheus ready", available)
    if scaled_down is not None:
        drill.recovered("first scale-down after the window", WINDOW + scaled_down)
    tl.check(at_least=21)  # sampled along, at most a tenth of the reads failed
    # within one tick: the tick in flight at the stop (if any) and the first that began
    # after it (seconds only recorded: a loaded machine stretches them, not the count)
    assert ticks_to_false <= 2, (ticks_to_false, unavailable)
    assert drops == [], drops
    assert desired_drops == [], desired_drops[:5]
    assert pairing == [], pairing[:5]
    assert below == [], below[:3]
