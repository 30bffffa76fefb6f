"""Test helpers for the PDDeployment CRD: load it, translate its Kubernetes OpenAPI v3
schema into a plain JSON Schema that ``jsonschema`` can check, apply the API server's
structural defaulting, list its CEL rules and evaluate them through Python twins
(``CEL_TWINS``). No cluster, no I/O beyond reading the CRD file.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from pdscaler import groups
from pdscaler import spec as pdspec
from pdscaler.spec import SCOPE_MATCHER_PATTERN, parse_duration

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "pdscaler.io_pddeployments.yaml"
EXAMPLES_DIR = ROOT / "deploy" / "examples"

Schema = dict[str, Any]


def load_crd() -> dict[str, Any]:
    with CRD_PATH.open() as f:
        crd: dict[str, Any] = yaml.safe_load(f)
    return crd


def openapi_schema(crd: dict[str, Any] | None = None) -> Schema:
    """The v1alpha1 ``openAPIV3Schema`` (the whole object: apiVersion ... status)."""
    crd = crd if crd is not None else load_crd()
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema: Schema = version["schema"]["openAPIV3Schema"]
    return schema


def is_opaque(node: Schema) -> bool:
    """A node whose content the API server keeps without a schema."""
    return bool(node.get("x-kubernetes-preserve-unknown-fields"))


def to_json_schema(node: Schema, *, root: bool = True) -> Schema:
    """Translate a Kubernetes structural schema node into JSON Schema (draft 2020-12):
    OpenAPI 3.0 boolean ``exclusiveMinimum``/``exclusiveMaximum`` become numeric, the
    ``x-kubernetes-*`` extensions are dropped, and objects without
    ``x-kubernetes-preserve-unknown-fields`` reject unknown fields (``kubectl apply``
    validates strictly by default). ``metadata`` at the root stays free-form (the API
    server owns ObjectMeta)."""
    out: Schema = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("description", "default"):
            continue
        if key == "properties":
            out[key] = {
                name: (
                    {"type": "object"}
                    if root and name == "metadata"
                    else to_json_schema(sub, root=False)
                )
                for name, sub in value.items()
            }
        elif key == "items":
            out[key] = to_json_schema(value, root=False)
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            continue
        else:
            out[key] = copy.deepcopy(value)
    if node.get("exclusiveMinimum"):
        out["exclusiveMinimum"] = out.pop("minimum")
    if node.get("exclusiveMaximum"):
        out["exclusiveMaximum"] = out.pop("maximum")
    if node.get("type") == "object" and not is_opaque(node):
        out["additionalProperties"] = False
    return out


def apply_defaults(node: Schema, value: Any) -> Any:
    """The API server's structural defaulting: a missing property with a ``default``
    gets a copy of it, then defaulting recurses into everything present (so
    ``replicas: {}`` becomes ``{"min": 1, "max": 16}``). Returns a new value."""
    if isinstance(value, dict) and node.get("type") == "object":
        props: dict[str, Schema] = node.get("properties", {})
        result = dict(value)
        for name, sub in props.items():
            if name not in result and "default" in sub:
                result[name] = copy.deepcopy(sub["default"])
            if name in result:
                result[name] = apply_defaults(sub, result[name])
        return result
    if isinstance(value, list) and "items" in node:
        return [apply_defaults(node["items"], item) for item in value]
    return value


def walk(node: Schema, path: str = "") -> list[tuple[str, Schema]]:
    """Every schema node with its dotted path (``spec.prefill.replicas.min``); array
    items get ``[]``."""
    found = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        found += walk(sub, f"{path}.{name}" if path else name)
    if "items" in node:
        found += walk(node["items"], f"{path}[]")
    return found


def cel_rules(node: Schema) -> list[tuple[str, dict[str, Any]]]:
    """(path, rule) for every ``x-kubernetes-validations`` entry."""
    return [
        (path, rule) for path, sub in walk(node) for rule in sub.get("x-kubernetes-validations", [])
    ]


def normalise_rule(rule: str) -> str:
    """A CEL rule's text with its whitespace collapsed (YAML folding varies)."""
    return " ".join(rule.split())


def _budget_floor(spec: dict[str, Any]) -> bool:
    floor = sum(
        spec[pool]["replicas"]["min"] * spec[pool]["gpusPerReplica"]
        for pool in ("prefill", "decode")
    )
    return bool(spec["scaling"]["maxGPUs"] >= floor)


#: router.args' rule, written from the flags the spec model refuses: the CRD must say
#: exactly this (a drift is a KeyError in ``cel_failures``).
ROUTER_ARGS_RULE = (
    "!has(self.args) || self.args.all(a, !(a.split('=')[0].startsWith('--') && "
    "a.split('=')[0].size() > 2 && ["
    + ", ".join(f"'{flag}'" for flag in pdspec.ROUTER_RESERVED_FLAGS)
    + "].exists(f, f.startsWith(a.split('=')[0]))))"
)

#: Python twins of the CRD's CEL rules (whitespace-normalised rule text -> predicate on the
#: object the rule sits on, after defaulting), so the rules can be exercised without an API
#: server. ``test_invalid_manifests`` fails when the CRD holds a rule without a twin here.
CEL_TWINS: dict[str, Callable[[dict[str, Any]], bool]] = {
    "self.min <= self.max": lambda s: bool(s["min"] <= s["max"]),
    "self.preset != 'custom' || has(self.queries)": lambda s: (
        s["preset"] != "custom" or "queries" in s
    ),
    "self.preset == 'custom' || !has(self.queries)": lambda s: (
        s["preset"] == "custom" or "queries" not in s
    ),
    "duration(self.interval) >= duration('1s')": lambda s: parse_duration(s["interval"]) >= 1.0,
    "duration(self.scaleDownStabilization) <= duration('1h')": lambda s: (
        parse_duration(s["scaleDownStabilization"]) <= 3600.0
    ),
    "!has(self.window) || duration(self.window) <= duration('1h')": lambda s: (
        "window" not in s or parse_duration(s["window"]) <= 3600.0
    ),
    "duration(self.window) <= duration('1h')": lambda s: parse_duration(s["window"]) <= 3600.0,
    "!has(self.progressDeadline) || duration(self.progressDeadline) <= duration('24h')": lambda s: (
        "progressDeadline" not in s or parse_duration(s["progressDeadline"]) <= 86400.0
    ),
    "self.scaling.maxGPUs >= self.prefill.replicas.min * self.prefill.gpusPerReplica + "
    "self.decode.replicas.min * self.decode.gpusPerReplica": _budget_floor,
    "!self.scaling.roleFlips.enabled || "
    "self.prefill.gpusPerReplica == self.decode.gpusPerReplica": lambda s: (
        not s["scaling"]["roleFlips"]["enabled"]
        or s["prefill"]["gpusPerReplica"] == s["decode"]["gpusPerReplica"]
    ),
    "!self.scaling.roleFlips.enabled || (has(self.router.type) ? "
    "self.router.type == 'vllm-router' : self.metrics.preset == 'vllm')": lambda s: (
        not s["scaling"]["roleFlips"]["enabled"]
        or (
            s["router"]["type"] == "vllm-router"
            if "type" in s["router"]
            else s["metrics"]["preset"] == "vllm"
        )
    ),
    ROUTER_ARGS_RULE: lambda s: not any(pdspec.reserved_router_flag(a) for a in s.get("args", [])),
    "self.metadata.name.size() <= 28": lambda s: len(s["metadata"]["name"]) <= 28,
    "self.version.matches('[A-Za-z0-9]$')": lambda s: (
        re.search("[A-Za-z0-9]$", s["version"]) is not None
    ),
}


def _query_scoped(q: str) -> bool:
    """A custom query template holds a scoping placeholder and no matcher on a label
    pdscaler scopes with (the CRD's rule on each ``metrics.queries`` field)."""
    has = "{selector}" in q or "{matchers}" in q
    return has and re.search(SCOPE_MATCHER_PATTERN, q) is None


def _query_rule(field: str, optional: bool) -> str:
    check = (
        f"(self.{field}.contains('{{selector}}') || self.{field}.contains('{{matchers}}'))"
        f" && !self.{field}.matches(r'''{SCOPE_MATCHER_PATTERN}''')"
    )
    return f"!has(self.{field}) || ({check})" if optional else check


def _absent_or_scoped(field: str) -> Callable[[dict[str, Any]], bool]:
    return lambda s: field not in s or _query_scoped(s[field])


for _field, _optional in (
    ("requestRate", False),
    ("promptTokens", False),
    ("outputTokens", False),
    ("queueDepth", False),
    ("ttft", False),
    ("tpot", False),
    ("running", True),
    ("kvUsage", True),
):
    CEL_TWINS[_query_rule(_field, _optional)] = _absent_or_scoped(_field)


_RESERVED = (
    "authorization",
    "proxy-authorization",
    "host",
    "connection",
    "content-type",
    "content-length",
    "transfer-encoding",
)
CEL_TWINS.update(
    {
        "!has(self.auth) || !(has(self.auth.ca) || has(self.auth.cert)) || "
        "self.url.startsWith('https://')": lambda s: (
            "auth" not in s
            or not ("ca" in s["auth"] or "cert" in s["auth"])
            or s["url"].startswith("https://")
        ),
        "has(self.username) == has(self.password)": lambda s: (
            ("username" in s) == ("password" in s)
        ),
        "has(self.cert) == has(self.key)": lambda s: ("cert" in s) == ("key" in s),
        "!(has(self.bearerToken) && has(self.username))": lambda s: (
            not ("bearerToken" in s and "username" in s)
        ),
        "!has(self.profile) || self.profile.all(p, self.profile.exists_one(q, q.tokens == "
        "p.tokens))": lambda s: (
            len({p["tokens"] for p in s.get("profile", [])}) == len(s.get("profile", []))
        ),
        "!has(self.customHeaders) || self.customHeaders.all(h, self.customHeaders.exists_one(g, "
        "g.header.lowerAscii() == h.header.lowerAscii()))": lambda s: (
            len({h["header"].lower() for h in s.get("customHeaders", [])})
            == len(s.get("customHeaders", []))
        ),
        "!has(self.customHeaders) || self.customHeaders.all(h, "
        "h.header.matches('^[A-Za-z0-9][-A-Za-z0-9_]*$'))": lambda s: all(
            re.match("^[A-Za-z0-9][-A-Za-z0-9_]*$", h["header"]) is not None
            for h in s.get("customHeaders", [])
        ),
        "!has(self.customHeaders) || self.customHeaders.all(h, !(h.header.lowerAscii() in "
        "['authorization', 'proxy-authorization', 'host', 'connection', 'content-type', "
        "'content-length', 'transfer-encoding']))": lambda s: all(
            h["header"].lower() not in _RESERVED for h in s.get("customHeaders", [])
        ),
    }
)

_ROUTER_FIELDS = ("type", "image", "args", "resources", "template")
CEL_TWINS.update(
    {
        "has(self.prefill.scaleTargetRef) == has(self.decode.scaleTargetRef)": lambda s: (
            ("scaleTargetRef" in s["prefill"]) == ("scaleTargetRef" in s["decode"])
        ),
        "has(self.engine) != has(self.prefill.scaleTargetRef)": lambda s: (
            ("engine" in s) != ("scaleTargetRef" in s["prefill"])
        ),
        "!has(self.prefill.scaleTargetRef) || !(has(self.router.type) || has(self.router.image) "
        "|| has(self.router.args) || has(self.router.resources) || has(self.router.template))": (
            lambda s: (
                "scaleTargetRef" not in s["prefill"]
                or not any(k in s["router"] for k in _ROUTER_FIELDS)
            )
        ),
        "!has(self.prefill.scaleTargetRef) || !self.scaling.roleFlips.enabled": lambda s: (
            "scaleTargetRef" not in s["prefill"] or not s["scaling"]["roleFlips"]["enabled"]
        ),
        "!has(self.versionLabel) || has(self.prefill.scaleTargetRef)": lambda s: (
            "versionLabel" not in s or "scaleTargetRef" in s["prefill"]
        ),
        "!has(self.scaleTargetRef) || !has(self.template)": lambda s: (
            "scaleTargetRef" not in s or "template" not in s
        ),
    }
)


def _at(value: Any, path: str) -> Any:
    """The part of ``value`` at a schema path (``spec.prefill.replicas``), None if absent."""
    for key in path.split(".") if path else []:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def failing_cel_rules(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path, rule) of every CEL rule of the CRD that rejects ``manifest`` once the API
    server's defaults are applied; a rule whose object is absent is not evaluated. Raises
    KeyError for a rule without a twin in ``CEL_TWINS``."""
    schema = openapi_schema()
    defaulted = apply_defaults(schema, manifest)
    failing = []
    for path, rule in cel_rules(schema):
        target = _at(defaulted, path)
        if target is not None and not CEL_TWINS[normalise_rule(rule["rule"])](target):
            failing.append((path, rule))
    return failing


def rule_error_path(path: str, rule: dict[str, Any]) -> str:
    """Where the API server reports a failing rule: its path plus its ``fieldPath``
    (``spec.prefill.replicas`` + ``.min``)."""
    return (path + str(rule.get("fieldPath", ""))).lstrip(".")  # a root rule: "metadata.name"


def _min_zero(pool: str) -> Callable[[dict[str, Any]], bool]:
    """The twin of scaleToZero's rule on ``pool``: absent, or that pool's min 0."""
    return lambda s: "scaleToZero" not in s or (s[pool].get("replicas") or {}).get("min") == 0


CEL_TWINS.update(
    {
        f"!has(self.scaleToZero) || (has(self.{p}.replicas) && has(self.{p}.replicas.min) "
        f"&& self.{p}.replicas.min == 0)": _min_zero(p)
        for p in ("prefill", "decode")
    }
)


def _group_twin(rule: dict[str, str]) -> tuple[str, Callable[[dict[str, Any]], bool]]:
    """The twin of one of groups.py's CRD rules (issue 29 item 2), by its message."""
    checks: dict[str, Callable[[dict[str, Any]], bool]] = {
        pdspec.MSG_GROUP_GPUS: lambda s: s["gpusPerReplica"] % s["podsPerReplica"] == 0,
        pdspec.MSG_GPU_RESOURCE: lambda s: (
            "gpuResource" not in s or pdspec.valid_gpu_resource(s["gpuResource"])
        ),
        pdspec.MSG_FLIP_SHAPE: lambda s: (
            not s["scaling"]["roleFlips"]["enabled"]
            or len(
                {
                    (
                        s[p]["podsPerReplica"],
                        s[p].get("gpuResource") or s.get("gpuResource") or "nvidia.com/gpu",
                    )
                    for p in ("prefill", "decode")
                }
            )
            == 1
        ),
    }
    return normalise_rule(rule["rule"]), checks[rule["message"]]


CEL_TWINS.update(dict(_group_twin(r) for r in groups.POOL_RULES + groups.SPEC_RULES))
CEL_TWINS["!has(self.scaleTargetRef) || self.podsPerReplica == 1"] = lambda s: (
    "scaleTargetRef" not in s or s["podsPerReplica"] == 1
)
