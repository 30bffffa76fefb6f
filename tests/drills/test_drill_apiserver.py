"""D4: the kube-apiserver SIGKILLed (then restarted), or SIGSTOPped (then continued),
in the middle of a rollout v1 -> v2 of a 2 + 2 PDDeployment.

Invariants: the operator process stays alive and ``/healthz`` answers 200 after the
outage; its ticks resume (a successful tick, counted by its own
``pdscaler_reconcile_duration_seconds_count``) within interval + 10 s of the API server
answering again; the outage causes no rollback: no RollingBack / RolledBack phase within
``progressDeadline`` of the API server's return (a rollback then could only come from
counting the outage, which is longer than the deadline, as time without progress); no
owned Deployment is ever recreated (one uid per name over the whole drill); no mixed
pairs. Sampled all along every 200 ms: mixed pairs and the serving capacity below the
2 + 2 before the rollout (``operator_process.Sampler``), every Deployment's uid and
``spec.replicas`` and the rollout phase (``faults.ClusterSampler``).

The capacity below 2 + 2 is recorded, not asserted, and the rollout is waited for until
it settles (Complete or RolledBack) without asserting which: after an outage the
controller-manager takes ~20 s to act again, and a rollout stalled by that for longer
than the deadline rolls back, rightly; that stall is not the operator's. The lab's
fake nodes renew their Leases through the API server too: pdlab runs the
controller-manager with a 3-minute node grace period so that the outage does not also
become a node failure (with the default 50 s, kwok's renewals lapsed ~13 s after the API
server was back and the node lifecycle controller marked pods NotReady one role before
the other: mixed pairs the operator did not make).

The operator runs with ``--leader-elect`` (the chart's HA setting): its Lease cannot be
renewed during the outage, so its fence closes, and it must take the Lease again.

Shortened (each case < 90 s without load): the issue's 30 s SIGKILL and 45 s SIGSTOP
are 25 s each; 2 s interval, pods Ready 1 s after creation, 2 + 2 replicas, surge 2;
progressDeadline 20 s (shorter than the outage, so counting the outage as "no
progress" rolls back on the first tick after it: seen before the fix).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from drills.faults import ClusterSampler, DrillOperator, TickSampler, killed, paused
from drills.operator_process import Sampler, cells, start_on_new_pdd, wait_ready
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import Role, RolloutPhase
from support.exporter import EngineExporter
from support.labkit import Kube, WaitTimeoutError, wait_for
from support.opkit import get_pdd, patch_spec, serve_two_by_two, spec_of

INTERVAL = 2.0
OUTAGE = 25.0
DEADLINE = "20s"
DEADLINE_S = 20.0
NAME = "d4"
#: How long the rollout may take to settle after the first tick that follows the outage
#: (the controller-manager acts again ~20 s after the API server; a rollout stalled past
#: the deadline then rolls back and the old cell comes up again). Both cases passed
#: within 60 s alone here (2 passed in 180 s); CI's full run ran out of 60 s once in the
#: sigkill case, so twice that: settling is waited for, it is not the invariant, and a
#: rollout that never settles still fails (with what it looked like).
SETTLE_S = 120.0

FAULTS: dict[str, Callable[[Lab], AbstractContextManager[int]]] = {
    "sigkill": lambda lab: killed(lab, "apiserver"),
    "sigstop": lambda lab: paused(lab, "apiserver"),
}


def _mid_rollout(kube: Kube, namespace: str) -> bool:
    c = cells(kube, namespace, NAME)
    new = c.get(("v2", Role.PREFILL.value))
    old = c.get(("v1", Role.PREFILL.value))
    return (
        new is not None
        and int(new["spec"].get("replicas") or 0) > 0
        and old is not None
        and int(old["spec"].get("replicas") or 0) > 0
    )


def _settled(kube: Kube, namespace: str) -> bool:
    st = get_pdd(kube, namespace, NAME).get("status") or {}
    phase = (st.get("rollout") or {}).get("phase")
    return phase in (RolloutPhase.COMPLETE, RolloutPhase.ROLLED_BACK)


def _wait_settled(kube: Kube, namespace: str, timeout: float) -> None:
    """Wait for Complete or RolledBack; on a timeout, fail with what the rollout and the
    cells looked like (CI keeps no tmp_path, so the message is all a failed run leaves)."""
    try:
        wait_for(lambda: _settled(kube, namespace), timeout, "the rollout settled")
    except WaitTimeoutError as err:
        st = get_pdd(kube, namespace, NAME).get("status") or {}
        seen = {
            "rollout": st.get("rollout"),
            "conditions": [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in st.get("conditions") or []
            ],
            "cells": {
                f"{rev}/{role}": (
                    d["spec"].get("replicas"),
                    (d.get("status") or {}).get("readyReplicas"),
                )
                for (rev, role), d in cells(kube, namespace, NAME).items()
            },
        }
        raise WaitTimeoutError(f"{err}; seen: {json.dumps(seen, default=str)}") from err


def _dump(kube: Kube, namespace: str, tmp_path: Path, cluster: ClusterSampler | None) -> None:
    """What the drill saw, in ``tmp_path/drill.json`` (for a failed run)."""
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        out["status"] = get_pdd(kube, namespace, NAME).get("status")
    with contextlib.suppress(Exception):
        events = kube.core.list_namespaced_event(namespace, _request_timeout=5).items
        out["events"] = sorted(
            (str(e.last_timestamp or e.event_time), e.reason, e.message) for e in events
        )
    if cluster is not None:
        out["phases"] = cluster.phases
        out["uids"] = {k: sorted(v) for k, v in cluster.uids.items()}
        out["replicas"] = cluster.timeline
    (tmp_path / "drill.json").write_text(json.dumps(out, indent=1, default=str))


@pytest.mark.lab
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "fault",
    [
        "sigkill",
        "sigstop",
    ],
)
def test_apiserver_outage_mid_rollout(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
    fault: str,
) -> None:
    drill.describe(
        "D4",
        fault=f"kube-apiserver {fault.upper()} {OUTAGE:g} s mid-rollout",
        invariant="operator alive; ticks resume within interval + 10 s; no rollback "
        "caused by the outage; no Deployment recreated (same uids); no mixed pairs",
        shortened=f"outage {OUTAGE:g} s (issue: 30 s SIGKILL / 45 s SIGSTOP); 2 s interval, "
        f"2 + 2 replicas, progressDeadline {DEADLINE} (shorter than the outage)",
    )
    serve_two_by_two(exporter, namespace, NAME, 2.0)
    op = DrillOperator(namespace, str(lab.kubeconfig), tmp_path / "operator.log", leader_elect=True)
    start_on_new_pdd(
        op, kube, lab.prometheus_url, NAME, interval=INTERVAL, progress_deadline=DEADLINE
    )
    try:
        wait_ready(kube, namespace, NAME, 2, 2, 90)
        spec = spec_of(get_pdd(kube, namespace, NAME))
        with (
            Sampler(kube, namespace, NAME, spec, floor=(2, 2)) as pairs,
            ClusterSampler(kube, namespace) as cluster,
            TickSampler(op, period=0.2) as ticks,
        ):
            patch_spec(kube, namespace, NAME, {"engine": {"version": "v2"}})
            wait_for(lambda: _mid_rollout(kube, namespace), 30, "v2 prefill > 0, v1 still up")
            down = time.monotonic()
            with FAULTS[fault](lab):
                time.sleep(OUTAGE)
            back = time.monotonic()  # the API server answers again
            back_wall = time.time()
            wait_for(
                lambda: ticks.first_tick_after(back).get(NAME),
                INTERVAL + 10 + 20,
                "a successful tick after the outage",
            )
            resume_s = ticks.first_tick_after(back)[NAME]
            wait_for(op.healthy, 10, "/healthz 200 after the outage")
            _wait_settled(kube, namespace, SETTLE_S)
            for sampler in (pairs, cluster, ticks):
                sampler.still_sampling()  # alive to the end of the drill
        alive = op.alive()
    finally:
        op.stop()
        _dump(kube, namespace, tmp_path, locals().get("cluster"))
    where = f"operator log tail:\n{op.tail()}"
    phases: list[tuple[float, Any]] = cluster.phases.get(NAME, [])
    back_phases = (RolloutPhase.ROLLING_BACK, RolloutPhase.ROLLED_BACK)
    early = [
        (t - back_wall, p) for t, p in phases if p in back_phases and t < back_wall + DEADLINE_S
    ]
    # the API server's reads fail only while it is down (the outage and, after SIGKILL,
    # its restart): at most one per 0.2 s period of that, a few more around it
    outage_reads = int((back - down) / 0.2) + 5
    pairs.check(at_least=20, max_failed=outage_reads)
    cluster.check(at_least=20, max_failed=outage_reads)
    ticks.check(at_least=20)  # the operator's /metrics answers through the outage
    drill.sampled(pairs.samples, len(pairs.mixed))
    drill.sampled(cluster.samples, len(cluster.recreated()) + len(early))
    drill.recovered("first successful tick after the API server is back", resume_s)
    assert alive, where
    assert resume_s <= INTERVAL + 10, (resume_s, where)
    assert early == [], (early, phases, where)
    assert cluster.recreated() == {}, cluster.recreated()
    assert pairs.mixed == [], pairs.mixed[:5]
    # recorded, not asserted (module docstring): the lab's nodes go NotReady after it
    print(f"capacity below 2 + 2 in {len(pairs.below)} of {pairs.samples} samples")
