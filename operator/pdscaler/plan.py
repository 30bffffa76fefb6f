"""The patch planner: desired objects vs what the API server shows -> the minimal list of
actions (sample-controller's "update only on drift").

Owns: deciding WHICH writes a tick needs, and their order. An object converged on
its ``pdscaler.io/spec-hash`` annotation and ``spec.replicas`` needs no action, so a
converged PDDeployment plans NOTHING (and the operator makes zero writes). Objects
that exist under a name we want but are not controlled by this PDDeployment (owner
reference uid) are never touched: the plan carries a warning instead.

Order of the plan: replica changes of the cells that exist (pod-deletion-cost
annotations on decode pods come right before the decode scale-down they steer), then
creates (as built: decode, prefill, router, Services, RBAC), template updates, then
deletes: a retired cell loses its prefill Deployment first; its decode Deployment and
Service go only once no prefill pod of that cell is left, so a prefill pod never
outlives its decode pool. Serving capacity first: the shell runs every write on its
own (a refused create never stops a later write), and the scales that keep a serving
cell sized are the writes that matter most when the API server refuses some.

Purely computational: no Kubernetes client, no clock, no I/O. Example (``describe()`` of
each action): the decode pool of a converged cell going 4 -> 6 plans exactly one write,
``scale Deployment/chat-v1-abcde-decode 4->6``; the same tick again plans none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pdscaler import groups, naming
from pdscaler.manifests import DELETION_COST_ANNOTATION
from pdscaler.objects import SPEC_HASH_ANNOTATION, Manifest
from pdscaler.types import Role


class Verb(StrEnum):
    CREATE = "create"
    UPDATE = "update"  # the template/spec drifted: apply the whole desired object
    SCALE = "scale"  # only spec.replicas differs (body: the whole desired object, for apply)
    ANNOTATE_POD = "annotate-pod"  # pod-deletion-cost before a decode scale-down
    RELABEL_POD = "relabel-pod"  # a role flip: the pod's role label (and its cost)
    DELETE = "delete"
    WARN = "warn"  # refused: not ours (no write)


@dataclass(frozen=True)
class Action:
    """One write the operator will make (or, for WARN, refuses to make)."""

    verb: Verb
    kind: str
    name: str
    body: Manifest | None = None
    replicas: int | None = None
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    message: str = ""

    @property
    def is_write(self) -> bool:
        return self.verb is not Verb.WARN

    def describe(self) -> str:
        """``scale Deployment/chat-v1-abcde-decode 4->6`` style one-liner."""
        text = f"{self.verb.value} {self.kind}/{self.name}"
        if self.message:
            text += f" {self.message}"
        return text


@dataclass(frozen=True)
class Observed:
    """What the API server shows for one PDDeployment: its Deployments and Services
    (owned ones and any object holding a name we want) and the pods of its pools.
    ``deployments`` holds its pool objects: Deployments and LeaderWorkerSets."""

    deployments: tuple[Manifest, ...] = ()
    services: tuple[Manifest, ...] = ()
    pods: tuple[Manifest, ...] = ()
    #: other wanted objects by name (the routers' ServiceAccount, Role, RoleBinding)
    others: tuple[Manifest, ...] = ()


@dataclass(frozen=True)
class Plan:
    actions: tuple[Action, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def writes(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.is_write)

    @property
    def empty(self) -> bool:
        return not self.writes


def owned_by(obj: Mapping[str, Any], uid: str) -> bool:
    """True when ``obj`` has a controller owner reference to the object with ``uid``."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("uid") == uid and ref.get("controller"):
            return True
    return False


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def _hash(obj: Mapping[str, Any]) -> str | None:
    value = (obj.get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    return str(value) if value is not None else None


def _replicas(obj: Mapping[str, Any]) -> int:
    value = obj.get("spec", {}).get("replicas")
    return 1 if value is None else int(value)


def _terminating(obj: Mapping[str, Any]) -> bool:
    return obj.get("metadata", {}).get("deletionTimestamp") is not None


def deletion_costs(pods: Sequence[Manifest], running_by_pod: Mapping[str, float]) -> dict[str, str]:
    """pod name -> pod-deletion-cost for the pods of a decode pool about to shrink.

    The ReplicaSet controller removes the lowest cost first, so the cost is the pod's
    in-flight requests, rounded: running {a: 0.2, b: 7, c: 3} -> {a: "0", b: "7",
    c: "3"}: a goes first, then c. Pods without a measurement keep their annotation.
    """
    costs: dict[str, str] = {}
    for pod in pods:
        name = _name(pod)
        if name in running_by_pod and not _terminating(pod):
            costs[name] = str(round(running_by_pod[name]))
    return costs


#: The kinds a pool object may be: a Deployment, or a LeaderWorkerSet of groups
#: (``spec.<pool>.podsPerReplica`` > 1); ``Observed.deployments`` holds both.
POOL_KINDS = ("Deployment", groups.LWS_KIND)


def pool_kind(obj: Mapping[str, Any]) -> str:
    """A pool object's kind (a Deployment unless it says otherwise)."""
    return str(obj.get("kind") or "Deployment")


def plan(
    uid: str,
    desired: Sequence[Manifest],
    observed: Observed,
    decode_running_by_pod: Mapping[str, float] | None = None,
) -> Plan:
    """The actions that move ``observed`` to ``desired`` for the PDDeployment ``uid``.

    Converged (same hashes, same replicas, nothing extra) -> ``Plan()`` with no actions.
    A decode Deployment going 4 -> 2 with per-pod running {p1: 5, p2: 0, p3: 9, p4: 1}
    first annotates p1..p4 with costs 5, 0, 9, 1 (where they differ), so p2 and p4 go.
    """
    running = decode_running_by_pod or {}
    by_key: dict[tuple[str, str], Manifest] = {}
    for obj in observed.deployments:
        by_key[(pool_kind(obj), _name(obj))] = obj
    for obj in observed.services:
        by_key[("Service", _name(obj))] = obj
    for obj in observed.others:
        by_key[(str(obj.get("kind")), _name(obj))] = obj

    creates: list[Action] = []
    updates: list[Action] = []
    scales: list[Action] = []
    warnings: list[Action] = []
    wanted: set[tuple[str, str]] = set()
    for want in desired:
        key = (str(want["kind"]), _name(want))
        wanted.add(key)
        have = by_key.get(key)
        if have is None:
            creates.append(Action(Verb.CREATE, key[0], key[1], body=want))
            continue
        if not owned_by(have, uid):
            warnings.append(
                Action(
                    Verb.WARN,
                    key[0],
                    key[1],
                    message="exists and is not controlled by this PDDeployment; left alone",
                )
            )
            continue
        if _hash(have) != _hash(want):
            updates.append(
                Action(Verb.UPDATE, key[0], key[1], body=want, message="template changed")
            )
            continue
        if key[0] in POOL_KINDS and _replicas(have) != _replicas(want):
            old, new = _replicas(have), _replicas(want)
            # a LeaderWorkerSet removes its highest groups: no per-pod deletion cost
            decode = _labels(want).get(naming.LABEL_ROLE) == Role.DECODE.value
            if new < old and decode and key[0] == "Deployment":
                scales.extend(_cost_annotations(want, observed.pods, running))
            scales.append(
                Action(Verb.SCALE, key[0], key[1], body=want, replicas=new, message=f"{old}->{new}")
            )

    deletes = _deletes(uid, wanted, observed)
    actions = (*scales, *creates, *updates, *deletes, *warnings)
    return Plan(actions=tuple(actions), warnings=tuple(a.describe() for a in warnings))


def _cost_annotations(
    want: Manifest, pods: Sequence[Manifest], running: Mapping[str, float]
) -> list[Action]:
    selector = want["spec"]["selector"]["matchLabels"]
    role = _labels(want).get(naming.LABEL_ROLE)
    # a pod flipped to the other pool (role label changed) keeps the cost it was given
    mine = [
        p
        for p in pods
        if all(_labels(p).get(k) == v for k, v in selector.items())
        and _labels(p).get(naming.LABEL_ROLE) == role
    ]
    out: list[Action] = []
    for pod in mine:
        cost = deletion_costs([pod], running).get(_name(pod))
        current = (pod.get("metadata", {}).get("annotations") or {}).get(DELETION_COST_ANNOTATION)
        if cost is not None and cost != current:
            out.append(
                Action(
                    Verb.ANNOTATE_POD,
                    "Pod",
                    _name(pod),
                    annotations={DELETION_COST_ANNOTATION: cost},
                    message=f"deletion-cost={cost}",
                )
            )
    return out


def _deletes(uid: str, wanted: set[tuple[str, str]], observed: Observed) -> list[Action]:
    prefill_revs_with_pods = {
        _labels(p).get(naming.LABEL_REVISION)
        for p in observed.pods
        if _labels(p).get(naming.LABEL_ROLE) == Role.PREFILL.value
    }
    extra_deploys = [
        d
        for d in observed.deployments
        if (pool_kind(d), _name(d)) not in wanted and owned_by(d, uid) and not _terminating(d)
    ]
    live_prefill_revs = {
        _labels(d).get(naming.LABEL_REVISION)
        for d in observed.deployments
        if _labels(d).get(naming.LABEL_ROLE) == Role.PREFILL.value
    }
    blocked = prefill_revs_with_pods | live_prefill_revs
    first: list[Action] = []
    then: list[Action] = []
    for dep in extra_deploys:
        role = _labels(dep).get(naming.LABEL_ROLE)
        rev = _labels(dep).get(naming.LABEL_REVISION)
        if role == Role.PREFILL.value:
            first.append(Action(Verb.DELETE, pool_kind(dep), _name(dep), message="cell retired"))
        elif rev not in blocked:
            then.append(Action(Verb.DELETE, pool_kind(dep), _name(dep), message="cell retired"))
    # No Service this version creates carries a revision label (the front Service <name>
    # has none). A revision-labelled one is a per-cell ``<name>-<rev>-decode`` Service
    # left by an upgrade from 0.1.0, whose prefill pods were given its address through
    # PDSCALER_DECODE_ENDPOINT (their frozen template still carries it): it goes, but only
    # once no prefill pod of that cell is left, as in 0.1.0 (test_plan's
    # test_a_decode_service_left_by_an_older_operator_goes_with_its_cell).
    for svc in observed.services:
        if ("Service", _name(svc)) in wanted or not owned_by(svc, uid) or _terminating(svc):
            continue
        rev = _labels(svc).get(naming.LABEL_REVISION)
        if rev is not None and rev in blocked:
            continue  # a 0.1.0 cell's prefill pods may still dial this decode Service
        then.append(Action(Verb.DELETE, "Service", _name(svc), message="cell retired"))
    return [*first, *then]
