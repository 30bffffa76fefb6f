"""The PDDeployment resource as typed Python: the spec the user writes and the status
the operator writes. Mirrors ``crds/pdscaler.io_pddeployments.yaml`` field by field
(``tests/unit/test_crd_mirror.py`` keeps the two equal: field set, types, required,
enums, bounds, defaults). Pure: parsing and validation only, no I/O, no Kubernetes client.

Attribute names are snake_case; the Kubernetes (camelCase) names are the aliases, so
``PDDeploymentSpec.model_validate(obj["spec"])`` reads a manifest as written and
``model_dump(by_alias=True)`` writes one back: for ``deploy/examples/chat.yaml``,
``spec.scaling.max_gpus == 48`` and ``spec.scaling.interval_seconds == 15.0``.

Every CEL rule of the CRD has its twin here, raising the SAME message (the ``MSG_*``
constants; a test checks that the CRD's CEL messages are exactly ``CEL_MESSAGES``), so
the API server and ``pdscaler plan --from-file`` reject a bad manifest with the same
sentence. OpenAPI-level checks (minimum, enum, pattern) are pydantic constraints with
pydantic's wording.

Two ways to read a spec. ``model_validate`` is strict (an unknown field is an error): for
manifests validated offline (``pdscaler plan -f``, the tests' invalid manifests). The
operator reads what the API server already admitted with ``parse_spec_lenient``: a field
this version does not know (a newer CRD's) is dropped and reported, not fatal, so a CRD
upgraded ahead of the operator does not stop every PDDeployment; and the CEL twins that
the operator checks itself with a clearer outcome (custom query scoping: condition
MetricsAvailable=False, InvalidQuery) are left to it::

    spec, unknown = parse_spec_lenient({**manifest["spec"], "futureField": 1})
    unknown == ("spec.futureField",)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self, get_args

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from pdscaler.pools import Role

GROUP = "pdscaler.io"
VERSION = "v1alpha1"
KIND = "PDDeployment"
PLURAL = "pddeployments"
API_VERSION = f"{GROUP}/{VERSION}"

# A Go-style duration restricted to the units an operator needs: "15s", "2m", "1h30m",
# "1.5h", "500ms". The CRD's `pattern` is this exact string.
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

# Bounds that keep the CRD's CEL rules cheap for the API server's cost estimator
# (strings have a maxLength, integers a maximum) and catch typos (maxGPUs: 640000).
MAX_REPLICAS = 10000
MAX_GPUS_PER_REPLICA = 256
MAX_GPUS = 100000
MAX_DURATION_LENGTH = 32
MAX_QUERY_LENGTH = 4096
#: The largest KV cache one replica may declare, in tokens (a typo guard: 10^9 tokens is
#: hundreds of TB of KV).
MAX_KV_CACHE_TOKENS = 1_000_000_000
#: The most points a pool's capacity profile may have (a small measured table).
MAX_PROFILE_POINTS = 32

# The messages of the CRD's CEL rules (x-kubernetes-validations), word for word.
MSG_REPLICAS_MIN_MAX = "replicas.min must be less than or equal to replicas.max"
MSG_QUERIES_REQUIRED = "metrics.queries is required when metrics.preset is custom"
MSG_QUERIES_FORBIDDEN = "metrics.queries is only allowed when metrics.preset is custom"
MSG_INTERVAL_MIN = "scaling.interval must be at least 1s"
#: Upper bounds of the window fields (issue 30, item 3): what a tick keeps in memory, asks
#: Prometheus for and persists in the status grows with them. The API server refuses a
#: longer one (CEL); a stored spec admitted before is read with the bound (``bounded``).
MAX_WINDOW_S = 3600.0
MAX_PROGRESS_DEADLINE_S = 86400.0
MSG_STABILIZATION_MAX = "scaling.scaleDownStabilization must be at most 1h"
MSG_WINDOW_MAX = "metrics.window must be at most 1h"
MSG_FLIPS_WINDOW_MAX = "scaling.roleFlips.window must be at most 1h"
MSG_PROGRESS_DEADLINE_MAX = "rollout.progressDeadline must be at most 24h"
MSG_BUDGET_FLOOR = (
    "scaling.maxGPUs must be at least prefill.replicas.min * prefill.gpusPerReplica"
    " + decode.replicas.min * decode.gpusPerReplica"
)
MSG_FLIPS_GPUS = (
    "scaling.roleFlips.enabled needs prefill.gpusPerReplica equal to decode.gpusPerReplica"
    " (a replica changes pool as it is)"
)
MSG_FLIPS_ROUTER = (
    "scaling.roleFlips.enabled needs the vllm-router (router.type, or metrics.preset vllm):"
    " only it follows a replica's pdscaler.io/role label to an engine that serves both roles"
)
#: The router flags ``router.args`` may not give: the ones pdscaler sets (the P/D mode,
#: the cell-scoped discovery, the bind and metrics addresses) and the ones that would
#: bring workers from outside the cell (static worker URLs, other discovery and routing
#: modes). Both routers parse with argparse, where a later flag wins and a unique prefix
#: stands for the whole flag, so an abbreviation is refused too (``reserved_router_flag``).
ROUTER_RESERVED_FLAGS = (
    "--vllm-pd-disaggregation",
    "--pd-disaggregation",
    "--service-discovery",
    "--service-discovery-namespace",
    "--service-discovery-port",
    "--selector",
    "--prefill-selector",
    "--decode-selector",
    "--vllm-discovery-address",
    "--prefill",
    "--decode",
    "--worker-urls",
    "--enable-igw",
    "--mini-lb",
    "--host",
    "--port",
    "--prometheus-host",
    "--prometheus-port",
)
MSG_ROUTER_ARGS_RESERVED = (
    "router.args must not give a flag pdscaler sets or one that brings workers from outside"
    " the cell (P/D mode, discovery and selectors, --prefill/--decode/--worker-urls, host,"
    " port, metrics address), nor a prefix of one"
)
MSG_TEMPLATE_OBJECT = "template.metadata and template.spec must be of type object"
MSG_QUERY_SCOPE = (
    "metrics.queries templates must select with {selector} or {matchers} and must not match"
    " on namespace, pod or pdscaler_io_* labels"
)
#: The longest PDDeployment name: its objects are named ``<name>-<revision>-prefill``
#: (revision at most 26 characters, ``naming.revision``), and a name must fit 63
#: characters: 63 - 1 - 26 - len("-prefill") = 28.
MAX_NAME_LENGTH = 28
MSG_NAME_LENGTH = (
    "metadata.name must be at most 28 characters (<name>-<revision>-prefill must fit 63)"
)
MSG_VERSION_LABEL = "engine.version must end with a letter or a digit (it is a label value)"
MSG_AUTH_BASIC_PAIR = "metrics.prometheus.auth.username and password must be given together"
MSG_AUTH_CERT_PAIR = "metrics.prometheus.auth.cert and key must be given together"
MSG_AUTH_ONE_SCHEME = (
    "metrics.prometheus.auth: bearerToken and username/password both set the Authorization"
    " header; give one"
)
MSG_AUTH_TLS_HTTPS = "metrics.prometheus.auth.ca, cert and key need an https:// url"
MSG_AUTH_HEADER_RESERVED = (
    "metrics.prometheus.auth.customHeaders: Authorization, Proxy-Authorization, Host,"
    " Connection, Content-Type, Content-Length and Transfer-Encoding are set by the operator"
)
MSG_AUTH_HEADER_UNIQUE = "metrics.prometheus.auth.customHeaders: each header at most once"
MSG_PROFILE_UNIQUE = "profile: each point's tokens at most once"
MSG_AUTH_HEADER_NAME = (
    "metrics.prometheus.auth.customHeaders: a header name is letters, digits, '-' and '_'"
)
#: Headers a custom header may not set (lower case): the operator sets them itself.
RESERVED_HEADERS = (
    "authorization",
    "proxy-authorization",
    "host",
    "connection",
    "content-type",
    "content-length",
    "transfer-encoding",
)
_VERSION_END = re.compile(r"[A-Za-z0-9]$")
CEL_MESSAGES = frozenset(
    {
        MSG_REPLICAS_MIN_MAX,
        MSG_QUERIES_REQUIRED,
        MSG_QUERIES_FORBIDDEN,
        MSG_INTERVAL_MIN,
        MSG_STABILIZATION_MAX,
        MSG_WINDOW_MAX,
        MSG_FLIPS_WINDOW_MAX,
        MSG_PROGRESS_DEADLINE_MAX,
        MSG_BUDGET_FLOOR,
        MSG_FLIPS_GPUS,
        MSG_FLIPS_ROUTER,
        MSG_ROUTER_ARGS_RESERVED,
        MSG_QUERY_SCOPE,
        MSG_NAME_LENGTH,
        MSG_VERSION_LABEL,
        MSG_AUTH_BASIC_PAIR,
        MSG_AUTH_CERT_PAIR,
        MSG_AUTH_ONE_SCHEME,
        MSG_AUTH_TLS_HTTPS,
        MSG_AUTH_HEADER_RESERVED,
        MSG_PROFILE_UNIQUE,
        MSG_AUTH_HEADER_UNIQUE,
        MSG_AUTH_HEADER_NAME,
    }
)
# Scale to zero (``ScaleToZeroSpec``, ``policy.zero``): the CRD's rules and their twins.
MSG_ZERO_PREFILL_MIN = "scaleToZero needs prefill.replicas.min 0 (the pool it stops)"
MSG_ZERO_DECODE_MIN = "scaleToZero needs decode.replicas.min 0 (the pool it stops)"
CEL_MESSAGES = CEL_MESSAGES | {MSG_ZERO_PREFILL_MIN, MSG_ZERO_DECODE_MIN}
# Pools pdscaler does not own (``PoolSpec.scale_target_ref``, docs/design.md §1.1): the
# CRD's rules and their twins (``PDDeploymentSpec._scale_targets``).
MSG_TARGETS_TOGETHER = (
    "prefill.scaleTargetRef and decode.scaleTargetRef must be given together (pdscaler"
    " sizes both pools of a pair it does not own, or owns both)"
)
MSG_TARGETS_ENGINE = (
    "engine is required unless prefill and decode have scaleTargetRef, and must not be set"
    " with them (pdscaler does not render those pools' pods)"
)
MSG_TARGETS_TEMPLATE = (
    "template must not be set with scaleTargetRef: pdscaler writes only the target's /scale"
)
MSG_TARGETS_ROUTER = (
    "router.type, image, args, resources and template must not be set with scaleTargetRef:"
    " pdscaler deploys no router for pools it does not own"
)
MSG_TARGETS_FLIPS = (
    "scaling.roleFlips.enabled needs pools pdscaler owns (a flip relabels pods; with"
    " scaleTargetRef pdscaler writes only /scale)"
)
MSG_TARGETS_VERSION_LABEL = "versionLabel is only allowed with scaleTargetRef"
# Replicas bigger than one node (``PoolSpec.pods_per_replica``, ``pdscaler.groups``,
# docs/design.md §4.4): the CRD's rules and their twins (``PoolSpec._group_shape``,
# ``PDDeploymentSpec._group_fields``).
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
MAX_PODS_PER_REPLICA = 64
#: An extended resource name, e.g. nvidia.com/gpu, amd.com/gpu, habana.ai/gaudi: a
#: DNS-style domain, a slash, a name (Kubernetes' qualified-name rules, shortened).
GPU_RESOURCE_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MSG_GPU_RESOURCE = (
    "gpuResource must be an extended resource name <domain>/<name>, e.g. nvidia.com/gpu"
    " or amd.com/gpu"
)
MSG_GROUP_GPUS = "gpusPerReplica counts the whole group: it must be a multiple of podsPerReplica"
MSG_FLIP_SHAPE = (
    "scaling.roleFlips.enabled needs prefill and decode of the same group shape: equal"
    " podsPerReplica and gpuResource (a replica changes pool as it is)"
)
MSG_TARGETS_GROUPS = (
    "podsPerReplica must be 1 with scaleTargetRef: pdscaler renders groups only for pools it owns"
)


def valid_gpu_resource(name: str) -> bool:
    """The twin of the CRD's gpuResource rule (CEL ``matches``, RE2 anchored):
    ``amd.com/gpu`` is, ``gpu`` and ``AMD.com/gpu`` are not."""
    return re.fullmatch(GPU_RESOURCE_PATTERN, name) is not None


CEL_MESSAGES = CEL_MESSAGES | {
    MSG_TARGETS_TOGETHER,
    MSG_TARGETS_ENGINE,
    MSG_TARGETS_TEMPLATE,
    MSG_TARGETS_ROUTER,
    MSG_TARGETS_FLIPS,
    MSG_TARGETS_VERSION_LABEL,
    MSG_GPU_RESOURCE,
    MSG_GROUP_GPUS,
    MSG_FLIP_SHAPE,
    MSG_TARGETS_GROUPS,
}
#: The router fields that make sense only when pdscaler deploys the router.
TARGET_FORBIDDEN_ROUTER_FIELDS = ("type", "image", "args", "resources", "template")
#: The CRD's CEL check of one custom query template (RE2 and Python agree on it): a
#: matcher on a label pdscaler scopes with. ``metricsql.scope_problems`` checks more.
SCOPE_MATCHER_PATTERN = (
    r"""(^|[^A-Za-z0-9_:])(namespace|pod|pdscaler_io_[A-Za-z0-9_]*)["'`]?\s*(=~|!~|!=|=)"""
)
_SCOPE_MATCHER = re.compile(SCOPE_MATCHER_PATTERN)
#: The validation context of the operator's read (``parse_spec_lenient``).
LENIENT: dict[str, Any] = {"lenient": True}


def _lenient(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and bool(info.context.get("lenient"))


def bounded(text: str, most: float, message: str, info: ValidationInfo) -> None:
    """Refuse the duration ``text`` over ``most`` seconds with the CRD rule's ``message``,
    except in the operator's lenient read (the properties clamp it there)."""
    if not _lenient(info) and parse_duration(text) > most:
        raise ValueError(message)


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: ``"90s"`` -> 90.0, ``"2m"`` -> 120.0,
    ``"1h30m"`` -> 5400.0. Raises ValueError on anything else (``"5 min"``, ``""``)."""
    if not _DURATION.match(text):
        raise ValueError(f"invalid duration {text!r}: use a number with ms, s, m or h, e.g. 90s")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def rfc3339(now: float) -> datetime:
    """The timestamp the status uses for ``now`` (seconds since the epoch), truncated to
    whole seconds in UTC like metav1.Time: ``rfc3339(0.7)`` -> 1970-01-01T00:00:00Z."""
    return datetime.fromtimestamp(int(now), tz=UTC)


Duration = Annotated[str, Field(max_length=MAX_DURATION_LENGTH, pattern=DURATION_PATTERN)]
Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_LENGTH)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


# ---------------------------------------------------------------------------- spec


class EngineSpec(_Model):
    """The ONE engine version both pools run: a P/D version mismatch cannot be written.
    ``version`` is a tag (``v0.11.0``) or an image digest (``sha256:<64 hex>``, rendered
    as ``image@sha256:...``)."""

    image: str = Field(min_length=1, max_length=512)
    version: str = Field(
        min_length=1, max_length=71, pattern=r"^([A-Za-z0-9][A-Za-z0-9._-]*|sha256:[a-f0-9]{64})$"
    )

    @model_validator(mode="after")
    def _version_is_a_label_value(self) -> EngineSpec:
        """The version is the cells' version label: a label value ends with a letter or
        a digit (``v2-`` is a valid tag but not a label: every create would fail)."""
        if not _VERSION_END.search(self.version):
            raise ValueError(MSG_VERSION_LABEL)
        return self


def _pod_template_parts(value: dict[str, Any]) -> dict[str, Any]:
    """The CRD types a template's ``metadata`` and ``spec`` as objects."""
    for key in ("metadata", "spec"):
        if key in value and not isinstance(value[key], dict):
            raise ValueError(MSG_TEMPLATE_OBJECT)
    return value


class _MinMax(_Model):
    """Replica bounds ``min`` <= ``max``: the twin of the CRD's CEL rule
    ``self.min <= self.max`` (one rule for the pools' and the routers' bounds)."""

    min: int
    max: int

    @model_validator(mode="after")
    def _min_le_max(self) -> Self:
        if self.min > self.max:
            raise ValueError(MSG_REPLICAS_MIN_MAX)
        return self


class ReplicaBounds(_MinMax):
    """Per-pool replica bounds; the policy never leaves [min, max]."""

    min: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max: int = Field(default=16, ge=1, le=MAX_REPLICAS)


class ProfilePoint(_Model):
    """One measured point of a pool's capacity profile: ``{tokens: 16384,
    tokensPerSecond: 6500}``. ``tokens`` is the prompt length for prefill and the mean
    context per sequence (prompt + output/2) for decode; ``tokensPerSecond`` what ONE
    replica served there (prompt tokens/s for prefill, output tokens/s for decode at the
    batch its TPOT allows)."""

    tokens: int = Field(ge=1, le=MAX_KV_CACHE_TOKENS)
    tokens_per_second: float = Field(gt=0)


class ScaleTargetRef(_Model):
    """An object pdscaler does not own whose ``/scale`` subresource it sizes (the HPA's
    ``scaleTargetRef``): ``{apiVersion: apps/v1, kind: Deployment, name: chat-decode}``,
    a StatefulSet, a LeaderWorkerSet, a Dynamo DynamoGraphDeploymentScalingAdapter or
    any custom resource with ``/scale``. pdscaler reads its pods through the ``/scale``
    selector and writes only ``spec.replicas`` of ``/scale`` (``pdscaler.targets``)."""

    api_version: str = Field(
        min_length=1, max_length=253, pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?v[0-9a-z]+$"
    )
    kind: str = Field(min_length=1, max_length=63, pattern=r"^[A-Z][A-Za-z0-9]*$")
    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


class PoolSpec(_Model):
    """A pool: pod template, capacity facts of one replica, and bounds.

    ``template`` is a PodTemplateSpec kept as plain data (``{"metadata": {...},
    "spec": {...}}``); the operator sets the engine image and version on it.
    ``kv_cache_tokens`` (decode only; ignored on prefill) is M, the tokens of KV one
    replica holds (vLLM: ``num_gpu_blocks * block_size``, logged at start-up and exported
    as the labels of ``vllm:cache_config_info``): set, the policy also sizes decode by
    its KV memory (docs/models.md §2b); unset, by output tokens/s only.
    ``profile`` (optional, at most 32 points) is the replica's measured tokens/s over
    the workload (``ProfilePoint``): set, the capacity prior at the current mix is read
    off it (``models.profile.capacity_at``, docs/models.md §2d) instead of the constant
    ``tokens_per_second``, and the online refinement corrects it.
    """

    template: dict[str, Any] = Field(default_factory=dict)
    gpus_per_replica: int = Field(default=1, ge=1, le=MAX_GPUS_PER_REPLICA)
    replicas: ReplicaBounds = ReplicaBounds()
    tokens_per_second: float = Field(gt=0)
    target_utilization: float = Field(default=0.7, gt=0, le=1)
    kv_cache_tokens: int | None = Field(default=None, ge=1, le=MAX_KV_CACHE_TOKENS)
    profile: list[ProfilePoint] = Field(default_factory=list, max_length=MAX_PROFILE_POINTS)
    #: set: the pool is this object, sized through its ``/scale`` (pdscaler owns nothing)
    scale_target_ref: ScaleTargetRef | None = None
    #: pods of one replica: above 1 the pool is a LeaderWorkerSet of groups (``groups``)
    pods_per_replica: int = Field(default=1, ge=1, le=MAX_PODS_PER_REPLICA)
    #: the GPU resource this pool's pods ask for (else the spec's ``gpuResource``)
    gpu_resource: str | None = Field(default=None, max_length=253)

    _template_parts_are_objects = field_validator("template")(_pod_template_parts)

    @field_validator("profile")
    @classmethod
    def _profile_tokens_unique(cls, points: list[ProfilePoint]) -> list[ProfilePoint]:
        if len({p.tokens for p in points}) != len(points):
            raise ValueError(MSG_PROFILE_UNIQUE)
        return points

    @model_validator(mode="after")
    def _group_shape(self) -> Self:
        """The CRD's pool rules of group replicas: gpusPerReplica 16 over podsPerReplica
        2 is 8 a pod (15 is refused); a gpuResource is <domain>/<name>; no groups with
        scaleTargetRef."""
        if self.gpus_per_replica % self.pods_per_replica:
            raise ValueError(MSG_GROUP_GPUS)
        if self.gpu_resource is not None and not valid_gpu_resource(self.gpu_resource):
            raise ValueError(MSG_GPU_RESOURCE)
        if self.scale_target_ref is not None and self.pods_per_replica != 1:
            raise ValueError(MSG_TARGETS_GROUPS)
        return self

    def profile_points(self) -> tuple[tuple[int, float], ...]:
        """The profile as (tokens, tokens/s) sorted by tokens, the form
        ``models.profile.capacity_at`` reads: [{16384: 6500}, {1024: 8200}] ->
        ((1024, 8200.0), (16384, 6500.0))."""
        return tuple(sorted((p.tokens, p.tokens_per_second) for p in self.profile))

    @property
    def peak_tokens_per_second(self) -> float:
        """The most tokens/s the spec credits one replica with anywhere: the larger of
        ``tokens_per_second`` and every profile point (a plausibility bound on what a
        pool can serve)."""
        return max([self.tokens_per_second, *(p.tokens_per_second for p in self.profile)])


class SLOSpec(_Model):
    """Latency objectives at ``percentile``, and how fast an overload must clear."""

    ttft_seconds: float = Field(default=2.0, gt=0)
    tpot_seconds: float = Field(default=0.05, gt=0)
    percentile: float = Field(default=0.95, gt=0, lt=1)
    recovery_seconds: float = Field(default=60.0, gt=0)

    def latency_seconds(self, role: Role) -> float:
        """The latency objective a pool answers for: TTFT (prefill), TPOT (decode)."""
        by_role = {"prefill": self.ttft_seconds, "decode": self.tpot_seconds}
        return by_role[role]


#: A Secret's name (DNS subdomain) and a key in its data, as the API server allows them.
SECRET_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
HEADER_NAME_PATTERN = r"^[A-Za-z0-9][-A-Za-z0-9_]*$"
_HEADER_NAME = re.compile(HEADER_NAME_PATTERN)
MAX_CUSTOM_HEADERS = 8


class SecretKeyRef(_Model):
    """One value of a Secret in the PDDeployment's own namespace: ``{name: prom-creds,
    key: password}`` (KEDA's ``secretTargetRef`` without the parameter, which is the
    field's name here)."""

    name: str = Field(min_length=1, max_length=253, pattern=SECRET_NAME_PATTERN)
    key: str = Field(min_length=1, max_length=253, pattern=SECRET_KEY_PATTERN)


class CustomHeader(_Model):
    """A header sent with every query, its value from a Secret: ``{header: X-Scope-OrgID,
    name: prom-tenant, key: org-id}`` (KEDA's ``customHeaders``, never an inline value).
    The header's name is checked by ``PrometheusAuth`` (the CRD's rule sits on the
    list's owner, where the API server reports it)."""

    header: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=253)
    key: str = Field(min_length=1, max_length=253)


class PrometheusAuth(_Model):
    """How the operator authenticates to Prometheus, KEDA's Prometheus scaler parameters
    (``authModes`` bearer, basic, tls and custom headers), every value read from a
    Secret in the PDDeployment's namespace: ``bearerToken``; or ``username`` and
    ``password`` (basic); ``ca`` (PEM bundle verifying the server); ``cert`` and ``key``
    (PEM client certificate, TLS authentication); ``customHeaders``."""

    bearer_token: SecretKeyRef | None = None
    username: SecretKeyRef | None = None
    password: SecretKeyRef | None = None
    ca: SecretKeyRef | None = None
    cert: SecretKeyRef | None = None
    key: SecretKeyRef | None = None
    custom_headers: list[CustomHeader] = Field(default_factory=list, max_length=MAX_CUSTOM_HEADERS)

    @model_validator(mode="after")
    def _check(self) -> PrometheusAuth:
        if (self.username is None) != (self.password is None):
            raise ValueError(MSG_AUTH_BASIC_PAIR)
        if (self.cert is None) != (self.key is None):
            raise ValueError(MSG_AUTH_CERT_PAIR)
        if self.bearer_token is not None and self.username is not None:
            raise ValueError(MSG_AUTH_ONE_SCHEME)
        headers = [h.header.lower() for h in self.custom_headers]
        if any(not _HEADER_NAME.match(h.header) for h in self.custom_headers):
            raise ValueError(MSG_AUTH_HEADER_NAME)
        if any(h in RESERVED_HEADERS for h in headers):
            raise ValueError(MSG_AUTH_HEADER_RESERVED)
        if len(headers) != len(set(headers)):
            raise ValueError(MSG_AUTH_HEADER_UNIQUE)
        return self

    def refs(self) -> list[SecretKeyRef]:
        """Every Secret value it names, in field order (custom headers last)."""
        fields = (self.bearer_token, self.username, self.password, self.ca, self.cert, self.key)
        out = [ref for ref in fields if ref is not None]
        out.extend(SecretKeyRef(name=h.name, key=h.key) for h in self.custom_headers)
        return out

    def secret_names(self) -> list[str]:
        """The Secrets it names, each once, sorted: ``["prom-creds", "prom-tls"]``."""
        return sorted({ref.name for ref in self.refs()})


class PrometheusSpec(_Model):
    url: str = Field(
        default="http://prometheus.monitoring:9090", max_length=2048, pattern=r"^https?://"
    )
    insecure_skip_verify: bool = False
    auth: PrometheusAuth | None = None

    @model_validator(mode="after")
    def _tls_needs_https(self) -> PrometheusSpec:
        auth = self.auth
        if auth is not None and (auth.ca or auth.cert) and not self.url.startswith("https://"):
            raise ValueError(MSG_AUTH_TLS_HTTPS)
        return self


Preset = Literal["vllm", "sglang", "dynamo", "custom"]


class CustomQueries(_Model):
    """PromQL templates for the ``custom`` preset. ``{selector}`` is replaced with the
    pool's label matchers, ``{window}`` with ``metrics.window``, ``{quantile}`` with
    ``slo.percentile``."""

    request_rate: Query
    prompt_tokens: Query
    output_tokens: Query
    queue_depth: Query
    ttft: Query
    tpot: Query
    running: Query | None = None
    kv_usage: Query | None = None

    @model_validator(mode="after")
    def _scoped(self, info: ValidationInfo) -> CustomQueries:
        """The CRD's CEL rule: each template holds ``{selector}`` or ``{matchers}`` and no
        matcher on namespace/pod/pdscaler_io_*. Skipped by the operator's lenient read,
        where ``metricsql`` checks every selector and reports InvalidQuery."""
        if _lenient(info):
            return self
        for name in type(self).model_fields:
            q = getattr(self, name)
            if q is None:
                continue
            if ("{selector}" not in q and "{matchers}" not in q) or _SCOPE_MATCHER.search(q):
                raise ValueError(MSG_QUERY_SCOPE)
        return self


class MetricsSpec(_Model):
    prometheus: PrometheusSpec = PrometheusSpec()
    preset: Preset = "vllm"
    queries: CustomQueries | None = None
    window: Duration = "2m"

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> MetricsSpec:
        if self.preset == "custom" and self.queries is None:
            raise ValueError(MSG_QUERIES_REQUIRED)
        if self.preset != "custom" and self.queries is not None:
            raise ValueError(MSG_QUERIES_FORBIDDEN)
        bounded(self.window, MAX_WINDOW_S, MSG_WINDOW_MAX, info)
        return self

    @property
    def window_seconds(self) -> float:
        return min(parse_duration(self.window), MAX_WINDOW_S)


class RoleFlipsSpec(_Model):
    """Role flips as a second actuator (docs/design.md §4.2, docs/models.md §5a): a
    pool that grows may take Ready replicas the other pool holds above its recent
    recommendations by relabelling them (``pdscaler.io/role``: the routers and the
    metrics follow it) instead of starting new ones. Only for engines that run their KV
    connector in both roles (vLLM ``kv_role: kv_both``) with both pools on the same GPUs
    per replica. Turning it on or off is a new revision (a same-version rollout): a
    flip cell's Deployments select their pods by ``pdscaler.io/pool``, not by the role.
    ``reconfigureSeconds``: what the engine takes to serve the other role once drained
    (default: the reconfiguration model's 9 s); ``window``: how long a pool's
    recommendations must stay below what it runs before it gives replicas away (at most
    ``scaleDownStabilization``)."""

    enabled: bool = False
    reconfigure_seconds: float | None = Field(default=None, ge=0, le=3600)
    window: Duration = "60s"

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> RoleFlipsSpec:
        bounded(self.window, MAX_WINDOW_S, MSG_FLIPS_WINDOW_MAX, info)
        return self

    @property
    def window_seconds(self) -> float:
        return min(parse_duration(self.window), MAX_WINDOW_S)


class ScalingSpec(_Model):
    """How and how often the pools are resized. ``burst_headroom``: hold extra prefill
    replicas for the short bursts the policy has seen in the arrivals (docs/models.md
    §2c), within ``max_gpus``; off: prefill is sized for the mean rate."""

    mode: Literal["Auto", "Recommend"] = "Auto"
    interval: Duration = "15s"
    max_gpus: int = Field(default=64, ge=1, le=MAX_GPUS, alias="maxGPUs")
    scale_down_stabilization: Duration = "5m"
    burst_headroom: bool = False
    role_flips: RoleFlipsSpec = RoleFlipsSpec()

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ScalingSpec:
        if parse_duration(self.interval) < 1.0:
            raise ValueError(MSG_INTERVAL_MIN)
        bounded(self.scale_down_stabilization, MAX_WINDOW_S, MSG_STABILIZATION_MAX, info)
        return self

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    @property
    def scale_down_stabilization_seconds(self) -> float:
        return min(parse_duration(self.scale_down_stabilization), MAX_WINDOW_S)


class ScaleToZeroSpec(_Model):
    """``scaleToZero: {idleSeconds: 300}``: both pools stop after this many seconds with
    no request held or in flight at the holding proxy, and start again from the first
    request it holds (``policy.zero``, ``pdscaler.holder``). Needs both
    ``replicas.min`` 0."""

    idle_seconds: float = Field(default=300.0, ge=1, le=86400)
    #: the holding proxy's image: the operator's (``holding.DEFAULT_HOLDER_IMAGE``) unless
    #: given, e.g. from your registry (``registry.example/pdscaler/pdscaler:0.1.0``)
    image: str | None = Field(default=None, min_length=1, max_length=512)


class RolloutSpec(_Model):
    max_surge_gpus: int = Field(default=8, ge=1, le=MAX_GPUS, alias="maxSurgeGPUs")
    progress_deadline: Duration = "10m"

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> RolloutSpec:
        bounded(self.progress_deadline, MAX_PROGRESS_DEADLINE_S, MSG_PROGRESS_DEADLINE_MAX, info)
        return self

    @property
    def progress_deadline_seconds(self) -> float:
        return min(parse_duration(self.progress_deadline), MAX_PROGRESS_DEADLINE_S)


RouterType = Literal["vllm-router", "sglang-router", "external"]

#: The router each metrics preset pairs with when ``router.type`` is not set.
DEFAULT_ROUTER: dict[str, RouterType] = {
    "vllm": "vllm-router",
    "sglang": "sglang-router",
    "dynamo": "external",
    "custom": "external",
}

#: The image each router type runs when ``router.image`` is not set: a build of
#: deploy/router/Dockerfile named after the PyPI package and version it installs.
DEFAULT_ROUTER_IMAGE: dict[RouterType, str] = {
    "vllm-router": "vllm-router:0.1.17",
    "sglang-router": "sglang-router:0.3.2",
}


class RouterBounds(_MinMax):
    """Router replicas per serving cell (during a rollout ``min`` bounds the cells'
    total and each serving cell has at least 1: ``router.allot``)."""

    min: int = Field(default=1, ge=1, le=64)
    max: int = Field(default=8, ge=1, le=64)


class RouterSpec(_Model):
    """The P/D router of every revision cell (docs/design.md §4).

    ``type`` (default from ``metrics.preset``: vllm -> ``vllm-router``, sglang ->
    ``sglang-router``, dynamo/custom -> ``external``): ``external`` means the stack brings
    its own request path and pdscaler deploys no router and no front Service. ``image``:
    a build of the router (``deploy/router/Dockerfile``), default from the type
    (``DEFAULT_ROUTER_IMAGE``: ``vllm-router:0.1.17``, ``sglang-router:0.3.2``); ``args``
    are appended to the ones pdscaler sets (discovery scoped to the cell, host, port) and
    may not give those again (``reserved_router_flag``). A
    cell serving alone runs ``ceil(ready prefill / prefillPerRouter)`` routers within
    ``replicas``; during a rollout the serving cells split one such total in proportion
    to their Ready prefill (``router.allot``), so each cell's share of the front
    Service's traffic follows its share of prefill capacity.
    """

    type: RouterType | None = None
    image: str | None = Field(default=None, min_length=1, max_length=512)
    args: list[Annotated[str, Field(max_length=1024)]] | None = Field(default=None, max_length=64)
    resources: dict[str, Any] | None = None
    #: the router container's securityContext, replacing ``router.RESTRICTED`` whole
    security_context: dict[str, Any] | None = None
    template: dict[str, Any] | None = None
    replicas: RouterBounds = RouterBounds()
    prefill_per_router: int = Field(default=2, ge=1, le=1024)
    port: int = Field(default=8000, ge=1, le=65535)

    @field_validator("template")
    @classmethod
    def _template_parts_are_objects(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _pod_template_parts(value)

    @field_validator("args")
    @classmethod
    def _args_keep_the_cell(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and any(reserved_router_flag(a) for a in value):
            raise ValueError(MSG_ROUTER_ARGS_RESERVED)
        return value


def reserved_router_flag(arg: str) -> bool:
    """Whether the router argument ``arg`` gives a flag of ``ROUTER_RESERVED_FLAGS``, in
    full or as the unique prefix argparse expands, with or without ``=value``:
    ``--prefill-selector=a=b``, ``--prefill-sel`` and ``--port`` are; ``--prefill-policy``,
    ``--policy`` and a value such as ``round_robin`` are not. Without it, appended after
    pdscaler's own, ``--prefill-selector pdscaler.io/name=chat pdscaler.io/role=prefill``
    replaced the cell's selector and one router paired prefill and decode of every
    revision."""
    name = arg.split("=", 1)[0]
    return (
        name.startswith("--")
        and len(name) > 2
        and any(flag.startswith(name) for flag in ROUTER_RESERVED_FLAGS)
    )


#: The ``engine`` of a spec whose pools are scale targets (it has none).
UNMANAGED_ENGINE = EngineSpec(image="unmanaged", version="unmanaged")


class PDDeploymentSpec(_Model):
    #: ``engine`` (None only with scaleTargetRef: read through the ``engine`` property)
    engine_spec: EngineSpec | None = Field(default=None, alias="engine")
    prefill: PoolSpec
    decode: PoolSpec
    router: RouterSpec = RouterSpec()
    slo: SLOSpec = SLOSpec()
    startup_seconds: float = Field(default=60.0, gt=0)
    metrics: MetricsSpec = MetricsSpec()
    scaling: ScalingSpec = ScalingSpec()
    rollout: RolloutSpec = RolloutSpec()
    #: with scaleTargetRef: the pod label naming the engine version and configuration
    #: (``app.kubernetes.io/version``); unset: the first container's image and args
    version_label: str | None = Field(default=None, min_length=1, max_length=317)
    #: stop both pools after an idle period, wake them from the holder's queue
    scale_to_zero: ScaleToZeroSpec | None = None
    #: the GPU resource pods ask for and the budget counts (a pool's own overrides it)
    gpu_resource: str | None = Field(default=None, max_length=253)
    #: not a field: the engine-config of an existing cell of an older identity scheme
    #: that this spec is found to name (set by ``manifests.adopt`` only; None: the
    #: spec's cell is the current scheme's, ``manifests.kv_config``)
    _cell_config: str | None = PrivateAttr(default=None)
    #: not a field: ConfigMap name -> digest of its contents, for the ConfigMaps the
    #: pools' templates read (set by ``manifests.with_configmaps`` from the edge's reads;
    #: part of ``manifests.kv_config``: identity scheme 3)
    _configmaps: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def engine(self) -> EngineSpec:
        """``engine``; with scaleTargetRef (no engine) ``UNMANAGED_ENGINE``, which names
        no image pdscaler would run: it renders no pod of those pools."""
        return self.engine_spec if self.engine_spec is not None else UNMANAGED_ENGINE

    @property
    def scale_targets(self) -> bool:
        """Both pools are objects pdscaler does not own (``scaleTargetRef``)."""
        return self.prefill.scale_target_ref is not None

    @model_validator(mode="after")
    def _scale_targets(self) -> PDDeploymentSpec:
        """The CRD's rules of the scaleTargetRef mode: both pools or neither; then no
        engine, template, router fields or role flips, else an engine; versionLabel only
        with it."""
        targets = (self.prefill.scale_target_ref, self.decode.scale_target_ref)
        if (targets[0] is None) != (targets[1] is None):
            raise ValueError(MSG_TARGETS_TOGETHER)
        if (self.engine_spec is None) != (targets[0] is not None):
            raise ValueError(MSG_TARGETS_ENGINE)
        if self.version_label is not None and targets[0] is None:
            raise ValueError(MSG_TARGETS_VERSION_LABEL)
        if targets[0] is None:
            return self
        if any("template" in p.model_fields_set for p in (self.prefill, self.decode)):
            raise ValueError(MSG_TARGETS_TEMPLATE)
        if set(TARGET_FORBIDDEN_ROUTER_FIELDS) & self.router.model_fields_set:
            raise ValueError(MSG_TARGETS_ROUTER)
        if self.scaling.role_flips.enabled:
            raise ValueError(MSG_TARGETS_FLIPS)
        return self

    @model_validator(mode="after")
    def _zero_needs_min_zero(self) -> PDDeploymentSpec:
        """``scaleToZero`` stops both pools: each ``replicas.min`` must be 0."""
        if self.scale_to_zero is not None:
            if self.prefill.replicas.min != 0:
                raise ValueError(MSG_ZERO_PREFILL_MIN)
            if self.decode.replicas.min != 0:
                raise ValueError(MSG_ZERO_DECODE_MIN)
        return self

    def gpu_resource_of(self, role: Role) -> str:
        """``role``'s GPU resource: the pool's, else the spec's, else nvidia.com/gpu."""
        return self.pool(role).gpu_resource or self.gpu_resource or DEFAULT_GPU_RESOURCE

    @model_validator(mode="after")
    def _group_fields(self) -> PDDeploymentSpec:
        """The CRD's spec rules of group replicas: gpuResource is <domain>/<name>; role
        flips only between pools of one group shape (podsPerReplica and resource)."""
        if self.gpu_resource is not None and not valid_gpu_resource(self.gpu_resource):
            raise ValueError(MSG_GPU_RESOURCE)
        if self.scaling.role_flips.enabled:
            shapes = {(self.pool(r).pods_per_replica, self.gpu_resource_of(r)) for r in Role}
            if len(shapes) > 1:
                raise ValueError(MSG_FLIP_SHAPE)
        return self

    def pool(self, role: Role) -> PoolSpec:
        """The spec of ``role``'s pool: ``pool(Role.DECODE)`` is ``decode``."""
        pool: PoolSpec = getattr(self, role)
        return pool

    @property
    def router_type(self) -> RouterType:
        """``router.type``, else the preset's router (vllm -> vllm-router)."""
        return self.router.type or DEFAULT_ROUTER[self.metrics.preset]

    @property
    def router_image(self) -> str:
        """``router.image``, else the router type's image (``DEFAULT_ROUTER_IMAGE``):
        an sglang-router cell never runs in the vLLM router's image. ``external`` has no
        router and so no image (``""``)."""
        if self.router.image is not None:
            return self.router.image
        return DEFAULT_ROUTER_IMAGE.get(self.router_type, "")

    @model_validator(mode="after")
    def _budget_covers_minimums(self) -> PDDeploymentSpec:
        """Both pools at their minimums must fit the budget: prefill 2 x 1 GPU + decode
        3 x 2 GPUs needs maxGPUs >= 8."""
        floor = (
            self.prefill.replicas.min * self.prefill.gpus_per_replica
            + self.decode.replicas.min * self.decode.gpus_per_replica
        )
        if self.scaling.max_gpus < floor:
            raise ValueError(MSG_BUDGET_FLOOR)
        return self

    @model_validator(mode="after")
    def _flips_need_equal_replicas(self) -> PDDeploymentSpec:
        """A flipped replica keeps its GPUs: both pools must run the same count."""
        if (
            self.scaling.role_flips.enabled
            and self.prefill.gpus_per_replica != self.decode.gpus_per_replica
        ):
            raise ValueError(MSG_FLIPS_GPUS)
        return self

    @model_validator(mode="after")
    def _flips_need_vllm_router(self) -> PDDeploymentSpec:
        """A flip is a relabel: it moves a replica only where the router discovers pools
        by ``pdscaler.io/role`` AND the engine serves either leg as it runs (vLLM with
        ``kv_role: kv_both``). An SGLang engine runs in one ``--disaggregation-mode``
        (prefill or decode) for life, and an external router (Dynamo's frontend, llm-d's
        scheduler) registers a worker's role its own way: relabelled, the pod would keep
        serving its old role while the policy counted it in the new one."""
        if self.scaling.role_flips.enabled and self.router_type != "vllm-router":
            raise ValueError(MSG_FLIPS_ROUTER)
        return self


# -------------------------------------------------------------------------- status


class PoolStatus(_Model):
    """One pool summed over its serving cells. ``summary`` is the printer column,
    ready/desired: ``"3/4"``."""

    replicas: int | None = Field(default=None, ge=0)
    ready_replicas: int | None = Field(default=None, ge=0)
    desired_replicas: int | None = Field(default=None, ge=0)
    version: str | None = None
    summary: str | None = None


class DecisionInputs(_Model):
    """What the policy saw: load shape over the window and per-pool signals."""

    request_rate: float | None = None
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    prefill_queue: float | None = None
    decode_queue: float | None = None
    ttft_seconds: float | None = None
    tpot_seconds: float | None = None


class DecisionModel(_Model):
    """The models' numbers behind the decision (fractional replicas, drain time, the
    capacities and T_s used after online refinement, the forecast rate). ``n_decode`` is
    the larger of decode's throughput and memory sizings, ``decode_bound`` says which
    (``memory`` only with ``decode.kvCacheTokens``), ``n_decode_memory`` is the memory
    one; ``burst_headroom_replicas`` the prefill replicas held for bursts."""

    n_prefill: float | None = None
    n_decode: float | None = None
    ratio: float | None = None
    drain_seconds: float | None = None
    prefill_tokens_per_second: float | None = None
    decode_tokens_per_second: float | None = None
    startup_seconds: float | None = None
    forecast_rate: float | None = None
    decode_bound: Literal["throughput", "memory"] | None = None
    n_decode_memory: float | None = None
    burst_headroom_replicas: int | None = Field(default=None, ge=0)


class LastDecision(_Model):
    """The latest decision: ``action`` machine-readable (``ScaledDecode``), ``message``
    the human sentence (``Scaled decode 4->6: TPOT p95 62ms > 50ms; drain 38s <= 60s``)."""

    time: AwareDatetime | None = None
    action: str | None = None
    pool: Literal["prefill", "decode"] | None = None
    reason: str | None = None
    message: str | None = None
    inputs: DecisionInputs | None = None
    model: DecisionModel | None = None


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(_Model):
    """A Kubernetes metav1.Condition (same fields, same constraints)."""

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
        r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    )
    status: ConditionStatus
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    message: str = Field(max_length=32768)
    last_transition_time: AwareDatetime
    observed_generation: int | None = Field(default=None, ge=0)


class RolloutRequired(_Model):
    """The required totals of the rollout's last step (what the cells serve together)."""

    prefill: int = Field(ge=0)
    decode: int = Field(ge=0)


class RolloutStatus(_Model):
    """The version rollout in flight (or the last one): ``phase`` e.g. ``Progressing``,
    ``Complete``, ``RollingBack``; ``step`` counts capacity-shift steps taken.

    What a restarted operator resumes from: ``fromRevision``/``toRevision`` (the cells),
    ``required`` (the totals the cells serve together), ``progressAt``/``progressMark``
    (the progress clock) and ``checkedAt`` (the last tick that ran: time without ticks
    does not count against the progress deadline)."""

    phase: str | None = None
    from_version: str | None = None
    to_version: str | None = None
    from_revision: str | None = None
    to_revision: str | None = None
    started_at: AwareDatetime | None = None
    step: int | None = Field(default=None, ge=0)
    required: RolloutRequired | None = None
    progress_at: AwareDatetime | None = None
    progress_mark: int | None = None
    checked_at: AwareDatetime | None = None


class PDDeploymentStatus(_Model):
    """What the operator writes under ``status`` (never a handler's return value).

    ``ratio``, ``ttft``, ``tpot`` are display strings for the printer columns
    (``"1:1.1"``, ``"850ms"``, ``"42ms"``); ``memory`` is the policy's persisted
    memory, an opaque object only the policy reads.
    """

    observed_generation: int | None = Field(default=None, ge=0)
    active_version: str | None = None
    target_version: str | None = None
    prefill: PoolStatus | None = None
    decode: PoolStatus | None = None
    ratio: str | None = None
    ttft: str | None = None
    tpot: str | None = None
    last_decision: LastDecision | None = None
    conditions: list[Condition] | None = None
    rollout: RolloutStatus | None = None
    memory: dict[str, Any] | None = None

    def to_k8s(self) -> dict[str, Any]:
        """The status as the API server stores it: camelCase, JSON types (RFC 3339
        times), unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class PDDeployment(_Model):
    """A whole manifest: ``PDDeployment.model_validate(yaml.safe_load(text))``.
    ``metadata`` is kept as plain data (the API server owns its schema)."""

    api_version: Literal["pdscaler.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["PDDeployment"]
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PDDeploymentSpec
    status: PDDeploymentStatus | None = None

    @model_validator(mode="after")
    def _name_fits_its_objects(self) -> PDDeployment:
        """``metadata.name`` at most ``MAX_NAME_LENGTH`` (28) characters, so that
        ``<name>-<revision>-prefill`` fits a 63-character name."""
        name = self.metadata.get("name")
        if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
            raise ValueError(MSG_NAME_LENGTH)
        return self


# ------------------------------------------------------------------ lenient reading


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X | None``, ``list[X]``, ``Annotated``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def strip_unknown(model: type[BaseModel], data: Any, path: str) -> tuple[Any, list[str]]:
    """``data`` without the keys ``model`` does not know, recursively through nested
    models (lists of them too), and the dotted paths of what was dropped. Keys are known by
    alias or by name; free-form objects (a pod template) are kept whole. Pure.

    >>> strip_unknown(ReplicaBounds, {"min": 1, "burst": 2}, "spec.decode.replicas")
    ({'min': 1}, ['spec.decode.replicas.burst'])
    """
    if not isinstance(data, dict):
        return data, []
    annotations: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        annotations[name] = field.annotation
        if field.alias:
            annotations[field.alias] = field.annotation
    out: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in data.items():
        if key not in annotations:
            dropped.append(f"{path}.{key}")
            continue
        nested = _models_in(annotations[key])
        if len(nested) == 1 and isinstance(value, dict):
            value, more = strip_unknown(nested[0], value, f"{path}.{key}")
            dropped += more
        elif len(nested) == 1 and isinstance(value, list):
            items = []
            for i, item in enumerate(value):
                item, more = strip_unknown(nested[0], item, f"{path}.{key}[{i}]")
                items.append(item)
                dropped += more
            value = items
        out[key] = value
    return out, dropped


def parse_spec_lenient(data: Any) -> tuple[PDDeploymentSpec, tuple[str, ...]]:
    """The operator's read of a stored spec: (the spec without the fields this version
    does not know, their paths such as ``spec.scaling.burst``). Raises
    ``pydantic.ValidationError`` for a spec invalid in the fields it does know."""
    known, unknown = strip_unknown(PDDeploymentSpec, data, "spec")
    return PDDeploymentSpec.model_validate(known, context=LENIENT), tuple(unknown)
