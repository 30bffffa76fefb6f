"""Pools pdscaler does not own: a PDDeployment whose ``prefill`` and ``decode`` name a
``scaleTargetRef`` each (docs/design.md §1.1). Pure: resolve what the edge read
(``kube.scale``) into the pools' observations, check the pair, and plan the only writes
this mode makes, ``spec.replicas`` of each target's ``/scale``.

Owns: the checks that replace what pdscaler enforces on the pools it owns, each one a
condition and never a fight:

* the target is usable (``ScaleTargetInvalid``, Stalled): it exists, has ``/scale`` with a
  ``status.selector``, and its pods carry ``pdscaler.io/name`` and ``pdscaler.io/role``
  (the labels the metric queries select on: pdscaler does not label pods it does not
  own, the team puts them in the template, docs/operator.md);
* nobody else drives it (``ScaleTargetConflict``, Stalled): no HorizontalPodAutoscaler
  and no KEDA ScaledObject whose ``scaleTargetRef`` names the same object;
* one version across the pair (``MixedVersions``, Progressing): the same-version rollout
  is the team's here, so pdscaler checks it. A pool's Ready pods must run ONE engine
  configuration (``spec.versionLabel``'s value, else the first container's image and
  args), and both pools the same version (the label's value, else the image: the
  pools' args differ by design, kv_producer vs kv_consumer). Mixed: both pools hold.

Worked example (tests/unit/test_targets.py): prefill 2 Ready pods of ``vllm:v1``, decode
2 of ``vllm:v1`` and one of ``vllm:v2`` -> ``mixed`` says ``decode runs 2 engine
configurations`` and ``plan`` writes nothing, while the policy wanted decode 2 -> 4.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pdscaler import observe, status
from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from pdscaler.pools import Role
from pdscaler.spec import Condition, PDDeploymentStatus, ScaleTargetRef
from pdscaler.types import Action, ConditionReason, ConditionType, Decision, PoolObservation

Obj = dict[str, Any]

#: KEDA's defaults for a ScaledObject's ``scaleTargetRef`` (keda.sh/v1alpha1).
KEDA_DEFAULT_API_VERSION = "apps/v1"
KEDA_DEFAULT_KIND = "Deployment"


@dataclass(frozen=True)
class TargetRead:
    """One pool's target as the edge read it: its ``/scale`` (None: not read, ``error``
    says why) and the pods its ``status.selector`` selects."""

    role: Role
    ref: ScaleTargetRef
    scale: Obj | None
    pods: tuple[Obj, ...] = ()
    error: str | None = None

    @property
    def replicas(self) -> int:
        """``spec.replicas`` of ``/scale`` (0 when unread)."""
        return int(((self.scale or {}).get("spec") or {}).get("replicas") or 0)

    @property
    def selector(self) -> str | None:
        """``status.selector`` of ``/scale`` (a label selector string), when given."""
        value = ((self.scale or {}).get("status") or {}).get("selector")
        return str(value) if value else None


@dataclass(frozen=True)
class Check:
    """What the checks found: a reason to refuse (Stalled) or to hold (Progressing)."""

    refused: tuple[ConditionReason, str] | None = None
    mixed: str | None = None
    versions: tuple[str, ...] = field(default=())

    @property
    def blocked(self) -> bool:
        return self.refused is not None or self.mixed is not None


@dataclass(frozen=True)
class ScaleWrite:
    """One write: ``spec.replicas`` of ``ref``'s ``/scale`` from ``before`` to ``replicas``."""

    role: Role
    ref: ScaleTargetRef
    before: int
    replicas: int

    def describe(self) -> str:
        """``scale Deployment/chat-decode 2->4`` (the log and Event line)."""
        return f"scale {self.ref.kind}/{self.ref.name} {self.before}->{self.replicas}"


def _group(api_version: str) -> str:
    """The API group of ``apps/v1`` (``apps``); the core group of ``v1`` is ``""``."""
    return api_version.rpartition("/")[0]


def same_object(ref: ScaleTargetRef, other: Mapping[str, Any]) -> bool:
    """Whether another autoscaler's ``scaleTargetRef`` (an HPA's, a ScaledObject's with
    KEDA's defaults) names the object ``ref`` names: same group, kind and name (the
    version may differ: ``apps/v1beta2`` and ``apps/v1`` are one Deployment)."""
    api_version = str(other.get("apiVersion") or KEDA_DEFAULT_API_VERSION)
    kind = str(other.get("kind") or KEDA_DEFAULT_KIND)
    return (
        _group(api_version) == _group(ref.api_version)
        and kind == ref.kind
        and str(other.get("name") or "") == ref.name
    )


def drivers(ref: ScaleTargetRef, autoscalers: Iterable[Obj]) -> list[str]:
    """The other autoscalers that target ``ref``'s object, as ``HorizontalPodAutoscaler
    chat-decode``: HPAs (autoscaling/v2) and KEDA ScaledObjects both keep their target
    in ``spec.scaleTargetRef``."""
    out: list[str] = []
    for obj in autoscalers:
        target = (obj.get("spec") or {}).get("scaleTargetRef") or {}
        if isinstance(target, Mapping) and same_object(ref, target):
            out.append(f"{obj.get('kind', 'autoscaler')} {_name(obj)}")
    return sorted(out)


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _first_container(pod: Obj) -> Mapping[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    first: Mapping[str, Any] = containers[0]
    return first


def pod_version(pod: Obj, label: str | None) -> str:
    """The version a pod runs: ``label``'s value (``"<none>"`` without it), else its
    first container's image (``vllm/vllm-openai:v0.11.0``)."""
    if label is not None:
        return str(observe.labels(pod).get(label, "<none>"))
    return str(_first_container(pod).get("image") or "<none>")


def pod_config(pod: Obj, label: str | None) -> str:
    """The engine configuration a pod runs: ``label``'s value, else the first
    container's image and args (``vllm:v1 --max-num-seqs=256``)."""
    if label is not None:
        return pod_version(pod, label)
    first = _first_container(pod)
    args = " ".join(str(a) for a in [*(first.get("command") or []), *(first.get("args") or [])])
    return f"{pod_version(pod, None)} {args}".strip()


def _ready(pods: Iterable[Obj]) -> list[Obj]:
    return [p for p in pods if observe.is_ready(p) and not observe.terminating(p)]


def mixed(prefill: Sequence[Obj], decode: Sequence[Obj], label: str | None) -> str | None:
    """Why the pair's Ready pods are not one version (None: they are). A pool whose
    Ready pods run two configurations is mixed (its rollout is under way); so are pools
    whose versions differ. Pods not Ready do not count (a new version starting is not
    serving yet)."""
    problems: list[str] = []
    versions: dict[str, set[str]] = {}
    for role, pods in (("prefill", prefill), ("decode", decode)):
        ready = _ready(pods)
        configs = {pod_config(p, label) for p in ready}
        if len(configs) > 1:
            problems.append(f"{role} runs {len(configs)} engine configurations")
        versions[role] = {pod_version(p, label) for p in ready}
    if versions["prefill"] and versions["decode"] and versions["prefill"] != versions["decode"]:
        problems.append(
            f"prefill runs {', '.join(sorted(versions['prefill']))}, "
            f"decode {', '.join(sorted(versions['decode']))}"
        )
    what = f"label {label}" if label is not None else "the first container's image and args"
    return f"{'; '.join(problems)} (by {what})" if problems else None


def unlabelled(pods: Iterable[Obj], name: str, role: Role) -> list[str]:
    """The pods that lack ``pdscaler.io/name: <name>`` or ``pdscaler.io/role: <role>``:
    Prometheus would not find their series under the pool's selector."""
    out = []
    for pod in pods:
        labels = observe.labels(pod)
        if labels.get(LABEL_NAME) != name or labels.get(LABEL_ROLE) != str(role):
            out.append(_name(pod))
    return sorted(out)


def check(
    name: str,
    reads: Sequence[TargetRead],
    autoscalers: Sequence[Obj],
    label: str | None,
) -> Check:
    """The pair's checks in order: each target usable, then driven by nobody else, then
    one version (module docstring)."""
    for read in reads:
        where = f"{read.role}.scaleTargetRef {read.ref.kind}/{read.ref.name}"
        if read.scale is None:
            why = read.error or "not found"
            return Check(refused=(ConditionReason.SCALE_TARGET_INVALID, f"{where}: {why}"))
        if read.selector is None:
            why = "its /scale has no status.selector: pdscaler cannot find its pods"
            return Check(refused=(ConditionReason.SCALE_TARGET_INVALID, f"{where}: {why}"))
        missing = unlabelled(read.pods, name, read.role)
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            why = (
                f"pods {shown} lack the labels {LABEL_NAME}={name} and {LABEL_ROLE}={read.role}"
                " (put them in the target's pod template: the metric queries select on them)"
            )
            return Check(refused=(ConditionReason.SCALE_TARGET_INVALID, f"{where}: {why}"))
    for read in reads:
        others = drivers(read.ref, autoscalers)
        if others:
            where = f"{read.role}.scaleTargetRef {read.ref.kind}/{read.ref.name}"
            why = f"already driven by {', '.join(others)}; pdscaler does not write its /scale"
            return Check(refused=(ConditionReason.SCALE_TARGET_CONFLICT, f"{where}: {why}"))
    by_role = {r.role: r.pods for r in reads}
    prefill, decode = by_role.get(Role.PREFILL, ()), by_role.get(Role.DECODE, ())
    versions = tuple(sorted({pod_version(p, label) for p in _ready([*prefill, *decode])}))
    return Check(mixed=mixed(prefill, decode, label), versions=versions)


def observation(read: TargetRead) -> PoolObservation:
    """The pool as the policy reads it: ``/scale``'s replicas, the selected pods."""
    return observe.pool_observation(read.replicas, read.pods)


def held(decision: Decision, reads: Sequence[TargetRead], why: str) -> Decision:
    """``decision`` turned into a hold at the targets' current replicas (both pools: a
    mixed pair never has one pool scaled), ``Hold``, saying what it would have done."""
    now = {r.role: r.replicas for r in reads}
    wanted = f"prefill {decision.prefill}, decode {decision.decode}"
    return replace(
        decision,
        prefill=now.get(Role.PREFILL, decision.prefill),
        decode=now.get(Role.DECODE, decision.decode),
        action=Action.HOLD,
        message=f"Held both pools: {why} (the policy wanted {wanted})",
        pool=None,
        flip=None,
    )


def plan(decision: Decision, reads: Sequence[TargetRead], verdict: Check) -> list[ScaleWrite]:
    """The /scale writes of this tick: one per pool whose decided replicas differ from
    its ``/scale``; none at all when the pair is blocked."""
    if verdict.blocked:
        return []
    return [
        ScaleWrite(r.role, r.ref, r.replicas, decision.replicas(r.role))
        for r in reads
        if decision.replicas(r.role) != r.replicas
    ]


def with_check(
    built: PDDeploymentStatus,
    verdict: Check,
    now: float,
    generation: int,
    previous: PDDeploymentStatus | None,
) -> PDDeploymentStatus:
    """``built`` with this mode's conditions: Stalled True (``ScaleTargetInvalid``,
    ``ScaleTargetConflict``) for a refused target, Progressing True ``MixedVersions``
    for a mixed pair; each message the check's; ``lastTransitionTime`` kept while it
    stays. Nothing found: ``built`` unchanged."""
    before = previous.conditions if previous else None
    changed: list[Condition] = []
    if verdict.refused is not None:
        reason, message = verdict.refused
        changed.append(
            status.condition(
                ConditionType.STALLED, "True", reason, message, now, generation, before
            )
        )
        # kstatus: never Reconciling and Stalled both True
        blocked = ConditionReason.BLOCKED
        changed.append(
            status.condition(
                ConditionType.RECONCILING, "False", blocked, message, now, generation, before
            )
        )
    if verdict.mixed is not None:
        changed.append(
            status.condition(
                ConditionType.PROGRESSING,
                "True",
                ConditionReason.MIXED_VERSIONS,
                f"{verdict.mixed}: pdscaler holds both pools until one version remains",
                now,
                generation,
                before,
            )
        )
    if not changed:
        return built
    types = {c.type for c in changed}
    kept = [c for c in built.conditions or [] if c.type not in types]
    return status.replace_conditions(built, [*kept, *changed])
