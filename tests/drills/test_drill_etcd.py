"""D5: etcd SIGSTOPped while the operator runs many PDDeployments; one more is created
5 s after SIGCONT.

Invariants: every PDDeployment ticks again (a successful tick, counted by the operator's
own ``pdscaler_reconcile_duration_seconds_count``) within 2 intervals of SIGCONT; the
one created 5 s after SIGCONT is reconciled (its status names its generation and its
cell's Deployments exist) within 30 s; the operator process stays alive and
``/healthz`` answers 200. Sampled all along: the ticks of every PDDeployment every
500 ms (``faults.TickSampler``), the owned Deployments' uids (none recreated) every
200 ms (``faults.ClusterSampler``).

Shortened (< 90 s): etcd stopped 20 s, not 60 s; 20 PDDeployments, not 50, in
Recommend mode (they read, compute and publish status; no pods: 20 cells would need 40
of the lab's 32 GPUs) with an unreachable Prometheus (a refused query costs nothing; the
policy holds); the 21st is an Auto 1 + 1 PDDeployment. Interval 10 s (the default is
15 s): after SIGCONT all 20 ticks resume at once, and on 2 shared cores with a load
average near 20, 20 ticks took up to 12.9 s, past 2 intervals of 5 s.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from drills.faults import ClusterSampler, DrillOperator, TickSampler, paused
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import Role
from support.labkit import Kube, wait_for
from support.opkit import create_pdd, get_pdd, pdd_manifest, total

INTERVAL = 10.0
STOP = 20.0
COUNT = 20
UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing answers
LATE = "late"


def _reconciled(kube: Kube, namespace: str, name: str) -> bool:
    st = get_pdd(kube, namespace, name).get("status") or {}
    return (
        st.get("observedGeneration") == 1
        and total(kube, namespace, name, Role.PREFILL) >= 1
        and total(kube, namespace, name, Role.DECODE) >= 1
    )


@pytest.mark.lab
@pytest.mark.timeout(180)
def test_etcd_stopped_under_many_pddeployments(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    drill.describe(
        "D5",
        fault=f"etcd SIGSTOP {STOP:g} s with {COUNT} PDDeployments; one created 5 s after SIGCONT",
        invariant="every PDDeployment ticks again within 2 intervals of SIGCONT; the new "
        "one reconciled within 30 s; operator alive",
        shortened=f"{STOP:g} s stop (issue: 60 s), {COUNT} PDDeployments in Recommend mode "
        f"(issue: 50), {INTERVAL:g} s interval",
    )
    op = DrillOperator(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    op.allowed = f"{lab.prometheus_url},{UNREACHABLE}"
    names = [f"r{i:02d}" for i in range(COUNT)]
    for name in names:
        doc: dict[str, Any] = pdd_manifest(
            name, UNREACHABLE, mode="Recommend", interval=f"{INTERVAL:g}s"
        )
        create_pdd(kube, namespace, doc)
    op.start()
    try:
        # /metrics answers a tick before the tick sampler starts: its failed reads are
        # then the operator's, not its start-up's (5-35 s on the loaded 2 cores)
        wait_for(lambda: op.ticks() or None, 90, "the operator's first tick")
        with TickSampler(op) as ticks, ClusterSampler(kube, namespace) as cluster:
            wait_for(
                lambda: all(ticks.rows and ticks.rows[-1][1].get(n, 0) >= 2 for n in names),
                60,
                f"{COUNT} PDDeployments ticked twice",
            )
            with paused(lab, "etcd"):
                time.sleep(STOP)
            cont = time.monotonic()
            time.sleep(5.0)
            create_pdd(kube, namespace, pdd_manifest(LATE, UNREACHABLE, interval="2s"))
            created = time.monotonic()
            wait_for(lambda: _reconciled(kube, namespace, LATE), 30, "the late one reconciled")
            late_s = time.monotonic() - created
            wait_for(
                lambda: len(ticks.first_tick_after(cont)) >= COUNT,
                2 * INTERVAL + 20,
                "every PDDeployment ticked after SIGCONT",
            )
            wait_for(op.healthy, 10, "/healthz 200")
            ticks.still_sampling()  # both alive to the end of the drill
            cluster.still_sampling()
        alive = op.alive()
    finally:
        op.stop()
    resumed = ticks.first_tick_after(cont)
    late_ticks = {n: s for n, s in resumed.items() if n in names}
    slow = {n: s for n, s in late_ticks.items() if s > 2 * INTERVAL}
    ticks.check(at_least=20)  # /metrics answers while etcd is stopped
    # the API server's reads time out (2 s) only while etcd is stopped: at most one
    # per period of the stop
    cluster.check(at_least=20, max_failed=int(STOP / 0.2) + 5)
    drill.sampled(len(ticks.rows), len(slow) + (COUNT - len(late_ticks)))
    drill.sampled(cluster.samples, len(cluster.recreated()))
    drill.recovered("last PDDeployment ticked after SIGCONT", max(late_ticks.values()))
    drill.recovered("new PDDeployment reconciled after its creation", late_s)
    where = f"operator log tail:\n{op.tail()}"
    assert alive, where
    assert len(late_ticks) == COUNT, (sorted(late_ticks), where)
    assert slow == {}, (slow, where)
    assert late_s <= 30.0
    assert cluster.recreated() == {}
