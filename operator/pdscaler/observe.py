"""Reading the cluster's objects into the policy's observations: what a PDDeployment's
cells and pools look like right now.

Owns: the predicates on pods (Ready, unschedulable for lack of resources, start-up
time creation -> Ready) and the summing of a PDDeployment's owned Deployments and pods
into one ``CellObservation`` per revision and one ``PoolObservation`` per role (a
LeaderWorkerSet pool counted in groups: ``group_observation``). Must
not: talk to the API server (``kube`` fetched the objects), read the clock, or
decide anything.

Purely computational: plain dicts in (as the API server returns them), frozen data
out.

>>> pod = {"metadata": {"creationTimestamp": "2025-01-01T00:00:00Z"},
...        "status": {"phase": "Running", "conditions": [{"type": "Ready",
...        "status": "True", "lastTransitionTime": "2025-01-01T00:00:42Z"}]}}
>>> is_ready(pod), startup_seconds(pod)
(True, 42.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pdscaler import groups, naming
from pdscaler.plan import Observed, owned_by
from pdscaler.types import PoolObservation, Role

Obj = Mapping[str, Any]

#: At most this many start-up samples per pool (the most recent pods).
MAX_STARTUP_SAMPLES = 20


def parse_time(text: Any) -> float | None:
    """RFC 3339 -> epoch seconds: ``"1970-01-01T00:01:00Z"`` -> 60.0; junk -> None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name", ""))


def labels(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def terminating(obj: Obj) -> bool:
    return _meta(obj).get("deletionTimestamp") is not None


def _condition(pod: Obj, type_: str) -> Mapping[str, Any] | None:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def is_ready(pod: Obj) -> bool:
    """Ready=True and not being deleted (a terminating pod serves no new work)."""
    cond = _condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True" and not terminating(pod)


def is_unschedulable(pod: Obj) -> bool:
    """Pending because the scheduler found no node (PodScheduled=False, Unschedulable):
    with GPU pods that is "Insufficient nvidia.com/gpu"."""
    if terminating(pod) or (pod.get("status") or {}).get("phase") not in (None, "Pending"):
        return False
    cond = _condition(pod, "PodScheduled")
    return (
        cond is not None
        and cond.get("status") == "False"
        and (cond.get("reason") == "Unschedulable")
    )


def startup_seconds(pod: Obj) -> float | None:
    """creationTimestamp -> Ready lastTransitionTime, for a Ready pod; else None."""
    if not is_ready(pod):
        return None
    cond = _condition(pod, "Ready") or {}
    created = parse_time(_meta(pod).get("creationTimestamp"))
    ready_at = parse_time(cond.get("lastTransitionTime"))
    if created is None or ready_at is None or ready_at < created:
        return None
    return ready_at - created


def pool_observation(replicas: int, pods: Iterable[Obj]) -> PoolObservation:
    """One pool from its Deployments' desired ``replicas`` and its (live) pods."""
    pods = list(pods)
    live = [p for p in pods if not terminating(p)]
    ready = [p for p in live if is_ready(p)]
    ready.sort(key=lambda p: parse_time(_meta(p).get("creationTimestamp")) or 0.0)
    samples = [s for s in (startup_seconds(p) for p in ready) if s is not None]
    return PoolObservation(
        replicas=replicas,
        ready=len(ready),
        unschedulable=sum(1 for p in live if is_unschedulable(p)),
        startup_samples=tuple(samples[-MAX_STARTUP_SAMPLES:]),
        terminating=len(pods) - len(live),
    )


def _group_key(pod: Mapping[str, Any], index: int, size: int) -> str:
    key = labels(pod).get(groups.LWS_GROUP_INDEX_LABEL) if size > 1 else None
    return key if key is not None else f"pod-{index}"


def _group_startup(members: list[Mapping[str, Any]]) -> float | None:
    """Earliest pod creation -> latest Ready transition of a Ready group (the group
    serves from its last pod's Ready on): each pod's ``startup_seconds`` from its own
    creation; None if a time is missing."""
    created = [parse_time(_meta(p).get("creationTimestamp")) for p in members]
    took = [startup_seconds(p) for p in members]
    if not members or None in created or None in took:
        return None
    starts = [c for c in created if c is not None]
    ends = [c + t for c, t in zip(starts, (t for t in took if t is not None), strict=True)]
    return max(ends) - min(starts)


def group_observation(
    replicas: int, pods: Iterable[Mapping[str, Any]], size: int
) -> PoolObservation:
    """One grouped pool as the tick sees it, every count in groups (the twin of
    ``pool_observation`` for one-pod replicas): ``replicas`` is the
    LeaderWorkerSets' desired groups; ``ready`` the groups with all pods Ready;
    ``unschedulable`` the groups with a pod the scheduler could not place (a group
    needs every pod placed); ``startup_samples`` a Ready group's first pod creation to
    its last pod Ready, oldest first (the start-up learned per pool is a group's);
    ``terminating`` the groups with a pod being deleted (they still hold their GPUs).

    2 groups of 2, one Ready 40 s after its first pod was created, one with a pod
    Pending Unschedulable: ready 1, unschedulable 1, startup_samples (40.0,)."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    for i, pod in enumerate(pods):
        by_group.setdefault(_group_key(pod, i, size), []).append(pod)
    ready: list[tuple[float, float]] = []
    n_unschedulable = n_terminating = 0
    for members in by_group.values():
        if any(terminating(p) for p in members):
            n_terminating += 1
            continue
        if any(is_unschedulable(p) for p in members):
            n_unschedulable += 1
        if len(members) >= size and all(is_ready(p) for p in members):
            took = _group_startup(members)
            created = min(
                parse_time((p.get("metadata") or {}).get("creationTimestamp")) or 0.0
                for p in members
            )
            ready.append((created, took if took is not None else -1.0))
    ready.sort()
    samples = tuple(t for _, t in ready if t >= 0)
    return PoolObservation(
        replicas=replicas,
        ready=len(ready),
        unschedulable=n_unschedulable,
        startup_samples=samples[-MAX_STARTUP_SAMPLES:],
        terminating=n_terminating,
    )


@dataclass(frozen=True)
class CellObservation:
    """One revision's cell as the cluster shows it.

    ``version`` is the engine version from the Deployments' annotation; ``created`` the
    earliest creation time of its Deployments (the rollout's progress clock starts
    there); a pool whose Deployment is missing shows ``replicas=0``.
    """

    rev: str
    version: str
    created: float | None
    prefill: PoolObservation
    decode: PoolObservation
    has_prefill: bool = False
    has_decode: bool = False
    image: str | None = None  # the engine image (without ``:version``), when readable
    config: str = ""  # the cell's engine-config fingerprint (``manifests.kv_config``)
    #: its pool pods, each with the pool that made it and the role it serves
    pods: tuple[PoolPod, ...] = ()

    def pool(self, role: Role) -> PoolObservation:
        pool: PoolObservation = getattr(self, role)
        return pool

    @property
    def flipped(self) -> tuple[PoolPod, ...]:
        """Its live pods serving the other pool than the one that made them (flips)."""
        return tuple(p for p in self.pods if p.owner is not p.serves and p.live)

    @property
    def ready(self) -> bool:
        """Both pools have a Ready pod (the cell can serve a request end to end)."""
        return self.prefill.ready > 0 and self.decode.ready > 0


def _engine_image(dep: Obj) -> str | None:
    """The engine container's image of a pool Deployment (``engine``, else the first)."""
    containers = (groups.pool_template(dep).get("spec") or {}).get("containers") or []
    named = [c for c in containers if c.get("name") == "engine"] or containers[:1]
    image = named[0].get("image") if named else None
    return str(image) if image else None


def _cell_image(by_role: Mapping[Role, Obj], version: str) -> str | None:
    """The engine image repository of a cell: the ``engine-image`` annotation, else
    read off a Deployment whose engine image is ``<repo>:<version>`` (``@`` for a
    digest); a Deployment whose image was changed behind the operator's back is
    not believed."""
    for dep in by_role.values():
        image = (_meta(dep).get("annotations") or {}).get(naming.ANNOTATION_IMAGE)
        if image:
            return str(image)
    for dep in by_role.values():
        ref = _engine_image(dep)
        repo = naming.split_image_ref(ref, version) if ref else None
        if repo:
            return repo
    return None


#: The label the Deployment controller puts on a ReplicaSet and its pods: the hash of
#: the pod template, also the suffix of the ReplicaSet's name.
POD_TEMPLATE_HASH = "pod-template-hash"


def _owned_by_lws(pod: Obj, lws: str) -> bool:
    """A pod of LeaderWorkerSet ``lws``: labelled with its name and controlled by the
    StatefulSet LWS made for it (the leaders' ``<lws>``, a group's workers'
    ``<lws>-<group-index>``), the ``_owned_pod`` rule for groups."""
    lab = labels(pod)
    if lab.get(groups.LWS_SET_NAME_LABEL) != lws:
        return False
    names = {lws, f"{lws}-{lab.get(groups.LWS_GROUP_INDEX_LABEL, '')}"}
    return any(
        r.get("kind") == "StatefulSet" and r.get("controller") is True and r.get("name") in names
        for r in _meta(pod).get("ownerReferences") or []
    )


def _owned_pod(pod: Obj, deployment: str | None) -> bool:
    """A pod counts for a pool only when its controller is the ReplicaSet the pool's
    Deployment made for it: kind ReplicaSet, controller, named exactly
    ``<deployment>-<the pod's pod-template-hash>``. A pod without owner references (one
    made by hand with the pool's labels) is no capacity.

    Why by name and not uid: a pod's reference names its ReplicaSet's uid, not the
    Deployment's, and the operator does not watch ReplicaSets (one more informer and
    RBAC rule per namespace for this one check). The exact name is the Deployment
    controller's own rule (``<deployment>-<hash>``, the hash also labelled on the pod),
    so another Deployment's ReplicaSet never matches (``<deployment>-evil-<hash>`` is
    not ``<deployment>-<hash>``). Only someone who may create ReplicaSets in the
    namespace can forge it, and that author can run pods anyway."""
    if deployment is None:
        return False
    template_hash = labels(pod).get(POD_TEMPLATE_HASH)
    if not template_hash:
        return False
    want = f"{deployment}-{template_hash}"
    return any(
        r.get("kind") == "ReplicaSet" and r.get("controller") is True and r.get("name") == want
        for r in _meta(pod).get("ownerReferences") or []
    )


def _replicas(dep: Obj) -> int:
    value = (dep.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def cells(observed: Observed, uid: str) -> dict[str, CellObservation]:
    """The cells of the PDDeployment ``uid``, keyed by revision (only Deployments it
    controls count; a Deployment being deleted still counts while its pods live)."""
    deps: dict[str, dict[Role, Obj]] = {}
    for dep in observed.deployments:
        lab = labels(dep)
        rev, role = lab.get(naming.LABEL_REVISION), lab.get(naming.LABEL_ROLE)
        if not rev or role not in (Role.PREFILL.value, Role.DECODE.value) or not owned_by(dep, uid):
            continue
        deps.setdefault(rev, {})[Role(role)] = dep
    pods: dict[str, list[Obj]] = {}
    for pod in observed.pods:
        pods.setdefault(labels(pod).get(naming.LABEL_REVISION, ""), []).append(pod)
    out: dict[str, CellObservation] = {}
    for rev, by_role in sorted(deps.items()):
        any_dep = next(iter(by_role.values()))
        version = str(
            (_meta(any_dep).get("annotations") or {}).get(naming.ANNOTATION_VERSION)
            or labels(any_dep).get(naming.LABEL_VERSION, "")
        )
        image = _cell_image(by_role, version)
        config = next(
            (
                str(c)
                for c in (
                    (_meta(d).get("annotations") or {}).get(naming.ANNOTATION_CONFIG)
                    for d in by_role.values()
                )
                if c
            ),
            "",
        )
        created = [parse_time(_meta(d).get("creationTimestamp")) for d in by_role.values()]
        known = [c for c in created if c is not None]
        mine = pool_pods(by_role, pods.get(rev, []))
        pools = {
            role: pool_observation(
                (_replicas(by_role[role]) if role in by_role else 0)
                + sum(1 for p in mine if p.flipped_to(role) and p.live)
                - sum(1 for p in mine if p.flipped_from(role) and p.live),
                [p.pod for p in mine if p.serves is role],
            )
            if groups.group_size(by_role.get(role)) == 1
            else group_observation(
                _replicas(by_role[role]),
                [p.pod for p in mine if p.owner is role],
                groups.group_size(by_role.get(role)),
            )
            for role in Role
        }
        out[rev] = CellObservation(
            rev=rev,
            version=version,
            created=min(known) if known else None,
            prefill=pools[Role.PREFILL],
            decode=pools[Role.DECODE],
            has_prefill=Role.PREFILL in by_role,
            has_decode=Role.DECODE in by_role,
            image=image,
            config=config,
            pods=tuple(mine),
        )
    return out


@dataclass(frozen=True)
class PoolPod:
    """A pod of one cell's pools: ``owner`` the pool whose Deployment made it (its
    ReplicaSet), ``serves`` the role it is labelled with (what the routers and metrics
    see). They differ only in a role-flip cell, for a flipped pod."""

    pod: Obj
    owner: Role
    serves: Role

    @property
    def name(self) -> str:
        return _name(self.pod)

    @property
    def live(self) -> bool:
        return not terminating(self.pod)

    def flipped_to(self, role: Role) -> bool:
        return self.serves is role and self.owner is not role

    def flipped_from(self, role: Role) -> bool:
        return self.owner is role and self.serves is not role


def pool_pods(by_role: Mapping[Role, Obj], pods: Iterable[Obj]) -> list[PoolPod]:
    """The pods among ``pods`` that one of the cell's pool Deployments (``by_role``)
    made (``_owned_pod``), with the role each serves (``pdscaler.io/role``); a pod
    labelled neither prefill nor decode is none of them. In a cell without flips the two
    always agree (the Deployment selects on the role)."""
    out: list[PoolPod] = []
    for pod in pods:
        try:
            serves = Role(labels(pod).get(naming.LABEL_ROLE, ""))
        except ValueError:
            continue
        owner = next(
            (
                r
                for r, dep in by_role.items()
                if (_owned_by_lws if groups.group_size(dep) > 1 else _owned_pod)(pod, _name(dep))
            ),
            None,
        )
        if owner is not None:
            out.append(PoolPod(pod, owner, serves))
    return out


def total(cell_list: Iterable[CellObservation], role: Role) -> PoolObservation:
    """A role summed over cells: replicas, ready, unschedulable add; samples concatenate."""
    replicas = ready = unschedulable = 0
    samples: list[float] = []
    for cell in cell_list:
        pool = cell.pool(role)
        replicas += pool.replicas
        ready += pool.ready
        unschedulable += pool.unschedulable
        samples.extend(pool.startup_samples)
    return PoolObservation(
        replicas=replicas,
        ready=ready,
        unschedulable=unschedulable,
        startup_samples=tuple(samples[-MAX_STARTUP_SAMPLES:]),
    )


def ready_routers(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Ready, not terminating router pods per revision."""
    out: dict[str, int] = {}
    for pod in pods:
        lab = labels(pod)
        if (
            lab.get(naming.LABEL_ROLE) == naming.ROLE_ROUTER
            and is_ready(pod)
            and not terminating(pod)
        ):
            rev = lab.get(naming.LABEL_REVISION, "")
            out[rev] = out.get(rev, 0) + 1
    return out


def present_routers(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Router pods per revision that still exist, Ready or not, Terminating included: a
    cell's prefill must outlive them (a terminating router may still hold requests)."""
    out: dict[str, int] = {}
    for pod in pods:
        lab = labels(pod)
        if lab.get(naming.LABEL_ROLE) == naming.ROLE_ROUTER:
            rev = lab.get(naming.LABEL_REVISION, "")
            out[rev] = out.get(rev, 0) + 1
    return out
