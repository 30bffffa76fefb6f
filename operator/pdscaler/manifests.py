"""Pure builders of the Kubernetes objects a PDDeployment owns (docs/design.md §4).

Owns: the desired manifests of one *cell* (``<name>-<rev>-prefill`` and
``<name>-<rev>-decode`` Deployments, plus the cell's router from ``router``) and the
front Service ``<name>`` that selects the Ready routers of every serving cell. Every
object carries the ``pdscaler.io/*`` labels, the controller owner reference and the
spec-hash stamp (``objects``).

Rules the builders enforce, whatever the user's template says:

* the engine image is ``spec.engine.image:spec.engine.version`` (``@sha256:...`` for
  a digest) on the engine container (the one named ``engine``, else the first); a
  template's image is ignored;
* a cell's revision covers its configuration: ``kv_config`` fingerprints both pools'
  engine command, args, env, envFrom, resources and gpusPerReplica (``KV_FIELDS``), the
  pod-level fields that change what an engine computes or where it runs (init and
  sidecar containers, volumes, volume mounts, nodeSelector, affinity, tolerations,
  runtimeClassName, the ``pdscaler.io/config-revision`` annotation: ``identity``) and
  the contents of the ConfigMaps the templates read (``with_configmaps``), so changing
  any of them makes a new cell (a rollout); other template changes (labels,
  annotations, probes) update the cell in place;
* a cell's identity is data: its Deployments store the fingerprint and its scheme
  (``IDENTITY_SCHEME``), and an existing cell is found by what it stored (``adopt``),
  never by re-deriving its name with this operator's code; an existing Deployment
  rendered from the same spec inputs (``rendered_from``) keeps its pod template
  (``keep_rendered``): a later operator's rendering restarts no pod;
* every pool Deployment carries its cell's fingerprint (``pdscaler.io/engine-config``)
  and the hash of its engine container as rendered (``pdscaler.io/engine-hash``):
  ``drifted`` tells a Deployment whose engine container was changed behind the
  operator's back (``kubectl set image``, ``kubectl set resources``, an env or envFrom
  edit: the image plus ``KV_FIELDS``, the fields the revision hashes);
* every pod asks for ``gpusPerReplica`` ``nvidia.com/gpu`` (limits = requests) and
  tolerates the usual ``nvidia.com/gpu`` node taint;
* template labels/annotations pass through (``pdscaler.io/startup-delay`` for the lab);
  with sglang-router, prefill pods carry ``sglang.ai/bootstrap-port`` (the port their
  engine's ``--disaggregation-bootstrap-port`` binds, 8998 by default): the router's
  discovery reads it and hands it to the decode with each request;
* a pool pod being deleted keeps serving for ``drain_seconds`` before its engine gets
  SIGTERM (a ``preStop`` sleep on the engine container added to the template's grace
  period, unless the template has a preStop hook): a router may have paired a request
  with that decode pod while its prefill still runs, and the hand-off must find it.

Purely computational: no Kubernetes client, no clock, no I/O.

>>> m = Meta(name="chat", namespace="serving", uid="u-1")
>>> front_service(m, 8000)["spec"]["selector"]
{'pdscaler.io/name': 'chat', 'pdscaler.io/role': 'router'}
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pdscaler import groups, identity, naming, router
from pdscaler.holding import holding_objects
from pdscaler.objects import (
    SPEC_HASH_ANNOTATION,
    Manifest,
    Meta,
    digest,
    owner_reference,
    stamp,
)
from pdscaler.spec import PDDeploymentSpec, PoolSpec
from pdscaler.types import Role

GPU_RESOURCE = "nvidia.com/gpu"
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
ENGINE_CONTAINER = "engine"
DEFAULT_PORT = 8000
PORT_NAME = "http"
#: Kubernetes' terminationGracePeriodSeconds when a pod sets none.
DEFAULT_GRACE_S = 30
MAX_DRAIN_S = 120


@dataclass(frozen=True)
class CellTarget:
    """One cell the operator wants to exist: its engine version and pool sizes.

    ``rev`` is ``naming.revision(image, version, config)`` (``config``: the cell's
    ``kv_config`` fingerprint, empty for a cell rendered before it existed);
    ``prefill``/``decode`` are the Deployments' desired replicas (0 keeps the Deployment
    but runs no pods).
    """

    image: str
    version: str
    prefill: int
    decode: int
    router: int = 0
    config: str = ""

    @property
    def rev(self) -> str:
        return naming.revision(self.image, self.version, self.config)

    def replicas(self, role: Role) -> int:
        """``role``'s desired replicas: ``replicas(Role.DECODE)`` is ``decode``."""
        count: int = getattr(self, role)
        return count


def _engine_of(template: Mapping[str, Any]) -> Mapping[str, Any]:
    containers = (template.get("spec") or {}).get("containers") or []
    idx = _engine_index(list(containers))
    return containers[idx] if idx is not None else {}


#: The KV-relevant part of the engine container: what prefill and decode must share to
#: exchange KV. The revision (``kv_config``) and drift detection (``engine_hash``) both
#: read these fields, so whatever makes a new cell is also what counts as drift.
KV_FIELDS = ("command", "args", "env", "envFrom", "resources")
#: ``engine-hash`` annotations of this scheme start with it; one without it was written
#: by an operator that hashed image, command, args and env values only (``drifted``).
ENGINE_HASH_PREFIX = "kv."


def kv_part(engine: Mapping[str, Any]) -> dict[str, Any]:
    """The engine container's ``KV_FIELDS``, as written."""
    return {key: engine.get(key) for key in KV_FIELDS}


def _engine_parts(spec: PDDeploymentSpec) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for role in Role:
        pool = spec.pool(role)
        parts[role.value] = {**kv_part(_engine_of(pool.template)), "gpus": pool.gpus_per_replica}
    if spec.scaling.role_flips.enabled:  # a flip cell's Deployments select differently
        parts["flips"] = True
    return parts


def kv_config_v2(spec: PDDeploymentSpec) -> str:
    """Identity scheme 2's fingerprint (a bare hex digest): per pool the engine
    container's ``KV_FIELDS`` (command, args, env, envFrom, resources) and
    gpusPerReplica; nothing outside the engine container."""
    return digest(_engine_parts(spec))


def kv_config(spec: PDDeploymentSpec) -> str:
    """The fingerprint of a cell's configuration (identity scheme 3, ``"3.<hex>"``):
    scheme 2's engine part (``kv_config_v2``), per pool ``identity.pod_part`` (init and
    sidecar containers, volumes, the engine's volume mounts, nodeSelector, affinity,
    tolerations, runtimeClassName, ``pdscaler.io/config-revision``) and the digest of
    every ConfigMap the templates read (``with_configmaps``; ``identity.UNREAD`` when
    none was read). Labels, other annotations and probes do not count."""
    parts = _engine_parts(spec)
    templates = [spec.pool(role).template for role in Role]
    for role, template in zip(Role, templates, strict=True):
        containers = (template.get("spec") or {}).get("containers") or []
        parts[role.value]["pod"] = identity.pod_part(template, _engine_index(list(containers)))
    parts["configMaps"] = {
        name: spec._configmaps.get(name, identity.UNREAD)
        for name in identity.configmaps_of(templates)
    }
    return f"3.{digest(parts)}"


def with_configmaps(spec: PDDeploymentSpec, digests: Mapping[str, str]) -> PDDeploymentSpec:
    """``spec`` carrying the digests of the ConfigMaps its templates read (name ->
    ``identity.configmap_digest``, as the edge read them): ``kv_config`` hashes them,
    so an edited ConfigMap names a new cell."""
    out = spec.model_copy()
    out._configmaps = dict(digests)
    return out


#: The identity scheme: which projection of the spec names a cell. A cell's revision is
#: ``naming.revision(image, version, config)`` and its Deployments store ``config``
#: (``engine-config``) and this number (``identity-scheme``), so the name is data: an
#: operator whose projection differs finds an existing cell by what it stored
#: (``adopt``), never by re-deriving its name. Scheme 1 (no ``config``, before d90a49e):
#: image@version; scheme 2: the engine container (``kv_config_v2``); scheme 3: also the
#: pod-level fields and ConfigMap contents (``kv_config``, issue 30 item 7). Changing
#: ``kv_config``'s output for any spec is a new scheme: its configs are written
#: ``"<n>.<hex>"`` and the old projection stays in ``_PROJECTIONS``
#: (tests/unit/test_identity_golden.py fails on an unlisted change). A cell of an older
#: scheme stays the spec's while its projection matches and the spec's rendering inputs
#: are those it was rendered from (``adopt``): the user's next edit moves it to this one.
IDENTITY_SCHEME = 3
#: The prefix of ``rendered_from`` (what a template was rendered from): not the identity
#: scheme, so a new identity scheme re-renders no existing Deployment.
INPUTS_SCHEME = 2


def config_scheme(config: str) -> int:
    """The identity scheme a stored ``engine-config`` was computed by: ``""`` -> 1, a
    bare hex digest -> 2, ``"3.ab12..."`` -> 3."""
    if not config:
        return 1
    head, dot, _ = config.partition(".")
    return int(head) if dot and head.isdigit() else 2


#: scheme -> the projection that computed a stored config (the current scheme's is
#: ``kv_config``); scheme 1 stored none (``_legacy_match``).
_PROJECTIONS: dict[int, Any] = {2: kv_config_v2}


def spec_config(spec: PDDeploymentSpec) -> str:
    """The engine-config of the spec's cell: an existing cell's (``adopt``) when the
    spec names a cell of an older scheme, else ``kv_config(spec)``."""
    pinned = spec._cell_config
    return kv_config(spec) if pinned is None else pinned


def flip_cell(spec: PDDeploymentSpec, cell: CellTarget) -> bool:
    """Whether ``cell`` is rendered as a role-flip cell: the spec's own configuration
    with ``scaling.roleFlips`` on (``naming.deployment_selector``)."""
    return spec.scaling.role_flips.enabled and cell.config == spec_config(spec)


def spec_cell(spec: PDDeploymentSpec, prefill: int = 0, decode: int = 0) -> CellTarget:
    """The cell the spec names: its image, version and engine configuration."""
    image, version = spec.engine.image, spec.engine.version
    return CellTarget(image, version, prefill, decode, 0, spec_config(spec))


def spec_revision(spec: PDDeploymentSpec) -> str:
    """The revision of the cell the spec names."""
    return spec_cell(spec).rev


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _owned_pools(
    owner: Meta, deployments: Iterable[Mapping[str, Any]]
) -> dict[str, dict[Role, Mapping[str, Any]]]:
    """The owner's pool Deployments by revision and role."""
    out: dict[str, dict[Role, Mapping[str, Any]]] = {}
    for dep in deployments:
        meta = dep.get("metadata") or {}
        labels = meta.get("labels") or {}
        uids = {r.get("uid") for r in meta.get("ownerReferences") or [] if r.get("controller")}
        role, rev = labels.get(naming.LABEL_ROLE), labels.get(naming.LABEL_REVISION)
        if owner.uid in uids and rev and role in (Role.PREFILL.value, Role.DECODE.value):
            out.setdefault(str(rev), {})[Role(role)] = dep
    return out


#: env an operator before d90a49e appended to prefill engines (gone since): not the
#: user's configuration, so not part of a scheme-1 cell's identity
_LEGACY_OPERATOR_ENV = frozenset({"PDSCALER_DECODE_ENDPOINT"})


def _legacy_kv(template: Mapping[str, Any]) -> Any:
    engine = dict(_engine_of(template))
    env = [e for e in engine.get("env") or [] if e.get("name") not in _LEGACY_OPERATOR_ENV]
    engine["env"] = env
    return [engine.get("image"), _served(kv_part(engine))]


def _legacy_match(
    owner: Meta, spec: PDDeploymentSpec, pools: Mapping[Role, Mapping[str, Any]]
) -> bool:
    """A scheme-1 cell (no stored config) is the spec's when both its pools' engine
    containers run what the spec renders (image, command, args, env, envFrom,
    resources), the operator's own old env aside: then the spec did not change its
    identity since that cell was made."""
    if set(pools) != set(Role) or spec.scaling.role_flips.enabled:
        return False
    cell = CellTarget(spec.engine.image, spec.engine.version, 0, 0)
    for role, dep in pools.items():
        observed = (dep.get("spec") or {}).get("template") or {}
        if _legacy_kv(observed) != _legacy_kv(_pod_template(owner, spec, cell, role, False)):
            return False
    return True


def adopt(
    spec: PDDeploymentSpec, owner: Meta, deployments: Iterable[Mapping[str, Any]]
) -> PDDeploymentSpec:
    """``spec`` naming the existing cell that an older identity scheme made for the same
    identity (its stored revision kept: no rollout because the operator changed), else
    ``spec`` itself (its cell is the current scheme's, existing or not).

    An operator before d90a49e named ``chat.yaml``'s cell ``v0-11-0-2152f`` (image@version)
    where this one computes ``v0-11-0-17c3f``: its cell, still running the spec's engine
    configuration, stays the spec's cell. Once the spec's identity changes (new args),
    no stored cell matches and the current scheme names the new one (a rollout).
    """
    pools = _owned_pools(owner, deployments)
    image, version, own = spec.engine.image, spec.engine.version, kv_config(spec)
    if naming.revision(image, version, own) in pools:
        return spec
    for rev, by_role in sorted(pools.items()):
        stored = {
            str(_annotations(d).get(naming.ANNOTATION_CONFIG) or "") for d in by_role.values()
        }
        config = max(stored)
        if len(stored) != 1 or rev != naming.revision(image, version, config):
            continue
        scheme = config_scheme(config)
        project = _PROJECTIONS.get(scheme)
        same = (
            _legacy_match(owner, spec, by_role)
            if scheme == 1
            else project is not None and scheme != IDENTITY_SCHEME and project(spec) == config
        )
        if same and _inputs_unchanged(spec, by_role):
            pinned = spec.model_copy()
            pinned._cell_config = config
            return pinned
    return spec


def _inputs_unchanged(spec: PDDeploymentSpec, pools: Mapping[Role, Mapping[str, Any]]) -> bool:
    """Whether each pool Deployment was rendered from the spec's inputs as they are now
    (its ``rendered-from``; one stamped before it existed counts as unchanged): an
    older scheme's cell stays the spec's only until the user's next edit of them."""
    return all(
        _annotations(dep).get(naming.ANNOTATION_INPUTS) in (None, rendered_from(spec, role))
        for role, dep in pools.items()
    )


def rendered_from(spec: PDDeploymentSpec, role: Role | None) -> str:
    """The hash of the spec fields a pool's (``role``) or the router's (None) template
    is rendered from, prefixed by ``INPUTS_SCHEME``: while an existing Deployment
    carries the same value, the operator keeps its template as it is (``keep_rendered``):
    a later operator that renders the same inputs differently restarts no pod."""
    common = {
        "engine": spec.engine.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        "router": spec.router_type,
        "flips": spec.scaling.role_flips.enabled,
    }
    if role is None:
        inputs: dict[str, Any] = {
            **common,
            "spec": spec.router.model_dump(mode="json", by_alias=True, exclude_defaults=True),
            "image": spec.router_image,
            "port": engine_port(spec.decode),
        }
    else:
        pool = spec.pool(role)
        inputs = {
            **common,
            "template": pool.template,
            "gpus": pool.gpus_per_replica,
            "ttft": spec.slo.ttft_seconds,
        }
    return f"{INPUTS_SCHEME}.{digest(inputs)}"


def keep_rendered(
    desired: list[Manifest], observed: Iterable[Mapping[str, Any]], uid: str
) -> list[Manifest]:
    """``desired`` with every Deployment that exists, is not drifted and was rendered
    from the same spec inputs (``rendered_from``) kept as it is: only its replicas and
    its ``pdscaler.io`` identity annotations follow ``desired``, so a template-only
    change of the operator's rendering (a new default, a new annotation) restarts no
    pod of an existing cell; it reaches a cell when the spec's inputs change (the user's
    edit rolls the pods anyway) or in a new cell. A Deployment stamped before
    ``rendered_from`` existed is taken as rendered from the spec it serves (its inputs
    stamped, its template kept): an in-place edit (labels, probes) made between the old
    operator's last tick and the new one's first applies with the next edit."""
    have: dict[str, Mapping[str, Any]] = {}
    for obj in observed:
        meta = obj.get("metadata") or {}
        if any(r.get("uid") == uid for r in meta.get("ownerReferences") or []):
            have[str(meta.get("name"))] = obj
    out: list[Manifest] = []
    for obj in desired:
        inputs = _annotations(obj).get(naming.ANNOTATION_INPUTS)
        old = have.get(str(obj["metadata"]["name"]))
        stored = _annotations(old or {}).get(naming.ANNOTATION_INPUTS)
        if (
            obj.get("kind") != "Deployment"
            or inputs is None
            or old is None
            or _annotations(old).get(SPEC_HASH_ANNOTATION)
            == _annotations(obj)[SPEC_HASH_ANNOTATION]
            or drifted(old)
            or stored not in (None, inputs)
        ):
            out.append(obj)
            continue
        kept = frozen_pool(dict(old), int(obj["spec"].get("replicas") or 0))
        annotations = kept["metadata"].setdefault("annotations", {})
        annotations.update({k: v for k, v in _annotations(obj).items() if k in _IDENTITY})
        if naming.ANNOTATION_ENGINE in annotations:
            annotations[naming.ANNOTATION_ENGINE] = engine_hash(kept["spec"]["template"])
        annotations.pop(SPEC_HASH_ANNOTATION, None)
        out.append(stamp(kept))
    return out


#: what ``keep_rendered`` takes from the new rendering onto a kept Deployment (its
#: metadata: no pod restarts for them); ``engine-hash`` is recomputed from the kept
#: template (a kept scheme-1 pool gains one, so drift is watched from then on)
_IDENTITY = frozenset(
    {naming.ANNOTATION_INPUTS, naming.ANNOTATION_SCHEME, naming.ANNOTATION_ENGINE}
)


def engine_hash(template: Mapping[str, Any]) -> str:
    """The hash of what a pod template's engine container runs: its image and its
    ``kv_part`` (so the GPU count, in resources, too), in the form the API server
    returns it (``_served``): a template as rendered and as read back hash alike."""
    engine = _engine_of(template)
    return ENGINE_HASH_PREFIX + digest([engine.get("image"), _served(kv_part(engine))])


def _legacy_engine_hash(template: Mapping[str, Any]) -> str:
    """What operators before ``ENGINE_HASH_PREFIX`` stamped: image, command, args and
    env values."""
    engine = _engine_of(template)
    env = [(e.get("name"), e.get("value")) for e in engine.get("env") or []]
    return digest([engine.get("image"), engine.get("command"), engine.get("args"), env])


def drifted(deployment: Mapping[str, Any]) -> bool:
    """True when a pool Deployment's engine container no longer is what the operator
    rendered (its ``engine-hash`` annotation); one without the annotation (rendered
    before it existed) never counts as drifted, and one stamped by an older operator
    is judged by the fields that operator hashed (until it is re-rendered)."""
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    rendered = annotations.get(naming.ANNOTATION_ENGINE)
    template = groups.pool_template(deployment)
    if rendered is None:
        return False
    if not str(rendered).startswith(ENGINE_HASH_PREFIX):
        return str(rendered) != _legacy_engine_hash(template)
    return str(rendered) != engine_hash(template)


_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)
_SUFFIX: dict[str | None, Fraction] = {
    None: Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    **{s: Fraction(1000**i) for i, s in enumerate("kMGTPE", 1)},
    **{f"{s}i": Fraction(1024**i) for i, s in enumerate("KMGTPE", 1)},
}


def _quantity(value: Any) -> Any:
    """A resource quantity by its value (``"0.5"``, ``0.5`` and ``"500m"`` alike;
    ``"2048Mi"`` and ``"2Gi"`` alike), as the API server canonicalises it; anything
    unparseable as written."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return value
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return value
    try:
        number = Fraction(match.group(1))
    except (ValueError, ZeroDivisionError):
        return value
    return str(number * _SUFFIX[match.group(2)])


def _pruned(value: Any) -> Any:
    """``value`` without empty strings, lists, maps and nulls (the API server omits
    them)."""
    if isinstance(value, Mapping):
        kept = {k: _pruned(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, "", [], {})}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


def _served(part: Mapping[str, Any]) -> Any:
    """``kv_part`` with what the API server fills in or rewrites made uniform:
    quantities by value, a fieldRef's ``apiVersion`` (default ``v1``), empty fields."""
    out = copy.deepcopy(dict(part))
    resources = out.get("resources")
    if isinstance(resources, Mapping):
        out["resources"] = {
            k: ({r: _quantity(q) for r, q in v.items()} if isinstance(v, Mapping) else v)
            for k, v in resources.items()
        }
    for env in out.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
    return _pruned(out)


def pool_labels(
    name: str, role: Role, rev: str, version: str, flips: bool = False
) -> dict[str, str]:
    """Labels of a pool's Deployment and pods; the selector is name+role+revision (in a
    role-flip cell name+pool+revision, the pool label added)."""
    labels = {
        naming.LABEL_NAME: name,
        naming.LABEL_ROLE: role.value,
        naming.LABEL_VERSION: naming.version_label(version),
        naming.LABEL_REVISION: rev,
    }
    if flips:
        labels[naming.LABEL_POOL] = role.value
    return labels


def engine_port(pool: PoolSpec) -> int:
    """The engine container's first containerPort, else 8000."""
    containers = pool.template.get("spec", {}).get("containers") or []
    engine = _engine_index(containers)
    if engine is not None:
        ports = containers[engine].get("ports") or []
        if ports and isinstance(ports[0].get("containerPort"), int):
            return int(ports[0]["containerPort"])
    return DEFAULT_PORT


def _engine_index(containers: list[dict[str, Any]]) -> int | None:
    for i, c in enumerate(containers):
        if c.get("name") == ENGINE_CONTAINER:
            return i
    return 0 if containers else None


def drain_seconds(spec: PDDeploymentSpec) -> int:
    """How long a deleted pool pod keeps taking requests (its preStop sleep when the
    template has none): twice the TTFT objective (a request a router paired with the pod
    just before it went may still be in prefill or queued for that long) plus 5 s for
    the routers' discovery to drop the pod; at most 120 s. TTFT 2 s -> 2 x 2 + 5 = 9 s;
    TTFT 15 s -> 35 s."""
    return min(MAX_DRAIN_S, math.ceil(2 * spec.slo.ttft_seconds) + 5)


def _with_drain(pod: dict[str, Any], engine: dict[str, Any], seconds: int) -> None:
    """A preStop sleep of ``seconds`` on ``engine`` unless the template has a preStop
    hook of its own; the sleep is added on top of the template's grace period
    (Kubernetes counts the hook inside it; 30 s, Kubernetes' default, when unset), so the
    engine keeps the time the template gave it after SIGTERM: template grace 60, drain
    9 -> 69."""
    lifecycle = engine.setdefault("lifecycle", {})
    if "preStop" not in lifecycle:
        lifecycle["preStop"] = {"sleep": {"seconds": seconds}}
        grace = pod.get("terminationGracePeriodSeconds")
        base = grace if isinstance(grace, int) else DEFAULT_GRACE_S
        pod["terminationGracePeriodSeconds"] = base + seconds


def _pod_template(
    meta: Meta, spec: PDDeploymentSpec, cell: CellTarget, role: Role, flips: bool
) -> dict[str, Any]:
    pool = spec.pool(role)
    tpl = copy.deepcopy(pool.template)
    tpl_meta = tpl.setdefault("metadata", {})
    labels = dict(tpl_meta.get("labels") or {})
    labels.update(pool_labels(meta.name, role, cell.rev, cell.version, flips))
    tpl_meta["labels"] = labels
    annotations = dict(tpl_meta.get("annotations") or {})
    annotations[naming.ANNOTATION_VERSION] = cell.version
    tpl_meta["annotations"] = annotations
    pod = tpl.setdefault("spec", {})
    containers: list[dict[str, Any]] = pod.setdefault("containers", [])
    idx = _engine_index(containers)
    if idx is None:
        containers.append({"name": ENGINE_CONTAINER})
        idx = 0
    engine = containers[idx]
    engine["image"] = naming.image_ref(cell.image, cell.version)
    if not engine.get("ports"):
        engine["ports"] = [{"name": PORT_NAME, "containerPort": DEFAULT_PORT}]
    resources = engine.setdefault("resources", {})
    gpus = str(pool.gpus_per_replica)
    resources.setdefault("limits", {})[GPU_RESOURCE] = gpus
    resources.setdefault("requests", {})[GPU_RESOURCE] = gpus
    tolerations = pod.setdefault("tolerations", [])
    if not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    _with_drain(pod, engine, drain_seconds(spec))
    if role is Role.PREFILL:  # the template's own value wins
        tpl_meta["annotations"] = {**router.prefill_annotations(spec, engine), **annotations}
    return tpl


def pool_deployment(meta: Meta, spec: PDDeploymentSpec, cell: CellTarget, role: Role) -> Manifest:
    """The Deployment of one pool of one cell, e.g. ``chat-v1-abcde-prefill``.

    Strategy maxSurge=0/maxUnavailable=1: a same-version template change never asks
    the cluster for GPUs beyond the pool's size (the budget is the hard limit).
    """
    replicas = cell.replicas(role)
    flips = flip_cell(spec, cell)
    labels = pool_labels(meta.name, role, cell.rev, cell.version, flips)
    template = _pod_template(meta, spec, cell, role, flips)
    obj: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": naming.pool_name(meta.name, cell.rev, role),
            "namespace": meta.namespace,
            "labels": labels,
            "annotations": {naming.ANNOTATION_VERSION: cell.version},
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "replicas": replicas,
            "selector": {
                "matchLabels": naming.deployment_selector(meta.name, role, cell.rev, flips)
            },
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
            },
            "revisionHistoryLimit": 2,
            "template": template,
        },
    }
    annotations = obj["metadata"]["annotations"]
    annotations[naming.ANNOTATION_ENGINE] = engine_hash(template)
    annotations[naming.ANNOTATION_IMAGE] = cell.image
    annotations[naming.ANNOTATION_SCHEME] = str(config_scheme(cell.config))
    if cell.config:
        annotations[naming.ANNOTATION_CONFIG] = cell.config
    if cell.config == spec_config(spec):  # the spec's cell: an old cell is frozen
        annotations[naming.ANNOTATION_INPUTS] = rendered_from(spec, role)
    return stamp(obj)


def pool_object(meta: Meta, spec: PDDeploymentSpec, cell: CellTarget, role: Role) -> Manifest:
    """The pool object of one pool of one cell: ``pool_deployment``, or with
    ``podsPerReplica`` > 1 the LeaderWorkerSet ``groups.leader_worker_set`` renders from
    it (the same name and identity; ``spec.replicas`` groups), or with another
    ``gpuResource`` the Deployment asking for that resource. Its ``engine-hash`` is the
    engine container of what the cluster runs (the leader's template)."""
    dep = pool_deployment(meta, spec, cell, role)
    shape = groups.shape_of(spec, role)
    if not shape.grouped and shape.resource == GPU_RESOURCE:
        return dep
    if shape.grouped:
        obj = groups.leader_worker_set(dep, shape)
    else:
        obj = copy.deepcopy(dep)
        groups.set_gpus(obj["spec"]["template"], shape)
    annotations = obj["metadata"]["annotations"]
    if naming.ANNOTATION_ENGINE in annotations:
        annotations[naming.ANNOTATION_ENGINE] = engine_hash(groups.pool_template(obj))
    return stamp(obj)


def _service(
    meta: Meta, name: str, labels: dict[str, str], selector: dict[str, str], port: int
) -> Manifest:
    obj: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": meta.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(meta)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return stamp(obj)


def front_service(meta: Meta, port: int) -> Manifest:
    """``<name>``: the entry point, selecting the routers of every cell. A Service
    routes only to Ready pods, and the cells' routers are allotted in proportion to their
    Ready prefill (``router.allot``), so traffic follows the cells' ready capacity."""
    selector = {naming.LABEL_NAME: meta.name, naming.LABEL_ROLE: naming.ROLE_ROUTER}
    return _service(meta, meta.name, {naming.LABEL_NAME: meta.name}, selector, port)


def desired_objects(meta: Meta, spec: PDDeploymentSpec, cells: list[CellTarget]) -> list[Manifest]:
    """Everything that should exist: per cell the decode, prefill and router Deployments
    (in that order), then the routers' identity and the front Service. With
    ``router.type: external`` the stack brings its own request path: pools only."""
    out: list[Manifest] = []
    routed = router.enabled(spec)
    for cell in cells:
        out.append(pool_object(meta, spec, cell, Role.DECODE))
        out.append(pool_object(meta, spec, cell, Role.PREFILL))
        if routed:
            port = engine_port(spec.decode)
            routers = router.router_deployment(
                meta, spec, cell.rev, cell.version, cell.router, port
            )
            if cell.config == spec_config(spec):
                routers["metadata"]["annotations"][naming.ANNOTATION_INPUTS] = rendered_from(
                    spec, None
                )
                stamp(routers)
            out.append(routers)
    if routed:
        out.extend(router.router_identity(meta))
        front = front_service(meta, spec.router.port)
        out.extend(holding_objects(meta, spec, front))  # scaleToZero: the holder in front
    return out


_KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences")


def frozen_pool(observed: Manifest, replicas: int) -> Manifest:
    """A pool Deployment of a cell that is not the spec's version, kept as it was
    rendered (its template, image and spec-hash) with only ``replicas`` changed.

    During a rollout (and after a rollback) the spec's template belongs to the spec's
    version: re-rendering an old cell from it would restart that cell's pods with the
    new template (a new start-up delay, new flags) while it is the one still serving.
    Server-set fields (uid, resourceVersion, status, managedFields, ...) are dropped.
    """
    meta = observed.get("metadata") or {}
    body: Manifest = {
        "apiVersion": observed.get("apiVersion", "apps/v1"),
        "kind": observed.get("kind", "Deployment"),
        "metadata": {k: copy.deepcopy(meta[k]) for k in _KEPT_METADATA if k in meta},
        "spec": copy.deepcopy(observed.get("spec") or {}),
    }
    annotations = body["metadata"].get("annotations") or {}
    body["metadata"]["annotations"] = {
        k: v for k, v in annotations.items() if not k.startswith("deployment.kubernetes.io/")
    }
    body["spec"]["replicas"] = replicas
    if drifted(body):
        _restore_image(body)
    return body


def _restore_image(body: Manifest) -> None:
    """Put back the engine image a drifted pool Deployment was rendered with (its
    ``engine-image`` and ``engine-version`` annotations), in place."""
    annotations = body["metadata"].get("annotations") or {}
    image, version = (
        annotations.get(naming.ANNOTATION_IMAGE),
        annotations.get(naming.ANNOTATION_VERSION),
    )
    containers = ((body["spec"].get("template") or {}).get("spec") or {}).get("containers") or []
    idx = _engine_index(containers)
    if image and version and idx is not None:
        containers[idx]["image"] = naming.image_ref(str(image), str(version))


def revert_drift(
    desired: list[Manifest], observed: list[Mapping[str, Any]]
) -> tuple[list[Manifest], list[str], list[str]]:
    """Desired objects that put back every drifted pool Deployment, and the names of the
    drifted Deployments (reverted, and not revertible).

    A Deployment is drifted when its engine container is not what was rendered
    (``drifted``). When the desired object restores it (the spec's cell is re-rendered;
    an old cell's frozen copy gets its image back), its spec-hash is marked so the
    planner applies it even though the template it stamped did not change (``kubectl
    set image`` leaves the annotation alone). An old cell whose engine configuration
    (``KV_FIELDS``) was changed cannot be restored (the operator keeps no copy of its
    template): reported.
    """
    have = {str((o.get("metadata") or {}).get("name")): o for o in observed}
    out: list[Manifest] = []
    reverted: list[str] = []
    stuck: list[str] = []
    for obj in desired:
        name = str(obj["metadata"]["name"])
        old = have.get(name)
        if obj.get("kind") != "Deployment" or old is None or not drifted(old):
            out.append(obj)
            continue
        if drifted(obj):
            stuck.append(name)
            out.append(obj)
            continue
        reverted.append(name)
        obj = copy.deepcopy(obj)
        annotations = obj["metadata"].setdefault("annotations", {})
        stamp_now = annotations.get(SPEC_HASH_ANNOTATION)
        stamp_old = ((old.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if stamp_now == stamp_old:
            annotations[SPEC_HASH_ANNOTATION] = f"{stamp_now}-r"
        out.append(obj)
    return out, reverted, stuck
