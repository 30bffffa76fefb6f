"""One operator, more PDDeployments than kopf has worker threads: every one is reconciled
and keeps ticking at its interval.

Regression test: the per-object loop was a sync kopf daemon, which holds one of kopf's
8 worker threads for the object's whole life; the 9th PDDeployment and every create
handler after it waited forever (found by the 200-PDDeployment overhead benchmark:
8 of 200 reconciled). 12 PDDeployments at a 2 s interval: EACH must add 2 successful
ticks (half of its 4 in 8 s; counted per object from the operator's tick histogram, so
a loaded machine stretches the wait, 60 s at most, not the count; idle it takes ~4 s).
"""

from __future__ import annotations

import time

from pdlab.cluster.lab import Lab
from pdscaler.runtime import Runtime
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
#: successful ticks each PDDeployment must add (8 s of its 2 s interval, halved)
MORE_TICKS = 2
#: ... within (idle: ~4 s; the 8 stuck behind kopf's workers never tick)
WATCH_LIMIT_S = 60.0

# pods of this fleet match no node: they stay Pending and take no GPU from other tests
NOWHERE = {"node_selector": {"pdscaler.io/test-nowhere": "true"}, "extra_tolerations": []}


def _ticks(rt: Runtime, namespace: str, name: str) -> float:
    """The in-process operator's successful ticks of ``name`` (its tick histogram)."""
    value = rt.telemetry.registry.get_sample_value(
        "pdscaler_reconcile_duration_seconds_count", {"namespace": namespace, "name": name}
    )
    return float(value or 0.0)


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
            before = {n: _ticks(rt, namespace, n) for n in names}
            t0 = time.monotonic()

            def behind() -> list[str]:
                return [n for n in names if _ticks(rt, namespace, n) - before[n] < MORE_TICKS]

            wait_for(lambda: not behind() or None, WATCH_LIMIT_S, f"{MORE_TICKS} more ticks each")
            took = time.monotonic() - t0
            print(f"every one of {FLEET} ticked {MORE_TICKS} more times in {took:.1f} s")
            assert {n for (_, n) in rt.last} >= set(names)
        finally:
            for name in names:
                delete_pdd_and_wait(kube, namespace, name)
