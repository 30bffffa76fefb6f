"""The live role flip (``scaling.roleFlips``) with the real ``vllm-router``: a decode
replica the decode pool no longer needs becomes a prefill replica by a label patch, and
requests follow it, without a new pod.

A scaled-down ``deploy/examples/chat.yaml`` with role flips on (reconfiguration 0 s, a
5 s flip window) runs 1 prefill and 4 decode replicas. Then decode's minimum drops to 1
(the 5-minute scale-down stabilization keeps its 4 pods: 3 above its recommendation)
and prefill's minimum rises to 3: prefill grows by 2, and the policy flips one decode
replica (a third of 4) instead of starting it cold (engine pods take 6 s, a flip about
0.2 s of drain). Checked against the cluster and real requests:

* the flipped pod is the same pod (same UID), made by the decode Deployment, labelled
  ``pdscaler.io/role=prefill`` with ``pod-deletion-cost`` 1000000; the decode Deployment
  runs 4 (3 serving decode + the flipped one), the prefill Deployment 2 (one new pod);
* the status counts what each pool SERVES: prefill 3 Ready, decode 3; the decision's
  message says a replica changes role, and a ``FlippedRole`` Event names the pod;
* the real router discovers the relabelled pod as a prefill worker: streamed completions
  through the front Service get their prefill from it, and no decode leg goes to it
  once it serves prefill; every request's prefill and decode are of one revision;
* decode then shrinks to 1 (stabilization cut to 1 s): the real ReplicaSet controller
  deletes decode's own pods and keeps the flipped one (its deletion cost), so the decode
  Deployment runs 2 (1 serving decode + the flipped pod) and prefill still serves 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pdlab.cluster.lab import Lab
from pdlab.cluster.svcproxy import SvcProxy
from pdscaler import naming
from pdscaler.manifests import DELETION_COST_ANNOTATION
from pdscaler.observe import labels
from support.labkit import Kube, wait_for
from support.opkit import get_pdd, patch_spec
from support.served_chat import (
    NAME,
    Clients,
    armed,
    completion,
    decode_flipped_or_why,
    flip_chat,
    live_pods,
    ready_by_role,
    records,
    serving,
)


@pytest.fixture
def served(lab: Lab, kube: Kube, crd: str, namespace: str) -> Iterator[tuple[int, int, SvcProxy]]:
    with serving(lab, kube, namespace, doc=flip_chat(namespace, lab.prometheus_url)) as path:
        yield path


def deployment_replicas(kube: Kube, namespace: str) -> dict[str, int]:
    deps = kube.apps.list_namespaced_deployment(
        namespace, label_selector=f"{naming.LABEL_NAME}={NAME}"
    ).items
    return {
        ((d.metadata and d.metadata.labels) or {})[naming.LABEL_ROLE]: int(d.spec.replicas or 0)
        for d in deps
    }


def test_a_surplus_decode_replica_flips_to_prefill_and_the_router_follows(
    kube: Kube, namespace: str, served: tuple[int, int, SvcProxy]
) -> None:
    front, control, _ = served
    wait_for(lambda: completion(front), 120, "a streamed completion via the front")
    wait_for(
        lambda: ready_by_role(kube, namespace) == {"prefill": 1, "decode": 4, "router": 1},
        90, "1 prefill, 4 decode and 1 router Ready",
    )  # fmt: skip
    decode_uids = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in live_pods(kube, namespace)
        if labels(p)[naming.LABEL_ROLE] == "decode"
    }
    # every decode pod was made by the decode Deployment, which selects on the pool label
    assert all(
        labels(p).get(naming.LABEL_POOL) == labels(p)[naming.LABEL_ROLE]
        for p in live_pods(kube, namespace)
        if labels(p)[naming.LABEL_ROLE] != "router"
    )
    patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 1, "max": 6}}})

    def flipped() -> dict[str, Any] | None:
        try:
            return decode_flipped_or_why(kube, namespace)
        except LookupError:
            return None

    # Requests keep flowing while the flip is asked for and made: with none in the
    # metrics window the token lengths are unknown, and the policy holds on missing data
    # (it raises prefill to its min with new pods and flips nothing). In CI at 4c5ab29
    # and in a fresh-clone run of c4ad678 the trigger tick saw request rate 0 and
    # prefill grew 1->3 by new pods; after a minute without requests the metrics read
    # "prompt_tokens NaN (nothing observed in the window)". ``armed``: the flip window
    # (5 s) full of decode recommendations of 1, and the metrics without a gap.
    with Clients(front):
        armed(kube, namespace)
        patch_spec(kube, namespace, NAME, {"prefill": {"replicas": {"min": 3, "max": 4}}})
        pod = wait_for(
            lambda: decode_flipped_or_why(kube, namespace), 60, "a decode pod relabelled prefill"
        )
    name = pod["metadata"]["name"]
    assert decode_uids.get(name) == pod["metadata"]["uid"], "the same pod, not a new one"
    cost = (pod["metadata"].get("annotations") or {}).get(DELETION_COST_ANNOTATION)
    assert cost == "1000000"
    wait_for(
        lambda: ready_by_role(kube, namespace).get("prefill") == 3 or None,
        90, "3 Ready prefill (1 flipped, 1 new)",
    )  # fmt: skip
    assert ready_by_role(kube, namespace)["decode"] == 3
    reps = deployment_replicas(kube, namespace)
    assert (reps["prefill"], reps["decode"]) == (2, 4), reps
    assert decode_uids.get(name) == (flipped() or {})["metadata"]["uid"]

    def status_counts() -> tuple[int, int] | None:
        st = get_pdd(kube, namespace, NAME).get("status") or {}
        got = (
            (st.get("prefill") or {}).get("readyReplicas"),
            (st.get("decode") or {}).get("readyReplicas"),
        )
        return got if got == (3, 3) else None

    wait_for(status_counts, 30, "the status counting what each pool serves")
    events = kube.core.list_namespaced_event(namespace).items
    flips = [e for e in events if e.reason == "FlippedRole"]
    assert flips, [e.reason for e in events]
    assert f"{name} decode->prefill" in (flips[0].message or "")
    said = [e.message or "" for e in events]
    assert any("1 decode replica changes role to prefill" in m for m in said), said

    # the real router serves prefill from the flipped pod, and no longer decodes on it
    start = (records(control) or [{"seq": 0}])[-1]["seq"]

    def prefilled_by_flipped() -> bool | None:
        completion(front)
        recs = [r for r in records(control, start) if r["kind"] == "decode" and r["ok"]]
        return any(r["prefill_pod"] == name for r in recs) or None

    wait_for(prefilled_by_flipped, 60, "a request whose prefill ran on the flipped pod")
    after = records(control, start)[-1]["seq"]
    for _ in range(12):
        assert completion(front)
    recs = [r for r in records(control, after) if r["kind"] == "decode"]
    assert len(recs) >= 12
    assert all(r["ok"] for r in recs), recs
    assert not [r for r in recs if r["decode_pod"] == name], "a decode leg on the flipped pod"
    assert all(r["prefill_revision"] == r["decode_revision"] for r in recs)

    # decode shrinks (stabilization cut to 1 s): the real ReplicaSet controller removes
    # decode's own pods and keeps the flipped one, whose cost is the highest
    patch_spec(kube, namespace, NAME, {"scaling": {"scaleDownStabilization": "1s"}})
    wait_for(
        lambda: ready_by_role(kube, namespace).get("decode") == 1 or None,
        90, "decode down to 1 serving pod",
    )  # fmt: skip
    wait_for(
        lambda: deployment_replicas(kube, namespace)["decode"] == 2 or None,
        30, "decode's Deployment at 2: 1 serving decode + the flipped pod",
    )  # fmt: skip
    kept = flipped()
    assert kept is not None
    assert kept["metadata"]["uid"] == decode_uids[name]
    assert ready_by_role(kube, namespace)["prefill"] == 3
