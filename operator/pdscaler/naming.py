"""Names and labels of the objects a PDDeployment owns. Pure string functions.

A version is served by a *cell* named ``<name>-<rev>``: ``<name>-<rev>-prefill``,
``<name>-<rev>-decode`` and ``<name>-<rev>-router`` Deployments. ``rev`` is the
readable version plus a short hash of image@version and of the engine configuration
that decides KV compatibility (``config``: the fingerprint ``manifests.kv_config``
computes from both pools' engine args, command, env, resources and gpusPerReplica), so
two versions that sanitise alike (``v1.0`` and ``v1-0``) and one version run with two
engine configurations get distinct cells (a configuration change is a rollout, never an
in-place update that would pair prefill and decode of different configurations):

>>> revision("vllm/vllm-openai", "v0.11.0")
'v0-11-0-2152f'
>>> revision("vllm/vllm-openai", "v0.11.0", "3f2a9c1e")
'v0-11-0-3bc34'
>>> cell_name("chat", "v0-11-0-2152f")
'chat-v0-11-0-2152f'

A version may be an image digest (``sha256:<64 hex>``): the image is then
``repo@sha256:...`` (``image_ref``) and the version label its label-safe form.
"""

from __future__ import annotations

import hashlib
import re

from pdscaler.types import Role

DOMAIN = "pdscaler.io"
LABEL_NAME = f"{DOMAIN}/name"  # the PDDeployment's name
LABEL_ROLE = f"{DOMAIN}/role"  # prefill | decode | router
LABEL_VERSION = f"{DOMAIN}/version"  # engine version (the label-safe form)
LABEL_REVISION = f"{DOMAIN}/revision"  # the cell's rev
#: the pool whose Deployment made the pod, in a role-flip cell (``scaling.roleFlips``):
#: its Deployment selects on it, so ``LABEL_ROLE`` (what the pod serves) may change
LABEL_POOL = f"{DOMAIN}/pool"
ANNOTATION_VERSION = f"{DOMAIN}/engine-version"  # the exact version string
ANNOTATION_CONFIG = f"{DOMAIN}/engine-config"  # the cell's KV-config fingerprint
ANNOTATION_ENGINE = f"{DOMAIN}/engine-hash"  # hash of the engine container as rendered
ANNOTATION_IMAGE = f"{DOMAIN}/engine-image"  # the engine image repository (no tag)
#: the identity scheme of the cell's ``engine-config`` (``manifests.config_scheme``)
ANNOTATION_SCHEME = f"{DOMAIN}/identity-scheme"
#: what a Deployment's template was rendered from (``manifests.rendered_from``)
ANNOTATION_INPUTS = f"{DOMAIN}/rendered-from"
#: on a pool template, set by the user: part of the cell's identity (bump it to roll out
#: what the operator cannot read, e.g. a Secret's new contents: ``identity.pod_part``)
ANNOTATION_CONFIG_REVISION = f"{DOMAIN}/config-revision"
#: on the front Service: what a rollout must not forget when the status is lost
ANNOTATION_FAILED_REVISION = f"{DOMAIN}/failed-revision"  # rolled back from, not retried
ANNOTATION_REQUIRED = f"{DOMAIN}/rollout-required"  # "<prefill>/<decode>" during a rollout
#: on a PDDeployment, "true": the operator writes none of its objects (reads and reports)
ANNOTATION_PAUSED = f"{DOMAIN}/paused"
DIGEST_PREFIX = "sha256:"
FIELD_MANAGER = "pdscaler"
ROLE_ROUTER = "router"  # the role label of a cell's router pods

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def revision(image: str, version: str, config: str = "") -> str:
    """Label- and DNS-safe revision id of an engine version run with the engine
    configuration fingerprint ``config`` (max 26 characters). An empty ``config`` (a
    cell rendered before the fingerprint existed) hashes image@version alone."""
    readable = _UNSAFE.sub("-", version.lower()).strip("-")[:20].strip("-") or "v"
    key = f"{image}@{version}" + (f"#{config}" if config else "")
    digest = hashlib.sha256(key.encode()).hexdigest()[:5]
    return f"{readable}-{digest}"


def is_digest(version: str) -> bool:
    """``sha256:<hex>`` (an image digest) rather than a tag."""
    return version.startswith(DIGEST_PREFIX)


def image_ref(image: str, version: str) -> str:
    """The engine container's image: ``repo:tag``, or ``repo@sha256:...`` for a digest."""
    return f"{image}@{version}" if is_digest(version) else f"{image}:{version}"


def split_image_ref(ref: str, version: str) -> str | None:
    """The repository of ``ref`` rendered for ``version`` (``image_ref``'s inverse):
    None when ``ref`` is not ``<repo>:<version>`` / ``<repo>@<version>``."""
    for sep in (":", "@"):
        if ref.endswith(f"{sep}{version}") and len(ref) > len(version) + 1:
            return ref[: -len(version) - 1]
    return None


def cell_name(name: str, rev: str) -> str:
    return f"{name}-{rev}"


def pool_name(name: str, rev: str, role: Role) -> str:
    """``chat-v0-11-0-2152f-prefill``: the Deployment of one pool of one cell."""
    return f"{cell_name(name, rev)}-{role.value}"


def router_name(name: str, rev: str) -> str:
    """``chat-v0-11-0-2152f-router``: the Deployment of one cell's P/D routers."""
    return f"{cell_name(name, rev)}-{ROLE_ROUTER}"


def pool_selector(name: str, role: Role, rev: str) -> dict[str, str]:
    """The labels selecting one pool of one cell (name + role + revision)."""
    return {LABEL_NAME: name, LABEL_ROLE: role.value, LABEL_REVISION: rev}


def deployment_selector(name: str, role: Role, rev: str, flips: bool) -> dict[str, str]:
    """What one pool's Deployment selects: ``pool_selector``, or in a role-flip cell
    name + pool + revision (the role label is then free to change: a flip)."""
    if not flips:
        return pool_selector(name, role, rev)
    return {LABEL_NAME: name, LABEL_POOL: role.value, LABEL_REVISION: rev}


def version_label(version: str) -> str:
    """A label value for a version (labels allow [A-Za-z0-9._-], max 63, alphanumeric
    at both ends): ``sha256:ab12...`` -> ``sha256-ab12...`` cut to 63."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", version)[:63].strip("-._") or "v"
