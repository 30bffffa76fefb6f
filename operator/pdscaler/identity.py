"""What a cell's configuration is beyond its engine container (issue 30, item 7). Pure.

Owns: the pod-level part of a pool template that changes what an engine computes
(``pod_part``: init and sidecar containers, volumes, the engine's volume mounts,
nodeSelector, affinity, tolerations, runtimeClassName and the user's
``pdscaler.io/config-revision`` annotation), the ConfigMaps a template reads
(``configmap_names``: envFrom, env valueFrom, configMap and projected volumes, in every
container and init container) and the digest of a ConfigMap's contents
(``configmap_digest``). ``manifests.kv_config`` (identity scheme 3) hashes all three
into the revision, so a change of any of them is a new cell (a same-version rollout),
never an in-place roll that would pair pods of two configurations under one router.

Secrets are not read (the operator has no right to a tenant's Secrets): a template that
reads one is identified by its name only; the user bumps ``pdscaler.io/config-revision``
on the template to roll out new Secret contents (docs/operator.md, "Rollouts").

Must not: talk to Kubernetes (``kube.reads.Reads.get`` reads the ConfigMaps,
``reconcile`` hands their digests to the spec: ``manifests.with_configmaps``).

Worked numbers (tests/unit/test_identity_config.py):

>>> tpl = {"spec": {"containers": [{"name": "engine",
...     "envFrom": [{"configMapRef": {"name": "engine-flags"}}]}],
...     "volumes": [{"name": "t", "configMap": {"name": "chat-template"}}]}}
>>> configmap_names(tpl)
['chat-template', 'engine-flags']
>>> configmap_digest({"data": {"MAX_MODEL_LEN": "8192"}})
'be81628e5c'
>>> configmap_digest(None)
'absent'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pdscaler import naming
from pdscaler.objects import digest

#: Pod-level fields of a pool template that decide what its engine computes or where it
#: runs (its GPUs' kind: nodeSelector, affinity, tolerations): part of the revision.
POD_FIELDS = (
    "initContainers",
    "volumes",
    "nodeSelector",
    "affinity",
    "tolerations",
    "runtimeClassName",
)
#: What a ConfigMap that does not exist (or not yet) hashes as.
ABSENT = "absent"
#: What a referenced ConfigMap hashes as when no edge read it (the simulator, unit
#: tests): the operator reads every one before a tick (``reconcile``).
UNREAD = "unread"


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pod = template.get("spec") or {}
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def pod_part(template: Mapping[str, Any], engine: int | None) -> dict[str, Any]:
    """The template's ``POD_FIELDS`` as written, its containers other than the engine
    (index ``engine``: sidecars, whole), the engine's ``volumeMounts`` and the
    ``pdscaler.io/config-revision`` annotation (None when absent)."""
    pod = template.get("spec") or {}
    containers = list(pod.get("containers") or [])
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    mounts = containers[engine].get("volumeMounts") if engine is not None else None
    return {
        **{key: pod.get(key) for key in POD_FIELDS},
        "sidecars": [c for i, c in enumerate(containers) if i != engine],
        "mounts": mounts,
        "revision": annotations.get(naming.ANNOTATION_CONFIG_REVISION),
    }


def configmap_names(template: Mapping[str, Any]) -> list[str]:
    """The ConfigMaps (names in the template's namespace) the pods of ``template`` read:
    ``envFrom[].configMapRef``, ``env[].valueFrom.configMapKeyRef`` of every container
    and init container, ``volumes[].configMap`` and ``volumes[].projected.sources[]
    .configMap``; sorted, each once."""
    names: set[str] = set()
    for c in _containers(template):
        names.update(_ref(e.get("configMapRef") or {}) for e in c.get("envFrom") or [])
        names.update(
            _ref((e.get("valueFrom") or {}).get("configMapKeyRef") or {})
            for e in c.get("env") or []
        )
    for v in (template.get("spec") or {}).get("volumes") or []:
        names.add(_ref(v.get("configMap") or {}))
        for source in (v.get("projected") or {}).get("sources") or []:
            names.add(_ref(source.get("configMap") or {}))
    names.discard("")
    return sorted(names)


def _ref(ref: Mapping[str, Any]) -> str:
    return str(ref.get("name") or "")


def configmaps_of(templates: Iterable[Mapping[str, Any]]) -> list[str]:
    """``configmap_names`` over several templates (both pools), sorted, each once."""
    return sorted({n for t in templates for n in configmap_names(t)})


def configmap_digest(configmap: Mapping[str, Any] | None) -> str:
    """The digest of a ConfigMap's contents (``data`` and ``binaryData``; its labels and
    annotations do not count), ``ABSENT`` for one that does not exist. 10 hex digits:
    ``{"data": {"MAX_MODEL_LEN": "8192"}}`` -> ``be81628e5c``."""
    if configmap is None:
        return ABSENT
    return digest(
        {"data": configmap.get("data") or {}, "binary": configmap.get("binaryData") or {}}
    )
