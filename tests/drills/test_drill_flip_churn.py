"""D20, role flips under churn (issue 30): the live role flip (``scaling.roleFlips``, a
decode replica relabelled to serve prefill) while other things happen to the cell, under
a steady stream of streamed completions through the front Service (the served-chat
set-up of tests/lab/test_role_flip.py: ``deploy/examples/chat.yaml`` scaled to the lab,
the real ``vllm-router``, the engine simulator, the operator ticking every second).

Starting from 1 prefill and 4 decode replicas whose decode recommendation is 1 (its
minimum lowered; the 5-minute scale-down stabilization keeps the 4 pods), three phases:

A. evict a just-flipped pod: prefill's minimum 1 -> 2 makes the policy flip a surplus
   decode pod; the moment it is relabelled it is evicted (the Eviction API, as a node
   drain does). Prefill must serve 2 again (another flip or a new pod).
B. flip and roll out at once: one patch changes the engine version and prefill's
   minimum 2 -> 3 (``maxSurgeGPUs`` 8 here, so the new cell starts in one step). The new
   cell must serve prefill 3 and the old cell be gone.
C. flip during a scale-down: one patch raises prefill's minimum 3 -> 4 and cuts the
   stabilization to 1 s, so decode shrinks to its recommendation (1) while prefill grows
   from decode's surplus. Prefill must serve 4 and decode 1.

Invariants over the whole drill: no failed request (2 clients sending one streamed
completion after another); no mixed pair: every request the engine simulator recorded
had its prefill and its decode in one cell (revision and configuration) with the KV
hand-off, and none was a pairing error. The flips are counted (``FlippedRole``
Events, and flipped pods seen by a 0.3 s sampler).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s

from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler import naming
from pdscaler.observe import is_ready, labels
from support.background import Sampling
from support.labkit import Kube, wait_for
from support.opkit import deployments, get_pdd, patch_spec
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

V2 = "v0.12.0"


def flipped(pod: dict[str, Any]) -> bool:
    """An engine pod serving the other pool's role (its Deployment's pool label
    differs; routers have no pool)."""
    lab = labels(pod)
    pool = lab.get(naming.LABEL_POOL)
    return pool in ("prefill", "decode") and pool != lab.get(naming.LABEL_ROLE)


@dataclass
class FlipSampler(Sampling):
    """Every ``period`` s (0.3): the flipped pods (name -> first time seen)."""

    kube: Kube
    namespace: str
    period: float = field(default=0.3, kw_only=True)
    seen: dict[str, float] = field(default_factory=dict)

    def sample(self) -> None:
        now = time.time()
        for pod in live_pods(self.kube, self.namespace):
            if flipped(pod):
                self.seen.setdefault(pod["metadata"]["name"], now)

    def since(self, t: float) -> list[str]:
        return [n for n, first in self.seen.items() if first >= t]


def serving_roles(kube: Kube, namespace: str, version: str | None = None) -> dict[str, int]:
    """Ready pods not being deleted by the role they serve (only ``version``'s, if
    given), routers left out."""
    out: dict[str, int] = {}
    label = naming.version_label(version) if version else None
    for pod in live_pods(kube, namespace):
        lab = labels(pod)
        if not is_ready(pod) or lab[naming.LABEL_ROLE] == naming.ROLE_ROUTER:
            continue
        if label is None or lab.get(naming.LABEL_VERSION) == label:
            out[lab[naming.LABEL_ROLE]] = out.get(lab[naming.LABEL_ROLE], 0) + 1
    return out


def mixed(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode records whose prefill ran in another cell, or without the hand-off, or
    that the engine counted as a pairing error."""
    return [
        r
        for r in recs
        if r["kind"] == "decode"
        and (
            r["prefill_revision"] != r["decode_revision"]
            or r["prefill_config"] != r["decode_config"]
            or not r["kv_transfer"]
            or r.get("pairing_error")
        )
    ]


def rolled_out(kube: Kube, namespace: str) -> bool:
    """Only ``V2``'s pool Deployments left and the rollout not moving (while another
    cell exists the policy flips nothing: ``flips.consider_flip``)."""
    versions = {
        labels(d).get(naming.LABEL_VERSION)
        for d in deployments(kube, namespace, NAME)
        if labels(d).get(naming.LABEL_ROLE) in ("prefill", "decode")
    }
    status = get_pdd(kube, namespace, NAME).get("status") or {}
    phase = (status.get("rollout") or {}).get("phase")
    return versions == {naming.version_label(V2)} and phase not in ("Progressing", "RollingBack")


def churn_chat(namespace: str, prometheus_url: str) -> dict[str, Any]:
    doc = flip_chat(namespace, prometheus_url)
    doc["spec"]["rollout"]["maxSurgeGPUs"] = 8
    return doc


@pytest.mark.lab
@pytest.mark.timeout(420)
def test_role_flips_under_churn(
    lab: Lab, kube: Kube, crd: str, namespace: str, drill: DrillRecord
) -> None:
    drill.describe(
        "D20",
        fault="role flips under churn: a just-flipped pod evicted; a flip and a rollout in "
        "one patch; a flip during a decode scale-down",
        invariant="no failed request, no mixed pair (prefill and decode of one cell, with "
        "the KV hand-off)",
        shortened="1 prefill + 4 decode replicas, a 5 s flip window, 2 clients",
    )
    doc = churn_chat(namespace, lab.prometheus_url)
    with serving(lab, kube, namespace, doc=doc) as (front, control, _):
        wait_for(lambda: completion(front), 120, "a streamed completion via the front")
        start = (records(control) or [{"seq": 0}])[-1]["seq"]
        with Clients(front) as clients, FlipSampler(kube, namespace) as flips:
            wait_for(
                lambda: ready_by_role(kube, namespace)
                == {"prefill": 1, "decode": 4, "router": 1},
                90, "1 prefill, 4 decode and 1 router Ready",
            )  # fmt: skip
            patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 1, "max": 6}}})
            armed(kube, namespace)
            # A: evict a just-flipped pod
            t_a = time.time()
            patch_spec(kube, namespace, NAME, {"prefill": {"replicas": {"min": 2, "max": 4}}})
            pod = wait_for(
                lambda: decode_flipped_or_why(kube, namespace),
                60, "a decode pod relabelled prefill",
            )  # fmt: skip
            evicted = pod["metadata"]["name"]
            kube.core.create_namespaced_pod_eviction(
                evicted,
                namespace,
                k8s.V1Eviction(metadata=k8s.V1ObjectMeta(name=evicted, namespace=namespace)),
            )
            t_evict = time.time()
            wait_for(
                lambda: serving_roles(kube, namespace).get("prefill") == 2
                and evicted not in {p["metadata"]["name"] for p in live_pods(kube, namespace)},
                90, "prefill serving 2 again, the evicted pod gone",
            )  # fmt: skip
            drill.recovered("prefill serving 2 again after the eviction", time.time() - t_evict)
            # B: a flip and a rollout in one patch
            t_b = time.time()
            patch_spec(
                kube, namespace, NAME,
                {"engine": {"version": V2}, "prefill": {"replicas": {"min": 3, "max": 4}}},
            )  # fmt: skip
            wait_for(
                lambda: serving_roles(kube, namespace, V2).get("prefill", 0) >= 3
                and set(serving_roles(kube, namespace)) <= {"prefill", "decode"}
                and serving_roles(kube, namespace) == serving_roles(kube, namespace, V2)
                and rolled_out(kube, namespace),
                150, f"the {V2} cell serving prefill 3, nothing else serving, the old cell gone",
            )  # fmt: skip
            drill.recovered("rollout with a flip done", time.time() - t_b)
            # the new cell's decode above its recommendation again: 3 pods, then min 1
            patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 3, "max": 6}}})
            wait_for(
                lambda: serving_roles(kube, namespace, V2).get("decode", 0) >= 3,
                60, f"3 {V2} decode pods serving",
            )  # fmt: skip
            patch_spec(kube, namespace, NAME, {"decode": {"replicas": {"min": 1, "max": 6}}})
            armed(kube, namespace)
            # C: a flip during a decode scale-down
            t_c = time.time()
            patch_spec(
                kube, namespace, NAME,
                {"prefill": {"replicas": {"min": 4, "max": 4}},
                 "scaling": {"scaleDownStabilization": "1s"}},
            )  # fmt: skip
            wait_for(
                lambda: serving_roles(kube, namespace) == {"prefill": 4, "decode": 1},
                120, "prefill serving 4, decode 1",
            )  # fmt: skip
            drill.recovered("prefill 4 and decode 1 after the scale-down", time.time() - t_c)
            time.sleep(3.0)  # requests after the last change
            flips.still_sampling()
        recs = records(control, start)
    events = kube.core.list_namespaced_event(namespace).items
    flip_events = [e.message or "" for e in events if e.reason == "FlippedRole"]
    bad = mixed(recs)
    failed = clients.failed()
    decodes = [r for r in recs if r["kind"] == "decode"]
    phases = {
        "A": [n for n in flips.since(t_a) if flips.seen[n] < t_b],
        "B": [n for n in flips.since(t_b) if flips.seen[n] < t_c],
        "C": flips.since(t_c),
    }
    by_phase = {
        "A": [t for t in failed if t < t_b],
        "B": [t for t in failed if t_b <= t < t_c],
        "C": [t for t in failed if t >= t_c],
    }
    print(
        f"D20: failed by phase {by_phase} (phases at {t_a:.1f}, {t_b:.1f}, {t_c:.1f}); "
        f"{len(clients.sent)} requests, {len(failed)} failed, {len(decodes)} decode "
        f"records, {len(bad)} mixed; flipped pods by phase {phases}; evicted {evicted}; "
        f"FlippedRole Events {flip_events}"
    )
    drill.sampled(len(clients.sent), len(failed) + len(bad))
    flips.check(at_least=10)
    assert failed == [], f"{len(failed)} failed requests at {failed[:5]}"
    assert bad == [], bad[:3]
    assert len(decodes) >= len(clients.sent) * 0.9, (len(decodes), len(clients.sent))
    assert any(f"{evicted} decode->prefill" in m for m in flip_events), flip_events
    assert phases["C"], f"no flip during the scale-down: {phases}"
    assert {r["decode_version"] for r in decodes} >= {V2}
