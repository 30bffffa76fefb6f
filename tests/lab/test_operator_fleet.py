"""One operator, more PDDeployments than kopf has worker threads: every one is reconciled
and keeps ticking at its interval.

Regression test: the per-object loop was a sync kopf daemon, which holds one of kopf's
8 worker threads for the object's whole life; the 9th PDDeployment and every create
handler after it waited forever (found by the 200-PDDeployment overhead benchmark:
8 of 200 reconciled). 12 PDDeployments at a 2 s interval must give about
12 x 8 s / 2 s = 48 ticks in 8 s; the test asks for half of that.
"""

from __future__ import annotations

import time

from pdlab.lab import Lab
from support.labkit import Kube, wait_for
from support.opkit import (
    create_pdd,
    delete_pdd_and_wait,
    get_pdd,
    kopf_operator,
    operator_runtime,
    pdd_manifest,
)

FLEET = 12
INTERVAL_S = 2.0
WATCH_S = 8.0

# pods of this fleet match no node: they stay Pending and take no GPU from other tests
NOWHERE = {"node_selector": {"pdscaler.io/test-nowhere": "true"}, "extra_tolerations": []}


def _reconciled(kube: Kube, namespace: str, name: str) -> bool:
    pdd = get_pdd(kube, namespace, name)
    status = pdd.get("status") or {}
    return bool(status.get("observedGeneration") == pdd["metadata"]["generation"])


def test_more_pddeployments_than_kopf_workers_all_tick(
    lab: Lab, kube: Kube, crd: str, namespace: str
) -> None:
    rt = operator_runtime(lab)
    names = [f"fleet-{i:02d}" for i in range(FLEET)]
    with kopf_operator(namespace, rt):
        for name in names:
            manifest = pdd_manifest(
                name, lab.prometheus_url, interval=f"{INTERVAL_S:g}s", node_fields=NOWHERE
            )
            create_pdd(kube, namespace, manifest)
        try:
            wait_for(
                lambda: all(_reconciled(kube, namespace, n) for n in names),
                90,
                f"all {FLEET} PDDeployments reconciled (status.observedGeneration)",
            )
            before = rt.ticks
            time.sleep(WATCH_S)
            ticked = rt.ticks - before
            expected = FLEET * WATCH_S / INTERVAL_S
            assert ticked >= expected / 2, f"{ticked} ticks in {WATCH_S}s, expected ~{expected}"
            assert {n for (_, n) in rt.last} >= set(names)
        finally:
            for name in names:
                delete_pdd_and_wait(kube, namespace, name)
