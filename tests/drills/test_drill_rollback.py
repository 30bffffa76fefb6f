"""D2: a broken version (its pods never become Ready) rolled out while the operator is
SIGKILLed every 15 s and once more right after the rollback Event; the rollout must
roll back within progressDeadline + 2 intervals and the failed version must never grow
again.

The broken version: v2's pod templates carry the lab's start-up delay annotation
``pdscaler.io/startup-delay: 1h`` (kwok's pod-ready stage then waits an hour: never
Ready within the drill; the annotation is not part of the revision, so only the v2
cell's pods carry it, v1's template is frozen). The operator runs as a real process
(``OperatorProcess``): SIGKILL every 15 s after the spec names v2, restarted at once;
when the Warning Event ``ProgressDeadlineExceeded`` appears, SIGKILL at once and
restart. A ``Timeline`` samples every 150 ms: pairing (``pdscaler.invariants``), Ready
serving capacity against the totals published before the rollout (1 + 1: v2 is never
Ready, so v1 must keep serving them), and ``spec.replicas`` of every pool Deployment.

Checked: the rollback Event within progressDeadline + 2 intervals of the rollout's
start as the status shows it; after the rollback the v2 cell never grows (no
Deployment of v2 gets more replicas, none is re-created) for 12 s and two more
restarts; v1's Deployments never shrink; 0 pairing violations; capacity never below
1 + 1; the end state RolledBack on v1 with v2 still named by the spec.

Shortened (each case < 90 s): progressDeadline 20 s (default 10 m), 2 s interval
(default 15 s), 1 + 1 replicas, pods Ready 1 s after creation; "SIGKILL every 15 s"
restarts at once (a real restart takes a pod reschedule; the gap then counts as
down-time, ``rollout.phases.gap_counted``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from drills.operator_process import OperatorProcess, handling, ready_by_version, start_on_new_pdd
from drills.report import DrillRecord
from drills.samplers import Timeline
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.types import RolloutPhase, RolloutReason
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    get_pdd,
    patch_spec,
    pod_dicts,
    serve_light,
    spec_of,
    wait_stable,
)

INTERVAL = 2.0
DEADLINE = 20.0
KILL_EVERY = 15.0
WATCH_AFTER = 12.0  # how long the failed version is watched after the rollback
NEVER_READY = "1h"  # kwok's pod-ready stage waits this long: never within the drill
BROKEN = {"template": {"metadata": {"annotations": {"pdscaler.io/startup-delay": NEVER_READY}}}}


def _events(kube: Kube, namespace: str, name: str, reason: str) -> list[Any]:
    sel = f"involvedObject.name={name},reason={reason}"
    return list(kube.core.list_namespaced_event(namespace, field_selector=sel).items)


def _rollout(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict((get_pdd(kube, namespace, name).get("status") or {}).get("rollout") or {})


@pytest.mark.lab
@pytest.mark.timeout(240)
def test_broken_version_rolls_back_under_sigkill(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    drill.describe(
        "D2",
        fault=(
            f"broken version (pods never Ready), progressDeadline {DEADLINE:g} s; operator "
            f"SIGKILLed every {KILL_EVERY:g} s and right after the rollback Event"
        ),
        invariant=(
            "rollback within progressDeadline + 2 intervals; the failed version never grows "
            "again; 0 mixed pairs; Ready capacity never below the published totals"
        ),
        shortened=(
            f"progressDeadline {DEADLINE:g} s (10 m), interval {INTERVAL:g} s (15 s), 1 + 1 "
            "replicas, pods Ready 1 s after creation, restart at once after each SIGKILL"
        ),
    )
    name = "d2"
    serve_light(exporter, namespace, name)
    op = OperatorProcess(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    op.allowed = lab.prometheus_url
    start_on_new_pdd(
        op, kube, lab.prometheus_url, name, interval=INTERVAL, progress_deadline=f"{DEADLINE:g}s"
    )
    kills: list[str] = []
    down: list[list[float]] = []  # [killed at, up again at] per restart (wall clock)
    offset = [0]  # the log's size at the last start

    def kill_restart(why: str) -> None:
        op.kill()
        kills.append(f"{time.time():.1f} {why}")
        down.append([time.time(), float("inf")])
        offset[0] = op.log.stat().st_size if op.log.exists() else 0
        op.start()

    try:
        wait_for(
            lambda: (
                ready_by_version(pod_dicts(kube, namespace, name))
                == {("prefill", "v1"): 1, ("decode", "v1"): 1}
            ),
            40,
            "1 + 1 Ready v1 pods",
        )
        sizes = wait_stable(kube, namespace, name, hold=2.0, timeout=30)
        assert sizes == (1, 1), sizes
        spec = spec_of(get_pdd(kube, namespace, name))
        with Timeline(kube, namespace, name, spec) as tl:
            patch_spec(
                kube,
                namespace,
                name,
                {"engine": {"version": "v2"}, "prefill": BROKEN, "decode": BROKEN},
            )
            t_patch = time.time()
            next_kill = t_patch + KILL_EVERY
            started: float | None = None
            rolled_back: float | None = None
            end = t_patch + 75
            seen: list[str] = []  # status.rollout each time it changed (failure messages)
            while time.time() < end:
                now = time.time()
                if down and down[-1][1] == float("inf") and handling(op, offset[0]):
                    down[-1][1] = now
                    next_kill = now + KILL_EVERY  # every 15 s of the operator's uptime
                ro = _rollout(kube, namespace, name)
                line = f"{now - t_patch:.1f} {sorted(ro.items())}"
                if not seen or seen[-1].split(" ", 1)[1] != line.split(" ", 1)[1]:
                    seen.append(line)
                progressing = ro.get("phase") == RolloutPhase.PROGRESSING
                if started is None and progressing and ro.get("toVersion") == "v2":
                    started = now
                if rolled_back is None and _events(
                    kube, namespace, name, RolloutReason.DEADLINE.value
                ):
                    rolled_back = time.time()
                    kill_restart("right after the rollback Event")
                elif now >= next_kill and (not down or down[-1][1] < now):
                    kill_restart("periodic")
                watched = rolled_back is not None and now >= rolled_back + WATCH_AFTER
                if watched and ro.get("phase") == RolloutPhase.ROLLED_BACK:
                    break
                time.sleep(0.1)
            # a SIGKILL between the rollback's Event and its status write leaves the
            # status at Progressing: the restarted operator rolls back again (the
            # persisted clock is past the deadline) on its first tick
            wait_for(
                lambda: _rollout(kube, namespace, name).get("phase") == RolloutPhase.ROLLED_BACK,
                60,
                "RolledBack after the last restart",
            )
            final = get_pdd(kube, namespace, name)
            tl.still_sampling()  # alive to the end of the drill
    finally:
        op.stop()
    pairing = tl.pairing()
    below = tl.below(sizes)
    v1 = naming.version_label("v1")
    v1_drops = [d for d in tl.replica_drops() if tl.points and _version_of(tl, d[1]) == v1]
    grown = tl.version_growth("v2", since=rolled_back or float("inf"))
    drill.sampled(tl.samples, len(pairing) + len(below) + len(v1_drops) + len(grown))
    tl.check(at_least=101)  # sampled along, at most a tenth of the reads failed
    assert started is not None, "the rollout to v2 never showed as Progressing"
    assert rolled_back is not None, (kills, seen)
    # time the operator was down (killed, not yet handling the PDDeployment again)
    # between the rollout's start and the rollback does not count: no operator can roll
    # back while none runs (a restart takes ~5-12 s on the lab's loaded 2 cores)
    offline = sum(max(0.0, min(b, rolled_back) - max(a, started)) for a, b in down)
    took = rolled_back - started - offline
    drill.recovered("rollback after the rollout started (operator uptime)", took)
    for a, b in down:
        if b != float("inf"):
            drill.recovered("SIGKILL to handling again", b - a)
    assert took <= DEADLINE + 2 * INTERVAL, (took, offline, kills, seen)
    assert pairing == [], pairing[:5]
    assert below == [], below[:3]
    assert v1_drops == [], v1_drops
    assert grown == [], (grown, kills)
    st = final.get("status") or {}
    assert (st.get("rollout") or {}).get("phase") == RolloutPhase.ROLLED_BACK, st.get("rollout")
    assert st.get("activeVersion") == "v1", st
    assert final["spec"]["engine"]["version"] == "v2"
    assert len(kills) >= 2, kills


def _version_of(tl: Timeline, deployment: str) -> str:
    for s in reversed(tl.points):
        if deployment in s.replicas:
            return s.replicas[deployment][0]
    return ""
