"""Names and labels of the objects a PDDeployment owns. Pure string functions.

A version is served by a *cell* named ``<name>-<rev>``: ``<name>-<rev>-prefill`` and
``<name>-<rev>-decode`` Deployments and the ``<name>-<rev>-decode`` Service. ``rev`` is
the readable version plus a short hash of image@version, so two versions that sanitise
alike (``v1.0`` and ``v1-0``) still get distinct cells:

>>> revision("vllm/vllm-openai", "v0.11.0")
'v0-11-0-2152f'
>>> cell_name("chat", "v0-11-0-2152f")
'chat-v0-11-0-2152f'
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
ANNOTATION_VERSION = f"{DOMAIN}/engine-version"  # the exact version string
FIELD_MANAGER = "pdscaler"
ROLE_ROUTER = "router"  # the role label of a cell's router pods

_UNSAFE = re.compile(r"[^a-z0-9-]+")


def revision(image: str, version: str) -> str:
    """Label- and DNS-safe revision id of an engine version (max 26 characters)."""
    readable = _UNSAFE.sub("-", version.lower()).strip("-")[:20].strip("-") or "v"
    digest = hashlib.sha256(f"{image}@{version}".encode()).hexdigest()[:5]
    return f"{readable}-{digest}"


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


def version_label(version: str) -> str:
    """A label value for a version (labels allow [A-Za-z0-9._-], max 63)."""
    return version[:63]
