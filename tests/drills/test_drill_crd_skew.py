"""D13: a newer CRD (defaulted fields a newer pdscaler would ship) re-applied under a
running operator, and the PDDeployment's status wiped (with the operator SIGKILLed and
restarted at the same moment: nothing remembered anywhere but the cluster) mid-rollout
and after a rollback.

The newer CRD is crds/ with two extra defaulted fields: ``spec.scaling.predictive``
(string, default "Off") and ``status.schemaRevision`` (integer, default 2); the API
server then serves every stored PDDeployment with them. The status is wiped through
the status subresource (``{"status": null}``), as a restore without status or a
hand-made ``kubectl patch --subresource=status`` would. A ``Timeline`` samples every
150 ms: pairing (``pdscaler.invariants``), Ready serving capacity against the totals
published before the fault, ``spec.replicas`` of every pool Deployment.

Checked, both cases: with the newer CRD the operator keeps scaling (the load doubles:
1 + 1 -> 2 + 2) and says so (the condition FieldsIgnored True, reason UnknownFields,
and a Warning Event ``UnknownFields``, both naming ``spec.scaling.predictive``; its
status keeps being written); capacity never below the
published totals; 0 pairing violations. Mid-rollout (v2 Ready 6 s after creation): the
rollout finishes on v2 after the wipe. After a rollback (v2 never Ready, rolled back
and its cell deleted): after the wipe and restart the failed version is not retried
(no v2 Deployment appears again in 6 ticks of the restarted operator, 12 s idle) and
the rollout shows RolledBack again. The newer CRD's schema is served asynchronously:
the test polls its read of the default (and of the session CRD's schema at the end).

Shortened (each case < 90 s): interval 2 s (15 s), progressDeadline 15 s (10 m), 1 + 1
then 2 + 2 replicas, pods Ready 1 s after creation; the restart is at once.
"""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from drills.faults import DrillOperator
from drills.operator_process import (
    handling,
    ready_by_version,
    settled_two_by_two,
    start_on_new_pdd,
    wait_ready,
)
from drills.report import DrillRecord
from drills.samplers import Timeline
from pdlab.cluster.kubeclient import CRD_PATH, apply_crd, crd_established
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.spec import GROUP, PLURAL, VERSION, parse_spec_lenient
from pdscaler.types import ConditionType, RolloutPhase, RolloutReason
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    condition,
    deployments,
    get_pdd,
    patch_spec,
    pod_dicts,
    serve_two_by_two,
    wait_stable,
)

INTERVAL = 2.0
DEADLINE = 15.0
#: ticks of the restarted operator watched for a retry of the failed version (12 s idle)
WATCH_TICKS = 6
BROKEN = {"template": {"metadata": {"annotations": {"pdscaler.io/startup-delay": "1h"}}}}
SLOW = {"template": {"metadata": {"annotations": {"pdscaler.io/startup-delay": "6s"}}}}


def newer_crd() -> dict[str, Any]:
    """crds/ as a newer pdscaler would ship it: two more defaulted fields."""
    body: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    schema = body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    scaling = schema["spec"]["properties"]["scaling"]["properties"]
    scaling["predictive"] = {"type": "string", "default": "Off"}
    schema["status"]["properties"]["schemaRevision"] = {"type": "integer", "default": 2}
    return body


def _apply(kube: Kube, body: dict[str, Any]) -> None:
    name = body["metadata"]["name"]
    body = copy.deepcopy(body)
    current: Any = kube.apiext.read_custom_resource_definition(name)
    body["metadata"]["resourceVersion"] = current.metadata.resource_version
    kube.apiext.replace_custom_resource_definition(name, cast(Any, body))
    wait_for(lambda: crd_established(kube, name), 30, "the newer CRD Established")


def _served_scaling(kube: Kube, namespace: str, name: str, *, newer: bool) -> dict[str, Any]:
    """``spec.scaling`` of the PDDeployment once the API server serves the CRD just
    applied: with the newer CRD's defaulted ``predictive``, or without it again. A CRD's
    new schema is served asynchronously (Established is already True from before):
    read at once after the replace, the object came without the default (make test,
    48bfd55: KeyError 'predictive'), so the read is polled, 30 s at most."""

    reads, t0, which = [0], time.monotonic(), "newer" if newer else "session"

    def scaling() -> dict[str, Any] | None:
        reads[0] += 1
        got = dict(get_pdd(kube, namespace, name)["spec"]["scaling"])
        return got if ("predictive" in got) == newer else None

    served = wait_for(scaling, 30, f"the {which} CRD's schema served")
    print(f"the {which} CRD's schema served: read {reads[0]}, {time.monotonic() - t0:.2f} s")
    return served


def _status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_pdd(kube, namespace, name).get("status") or {})


def _phase(kube: Kube, namespace: str, name: str) -> str | None:
    return (_status(kube, namespace, name).get("rollout") or {}).get("phase")


def _wipe_status(kube: Kube, namespace: str, name: str) -> None:
    kube.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, PLURAL, name, {"status": None}
    )


def _events(kube: Kube, namespace: str, name: str, reason: str) -> list[Any]:
    sel = f"involvedObject.name={name},reason={reason}"
    return list(kube.core.list_namespaced_event(namespace, field_selector=sel).items)


def _cell_gone(kube: Kube, namespace: str, name: str, version: str) -> bool:
    label = naming.version_label(version)
    return not any(
        (d["metadata"].get("labels") or {}).get(naming.LABEL_VERSION) == label
        and not d["metadata"].get("deletionTimestamp")
        for d in deployments(kube, namespace, name)
    )


def _dump(kube: Kube, namespace: str, name: str) -> None:
    """What the cluster shows, for a failure's captured output."""
    st = _status(kube, namespace, name)
    print("rollout:", st.get("rollout"), "active:", st.get("activeVersion"))
    print(
        "conditions:",
        [(c["type"], c["status"], c.get("reason")) for c in st.get("conditions") or []],
    )
    print("lastDecision:", (st.get("lastDecision") or {}).get("message"))
    for d in deployments(kube, namespace, name):
        print("deployment:", d["metadata"]["name"], d["spec"].get("replicas"))
    print("ready:", ready_by_version(pod_dicts(kube, namespace, name)))
    for p in pod_dicts(kube, namespace, name):
        print(
            "pod:",
            p["metadata"]["name"],
            p["status"].get("phase"),
            p["metadata"].get("deletionTimestamp"),
        )
    try:  # what a tick would do now (a restarted operator's view), no writes
        from pdscaler import reconcile, tick
        from pdscaler.kube import Kube as OpKube
        from pdscaler.kube import load_api_client
        from pdscaler.runtime import Runtime

        rt = Runtime(kube=OpKube(load_api_client()))
        read = reconcile._read(rt, namespace, name)
        if not isinstance(read, str):
            fx = tick.compute(read[1])
            print("tick:", fx.step.message, [(c.rev, c.replicas) for c in fx.step.cells])
            print("writes:", [a.describe() for a in fx.writes])
            print("decision:", fx.decision.message)
    except Exception as err:
        print("tick failed:", err)
    for e in kube.core.list_namespaced_event(namespace).items:
        if e.involved_object.name == name:
            print("event:", e.type, e.reason, (e.message or "")[:200])


@pytest.mark.lab
@pytest.mark.timeout(300)
@pytest.mark.parametrize("when", ["mid-rollout", "after-rollback"])
def test_newer_crd_and_wiped_status(
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
        "D13",
        fault=(
            "a newer CRD with defaulted spec and status fields re-applied; status wiped "
            f"{when} with the operator SIGKILLed and restarted at the same moment"
        ),
        invariant=(
            "scaling continues and the skew is reported; the failed version is not "
            "retried; capacity never below the published totals; 0 mixed pairs"
        ),
        shortened=(
            f"interval {INTERVAL:g} s (15 s), progressDeadline {DEADLINE:g} s (10 m), "
            "1 + 1 then 2 + 2 replicas, pods Ready 1 s after creation, restart at once"
        ),
    )
    name = "d13"
    serve_two_by_two(exporter, namespace, name, 1.0)
    op = DrillOperator(namespace, str(lab.kubeconfig), tmp_path / "operator.log")
    op.allowed = lab.prometheus_url
    start_on_new_pdd(
        op, kube, lab.prometheus_url, name, interval=INTERVAL, progress_deadline=f"{DEADLINE:g}s"
    )
    try:
        wait_ready(kube, namespace, name, 1, 1, 60)
        _apply(kube, newer_crd())
        scaling = _served_scaling(kube, namespace, name, newer=True)
        assert scaling["predictive"] == "Off", scaling
        t0 = time.time()
        serve_two_by_two(exporter, namespace, name, 2.0)
        wait_for(
            lambda: (
                (r := ready_by_version(pod_dicts(kube, namespace, name))).get(("prefill", "v1"), 0)
                >= 2
                and r.get(("decode", "v1"), 0) >= 2
            ),
            40,
            "2 + 2 Ready v1 pods under the newer CRD",
        )
        drill.recovered("scale-up 1+1 -> 2+2 under the newer CRD", time.time() - t0)
        sizes = settled_two_by_two(wait_stable(kube, namespace, name, hold=2.0, timeout=30))
        unknown = _events(kube, namespace, name, "UnknownFields")
        assert unknown, "no UnknownFields Event"
        assert "spec.scaling.predictive" in unknown[0].message, unknown[0].message
        # and the condition says so while the skew lasts
        ignored = condition(get_pdd(kube, namespace, name), ConditionType.FIELDS_IGNORED)
        assert ignored is not None, "no FieldsIgnored condition"
        assert (ignored["status"], ignored["reason"]) == ("True", "UnknownFields"), ignored
        assert "spec.scaling.predictive" in ignored["message"], ignored
        spec, _ = parse_spec_lenient(get_pdd(kube, namespace, name)["spec"])
        with Timeline(kube, namespace, name, spec) as tl:
            if when == "mid-rollout":
                patch_spec(
                    kube,
                    namespace,
                    name,
                    {"engine": {"version": "v2"}, "prefill": SLOW, "decode": SLOW},
                )
                wait_for(
                    lambda: any(
                        (d["metadata"].get("labels") or {}).get(naming.LABEL_VERSION) == "v2"
                        for d in deployments(kube, namespace, name)
                    ),
                    30,
                    "the v2 cell created",
                    interval=0.1,
                )
            else:
                patch_spec(
                    kube,
                    namespace,
                    name,
                    {"engine": {"version": "v2"}, "prefill": BROKEN, "decode": BROKEN},
                )
                wait_for(
                    lambda: (
                        _phase(kube, namespace, name) == RolloutPhase.ROLLED_BACK
                        and _cell_gone(kube, namespace, name, "v2")
                    ),
                    DEADLINE + 40,
                    "rolled back from v2, its cell deleted",
                )
            op.kill()
            _wipe_status(kube, namespace, name)
            t_wipe = time.time()
            offset = op.log.stat().st_size
            op.start()
            wait_for(lambda: handling(op, offset), 90, "the restarted operator handling")
            drill.recovered("SIGKILL to handling again", time.time() - t_wipe)
            if when == "mid-rollout":
                wait_for(
                    lambda: (
                        _phase(kube, namespace, name) == RolloutPhase.COMPLETE
                        and _cell_gone(kube, namespace, name, "v1")
                    ),
                    120,
                    "the rollout to v2 complete after the wipe",
                )
                drill.recovered("rollout complete after the wipe", time.time() - t_wipe)
            else:
                back = wait_for(
                    lambda: _phase(kube, namespace, name) == RolloutPhase.ROLLED_BACK,
                    40,
                    "the rollback shown again after the wipe",
                )
                assert back
                drill.recovered("RolledBack shown again after the wipe", time.time() - t_wipe)
                op.hold(name, 0.0, WATCH_TICKS)  # the failed version must stay out
            final = get_pdd(kube, namespace, name)
            tl.still_sampling()  # alive to the end of the drill
    except Exception:
        _dump(kube, namespace, name)
        raise
    finally:
        op.stop()
        apply_crd(kube)  # the session's CRD again for the next tests, once it is served
        with contextlib.suppress(Exception):
            _served_scaling(kube, namespace, name, newer=False)
    pairing = tl.pairing()
    below = tl.below(sizes)
    retried = tl.version_growth("v2", since=t_wipe) if when == "after-rollback" else []
    drill.sampled(tl.samples, len(pairing) + len(below) + len(retried))
    tl.check(at_least=21)  # sampled along, at most a tenth of the reads failed
    assert retried == [], retried
    assert pairing == [], pairing[:5]
    assert below == [], below[:3]
    st = final.get("status") or {}
    assert st.get("conditions"), st  # the operator still writes its status
    if when == "after-rollback":
        assert (st.get("rollout") or {}).get("phase") == RolloutPhase.ROLLED_BACK, st
        assert st.get("activeVersion") == "v1", st
        assert _events(kube, namespace, name, RolloutReason.DEADLINE.value)
