"""Turning what the metrics edge reports into numbers the policy may trust, and saying
which pool may not scale down for want of data.

Owns: the rule that garbage is unknown: a negative, NaN or infinite measurement, or a
finite one beyond what the spec's largest deployment could ever produce (``Bounds``),
is treated exactly like a missing one (``None``) and named in the problems, so the
policy holds instead of acting on it; when a load of R = 0 counts as idle; and, per
pool, the gaps that forbid a scale-down (``down_gaps``). Must not: invent values (never
0 for unknown), read Prometheus, or decide sizes.

Bounds (``Bounds.of``), worked for the chat spec (prefill 3000 tok/s, decode 800 tok/s,
32 replicas each within maxGPUs 64, SLO TTFT 2 s, TPOT 50 ms, window 120 s): a pool at
its most serves ``replicas x P x 1.5`` tokens/s (1.5: the refinement's ceiling), so
prefill 144,000 and decode 38,400 tok/s; every request has at least one token in each
pool, so R above ``10 x min(144,000, 38,400) = 384,000`` req/s is not a measurement
(10: the safety factor), nor is ``R x L_p`` above 1,440,000 tok/s. A queue (or running
count) above ``384,000 x 120`` requests, a latency above ``1000 x`` its SLO (2,000 s
TTFT, 50 s TPOT), a pool's tokens/s above ten times its ceiling or a KV usage above
1.05 are garbage too. 1e12 req/s -> ``request_rate is implausible (1e+12 > 3.84e+05
req/s, 10x what maxGPUs could serve)``: the policy holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pdscaler.policy.refine import TPS_BOUNDS
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, PoolMetrics, PoolObservation, Role

#: How far beyond the largest deployment's capacity a value must be to be garbage.
SAFETY = 10.0
#: A latency above this multiple of its SLO is garbage (2 s TTFT SLO: 2,000 s).
LATENCY_SLO_FACTOR = 1000.0
#: KV-cache usage is a fraction of the cache; above this it is not one.
MAX_KV_USAGE = 1.05

_ROLES = (Role.PREFILL, Role.DECODE)


def clean(value: float | None) -> float | None:
    """``value`` if it is a finite number >= 0, else ``None``: ``-1``, ``nan``,
    ``inf`` -> None; ``0.0`` -> 0.0 (a measured zero is knowledge)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number) or number < 0:
        return None
    return number


@dataclass(frozen=True)
class Bounds:
    """The largest value of each signal the spec's largest deployment could produce,
    times ``SAFETY`` (module docstring). ``pool_tps``: each pool's most tokens/s at its
    max replicas (within maxGPUs) at 1.5x its prior, unmultiplied."""

    rate: float
    queue: float
    pool_tps: dict[Role, float]
    latency: dict[Role, float]

    @staticmethod
    def of(spec: PDDeploymentSpec) -> Bounds:
        """Chat: rate 384,000 req/s, queue 46,080,000, pool_tps 144,000 / 38,400."""
        pool_tps: dict[Role, float] = {}
        for role in _ROLES:
            pool = spec.pool(role)
            most = min(pool.replicas.max, spec.scaling.max_gpus // pool.gpus_per_replica)
            pool_tps[role] = max(most, 1) * pool.peak_tokens_per_second * TPS_BOUNDS[1]
        rate = SAFETY * min(pool_tps.values())
        slo = {Role.PREFILL: spec.slo.ttft_seconds, Role.DECODE: spec.slo.tpot_seconds}
        return Bounds(
            rate=rate,
            queue=rate * spec.metrics.window_seconds,
            pool_tps=pool_tps,
            latency={r: LATENCY_SLO_FACTOR * slo[r] for r in _ROLES},
        )


def _implausible(name: str, value: float, bound: float, unit: str, why: str) -> str:
    return f"{name} is implausible ({value:.3g} > {bound:.3g} {unit}, {why})"


@dataclass(frozen=True)
class CleanMetrics:
    """A snapshot with garbage removed, and why it cannot size the pools (if so).

    ``usable`` is True when the load shape is known: R, L_p and L_d, or R = 0 with both
    queues known empty and no request known running (idle: with no requests the lengths
    are irrelevant and the load is zero). R = 0 beside a queue or running requests is a
    wedged engine or a frozen counter, not idle.
    """

    snapshot: MetricsSnapshot | None
    problems: tuple[str, ...]

    @property
    def usable(self) -> bool:
        snap = self.snapshot
        if snap is None or snap.request_rate is None:
            return False
        return snap.complete or (snap.request_rate == 0 and idle(snap))


def idle(snap: MetricsSnapshot) -> bool:
    """Both queues known 0 and neither pool known to run a request."""
    pools = (snap.prefill, snap.decode)
    return all(p.queue_depth == 0 and not (p.running or 0) > 0 for p in pools)


def _check(
    name: str, value: float | None, bound: float, unit: str, why: str, problems: list[str]
) -> float | None:
    """``clean(value)``, also None above ``bound``; each rejection named in problems."""
    cleaned = clean(value)
    if value is not None and cleaned is None:
        problems.append(f"{name} is invalid ({value!r})")
    elif cleaned is not None and cleaned > bound:
        problems.append(_implausible(name, cleaned, bound, unit, why))
        cleaned = None
    return cleaned


def _pool(role: Role, pool: PoolMetrics, bounds: Bounds | None, problems: list[str]) -> PoolMetrics:
    inf = math.inf
    limits = {
        "queue_depth": (bounds.queue if bounds else inf, "requests"),
        "running": (bounds.queue if bounds else inf, "requests"),
        "latency_seconds": (bounds.latency[role] if bounds else inf, "s"),
        "tokens_per_second": (SAFETY * bounds.pool_tps[role] if bounds else inf, "tok/s"),
        "kv_usage": (MAX_KV_USAGE, "of the cache"),
    }
    cleaned: dict[str, float | None] = {}
    missing = list(pool.missing)
    for key, (bound, unit) in limits.items():
        value = getattr(pool, key)
        cleaned[key] = _check(f"{role} {key}", value, bound, unit, "beyond the spec", problems)
        if value is not None and cleaned[key] is None and key not in missing:
            missing.append(key)
    by_pod = {pod: v for pod, v in pool.running_by_pod.items() if clean(v) is not None}
    return replace(
        pool,
        queue_depth=cleaned["queue_depth"],
        running=cleaned["running"],
        latency_seconds=cleaned["latency_seconds"],
        tokens_per_second=cleaned["tokens_per_second"],
        kv_usage=cleaned["kv_usage"],
        running_by_pod=by_pod,
        missing=tuple(missing),
    )


def _load(
    metrics: MetricsSnapshot, bounds: Bounds | None, problems: list[str]
) -> dict[str, float | None]:
    """R, L_p and L_d cleaned; R above ``bounds.rate``, or R x L beyond ten times a
    pool's most tokens/s, makes R unknown (one of them is garbage; R is what sizes)."""
    why = "10x what maxGPUs could serve"
    load = {
        "request_rate": _check(
            "request_rate",
            metrics.request_rate,
            bounds.rate if bounds else math.inf,
            "req/s",
            why,
            problems,
        ),
        "prompt_tokens": _check("prompt_tokens", metrics.prompt_tokens, math.inf, "", "", problems),
        "output_tokens": _check("output_tokens", metrics.output_tokens, math.inf, "", "", problems),
    }
    rate = load["request_rate"]
    if bounds is None or rate is None:
        return load
    for role, key in ((Role.PREFILL, "prompt_tokens"), (Role.DECODE, "output_tokens")):
        tokens = load[key]
        limit = SAFETY * bounds.pool_tps[role]
        if tokens is not None and rate * tokens > limit:
            problems.append(
                _implausible(f"{role} load R x {key}", rate * tokens, limit, "tok/s", why)
            )
            load["request_rate"] = None
    return load


def sanitize(metrics: MetricsSnapshot | None, spec: PDDeploymentSpec | None = None) -> CleanMetrics:
    """Clean every number of ``metrics``; list each invalid or missing load value.
    With ``spec``, values beyond its ``Bounds`` are garbage too.

    ``None`` (Prometheus unreachable) -> unusable with the problem "no metrics snapshot".
    A snapshot with ``request_rate=nan`` -> request_rate None, problem
    ``"request_rate is invalid (nan)"``, unusable.
    """
    if metrics is None:
        return CleanMetrics(None, ("no metrics snapshot (Prometheus unreachable)",))
    bounds = Bounds.of(spec) if spec is not None else None
    problems = list(metrics.problems)
    load = _load(metrics, bounds, problems)
    snapshot = replace(
        metrics,
        request_rate=load["request_rate"],
        prompt_tokens=load["prompt_tokens"],
        output_tokens=load["output_tokens"],
        prefill=_pool(Role.PREFILL, metrics.prefill, bounds, problems),
        decode=_pool(Role.DECODE, metrics.decode, bounds, problems),
    )
    result = CleanMetrics(snapshot, tuple(problems))
    if not result.usable:
        missing = [k for k, v in load.items() if v is None]
        extra = [f"{k} unknown" for k in missing if not any(p.startswith(k) for p in problems)]
        if load["request_rate"] == 0 and not idle(snapshot):
            extra.append("request_rate 0 beside queued or running requests (not idle)")
        result = CleanMetrics(snapshot, tuple(problems) + tuple(extra))
    return result


_LATENCY = {Role.PREFILL: "TTFT", Role.DECODE: "TPOT"}


def _own_gaps(role: Role, pool: PoolMetrics, ready: int, rate: float) -> list[str]:
    """What ``role``'s own data lacks: targets down, its queue, its latency while it
    serves (R > 0; an idle pool has no latency to measure), any signal it reported as
    garbage or could not read."""
    gaps: list[str] = []
    if pool.targets_up is not None and pool.targets_up < ready:
        gaps.append(f"{role} targets: {pool.targets_up} of {ready} ready pods scraped (up)")
    if pool.queue_depth is None:
        gaps.append(f"{role} queue depth unknown")
    for key in pool.missing:
        if key == "queue_depth" or (key == "latency_seconds" and rate == 0):
            continue
        name = _LATENCY[role] if key == "latency_seconds" else key.replace("_", " ")
        gaps.append(f"{role} {name} unknown")  # "prefill targets up unknown"
    return gaps


def down_gaps(
    snap: MetricsSnapshot, prefill: PoolObservation, decode: PoolObservation
) -> dict[Role, tuple[str, ...]]:
    """Per pool, why it may not scale down on ``snap`` (cleaned): its own gaps
    (``_own_gaps``); decode also inherits prefill's missing (or uncheckable) targets,
    because R is summed over prefill's pods (a target down under-counts R, which sizes
    decode).
    Prefill 2 Ready with 1 target up -> both pools get
    ``"prefill targets: 1 of 2 ready pods scraped (up)"``."""
    rate = snap.request_rate or 0.0
    own = {
        Role.PREFILL: _own_gaps(Role.PREFILL, snap.prefill, prefill.ready, rate),
        Role.DECODE: _own_gaps(Role.DECODE, snap.decode, decode.ready, rate),
    }
    inherited = [g for g in own[Role.PREFILL] if g.startswith("prefill targets")]
    return {
        Role.PREFILL: tuple(own[Role.PREFILL]),
        Role.DECODE: tuple(own[Role.DECODE] + inherited),
    }
