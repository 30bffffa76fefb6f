"""One background sampler of a PDDeployment for drills: pairing, capacity and replicas
on one timeline, every ``period`` s (150 ms by default).

Owns: reading, per sample, the PDDeployment's pods (pairing: every Ready prefill pod's
reachable decode pods are of its version and config, ``pdscaler.invariants``; Ready
serving capacity per role), the last published desired totals
(``status.prefill|decode.desiredReplicas``), the rollout phase, and ``spec.replicas`` of
every owned pool Deployment; and the checks drills make on that timeline (capacity below
a floor, replicas that shrank, a version that grew); and ``MixSampler`` (D12): Ready pods
that would pair across engine configurations (``mixed_pairs``). Must not: inject faults or decide
whether a drill passed (its asserts do).

    with Timeline(kube, ns, "d7", spec) as tl:
        ...  # the fault
    drops = tl.replica_drops()          # [(t, "d7-v1-...-decode", 3, 2)] when one shrank
    tl.check(at_least=100)              # sampled along, few failed reads (else AssertionError)
    drill.sampled(tl.samples, len(tl.pairing()) + len(drops))
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from drills.operator_process import ready_by_version, serving
from pdscaler import invariants, naming
from pdscaler.observe import is_ready, labels
from pdscaler.spec import PDDeploymentSpec
from support.background import Sampling
from support.labkit import Kube
from support.opkit import IMAGE, deployments, get_pdd, pod_dicts


@dataclass(frozen=True)
class Sample:
    """One instant: ``t`` (epoch s); ``pairing`` (the invariants' messages); ``serving``
    (Ready prefill in versions with a Ready decode, Ready decode); ``ready`` per (role,
    version); ``desired`` (prefill, decode) as last published in the status (None before
    any); ``phase`` (status.rollout.phase); ``replicas``: Deployment name -> (version
    label, role, spec.replicas), pool Deployments only, not being deleted."""

    t: float
    pairing: tuple[str, ...]
    serving: tuple[int, int]
    ready: dict[tuple[str, str], int]
    desired: tuple[int, int] | None
    phase: str | None
    replicas: dict[str, tuple[str, str, int]]


def _desired(status: dict[str, Any]) -> tuple[int, int] | None:
    p = (status.get("prefill") or {}).get("desiredReplicas")
    d = (status.get("decode") or {}).get("desiredReplicas")
    return (int(p), int(d)) if p is not None and d is not None else None


@dataclass
class Timeline(Sampling):
    """Samples ``name`` in ``namespace`` every ``period`` s (0.15 by default) until the
    ``with`` block ends; a sample whose reads fail is not a sample (the drill may be
    cutting the API's peers): it is counted in ``failed`` and kept in ``errors``, and
    sampling goes on (``Sampling``)."""

    kube: Kube
    namespace: str
    name: str
    spec: PDDeploymentSpec
    period: float = field(default=0.15, kw_only=True)
    points: list[Sample] = field(default_factory=list)

    def sample(self) -> None:
        self.points.append(self.read())

    def read(self) -> Sample:
        """One instant of the PDDeployment (raises when a read fails)."""
        pods = pod_dicts(self.kube, self.namespace, self.name)
        deps = deployments(self.kube, self.namespace, self.name)
        status = get_pdd(self.kube, self.namespace, self.name).get("status") or {}
        reps: dict[str, tuple[str, str, int]] = {}
        for d in deps:
            lab = d["metadata"].get("labels") or {}
            if lab.get(naming.LABEL_ROLE) not in ("prefill", "decode"):
                continue
            if d["metadata"].get("deletionTimestamp"):
                continue
            reps[d["metadata"]["name"]] = (
                lab.get(naming.LABEL_VERSION, ""),
                lab[naming.LABEL_ROLE],
                int(d["spec"].get("replicas") or 0),
            )
        return Sample(
            t=time.time(),
            pairing=tuple(invariants.violations(pods, self.spec, self.name, check_capacity=False)),
            serving=serving(pods),
            ready=ready_by_version(pods),
            desired=_desired(status),
            phase=((status.get("rollout") or {}).get("phase")),
            replicas=reps,
        )

    # ------------------------------------------------------------ checks

    def pairing(self) -> list[tuple[float, str]]:
        """Every pairing violation seen (empty: none)."""
        return [(s.t, v) for s in self.points for v in s.pairing]

    def below(self, floor: tuple[int, int]) -> list[Sample]:
        """Samples whose Ready serving capacity was below ``floor`` in either role."""
        return [s for s in self.points if s.serving[0] < floor[0] or s.serving[1] < floor[1]]

    def replica_drops(
        self, since: float = 0.0, until: float | None = None
    ) -> list[tuple[float, str, int, int]]:
        """(t, Deployment, before, after) each time a pool Deployment's spec.replicas
        went down between two samples in [since, until]."""
        out: list[tuple[float, str, int, int]] = []
        last: dict[str, int] = {}
        for s in self.points:
            if s.t < since or (until is not None and s.t > until):
                continue
            for dep, (_, _, n) in s.replicas.items():
                if dep in last and n < last[dep]:
                    out.append((s.t, dep, last[dep], n))
                last[dep] = n
        return out

    def totals(self, s: Sample) -> tuple[int, int]:
        """spec.replicas summed per role over every cell at one sample."""
        p = sum(n for _, r, n in s.replicas.values() if r == "prefill")
        d = sum(n for _, r, n in s.replicas.values() if r == "decode")
        return p, d

    def version_growth(self, version: str, since: float) -> list[tuple[float, str, int, int]]:
        """(t, Deployment, before, after) each time a ``version`` pool Deployment's
        replicas went up after ``since``, or one appeared with replicas > 0 after it
        had been absent (a retry of that version)."""
        label = naming.version_label(version)
        out: list[tuple[float, str, int, int]] = []
        last: dict[str, int] = {}
        for s in self.points:
            mine = {d: n for d, (v, _, n) in s.replicas.items() if v == label}
            if s.t >= since:
                for dep, n in mine.items():
                    if n > last.get(dep, 0):
                        out.append((s.t, dep, last.get(dep, 0), n))
            last = mine
        return out


def engine_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    containers: list[dict[str, Any]] = spec["containers"]
    return next((c for c in containers if c.get("name") == "engine"), containers[0])


def _created(pod: dict[str, Any]) -> float:
    stamp = str(pod["metadata"].get("creationTimestamp") or "")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0


def mixed_pairs(pods: list[dict[str, Any]], edits: tuple[float, ...] = ()) -> list[str]:
    """Ready pods that would pair across configurations: a pod whose engine image is not
    its cell's version (``kubectl set image``), one pool of a cell whose Ready pods run
    different images, args, init containers or nodeSelectors (an in-place configuration
    change), or one cell whose Ready pool pods were created on both sides of an edit of
    a ConfigMap they read (``edits``: epoch seconds; a pod within 1.5 s of an edit, the
    timestamps' resolution, is not judged): its router pairs engines that read two
    contents."""
    out: list[str] = []
    seen: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    sides: dict[str, set[int]] = {}
    for p in pods:
        lab = labels(p)
        if lab.get(naming.LABEL_ROLE) not in ("prefill", "decode") or not is_ready(p):
            continue
        eng = engine_of(p)
        version = (p["metadata"].get("annotations") or {}).get(naming.ANNOTATION_VERSION, "")
        if eng.get("image") != naming.image_ref(IMAGE, version):
            out.append(f"pod {p['metadata']['name']} runs {eng.get('image')} in a {version} cell")
        key = (lab.get(naming.LABEL_REVISION, ""), lab[naming.LABEL_ROLE])
        pod = p["spec"]
        config = (pod.get("initContainers"), pod.get("nodeSelector"))
        seen.setdefault(key, set()).add(
            (str(eng.get("image")), repr(eng.get("args")), repr(config))
        )
        created = _created(p)
        if not any(abs(created - e) <= 1.5 for e in edits):
            sides.setdefault(key[0], set()).add(sum(created > e for e in edits))
    out += [f"{rev} {role}: {sorted(v)}" for (rev, role), v in seen.items() if len(v) > 1]
    out += [
        f"{rev}: Ready pods from both sides of a ConfigMap edit"
        for rev, s in sides.items()
        if len(s) > 1
    ]
    return out


@dataclass
class MixSampler(Sampling):
    """``mixed_pairs`` of the PDDeployment's pods every 200 ms (a failed read: no sample,
    counted in ``failed`` and kept in ``errors``: ``Sampling``)."""

    kube: Kube
    namespace: str
    name: str
    mixed: list[str] = field(default_factory=list)
    #: when a ConfigMap the pods read was edited (epoch s; the drill appends)
    edits: list[float] = field(default_factory=list)

    def sample(self) -> None:
        pods = pod_dicts(self.kube, self.namespace, self.name)
        self.mixed += mixed_pairs(pods, tuple(self.edits))
