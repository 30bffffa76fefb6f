"""Boundary types of one reconcile tick: what the edges (Prometheus, Kubernetes, or the
simulator) hand to the pure policy, and what the policy hands back.

``TickInput`` -> ``policy.decide`` -> ``Decision``. Nothing here does I/O; every field
is plain data so the simulator can build the same inputs the live operator does and
replay its decisions exactly. Unknown measurements are ``None``, never 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Generic, Literal, TypeVar, cast

from pdscaler.pools import Role as Role  # the vocabulary's word for a pool (see pools)
from pdscaler.spec import PDDeploymentSpec


class RateSource(StrEnum):
    """What ``MetricsSnapshot.request_rate`` counts: requests ARRIVING (the routers'
    counters) or requests COMPLETED by the prefill pool (the fall-back, which a growing
    backlog holds below demand; the policy corrects it by the queue's slope)."""

    ARRIVALS = "arrivals"
    COMPLETIONS = "completions"


# ------------------------------------------------------------------ the vocabulary
# Every string pdscaler writes to the cluster as a reason, phase or condition type is
# one member of one of these enums (values unchanged from the first release). A
# StrEnum member IS its string, so it serialises as written and compares equal to it.


class Action(StrEnum):
    """The policy's machine-readable action: ``Decision.action``, the reason of the
    decision's Event and ``status.lastDecision.action``. Every action that changes no
    replica count starts with ``Hold``."""

    SCALED_PREFILL = "ScaledPrefill"
    SCALED_DECODE = "ScaledDecode"
    SCALED_BOTH = "ScaledBoth"
    SCALED_DOWN = "ScaledDown"
    CAPACITY_LIMITED = "CapacityLimited"
    HOLD = "Hold"
    HOLD_METRICS_UNAVAILABLE = "HoldMetricsUnavailable"
    HOLD_STABILIZING = "HoldStabilizing"
    HOLD_ROLLOUT = "HoldRolloutInProgress"
    HOLD_AT_LIMIT = "HoldAtLimit"
    # scale to and from zero (``policy.zero``): both pools woken by requests the holding
    # proxy holds; both pools stopped after ``scaleToZero.idleSeconds`` with nothing held
    # or in flight; both at zero with nothing held
    SCALED_FROM_ZERO = "ScaledFromZero"
    SCALED_TO_ZERO = "ScaledToZero"
    HOLD_AT_ZERO = "HoldAtZero"

    @property
    def holds(self) -> bool:
        """True for the actions that change no replica count."""
        return self.value.startswith("Hold")


class RolloutPhase(StrEnum):
    """Where the same-version rollout is (``status.rollout.phase``)."""

    STABLE = "Stable"  # no rollout
    PROGRESSING = "Progressing"
    ROLLING_BACK = "RollingBack"
    COMPLETE = "Complete"  # the last rollout finished
    ROLLED_BACK = "RolledBack"  # the last rollout was rolled back

    @property
    def moving(self) -> bool:
        """True while cells are being shifted (Progressing or RollingBack)."""
        return self in (RolloutPhase.PROGRESSING, RolloutPhase.ROLLING_BACK)


class RolloutReason(StrEnum):
    """Why the rollout is where it is: the reason of rollout Events and of
    ``RolloutStep.reason``."""

    STABLE = "Stable"
    STARTED = "RolloutStarted"
    DECODE_FIRST = "WaitingForNewDecode"
    SHIFTING = "ShiftingCapacity"
    SURGE_BELOW_STEP = "SurgeBelowOneStep"
    STEP_DOES_NOT_FIT = "StepDoesNotFit"
    DRAINING = "DrainingOldCells"
    COMPLETE = "RolloutComplete"
    DEADLINE = "ProgressDeadlineExceeded"
    NO_ROLLBACK = "NoRollbackTarget"
    ROLLING_BACK = "RollingBack"
    ROLLED_BACK = "RolledBack"


class ConditionType(StrEnum):
    """The conditions of ``status.conditions``, in the order they are written."""

    READY = "Ready"
    METRICS_AVAILABLE = "MetricsAvailable"
    PROGRESSING = "Progressing"
    CAPACITY_LIMITED = "CapacityLimited"
    DEADLINE_INFEASIBLE = "DeadlineInfeasible"
    SLO_UNREACHABLE = "SLOUnreachable"
    WRITES_FAILING = "WritesFailing"
    FIELDS_IGNORED = "FieldsIgnored"
    # kstatus's two (sigs.k8s.io/cli-utils pkg/kstatus, read by Flux and kpt): True
    # while the operator works towards the spec / when it cannot without a change
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    PAUSED = "Paused"  # the pdscaler.io/paused annotation: no pool or router is written


class ConditionReason(StrEnum):
    """The ``reason`` of a condition (the CRD documents exactly these)."""

    SERVING = "Serving"
    # router.type external: the pools serve, and pairing them is the stack's job
    ROUTER_EXTERNAL = "RouterExternal"
    NOT_SERVING = "NotServing"
    METRICS_OK = "MetricsOK"
    PROMETHEUS_UNREACHABLE = "PrometheusUnreachable"
    PROMETHEUS_NOT_ALLOWED = "PrometheusNotAllowed"  # the URL is not in the allow-list
    INVALID_QUERY = "InvalidQuery"  # a custom query refused before it is sent
    # metrics.prometheus.auth: a Secret named there is missing, the operator may not
    # read it, a key is missing or its value unusable, or Prometheus refused the
    # credentials (HTTP 401/403)
    SECRET_NOT_FOUND = "SecretNotFound"
    SECRET_FORBIDDEN = "SecretForbidden"
    SECRET_KEY_NOT_FOUND = "SecretKeyNotFound"
    INVALID_SECRET = "InvalidSecret"
    PROMETHEUS_UNAUTHORIZED = "PrometheusUnauthorized"
    METRICS_INCOMPLETE = "MetricsIncomplete"
    ROLLOUT_IN_PROGRESS = "RolloutInProgress"
    ROLLING_BACK = "RollingBack"
    ROLLOUT_COMPLETE = "RolloutComplete"
    ROLLED_BACK = "ProgressDeadlineExceeded"
    STABLE = "Stable"
    INSUFFICIENT_GPUS = "InsufficientGPUs"
    CAPACITY_AVAILABLE = "CapacityAvailable"
    DEADLINE_INFEASIBLE = "RecoveryDeadlineInfeasible"
    DEADLINE_FEASIBLE = "DeadlineFeasible"
    # SLOUnreachable: TTFT breached in bursts no head-room the spec allows will absorb,
    # because burst head-room is off, cut by replicas.max / maxGPUs, or at its cap
    BURST_HEADROOM_OFF = "BurstHeadroomOff"
    BURST_HEADROOM_LIMITED = "BurstHeadroomLimited"
    BURST_HEADROOM_CAPPED = "BurstHeadroomCapped"
    SLO_WITHIN_REACH = "SLOWithinReach"
    WRITE_FAILED = "WriteFailed"
    WRITES_APPLIED = "WritesApplied"
    # spec fields this operator version does not know (a newer CRD): ignored
    UNKNOWN_FIELDS = "UnknownFields"
    ALL_FIELDS_KNOWN = "AllFieldsKnown"
    # Reconciling: True while a rollout or a rollback shifts cells or a pool's Ready
    # replicas differ from what the tick asks; False when nothing is left to do, while
    # paused, or while Stalled (kstatus reads the first True of the two)
    ROLLOUT_PROGRESSING = "RolloutProgressing"
    ROLLBACK_PROGRESSING = "RollbackProgressing"
    SCALING_IN_PROGRESS = "ScalingInProgress"
    RECONCILED = "Reconciled"
    RECONCILE_PAUSED = "ReconcilePaused"
    BLOCKED = "Blocked"
    # Stalled: no progress without a change by a person: a stored spec this operator
    # refuses (a CRD older than its validation), or a rollout rolled back at its deadline
    INVALID_SPEC = "InvalidSpec"
    ROLLOUT_ROLLED_BACK = "RolledBack"
    # scaleTargetRef (pools pdscaler does not own, ``targets``): the target is already
    # driven by an HPA or a KEDA ScaledObject; it is missing, has no /scale or selector,
    # or its pods lack pdscaler's labels. Progressing: the pair's Ready pods run more than
    # one version or engine configuration (pdscaler holds both pools)
    SCALE_TARGET_CONFLICT = "ScaleTargetConflict"
    SCALE_TARGET_INVALID = "ScaleTargetInvalid"
    MIXED_VERSIONS = "MixedVersions"
    NOT_STALLED = "NotStalled"
    # Paused
    PAUSED_BY_ANNOTATION = "PausedByAnnotation"
    NOT_PAUSED = "NotPaused"


class EventReason(StrEnum):
    """The reason of an Event that is neither a decision's (its ``Action``) nor a
    rollout's (a ``RolloutReason``). ``CREATED``/``UPDATED``/``DELETED`` and
    ``RECOMMEND`` are prefixes: ``CREATED.of("Deployment")`` -> ``CreatedDeployment``,
    ``RECOMMEND.of(Action.SCALED_DECODE)`` -> ``RecommendScaledDecode``."""

    CREATED = "Created"
    UPDATED = "Updated"
    DELETED = "Deleted"
    SET_DELETION_COST = "SetDeletionCost"
    FLIPPED_ROLE = "FlippedRole"  # pods relabelled to the other pool (role flips)
    NOT_OWNED = "NotOwned"
    DRIFT_REVERTED = "DriftReverted"
    DRIFT_DETECTED = "DriftDetected"
    WRITE_FAILED = "WriteFailed"
    INVALID_SPEC = "InvalidSpec"
    UNKNOWN_FIELDS = "UnknownFields"
    DECISION = "Decision"  # a published decision that carries no action
    RECOMMEND = "Recommend"  # a decision in Recommend mode, not applied

    def of(self, suffix: str) -> str:
        """The reason for ``suffix`` (a kind, an action) of a prefix member."""
        return f"{self.value}{suffix}"


class MetricsErrorReason(StrEnum):
    """Why Prometheus gave no snapshot: the machine reason of
    ``prometheus.MetricsUnavailableError`` (CamelCase, shown in its Event and message).
    """

    UNREACHABLE = "PrometheusUnreachable"  # refused, DNS, TLS, no answer in time
    HTTP_ERROR = "PrometheusError"  # HTTP status other than 200 without a query error
    QUERY_FAILED = "QueryFailed"  # Prometheus rejected or could not run a query
    BAD_ANSWER = "BadAnswer"  # 200, but not the API's JSON, or larger than the cap
    INVALID_QUERY = "InvalidQuery"  # a custom template refused before sending
    NOT_ALLOWED = "PrometheusNotAllowed"  # the URL is not in the operator's allow-list
    UNAUTHORIZED = "PrometheusUnauthorized"  # HTTP 401/403: credentials refused or needed
    SECRET_NOT_FOUND = "SecretNotFound"  # a Secret metrics.prometheus.auth names is absent
    SECRET_FORBIDDEN = "SecretForbidden"  # the operator may not get it
    SECRET_KEY_NOT_FOUND = "SecretKeyNotFound"  # the Secret lacks the key
    INVALID_SECRET = "InvalidSecret"  # the value is unusable (empty, not PEM, a line break)

    @property
    def condition_reason(self) -> ConditionReason:
        """The reason of the MetricsAvailable=False condition it gives: itself where it
        is a condition reason (``InvalidQuery``, ``SecretNotFound``, ...), else
        ``PrometheusUnreachable`` (``BadAnswer``, ``QueryFailed``, ``PrometheusError``)."""
        if self.value in _CONDITION_REASON_VALUES:
            return ConditionReason(self.value)
        return ConditionReason.PROMETHEUS_UNREACHABLE


_CONDITION_REASON_VALUES = frozenset(reason.value for reason in ConditionReason)


@dataclass(frozen=True)
class PoolMetrics:
    """One pool's signals from Prometheus, summed/aggregated over the pool's pods.

    ``latency_seconds`` is TTFT at the SLO percentile for prefill, TPOT for decode.
    ``tokens_per_second`` is the pool's observed throughput (prompt tokens/s for
    prefill, generated tokens/s for decode), used to refine the per-replica priors.

    ``targets_up`` counts the pool's scrape targets whose last scrape succeeded
    (``up == 1``); the policy compares it with the pool's Ready pods, and a pool with
    fewer targets up than Ready pods is under-counted, so it is never scaled down.
    None: the source does not count targets (the simulator, a test). ``missing`` names
    the pool's own signals (field names, e.g. ``"latency_seconds"``) the source asked
    for and did not get: an empty answer, NaN, a stale pool.
    """

    queue_depth: float | None = None
    running: float | None = None
    latency_seconds: float | None = None
    tokens_per_second: float | None = None
    kv_usage: float | None = None
    #: Tokens of KV one replica holds as the engine reports it (vLLM: the smallest
    #: ``num_gpu_blocks * block_size`` of the pool's ``vllm:cache_config_info``); None:
    #: not reported (the memory term then needs ``decode.kvCacheTokens``).
    kv_capacity_tokens: float | None = None
    # per-pod running requests, pod name -> requests (for pod-deletion-cost)
    running_by_pod: dict[str, float] = field(default_factory=dict)
    targets_up: int | None = None
    missing: tuple[str, ...] = ()


@dataclass(frozen=True)
class HolderReading:
    """The holding proxy's gauges (``pdscaler.holder``), summed over its pods (idle: the
    least of them). ``held``: requests waiting for a Ready router; ``held_prompt_tokens``
    / ``held_output_tokens``: their estimated tokens; ``in_flight``: forwarded, not
    finished; ``idle_seconds``: since the last request ended (0 while any is held or in
    flight). None: unknown (never read as 0)."""

    held: float | None = None
    held_prompt_tokens: float | None = None
    held_output_tokens: float | None = None
    in_flight: float | None = None
    idle_seconds: float | None = None


@dataclass(frozen=True)
class MetricsSnapshot:
    """What Prometheus said at ``time`` (seconds since the epoch or simulated clock).

    ``request_rate`` in req/s, ``prompt_tokens``/``output_tokens`` are means per
    request over the window. ``problems`` lists why a value is unknown (empty answer,
    NaN, stale, several series, unreachable), for the MetricsAvailable condition.
    ``rate_source`` says what ``request_rate`` counts (``RateSource``).
    """

    time: float
    request_rate: float | None
    prompt_tokens: float | None
    output_tokens: float | None
    prefill: PoolMetrics = field(default_factory=PoolMetrics)
    decode: PoolMetrics = field(default_factory=PoolMetrics)
    problems: tuple[str, ...] = ()
    rate_source: RateSource = RateSource.COMPLETIONS
    #: the holding proxy's gauges (scale to and from zero); None: no holder answered
    holder: HolderReading | None = None

    def pool(self, role: Role) -> PoolMetrics:
        """``role``'s pool signals: ``pool(Role.DECODE)`` is ``decode``."""
        return cast(PoolMetrics, getattr(self, role))

    @property
    def complete(self) -> bool:
        """True when the load shape (R, L_p, L_d) is known: enough to size the pools."""
        return None not in (self.request_rate, self.prompt_tokens, self.output_tokens)


@dataclass(frozen=True)
class PoolObservation:
    """One pool as the Kubernetes API shows it (summed over the serving cells).

    ``replicas`` is what the Deployments currently ask for; ``unschedulable`` counts
    pods Pending because no node has the GPUs; ``startup_samples`` are observed
    pod creation -> Ready durations in seconds (to refine T_s); ``terminating`` counts
    pods being deleted, which still hold their GPUs (the rollout counts them against
    ``maxGPUs + maxSurgeGPUs``).
    """

    replicas: int
    ready: int
    unschedulable: int = 0
    startup_samples: tuple[float, ...] = ()
    terminating: int = 0


@dataclass(frozen=True)
class Season:
    """The day's shape the policy learnt from its own rate (``policy.seasonal`` owns the
    arithmetic). ``start``: the first observation's time (None: none yet);
    ``profile``: the smoothed mean req/s per 5-minute bucket of the UTC day (288 values,
    None = never seen; empty = nothing learnt); ``bucket``/``total``/``count``: the open
    bucket (absolute index since the epoch) and its samples; ``pending``: the open hour's
    closed buckets (index, mean), folded into ``profile`` when the hour ends (so the
    persisted profile changes at most once an hour); ``recent``: the last hour's closed
    buckets (index, observed, what the profile expected), the departure test's input."""

    start: float | None = None
    profile: tuple[float | None, ...] = ()
    bucket: int | None = None
    total: float = 0.0
    count: int = 0
    pending: tuple[tuple[int, float], ...] = ()
    recent: tuple[tuple[int, float, float | None], ...] = ()


@dataclass(frozen=True)
class PolicyMemory:
    """What the policy carries from one tick to the next. Persisted by the operator
    (in status) so a restarted operator resumes with the same memory.

    ``recommendations``: (time, prefill, decode) desired counts of recent ticks, for the
    scale-down stabilization window (the max over the window is applied, as the HPA).
    ``rate_history``: (time, req/s) for the short-horizon forecast.
    ``prefill_tps``/``decode_tps``/``startup_seconds``: refined capacities and T_s
    (None = use the spec's prior); ``prefill_prior``/``decode_prior``: the prior each
    capacity was refined against (the profile at that tick's mix; None without a
    profile), so the correction carries to the next mix (``refine.carry``).
    ``capacity_gpus``/``capacity_time``: the GPUs the cluster could schedule when pods
    were last Pending for lack of GPUs, and when; the policy keeps sizing within them for
    one stabilization window instead of re-requesting the same unschedulable pods.
    ``pool_history``: (time, prefill queue, decode queue, prefill ready, decode ready)
    of recent ticks (``policy.history``: saturation, mean ready, queue slope); not
    persisted in status (it refills within one metrics window).
    """

    recommendations: tuple[tuple[float, int, int], ...] = ()
    rate_history: tuple[tuple[float, float], ...] = ()
    prefill_tps: float | None = None
    decode_tps: float | None = None
    prefill_prior: float | None = None
    decode_prior: float | None = None
    startup_seconds: float | None = None
    last_scale_time: float | None = None
    capacity_gpus: int | None = None
    capacity_time: float | None = None
    pool_history: tuple[tuple[float, float | None, float | None, int, int], ...] = ()
    #: prefill's burst head-room factor (``policy.headroom``, >= 1); not persisted
    burst_factor: float = 1.0
    #: the day's shape (``policy.seasonal``); its profile and start are persisted
    season: Season = field(default_factory=Season)


@dataclass(frozen=True)
class FlipOptions:
    """What a role change costs where the actuator supports one (both pools on the same
    hardware and parallelism, the engine's KV connector in both roles, e.g. vLLM's
    ``kv_role: kv_both``): ``reconfigure_seconds``, what pdscaler expects from the
    replica leaving one pool empty until it serves the other (None: the reconfiguration
    model's floor, ``models.migration.SOFTWARE_PREP_SECONDS``, 9 s: no weights move,
    docs/models.md §5); ``window_seconds`` how long a pool's
    recommendations must have stayed below what it runs before it gives replicas away
    (so a replica flipped in is not flipped back on the next dip)."""

    reconfigure_seconds: float | None = None
    window_seconds: float = 60.0


@dataclass(frozen=True)
class Flip:
    """``count`` ready replicas of ``source`` change role to the other pool on this
    tick, each serving there about ``seconds`` from now (its drain plus the
    reconfiguration) instead of ``cold_start_seconds`` for a new replica."""

    source: Role
    count: int
    seconds: float
    cold_start_seconds: float

    @property
    def target(self) -> Role:
        return self.source.other


@dataclass(frozen=True)
class TickInput:
    """Everything one decision depends on; ``now`` is passed in, never read."""

    now: float
    spec: PDDeploymentSpec
    metrics: MetricsSnapshot | None  # None: Prometheus unreachable
    prefill: PoolObservation
    decode: PoolObservation
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    rollout_in_progress: bool = False
    #: the actuator can move a replica between the pools by changing its role
    #: (``policy.flips``); None: it cannot, every change is a scale (the live operator,
    #: which has no role-change path yet)
    flips: FlipOptions | None = None

    def pool(self, role: Role) -> PoolObservation:
        """``role``'s pool as the API shows it: ``pool(Role.DECODE)`` is ``decode``."""
        return cast(PoolObservation, getattr(self, role))


@dataclass(frozen=True)
class ModelOutputs:
    """The models' numbers behind a decision (shown in status and `pdscaler explain`)."""

    n_prefill: float | None = None  # fractional ratio-model replicas
    n_decode: float | None = None
    ratio: float | None = None  # N_P / N_D
    drain_seconds: float | None = None  # predicted drain of the scaled pool; None = never
    prefill_tps: float | None = None  # capacities used (after refinement)
    decode_tps: float | None = None
    startup_seconds: float | None = None
    forecast_rate: float | None = None
    decode_bound: Literal["throughput", "memory"] | None = None  # None: no memory term
    n_decode_memory: float | None = None  # decode replicas the KV memory needs
    burst_headroom_replicas: int | None = None  # prefill replicas held for bursts


@dataclass(frozen=True)
class Unreachable:
    """Why prefill's TTFT SLO is out of the burst head-room's reach: the SLOUnreachable
    condition's reason (``BurstHeadroomOff``, ``...Limited``, ``...Capped``) and its
    sentence, with what reaching the SLO would cost."""

    reason: ConditionReason
    message: str


@dataclass(frozen=True)
class Decision:
    """The policy's answer: desired replicas per pool, and why.

    ``action`` is a machine reason such as ``ScaledDecode``, ``ScaledPrefill``,
    ``ScaledDown``, ``Hold``, ``HoldMetricsUnavailable``; ``message`` the human
    sentence, e.g. ``Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s``.
    ``metrics_available``: the load shape was known (False: the decision held).
    ``data_gaps`` names the data the decision lacked (``prefill queue depth unknown``):
    no pool a gap concerns scaled down, and the MetricsAvailable condition is False.
    """

    prefill: int
    decode: int
    action: Action
    message: str
    pool: Role | None = None
    model: ModelOutputs = field(default_factory=ModelOutputs)
    metrics_available: bool = True
    capacity_limited: bool = False
    deadline_infeasible: bool = False
    #: why the TTFT SLO is out of the burst head-room's reach (None: it is not), the
    #: SLOUnreachable condition (``policy.reach``)
    slo_unreachable: Unreachable | None = None
    memory: PolicyMemory = field(default_factory=PolicyMemory)
    data_gaps: tuple[str, ...] = ()
    #: replicas that change role on this tick (``prefill``/``decode`` count them in
    #: their new pool); None: none (``policy.flips``)
    flip: Flip | None = None

    def replicas(self, role: Role) -> int:
        """The desired replicas of ``role``: ``replicas(Role.DECODE)`` is ``decode``
        (``pool`` is the field naming the pool a decision scaled)."""
        return cast(int, getattr(self, role))


# ------------------------------------------------------------------ one value per role

T = TypeVar("T")
U = TypeVar("U")
_ROLES = tuple(Role)


@dataclass(frozen=True)
class PerRole(Generic[T]):
    """One value per pool role, the fields named as the ``Role`` values, so code that
    treats the roles alike reads ``pool(role)`` or loops over ``items()`` instead of
    keeping a ``p_``/``d_`` pair: another role is one more field, not another copy of
    every line. Plain data, no I/O.

    ``replicas = PerRole(prefill=20, decode=18)``: ``replicas.pool(Role.DECODE)`` -> 18,
    ``replicas.map(lambda n: 2 * n)`` -> ``PerRole(prefill=40, decode=36)``,
    ``replicas.with_pool(Role.PREFILL, 16)`` -> ``PerRole(prefill=16, decode=18)``,
    ``PerRole.build(str.upper)`` -> ``PerRole(prefill="PREFILL", decode="DECODE")``,
    ``dict(replicas.items())`` -> ``{Role.PREFILL: 20, Role.DECODE: 18}``.
    """

    prefill: T
    decode: T

    @classmethod
    def build(cls, value: Callable[[Role], T]) -> PerRole[T]:
        """``value(role)`` for every role."""
        return cls(*[value(role) for role in _ROLES])

    def pool(self, role: Role) -> T:
        """The value of ``role`` (the field named as the role)."""
        return cast(T, getattr(self, role))

    def items(self) -> tuple[tuple[Role, T], ...]:
        """``(role, value)`` in ``Role`` order (prefill first)."""
        return tuple([(role, getattr(self, role)) for role in _ROLES])

    def map(self, fn: Callable[[T], U]) -> PerRole[U]:
        """``fn`` applied to every role's value."""
        return PerRole(*[fn(getattr(self, role)) for role in _ROLES])

    def with_pool(self, role: Role, value: T) -> PerRole[T]:
        """A copy with ``role``'s value replaced."""
        return PerRole.build(lambda r: value if r is role else getattr(self, r))


if [f.name for f in fields(PerRole)] != [role.value for role in _ROLES]:  # pragma: no cover
    raise TypeError("PerRole's fields must be the Role values, in Role order")
