"""The shared table of invalid PDDeployment manifests, each with the error it must get.

Owns: ``CASES``, a list of ``InvalidCase``: a mutation of the valid chat example
(``deploy/examples/chat.yaml``), the field path and phrase the API server prints, and the
location and phrase pydantic (``pdscaler.spec``) reports. Used by
``tests/unit/test_invalid_manifests.py`` (pydantic, and the CRD's OpenAPI/CEL constraints
checked offline) and ``tests/lab/test_lab_crd.py`` (the real kube-apiserver). Must not
talk to a cluster itself.

For the lab::

    for case in CASES:
        body = case.manifest(namespace=ns)
        # create with dry_run="All" and field_validation="Strict"
        # -> ApiException 422 (400 for strict unknown fields) whose body satisfies
        #    case.api_matches(exc.body)

What kube-apiserver prints, per mechanism (``keyword``):

* OpenAPI bounds (``minimum``/``exclusiveMinimum``/``maximum``/``exclusiveMaximum``):
  ``spec.prefill.gpusPerReplica: Invalid value: 0: spec.prefill.gpusPerReplica in body
  should be greater than or equal to 1`` (exclusive: ``should be greater than 0``).
* ``pattern``: ``... in body should match '<regex>'``; ``minLength``: ``... in body should
  be at least 1 chars long``; ``type``: ``... in body must be of type integer``.
* ``enum``: ``spec.scaling.mode: Unsupported value: "Manual": supported values: ...``.
* ``required``: ``spec.engine.version: Required value``.
* CEL (``x-kubernetes-validations``): the rule's ``message``, at the rule's path plus its
  ``fieldPath`` (``spec.prefill.replicas.min: Invalid value: "object": replicas.min must
  be less than or equal to replicas.max``).
* unknown fields (``additionalProperties``; ``strict_only``): rejected only with
  ``fieldValidation=Strict`` (kubectl's default; the Python client needs
  ``field_validation="Strict"``, else the field is silently pruned):
  ``strict decoding error: unknown field "spec.scaling.maxGpus"``.

``api_matches`` asks for the field path AND the phrase, so the message names the field.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from pdscaler import spec as pdspec
from support.crd_schema import EXAMPLES_DIR

Manifest = dict[str, Any]
Mutation = Callable[[Manifest], None]

BASE_PATH = EXAMPLES_DIR / "chat.yaml"

CEL = "x-kubernetes-validations"


@cache
def _base_text() -> str:
    return BASE_PATH.read_text()


def base_manifest() -> Manifest:
    """A fresh copy of the valid chat example (prefill/decode min 2, maxGPUs 48)."""
    manifest: Manifest = yaml.safe_load(_base_text())
    return manifest


def _parent(manifest: Manifest, path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    node: Any = manifest
    for key in parents:
        node = node.setdefault(key, {})
    return node, leaf


def set_(path: str, value: Any) -> Mutation:
    """Set the dotted ``path`` (``spec.scaling.maxGPUs``) to ``value``."""

    def mutate(manifest: Manifest) -> None:
        node, leaf = _parent(manifest, path)
        node[leaf] = copy.deepcopy(value)

    return mutate


def drop(path: str) -> Mutation:
    """Remove the dotted ``path``."""

    def mutate(manifest: Manifest) -> None:
        node, leaf = _parent(manifest, path)
        del node[leaf]

    return mutate


def both(*mutations: Mutation) -> Mutation:
    def mutate(manifest: Manifest) -> None:
        for m in mutations:
            m(manifest)

    return mutate


@dataclass(frozen=True)
class InvalidCase:
    """One invalid manifest.

    ``path``: the field the API server names (dotted, from the object root);
    ``api_error``: a phrase of its message; ``keyword``: the CRD mechanism that rejects it
    (a JSON-schema keyword, or ``x-kubernetes-validations`` for a CEL rule);
    ``pydantic_loc``/``pydantic_error``: where and what ``PDDeployment.model_validate``
    reports (a CEL twin in spec.py raises at the model's location, e.g.
    ``spec.prefill.replicas``, with the CEL message word for word).
    """

    id: str
    mutate: Mutation
    path: str
    api_error: str
    keyword: str
    pydantic_loc: str
    pydantic_error: str
    strict_only: bool = False

    def manifest(self, namespace: str | None = None, name: str | None = None) -> Manifest:
        """The invalid manifest (a new dict), optionally in another namespace/name."""
        out = base_manifest()
        self.mutate(out)
        if namespace is not None:
            out["metadata"]["namespace"] = namespace
        if name is not None:
            out["metadata"]["name"] = name
        return out

    def api_matches(self, text: str) -> bool:
        """The API server's answer names the field and says the phrase."""
        return self.path in text and self.api_error in text


def _at(
    case_id: str,
    path: str,
    mutate: Mutation,
    keyword: str,
    api_error: str,
    pydantic_error: str,
    strict_only: bool = False,
) -> InvalidCase:
    """A case that the API server and pydantic both report at ``path`` itself."""
    return InvalidCase(
        id=case_id,
        mutate=mutate,
        path=path,
        api_error=api_error,
        keyword=keyword,
        pydantic_loc=path,
        pydantic_error=pydantic_error,
        strict_only=strict_only,
    )


def _bound(path: str, phrase: str, keyword: str, pydantic_phrase: str, value: Any) -> InvalidCase:
    """A numeric bound broken: kube prints ``<path> in body should be <phrase>``."""
    api_error = f"{path} in body should be {phrase}"
    pydantic_error = f"Input should be {pydantic_phrase}"
    return _at("", path, set_(path, value), keyword, api_error, pydantic_error)


def _pattern(path: str, value: str) -> InvalidCase:
    """A string that does not match the CRD's pattern (durations, version, URL)."""
    api_error = f"{path} in body should match"
    return _at("", path, set_(path, value), "pattern", api_error, "String should match pattern")


def _named(case_id: str, case: InvalidCase) -> InvalidCase:
    return InvalidCase(**{**case.__dict__, "id": case_id})


def _gt(path: str, value: Any, limit: int = 0) -> InvalidCase:
    return _bound(path, f"greater than {limit}", "exclusiveMinimum", f"greater than {limit}", value)


def _ge(path: str, value: Any, limit: int) -> InvalidCase:
    phrase = f"greater than or equal to {limit}"
    return _bound(path, phrase, "minimum", phrase, value)


def _cel(case_id: str, mutate: Mutation, path: str, message: str, pydantic_loc: str) -> InvalidCase:
    return InvalidCase(
        id=case_id,
        mutate=mutate,
        path=path,
        api_error=message,
        keyword=CEL,
        pydantic_loc=pydantic_loc,
        pydantic_error=message,
    )


def _unknown(case_id: str, path: str, value: Any) -> InvalidCase:
    api_error = f'unknown field "{path}"'
    pydantic_error = "Extra inputs are not permitted"
    return _at(
        case_id,
        path,
        set_(path, value),
        "additionalProperties",
        api_error,
        pydantic_error,
        strict_only=True,
    )


def _required(case_id: str, path: str) -> InvalidCase:
    return _at(case_id, path, drop(path), "required", f"{path}: Required value", "Field required")


def _enum(case_id: str, path: str, value: str, pydantic_error: str) -> InvalidCase:
    api_error = f'{path}: Unsupported value: "{value}"'
    return _at(case_id, path, set_(path, value), "enum", api_error, pydantic_error)


QUERIES = {
    "requestRate": "sum(rate(requests_total{selector}[{window}]))",
    "promptTokens": "avg(prompt_tokens{selector})",
    "outputTokens": "avg(output_tokens{selector})",
    "queueDepth": "sum(waiting{selector})",
    "ttft": "histogram_quantile({quantile}, sum by (le) (rate(ttft_bucket{selector}[{window}])))",
    "tpot": "histogram_quantile({quantile}, sum by (le) (rate(tpot_bucket{selector}[{window}])))",
}

AUTH_REF = {"name": "prom-creds", "key": "token"}
AUTH_BASIC = {
    "username": {"name": "prom-creds", "key": "username"},
    "password": {"name": "prom-creds", "key": "password"},
}
AUTH_TLS = {
    "ca": {"name": "prom-tls", "key": "ca.crt"},
    "cert": {"name": "prom-tls", "key": "tls.crt"},
    "key": {"name": "prom-tls", "key": "tls.key"},
}


def header(name: str) -> dict[str, str]:
    return {"header": name, "name": "prom-tenant", "key": "org"}


def _auth_pattern(field: str, part: str) -> InvalidCase:
    """A Secret reference whose name (or key) the API server refuses; the rest of the
    auth block complete (pairs given, https for TLS)."""
    auth: dict[str, Any] = copy.deepcopy(
        {"bearerToken": {"bearerToken": AUTH_REF}}.get(field)
        or (AUTH_BASIC if field in AUTH_BASIC else AUTH_TLS)
    )
    auth[field][part] = "Not_Valid!"
    path = f"spec.metrics.prometheus.auth.{field}.{part}"
    return _at(
        "",
        path,
        both(
            set_("spec.metrics.prometheus.url", "https://prometheus.monitoring:9090"),
            set_("spec.metrics.prometheus.auth", auth),
        ),
        "pattern",
        f"{path} in body should match",
        "String should match pattern",
    )


CASES: list[InvalidCase] = [
    # replicas: min <= max (CEL on the bounds object), and the bounds themselves
    _cel(
        "prefill-replicas-min-above-max",
        set_("spec.prefill.replicas", {"min": 5, "max": 3}),
        "spec.prefill.replicas.min",
        pdspec.MSG_REPLICAS_MIN_MAX,
        "spec.prefill.replicas",
    ),
    _cel(
        "decode-replicas-min-above-default-max",  # max defaults to 16
        set_("spec.decode.replicas", {"min": 20}),
        "spec.decode.replicas.min",
        pdspec.MSG_REPLICAS_MIN_MAX,
        "spec.decode.replicas",
    ),
    _named("prefill-replicas-max-zero", _ge("spec.prefill.replicas.max", 0, 1)),
    _named("decode-replicas-min-negative", _ge("spec.decode.replicas.min", -1, 0)),
    # 0 < targetUtilization <= 1
    _named("prefill-target-utilization-zero", _gt("spec.prefill.targetUtilization", 0)),
    _named(
        "decode-target-utilization-above-one",
        _bound(
            "spec.decode.targetUtilization",
            "less than or equal to 1",
            "maximum",
            "less than or equal to 1",
            1.2,
        ),
    ),
    # tokensPerSecond > 0
    _named("prefill-tokens-per-second-zero", _gt("spec.prefill.tokensPerSecond", 0)),
    InvalidCase(
        id="prefill-profile-tokens-per-second-zero",
        mutate=set_("spec.prefill.profile", [{"tokens": 1024, "tokensPerSecond": 0}]),
        path="spec.prefill.profile[0].tokensPerSecond",
        api_error="spec.prefill.profile[0].tokensPerSecond in body should be greater than 0",
        keyword="exclusiveMinimum",
        pydantic_loc="spec.prefill.profile.0.tokensPerSecond",
        pydantic_error="Input should be greater than 0",
    ),
    _cel(
        "decode-profile-tokens-twice",
        set_(
            "spec.decode.profile",
            [{"tokens": 1024, "tokensPerSecond": 800}, {"tokens": 1024, "tokensPerSecond": 700}],
        ),
        "spec.decode.profile",
        pdspec.MSG_PROFILE_UNIQUE,
        "spec.decode.profile",
    ),
    _named("decode-tokens-per-second-negative", _gt("spec.decode.tokensPerSecond", -800)),
    _required("prefill-tokens-per-second-missing", "spec.prefill.tokensPerSecond"),
    # gpusPerReplica >= 1, an integer
    _named("prefill-gpus-per-replica-zero", _ge("spec.prefill.gpusPerReplica", 0, 1)),
    InvalidCase(
        id="decode-gpus-per-replica-fractional",
        mutate=set_("spec.decode.gpusPerReplica", 1.5),
        path="spec.decode.gpusPerReplica",
        api_error="spec.decode.gpusPerReplica in body must be of type integer",
        keyword="type",
        pydantic_loc="spec.decode.gpusPerReplica",
        pydantic_error="Input should be a valid integer",
    ),
    # SLO values > 0, percentile in (0, 1), recoverySeconds > 0, startupSeconds > 0
    _named("slo-ttft-zero", _gt("spec.slo.ttftSeconds", 0)),
    _named("slo-tpot-negative", _gt("spec.slo.tpotSeconds", -0.05)),
    _named("slo-percentile-zero", _gt("spec.slo.percentile", 0)),
    _named(
        "slo-percentile-one",
        _bound("spec.slo.percentile", "less than 1", "exclusiveMaximum", "less than 1", 1),
    ),
    _named(
        "slo-percentile-as-percent",
        _bound("spec.slo.percentile", "less than 1", "exclusiveMaximum", "less than 1", 95),
    ),
    _named("slo-recovery-seconds-zero", _gt("spec.slo.recoverySeconds", 0)),
    _named("startup-seconds-zero", _gt("spec.startupSeconds", 0)),
    # metrics: custom preset needs queries, the others forbid them
    _cel(
        "custom-preset-without-queries",
        set_("spec.metrics.preset", "custom"),
        "spec.metrics.queries",
        pdspec.MSG_QUERIES_REQUIRED,
        "spec.metrics",
    ),
    # custom queries read only the PDDeployment's own series
    _cel(
        "custom-query-without-placeholder",
        set_("spec.metrics", {"preset": "custom", "queries": {**QUERIES, "ttft": "max(ttft)"}}),
        "spec.metrics.queries.ttft",
        pdspec.MSG_QUERY_SCOPE,
        "spec.metrics.queries",
    ),
    _cel(
        "custom-query-reads-another-namespace",
        set_(
            "spec.metrics",
            {
                "preset": "custom",
                "queries": {
                    **QUERIES,
                    "queueDepth": 'sum(waiting{selector}) or sum(waiting{namespace="other"})',
                },
            },
        ),
        "spec.metrics.queries.queueDepth",
        pdspec.MSG_QUERY_SCOPE,
        "spec.metrics.queries",
    ),
    _cel(
        "vllm-preset-with-queries",
        set_("spec.metrics.queries", QUERIES),
        "spec.metrics.queries",
        pdspec.MSG_QUERIES_FORBIDDEN,
        "spec.metrics",
    ),
    _enum(
        "unknown-preset",
        "spec.metrics.preset",
        "triton",
        "Input should be 'vllm', 'sglang', 'dynamo' or 'custom'",
    ),
    _named("prometheus-url-without-scheme", _pattern("spec.metrics.prometheus.url", "prom:9090")),
    # metrics.prometheus.auth: pairs, one Authorization scheme, TLS over https, headers
    _cel(
        "prometheus-auth-username-without-password",
        set_("spec.metrics.prometheus.auth", {"username": {"name": "p", "key": "u"}}),
        "spec.metrics.prometheus.auth.username",
        pdspec.MSG_AUTH_BASIC_PAIR,
        "spec.metrics.prometheus.auth",
    ),
    _cel(
        "prometheus-auth-key-without-cert",
        both(
            set_("spec.metrics.prometheus.url", "https://prometheus.monitoring:9090"),
            set_("spec.metrics.prometheus.auth", {"key": {"name": "p", "key": "tls.key"}}),
        ),
        "spec.metrics.prometheus.auth.cert",
        pdspec.MSG_AUTH_CERT_PAIR,
        "spec.metrics.prometheus.auth",
    ),
    _cel(
        "prometheus-auth-bearer-and-basic",
        set_("spec.metrics.prometheus.auth", {**AUTH_BASIC, "bearerToken": AUTH_REF}),
        "spec.metrics.prometheus.auth.bearerToken",
        pdspec.MSG_AUTH_ONE_SCHEME,
        "spec.metrics.prometheus.auth",
    ),
    _cel(
        "prometheus-auth-ca-over-http",
        set_("spec.metrics.prometheus.auth", {"ca": {"name": "p", "key": "ca.crt"}}),
        "spec.metrics.prometheus.url",
        pdspec.MSG_AUTH_TLS_HTTPS,
        "spec.metrics.prometheus",
    ),
    _cel(
        "prometheus-auth-header-name",
        set_("spec.metrics.prometheus.auth", {"customHeaders": [header("X Org")]}),
        "spec.metrics.prometheus.auth.customHeaders",
        pdspec.MSG_AUTH_HEADER_NAME,
        "spec.metrics.prometheus.auth",
    ),
    _cel(
        "prometheus-auth-header-authorization",
        set_("spec.metrics.prometheus.auth", {"customHeaders": [header("Authorization")]}),
        "spec.metrics.prometheus.auth.customHeaders",
        pdspec.MSG_AUTH_HEADER_RESERVED,
        "spec.metrics.prometheus.auth",
    ),
    _cel(
        "prometheus-auth-header-twice",
        set_(
            "spec.metrics.prometheus.auth",
            {"customHeaders": [header("X-Scope-OrgID"), header("x-scope-orgid")]},
        ),
        "spec.metrics.prometheus.auth.customHeaders",
        pdspec.MSG_AUTH_HEADER_UNIQUE,
        "spec.metrics.prometheus.auth",
    ),
    *(
        _named(f"prometheus-auth-{field}-{part}", _auth_pattern(field, part))
        for field in ("bearerToken", "username", "password", "ca", "cert", "key")
        for part in ("name", "key")
    ),
    # the GPU budget covers both pools' minimums (2 x 1 + 2 x 1 = 4 in the base)
    _cel(
        "max-gpus-below-minimums",
        set_("spec.scaling.maxGPUs", 3),
        "spec.scaling.maxGPUs",
        pdspec.MSG_BUDGET_FLOOR,
        "spec",
    ),
    _cel(
        "max-gpus-below-minimums-of-multi-gpu-replicas",  # 2 x 4 + 2 x 1 = 10 > 9
        both(set_("spec.prefill.gpusPerReplica", 4), set_("spec.scaling.maxGPUs", 9)),
        "spec.scaling.maxGPUs",
        pdspec.MSG_BUDGET_FLOOR,
        "spec",
    ),
    # a flipped replica keeps its GPUs: flips need equal GPUs per replica
    _cel(
        "role-flips-with-unequal-gpus-per-replica",
        both(
            set_("spec.scaling.roleFlips", {"enabled": True}),
            set_("spec.prefill.gpusPerReplica", 2),
            set_("spec.scaling.maxGPUs", 16),
        ),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_FLIPS_GPUS,
        "spec",
    ),
    # a flip is a relabel: only the vllm-router follows it to an engine serving both roles
    _cel(
        "role-flips-behind-sglang-router",
        both(
            set_("spec.scaling.roleFlips", {"enabled": True}),
            set_("spec.router.type", "sglang-router"),
        ),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_FLIPS_ROUTER,
        "spec",
    ),
    _cel(
        "role-flips-behind-an-external-router-by-preset",
        both(
            set_("spec.scaling.roleFlips", {"enabled": True}),
            set_("spec.metrics.preset", "dynamo"),
            drop("spec.router.type"),
        ),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_FLIPS_ROUTER,
        "spec",
    ),
    # router.args cannot undo the cell's scoping (argparse: the last flag wins, and a
    # unique prefix stands for the flag)
    *(
        _cel(
            case_id,
            set_("spec.router.args", args),
            "spec.router.args",
            pdspec.MSG_ROUTER_ARGS_RESERVED,
            "spec.router.args",
        )
        for case_id, args in (
            (
                "router-args-replace-the-cell-selector",
                ["--prefill-selector", "pdscaler.io/name=chat", "pdscaler.io/role=prefill"],
            ),
            ("router-args-abbreviate-a-selector", ["--policy", "round_robin", "--decode-sel=a=b"]),
            ("router-args-name-static-workers", ["--worker-urls=http://10.0.0.9:8000"]),
            ("router-args-move-the-port", ["--port", "9000"]),
        )
    ),
    _named("role-flips-window-without-unit", _pattern("spec.scaling.roleFlips.window", "60")),
    _named("max-gpus-zero", _ge("spec.scaling.maxGPUs", 0, 1)),
    _named("max-surge-gpus-zero", _ge("spec.rollout.maxSurgeGPUs", 0, 1)),
    # durations parse (and the interval is at least 1s)
    _named("interval-without-unit", _pattern("spec.scaling.interval", "15")),
    _named("interval-in-days", _pattern("spec.scaling.interval", "1d")),
    _cel(
        "interval-below-one-second",
        set_("spec.scaling.interval", "500ms"),
        "spec.scaling.interval",
        pdspec.MSG_INTERVAL_MIN,
        "spec.scaling",
    ),
    _named("window-spelled-out", _pattern("spec.metrics.window", "2 minutes")),
    # window fields have an upper bound (issue 30, item 3)
    _cel(
        "stabilization-over-an-hour",
        set_("spec.scaling.scaleDownStabilization", "1000h"),
        "spec.scaling.scaleDownStabilization",
        pdspec.MSG_STABILIZATION_MAX,
        "spec.scaling",
    ),
    _cel(
        "stabilization-just-over-an-hour",
        set_("spec.scaling.scaleDownStabilization", "1h0m1s"),
        "spec.scaling.scaleDownStabilization",
        pdspec.MSG_STABILIZATION_MAX,
        "spec.scaling",
    ),
    _cel(
        "role-flips-window-over-an-hour",
        set_("spec.scaling.roleFlips.window", "90m"),
        "spec.scaling.roleFlips.window",
        pdspec.MSG_FLIPS_WINDOW_MAX,
        "spec.scaling.roleFlips",
    ),
    _cel(
        "metrics-window-over-an-hour",
        set_("spec.metrics.window", "2h"),
        "spec.metrics.window",
        pdspec.MSG_WINDOW_MAX,
        "spec.metrics",
    ),
    _cel(
        "progress-deadline-over-a-day",
        set_("spec.rollout.progressDeadline", "25h"),
        "spec.rollout.progressDeadline",
        pdspec.MSG_PROGRESS_DEADLINE_MAX,
        "spec.rollout",
    ),
    _named("stabilization-bad-unit", _pattern("spec.scaling.scaleDownStabilization", "5min")),
    _named("progress-deadline-negative", _pattern("spec.rollout.progressDeadline", "-10m")),
    # enums
    _enum("unknown-mode", "spec.scaling.mode", "Manual", "Input should be 'Auto' or 'Recommend'"),
    _enum(
        "unknown-router",
        "spec.router.type",
        "nginx",
        "Input should be 'vllm-router', 'sglang-router' or 'external'",
    ),
    _cel(
        "router-replicas-min-above-max",
        both(set_("spec.router.replicas.min", 5), set_("spec.router.replicas.max", 2)),
        "spec.router.replicas.min",
        pdspec.MSG_REPLICAS_MIN_MAX,
        "spec.router.replicas",
    ),
    # unknown fields (typos)
    _unknown("unknown-field-max-gpus-typo", "spec.scaling.maxGpus", 8),
    _unknown("unknown-field-in-replica-bounds", "spec.decode.replicas.maximum", 10),
    # the one engine version
    _required("engine-version-missing", "spec.engine.version"),
    _named("engine-version-with-space", _pattern("spec.engine.version", "v0.11.0 beta")),
    _at(
        "engine-version-empty",
        "spec.engine.version",
        set_("spec.engine.version", ""),
        "minLength",
        "spec.engine.version in body should be at least 1 chars long",
        "String should have at least 1 character",
    ),
    _cel(
        "engine-version-ending-in-a-dash",  # a valid tag, not a label value
        set_("spec.engine.version", "v2-"),
        "spec.engine.version",
        pdspec.MSG_VERSION_LABEL,
        "spec.engine",
    ),
    _cel(
        "engine-version-ending-in-a-dot",
        set_("spec.engine.version", "v0.11."),
        "spec.engine.version",
        pdspec.MSG_VERSION_LABEL,
        "spec.engine",
    ),
    # the name fits <name>-<revision>-prefill in 63 characters (a rule on the root)
    _cel(
        "name-too-long-for-its-objects",
        set_("metadata.name", "chat-with-a-name-of-forty-five-characters-xyz"),
        "metadata.name",
        pdspec.MSG_NAME_LENGTH,
        "",
    ),
    _required("decode-pool-missing", "spec.decode"),
    # the pod template's parts are objects
    InvalidCase(
        id="template-spec-not-an-object",
        mutate=set_("spec.prefill.template.spec", "containers: []"),
        path="spec.prefill.template.spec",
        api_error="spec.prefill.template.spec in body must be of type object",
        keyword="type",
        pydantic_loc="spec.prefill.template",
        pydantic_error=pdspec.MSG_TEMPLATE_OBJECT,
    ),
]


def _targets(manifest: Manifest) -> None:
    """The chat example turned to pools pdscaler does not own (valid): both pools
    ``scaleTargetRef`` to Deployments, no engine, templates or router fields."""
    for role in ("prefill", "decode"):
        pool = manifest["spec"][role]
        pool.pop("template", None)
        pool["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "Deployment", "name": role}
    manifest["spec"].pop("engine")
    for key in pdspec.TARGET_FORBIDDEN_ROUTER_FIELDS:
        manifest["spec"]["router"].pop(key, None)


# scaleTargetRef (pools pdscaler does not own): both or neither, then nothing pdscaler
# would render (engine, templates, router) and no role flips
CASES += [
    _cel(
        "scale-target-on-one-pool",
        both(
            set_("spec.decode.scaleTargetRef", {"apiVersion": "v1", "kind": "X", "name": "d"}),
            drop("spec.decode.template"),
        ),
        "spec.decode.scaleTargetRef",
        pdspec.MSG_TARGETS_TOGETHER,
        "spec",
    ),
    _cel(
        "scale-targets-with-engine",
        both(_targets, set_("spec.engine", {"image": "i", "version": "v1"})),
        "spec.engine",
        pdspec.MSG_TARGETS_ENGINE,
        "spec",
    ),
    _cel("engine-missing", drop("spec.engine"), "spec.engine", pdspec.MSG_TARGETS_ENGINE, "spec"),
    _cel(
        "scale-target-with-template",
        both(_targets, set_("spec.prefill.template", {"spec": {}})),
        "spec.prefill.template",
        pdspec.MSG_TARGETS_TEMPLATE,
        "spec",
    ),
    _cel(
        "scale-targets-with-router-image",
        both(_targets, set_("spec.router.image", "r:1")),
        "spec.router",
        pdspec.MSG_TARGETS_ROUTER,
        "spec",
    ),
    _cel(
        "scale-targets-with-role-flips",
        both(_targets, set_("spec.scaling.roleFlips", {"enabled": True})),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_TARGETS_FLIPS,
        "spec",
    ),
    _cel(
        "version-label-without-targets",
        set_("spec.versionLabel", "app.kubernetes.io/version"),
        "spec.versionLabel",
        pdspec.MSG_TARGETS_VERSION_LABEL,
        "spec",
    ),
]
CASES += [
    _named(
        f"scale-target-{field.lower()}-pattern",
        InvalidCase(
            **{
                **_pattern(f"spec.decode.scaleTargetRef.{field}", value).__dict__,
                "mutate": both(_targets, set_(f"spec.decode.scaleTargetRef.{field}", value)),
            }
        ),
    )
    for field, value in (("apiVersion", "apps/V1"), ("kind", "deployment"), ("name", "Decode"))
]
# scaleToZero stops both pools: each replicas.min must be 0 (issue 29, item 3)
CASES += [
    _cel(
        "scale-to-zero-prefill-min",
        both(set_("spec.scaleToZero", {"idleSeconds": 60}), set_("spec.decode.replicas.min", 0)),
        "spec.prefill.replicas.min",
        pdspec.MSG_ZERO_PREFILL_MIN,
        "spec",
    ),
    _cel(
        "scale-to-zero-decode-min",
        both(set_("spec.scaleToZero", {}), set_("spec.prefill.replicas.min", 0)),
        "spec.decode.replicas.min",
        pdspec.MSG_ZERO_DECODE_MIN,
        "spec",
    ),
]
# replicas bigger than one node (issue 29, item 2): gpusPerReplica counts the group, the
# GPU resource is a resource name, groups only for owned pools, flips only between pools
# of one group shape
_FLIPS = set_("spec.scaling.roleFlips", {"enabled": True})
CASES += [
    _cel(
        "decode-gpus-not-a-multiple-of-pods",
        both(set_("spec.decode.podsPerReplica", 2), set_("spec.decode.gpusPerReplica", 3)),
        "spec.decode.gpusPerReplica",
        pdspec.MSG_GROUP_GPUS,
        "spec.decode",
    ),
    _cel(
        "gpu-resource-not-a-resource-name",
        set_("spec.gpuResource", "gpu"),
        "spec.gpuResource",
        pdspec.MSG_GPU_RESOURCE,
        "spec",
    ),
    _cel(
        "prefill-gpu-resource-upper-case",
        set_("spec.prefill.gpuResource", "AMD.com/gpu"),
        "spec.prefill.gpuResource",
        pdspec.MSG_GPU_RESOURCE,
        "spec.prefill",
    ),
    _cel(
        "scale-target-with-pods-per-replica",
        both(
            _targets,
            set_("spec.decode.podsPerReplica", 2),
            set_("spec.decode.gpusPerReplica", 2),
        ),
        "spec.decode.podsPerReplica",
        pdspec.MSG_TARGETS_GROUPS,
        "spec.decode",
    ),
    _cel(
        "role-flips-between-group-shapes",
        both(_FLIPS, set_("spec.decode.gpuResource", "amd.com/gpu")),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_FLIP_SHAPE,
        "spec",
    ),
    _cel(
        "role-flips-one-pod-and-a-group",
        both(
            _FLIPS,
            set_("spec.prefill.gpusPerReplica", 2),
            set_("spec.decode.gpusPerReplica", 2),
            set_("spec.decode.podsPerReplica", 2),
        ),
        "spec.scaling.roleFlips.enabled",
        pdspec.MSG_FLIP_SHAPE,
        "spec",
    ),
    _named("decode-pods-per-replica-zero", _ge("spec.decode.podsPerReplica", 0, 1)),
]
