"""What every object a PDDeployment owns carries: the owner's identity, the controller
owner reference, and the ``pdscaler.io/spec-hash`` stamp. Pure.

Owns: ``Meta`` (the owning PDDeployment), ``owner_reference`` (controller=true, so
deleting the PDDeployment garbage-collects everything), ``spec_hash``/``stamp`` (the
hash of everything the operator manages except ``replicas``: the patch planner compares
it instead of diffing API-server defaults). Must not: build any particular object
(``manifests`` builds the pools and Services, ``router`` the routers).

>>> spec_hash({"spec": {"replicas": 3, "x": 1}}) == spec_hash({"spec": {"replicas": 9, "x": 1}})
True
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pdscaler import naming
from pdscaler.spec import GROUP, KIND, VERSION

SPEC_HASH_ANNOTATION = f"{naming.DOMAIN}/spec-hash"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Meta:
    """The identity of the owning PDDeployment (what an owner reference needs)."""

    name: str
    namespace: str
    uid: str


def owner_reference(meta: Meta) -> dict[str, Any]:
    """The controller owner reference every owned object carries."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": meta.name,
        "uid": meta.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def spec_hash(obj: Manifest) -> str:
    """Hash of an object's managed content minus ``spec.replicas`` (10 hex digits).

    Two builds of the same intent hash alike, so a converged object needs no write;
    a template, image, label or port change changes the hash (a template patch).
    """
    body = copy.deepcopy(obj)
    body.get("spec", {}).pop("replicas", None)
    body.get("metadata", {}).get("annotations", {}).pop(SPEC_HASH_ANNOTATION, None)
    return digest(body)


def digest(value: Any) -> str:
    """10 hex digits of the SHA-256 of ``value`` as canonical JSON (sorted keys, no
    spaces; ``str()`` of what JSON cannot hold): the one hash behind ``spec_hash``, a
    cell's configuration (``manifests.kv_config``) and a ConfigMap's contents
    (``identity.configmap_digest``). ``digest({"data": {}, "binary": {}})`` hashes
    ``{"binary":{},"data":{}}``."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def stamp(obj: Manifest) -> Manifest:
    """``obj`` with its spec-hash annotation set (in place)."""
    obj["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = spec_hash(obj)
    return obj
