"""Same-version rollouts against the lab (docs/design.md §4): a version change rolls both
pools to a new cell while a checker samples the cluster every 200 ms and finds no
violation of the invariants (``pdscaler.invariants``); a version whose pods never get
Ready is rolled back by the operator itself after ``rollout.progressDeadline``. Argo CD's
health of the live object (deploy/argocd/health.lua) follows: Healthy, Progressing
while the rollout runs, Healthy again; Degraded once a rollout was rolled back.

Load: 2 req/s of 2000 prompt / 500 output tokens: N_P = 4000/2100 = 1.9 -> 2 and
N_D = 1000/560 = 1.8 -> 2 replicas, so a rollout moves 2 + 2 pods in levels, with
maxSurgeGPUs 4 and maxGPUs 32. Pods get Ready 1 s after creation; the never-Ready
version's template asks kwok for a 1 h start-up delay.
"""

from __future__ import annotations

import time

from pdlab.cluster.lab import Lab
from pdscaler import manifests, naming
from pdscaler.observe import is_ready, labels
from pdscaler.types import ConditionReason, ConditionType, Role
from support.argocd import health
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    InvariantChecker,
    condition,
    create_pdd,
    get_pdd,
    operator_runtime,
    patch_spec,
    pdd_manifest,
    pod_dicts,
    replicas,
    spec_of,
    ticking,
    wait_cell_gone,
    wait_stable,
)


def serve(exp: EngineExporter, namespace: str, name: str) -> None:
    exp.set_deployment(
        namespace, name, [f"{name}-p0", f"{name}-p1"], [f"{name}-d0", f"{name}-d1"],
        rate=2.0, prompt_tokens=2000, output_tokens=500, ttft=0.4, tpot=0.02,
    )  # fmt: skip


def ready_by_version(kube: Kube, namespace: str, name: str) -> dict[tuple[str, str], int]:
    out: dict[tuple[str, str], int] = {}
    for p in pod_dicts(kube, namespace, name):
        if is_ready(p):
            key = (labels(p)[naming.LABEL_ROLE], labels(p)[naming.LABEL_VERSION])
            out[key] = out.get(key, 0) + 1
    return out


def start(lab: Lab, kube: Kube, namespace: str, name: str, deadline: str) -> tuple[int, int]:
    create_pdd(
        kube,
        namespace,
        pdd_manifest(name, lab.prometheus_url, surge=4, progress_deadline=deadline),
    )
    wait_for(
        lambda: (
            ready_by_version(kube, namespace, name).get(("prefill", "v1"), 0) >= 2
            and ready_by_version(kube, namespace, name).get(("decode", "v1"), 0) >= 2
        ),
        90,
        f"{name}: 2 + 2 Ready v1 pods",
    )
    return wait_stable(kube, namespace, name)


def test_version_change_rolls_both_pools_without_breaking_invariants(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    name = "roll"
    serve(exporter, namespace, name)
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name, period=0.5):
        sizes = start(lab, kube, namespace, name, deadline="60s")
        spec = spec_of(get_pdd(kube, namespace, name))
        assert health(get_pdd(kube, namespace, name))[0] == "Healthy"  # v1 serving
        argo: set[str] = set()  # Argo CD's health of the live object during the rollout
        with InvariantChecker(kube, namespace, name, spec, period=0.2) as checker:
            t0 = time.time()
            patch_spec(kube, namespace, name, {"engine": {"version": "v2"}})

            def done() -> bool:
                obj = get_pdd(kube, namespace, name)
                argo.add(health(obj)[0])
                st = obj.get("status") or {}
                ready = ready_by_version(kube, namespace, name)
                return (
                    st.get("activeVersion") == "v2"
                    and (st.get("rollout") or {}).get("phase") == "Complete"
                    and ready.get(("prefill", "v2"), 0) >= sizes[0]
                    and ready.get(("decode", "v2"), 0) >= sizes[1]
                    and ("prefill", "v1") not in ready
                    and ("decode", "v1") not in ready
                )

            wait_for(done, 120, "rollout to v2 complete")
            took = time.time() - t0
            wait_cell_gone(kube, namespace, name, "v1", 30)
            checker.still_sampling()  # alive once the v1 cell is gone: the whole rollout
    assert checker.violations == [], checker.violations[:5]
    # sampled all along: alive at the end (above), from v1 through v2 (below); 10 samples
    # at least, a count a loaded machine still reaches (a sample every 200 ms idle, ~5
    # per second of rollout; the rate is not asserted: load stretches it)
    print(f"rollout took {took:.1f} s")
    checker.check(at_least=10)
    assert {"v1", "v2"} <= checker.versions_seen
    prog = condition(get_pdd(kube, namespace, name), ConditionType.PROGRESSING)
    assert prog is not None
    assert (prog["status"], prog["reason"]) == ("False", ConditionReason.ROLLOUT_COMPLETE)
    assert "Progressing" in argo, argo
    assert "Degraded" not in argo, argo
    assert health(get_pdd(kube, namespace, name))[0] == "Healthy"


def test_never_ready_version_rolls_back_by_itself(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    """v1 -> v9 whose template makes kwok wait 1 h before Ready; progressDeadline 10 s:
    the operator rolls back to v1 (RolledBack), the v9 cell goes away, and the v1 cell,
    which kept its own template, served throughout."""
    name = "back"
    serve(exporter, namespace, name)
    rt = operator_runtime(lab)
    with ticking(rt, namespace, name, period=0.5):
        start(lab, kube, namespace, name, deadline="10s")
        spec = spec_of(get_pdd(kube, namespace, name))
        never = {"metadata": {"annotations": {"pdscaler.io/startup-delay": "1h"}}}
        with InvariantChecker(kube, namespace, name, spec, period=0.2) as checker:
            t0 = time.time()
            patch_spec(
                kube,
                namespace,
                name,
                {
                    "engine": {"version": "v9"},
                    "prefill": {"template": never},
                    "decode": {"template": never},
                },
            )
            wait_for(
                lambda: replicas(kube, namespace, name, Role.DECODE).get(
                    manifests.spec_revision(spec_of(get_pdd(kube, namespace, name)))
                ),
                30,
                "the v9 cell's decode Deployment",
            )

            def rolled_back() -> dict[str, object] | None:
                st = get_pdd(kube, namespace, name).get("status") or {}
                return st if (st.get("rollout") or {}).get("phase") == "RolledBack" else None

            st = wait_for(rolled_back, 90, "phase RolledBack")
            wait_cell_gone(kube, namespace, name, "v9", 60)
            took = time.time() - t0
            checker.still_sampling()  # alive once the v9 cell is gone: the whole rollback
    assert st["activeVersion"] == "v1"
    ready = ready_by_version(kube, namespace, name)
    assert ready.get(("prefill", "v1"), 0) >= 1
    assert ready.get(("decode", "v1"), 0) >= 1
    assert ("prefill", "v9") not in ready
    assert checker.violations == [], checker.violations[:5]
    print(f"rollback took {took:.1f} s")
    checker.check(at_least=10)  # sampled through the rollback (the rate: not asserted)
    assert {"v1", "v9"} <= checker.versions_seen  # the v9 pods were sampled too
    prog = condition(get_pdd(kube, namespace, name), ConditionType.PROGRESSING)
    assert prog is not None
    assert (prog["status"], prog["reason"]) == ("False", ConditionReason.ROLLED_BACK)
    # v1 serves again, but the version asked for does not: Argo CD shows it Degraded
    state, message = health(get_pdd(kube, namespace, name))
    assert state == "Degraded"
    assert message.startswith("ProgressDeadlineExceeded")
