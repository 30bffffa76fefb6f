"""D1: SIGKILL the operator at each rollout boundary and restart it 3 s later, with and
without Prometheus; the rollout must keep its invariants and finish.

Boundaries (as the cluster shows them, v1 -> v2): the new decode Deployment exists but
no new prefill is asked; the new prefill is asked (> 0); halfway (both cells run
prefill, the old one below the totals: a restart must not take one cell for the whole);
the old prefill is at 0 while the old decode still runs; the old cell is being deleted.
At each, the drill SIGKILLs the operator process it started, waits 3 s and starts it
again. Checked all along by a
sampler every 200 ms: 0 mixed pairs (``pdscaler.invariants``), Ready serving capacity
never below the totals desired before the first kill; at the end the rollout is
Complete on v2; after each restart the operator's first write (the PDDeployment's
status: ``status.rollout.checkedAt`` moves every tick of a rollout) comes within
interval + 5 s.

Shortened (each case < 90 s): 2 s interval, pods Ready 1 s after creation, 1 + 1 or
2 + 2 replicas, so the rollout has few levels; one kill per boundary the rollout
passes (a boundary passed while the operator was down is skipped); "without
Prometheus" switches the metrics URL to one nothing listens on (every query fails) once
2 + 2 run, before the rollout: the policy then holds what it sees as the current size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drills.operator_process import (
    OperatorProcess,
    Sampler,
    cells,
    ready_by_version,
    settled_two_by_two,
    start_on_new_pdd,
    wait_ready,
)
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import ConditionReason, Role
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    get_pdd,
    patch_spec,
    pod_dicts,
    serve_two_by_two,
    spec_of,
    wait_stable,
)

INTERVAL = 2.0
RESTART_AFTER = 3.0
UNREACHABLE = "http://127.0.0.1:9"  # discard port: nothing answers

Cells = dict[tuple[str, str], dict[str, Any]]


def _replicas(c: Cells, version: str, role: Role) -> int | None:
    dep = c.get((version, role.value))
    if dep is None:
        return None
    return int(dep["spec"].get("replicas") or 0)


def _deleting(c: Cells, version: str) -> bool:
    return any(
        d["metadata"].get("deletionTimestamp") for (v, _), d in c.items() if v == version
    ) or (bool(c) and not any(v == version for (v, _) in c))


BOUNDARIES: list[tuple[str, Callable[[Cells], bool]]] = [
    (
        "new decode created, no new prefill",
        lambda c: (
            _replicas(c, "v2", Role.DECODE) is not None and not _replicas(c, "v2", Role.PREFILL)
        ),
    ),
    ("new prefill > 0", lambda c: (_replicas(c, "v2", Role.PREFILL) or 0) > 0),
    (
        "halfway: both cells serve prefill, the old one below the totals",
        lambda c: (
            0 < (_replicas(c, "v1", Role.PREFILL) or 0) < 2
            and (_replicas(c, "v2", Role.PREFILL) or 0) > 0
        ),
    ),
    (
        "old prefill 0, old decode up",
        lambda c: (
            _replicas(c, "v1", Role.PREFILL) == 0 and (_replicas(c, "v1", Role.DECODE) or 0) > 0
        ),
    ),
    ("old cell deleting", lambda c: bool(_deleting(c, "v1"))),
]


def _resource_version(kube: Kube, namespace: str, name: str) -> str:
    return str(get_pdd(kube, namespace, name)["metadata"]["resourceVersion"])


def _complete(kube: Kube, namespace: str, name: str) -> bool:
    st = get_pdd(kube, namespace, name).get("status") or {}
    ready = ready_by_version(pod_dicts(kube, namespace, name))
    return (
        (st.get("rollout") or {}).get("phase") == "Complete"
        and st.get("activeVersion") == "v2"
        and ("prefill", "v1") not in ready
        and ("decode", "v1") not in ready
    )


@pytest.mark.lab
@pytest.mark.timeout(120)
@pytest.mark.parametrize("prometheus", ["available", "unavailable"])
def test_sigkill_at_every_rollout_boundary(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    prometheus: str,
    drill: DrillRecord,
) -> None:
    name = "d1"
    drill.describe(
        "D1",
        fault=f"SIGKILL the operator at each rollout boundary, restart after 3 s (Prometheus "
        f"{prometheus})",
        invariant="0 mixed pairs; Ready never below the desired totals before the first kill; "
        "rollout completes; first write within interval + 5 s of a restart",
        shortened="2 s interval, 2 + 2 replicas (few levels), one kill per boundary passed",
    )
    serve_two_by_two(exporter, namespace, name, 2.0)
    op = OperatorProcess(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    # the dead Prometheus is allowed too: the drill is about an outage, not the allow-list
    op.allowed = f"{lab.prometheus_url},{UNREACHABLE}"
    start_on_new_pdd(op, kube, lab.prometheus_url, name, interval=INTERVAL, progress_deadline="60s")
    try:
        wait_ready(kube, namespace, name, 2, 2, 40)
        sizes = settled_two_by_two(wait_stable(kube, namespace, name, hold=2.0, timeout=30))
        if prometheus == "unavailable":  # Prometheus gone before the rollout starts
            patch_spec(kube, namespace, name, {"metrics": {"prometheus": {"url": UNREACHABLE}}})
            wait_for(
                lambda: any(
                    c.get("reason") == ConditionReason.PROMETHEUS_UNREACHABLE
                    for c in (get_pdd(kube, namespace, name).get("status") or {}).get(
                        "conditions", []
                    )
                ),
                15,
                "metrics unavailable",
            )
        spec = spec_of(get_pdd(kube, namespace, name))
        kills: list[str] = []
        first_write: list[float] = []
        with Sampler(kube, namespace, name, spec, floor=sizes) as sampler:
            patch_spec(kube, namespace, name, {"engine": {"version": "v2"}})
            pending = list(BOUNDARIES)
            deadline = time.monotonic() + 60
            while pending and time.monotonic() < deadline:
                c = cells(kube, namespace, name)
                hit = next((i for i, (_, at) in enumerate(pending) if at(c)), None)
                if hit is None:
                    if _complete(kube, namespace, name):
                        break
                    time.sleep(0.1)
                    continue
                label = pending[hit][0]
                del pending[: hit + 1]  # boundaries passed meanwhile are skipped
                op.kill()
                kills.append(f"{time.time():.1f} {label}")
                time.sleep(RESTART_AFTER)
                before = _resource_version(kube, namespace, name)
                op.start()
                t0 = time.monotonic()
                if _complete(kube, namespace, name):
                    break

                def written(before: str = before) -> bool:
                    return _resource_version(kube, namespace, name) != before

                wait_for(
                    written,
                    INTERVAL + 5 + 10,
                    "the restarted operator's first write",
                    interval=0.1,
                )
                first_write.append(time.monotonic() - t0)
                drill.recovered("first write after a restart", first_write[-1])
            wait_for(lambda: _complete(kube, namespace, name), 40, "rollout to v2 complete")
            sampler.still_sampling()  # alive to the end of the drill
    finally:
        op.stop()
    late = [t for t in first_write if t > INTERVAL + 5]
    drill.sampled(sampler.samples, len(sampler.mixed) + len(sampler.below) + len(late))
    assert len(kills) >= 2, kills
    sampler.check(at_least=20)  # 2 kills + restarts at 0.2 s; few failed reads
    assert sampler.mixed == [], sampler.mixed[:5]
    assert sampler.below == [], (sizes, kills, sampler.below[:5])
    assert late == [], first_write
