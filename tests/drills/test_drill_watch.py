"""D19, a half-open watch mid-rollout (issue 30, item 5): the operator reaches the API
server through its own proxy (``drills.apiproxy``); once the new cell (v2) has Ready
pods of both roles and the old one (v1) still runs (its drain is next), every watch
the operator has open is frozen (the connection stays open, no byte more arrives, not
even the server's end of it), a pod quota refuses new pods and every new-cell engine
pod is deleted: no replacement exists, so the operator's caches show Ready v2 pods that are gone.

Invariants:

* staleness detected: each of the operator's frozen cache watches (``labelSelector``
  ``pdscaler.io/name``; kopf's own watch of PDDeployments is not a cache) is given up
  on and a new LIST or WATCH of its kind sent within 60 s of the freeze (the bound is
  the 30 s server timeout + 10 s of silence = 40 s; a shrink's check lists the pods
  at once);
* no old cell shrunk for pods that are gone: sampled every 0.3 s from the deletion to
  the end of the window, no v1 pool Deployment's ``spec.replicas`` goes down (no Ready
  v2 pod exists in that window, so no shrink of v1 is justified).

Before the fix (watches of 240 s, given up on after 270 s of silence; no LIST before a
shrink) the frozen watches were not replaced in the window. Window: 47 s after the
deletion in ``make test`` (the drill ~70 s), 90 s under ``make drill``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from kubernetes import client

from drills.apiproxy import ApiProxy, Call
from drills.faults import DrillOperator, full_windows
from drills.operator_process import ready_by_version, wait_ready
from drills.report import DrillRecord
from drills.samplers import Timeline
from pdlab.cluster.lab import Lab
from pdscaler import naming
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    as_dict,
    create_pdd,
    get_pdd,
    patch_spec,
    pdd_manifest,
    pod_dicts,
    serve_two_by_two,
    spec_of,
)

NAME = "hw"
DETECT_BOUND = 60.0


def cache_watch(c: Call) -> bool:
    """A watch of one of the operator's caches (kopf's PDDeployment watch is not one)."""
    return c.watch and naming.LABEL_NAME in unquote(urlsplit(c.path).query)


def new_engine(meta: dict[str, Any]) -> bool:
    """An engine pod of the new cell (v2), by its metadata."""
    labels = meta.get("labels") or {}
    role = labels.get(naming.LABEL_ROLE)
    return labels.get(naming.LABEL_VERSION) == "v2" and role in ("prefill", "decode")


def detections(calls: list[Call], frozen_at: float) -> dict[str, float]:
    """Per cache path frozen at ``frozen_at``: seconds until the operator sent the next
    LIST or WATCH of it (absent: never in ``calls``)."""
    frozen = {urlsplit(c.path).path for c in calls if cache_watch(c) and c.received < frozen_at}
    out: dict[str, float] = {}
    for c in calls:
        path = urlsplit(c.path).path
        late = c.received > frozen_at and c.method == "GET"
        ours = naming.LABEL_NAME in unquote(urlsplit(c.path).query)
        if path in frozen and path not in out and late and ours:
            out[path] = c.received - frozen_at
    return out


@contextlib.contextmanager
def no_new_pods(kube: Kube, namespace: str, keep: int) -> Iterator[None]:
    """A ResourceQuota of ``keep`` pods in ``namespace`` for the block (set once the
    quota controller counted it): a Deployment's replacement pods are refused, so none
    is Pending or Ready (cordoned nodes would be read as a capacity limit instead)."""
    body = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="d19"),
        spec=client.V1ResourceQuotaSpec(hard={"pods": str(keep)}),
    )
    kube.core.create_namespaced_resource_quota(namespace, body)

    def counted() -> bool:
        status = kube.core.read_namespaced_resource_quota("d19", namespace).status
        return status is not None and bool(status.hard)

    try:
        wait_for(counted, 30, "the quota counted", interval=0.2)
        yield
    finally:
        kube.core.delete_namespaced_resource_quota("d19", namespace)


@pytest.mark.lab
@pytest.mark.timeout(240)
def test_drill_half_open_watch_mid_rollout(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    window = 90.0 if full_windows() else 47.0
    drill.describe(
        "D19",
        fault="mid-rollout (v2 Ready, v1 up): every operator watch frozen half-open, replacements "
        "refused (a pod quota), every new-cell engine pod deleted",
        invariant=f"each frozen cache watch replaced within {DETECT_BOUND:g} s; no old-cell "
        "pool shrunk while no new-cell pod is Ready",
        shortened="" if full_windows() else f"{window:g} s window (make drill: 90 s)",
    )
    serve_two_by_two(exporter, namespace, NAME, 2.0)
    with ApiProxy(lab, "op") as proxy:
        op = DrillOperator(namespace, str(proxy.kubeconfig(tmp_path)), tmp_path / "op.log")
        create_pdd(kube, namespace, pdd_manifest(NAME, lab.prometheus_url, interval="2s"))
        op.start()
        try:
            wait_ready(kube, namespace, NAME, 2, 2, 60)
            spec = spec_of(get_pdd(kube, namespace, NAME))
            with Timeline(kube, namespace, NAME, spec, period=0.3) as tl:
                patch_spec(kube, namespace, NAME, {"engine": {"version": "v2"}})

                def mid_rollout() -> bool:
                    ready = ready_by_version(pod_dicts(kube, namespace, NAME))
                    v2 = {r for (r, v), n in ready.items() if v == "v2" and n > 0}
                    v1 = {r for (r, v), n in ready.items() if v == "v1" and n > 0}
                    return len(v2) == len(v1) == 2  # the old cell's drain is next

                wait_for(mid_rollout, 60, "Ready v2 pods of both roles, v1 up", interval=0.2)
                time.sleep(1.0)  # the operator's cache saw it Ready (watch events: ms)
                frozen_at = proxy.faults.freeze_watches()
                pods = [as_dict(kube, p) for p in kube.core.list_namespaced_pod(namespace).items]
                gone = [p["metadata"]["name"] for p in pods if new_engine(p["metadata"])]
                with no_new_pods(kube, namespace, len(pods) - len(gone)):
                    t_delete = time.time()
                    for pod in gone:
                        kube.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
                    time.sleep(window)
                    t_end = time.time()
                    tl.still_sampling()
            tl.check(at_least=int(window))
        finally:
            op.stop()
    found = detections(proxy.calls, frozen_at)
    frozen_paths = {
        urlsplit(c.path).path for c in proxy.calls if cache_watch(c) and c.received < frozen_at
    }
    version_of = {dep: v for s in tl.points for dep, (v, _, _) in s.replicas.items()}
    v1 = naming.version_label("v1")
    drops = tl.replica_drops(since=t_delete, until=t_end)
    shrunk = [d for d in drops if version_of.get(d[1]) == v1]
    ready_v2 = [s for s in tl.points if t_delete + 2 < s.t <= t_end and any(
        v == "v2" and n > 0 for (_, v), n in s.ready.items())]  # fmt: skip
    window_points = [s for s in tl.points if t_delete <= s.t <= t_end]
    drill.sampled(len(window_points), len(shrunk))
    for path, seconds in sorted(found.items()):
        drill.recovered(f"frozen watch replaced ({path.rsplit('/', 1)[-1]})", seconds)
    refused = op.log.read_text(errors="replace").count("StaleCacheError")
    print(f"D19: {refused} ticks refused on a stale cache; detections {found}")
    print(f"v1 drops {shrunk}; log tail:\n{op.tail(1500)}")
    assert frozen_paths, "the operator opened no cache watch through the proxy"
    assert ready_v2 == [], "a v2 pod was Ready in the window: the fault did not hold"
    missing = sorted(p for p in frozen_paths if p not in found)
    assert missing == [], f"frozen watches never replaced: {missing}; {found}"
    late = {p: s for p, s in found.items() if s > DETECT_BOUND}
    assert late == {}, late
    assert shrunk == [], shrunk
