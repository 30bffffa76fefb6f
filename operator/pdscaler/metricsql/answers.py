"""Prometheus' answers read into a ``MetricsSnapshot``: unknown is never 0.

Owns: reading one answer (``parse_scalar``, ``parse_by_label``), the per-pool staleness
and targets-up checks, ``choose_rate`` (R: the routers' arrivals when they answer, else
the prefill pool's completions), and ``assemble`` (every answer of one snapshot, the
stale pools' values voided, each pool's unknown signals named in
``PoolMetrics.missing``). Must not: build queries or open a connection.

>>> empty = {"status": "success", "data": {"resultType": "vector", "result": []}}
>>> parse_scalar(empty, now=1700000000.0, max_age=60.0).problem
'no data (empty answer)'
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pdscaler.metricsql.queries import HOLDER_QUERIES, HOLDER_ROLE, Key, Query
from pdscaler.metricsql.templates import DEFAULT_MAX_AGE_SECONDS, PROM_ROLE, ROUTER_ROLE
from pdscaler.types import HolderReading, MetricsSnapshot, PoolMetrics, RateSource, Role

# ---------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Reading:
    """A value read from one answer, or None with the reason it is unknown."""

    value: float | None
    problem: str | None = None


def _number(text: Any) -> float | None:
    """A sample value (Prometheus sends strings: "1.5", "NaN", "+Inf") as a finite float,
    or None."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _samples(answer: Mapping[str, Any]) -> tuple[list[tuple[dict[str, str], Any, Any]], str | None]:
    """The (labels, timestamp, value) samples of an instant-query answer, or a problem."""
    if answer.get("status") != "success":
        kind = answer.get("errorType", "error")
        return [], f"query failed ({kind}): {answer.get('error', 'no reason given')}"
    data = answer.get("data")
    if not isinstance(data, Mapping):
        return [], "malformed answer: no data"
    kind = data.get("resultType")
    result = data.get("result")
    if kind == "scalar" and isinstance(result, Sequence) and len(result) == 2:
        return [({}, result[0], result[1])], None
    if kind == "vector" and isinstance(result, Sequence):
        out = []
        for item in result:
            if not isinstance(item, Mapping):
                return [], "malformed answer: vector item is not an object"
            value = item.get("value")
            if not isinstance(value, Sequence) or len(value) != 2:
                return [], "malformed answer: sample without [time, value]"
            out.append((dict(item.get("metric") or {}), value[0], value[1]))
        return out, None
    return [], f"unexpected result type {kind!r} (an instant vector was expected)"


def _describe(value: Any) -> str:
    text = str(value)
    return {"NaN": "NaN (nothing observed in the window?)"}.get(text, text)


def evaluated_at(answer: Mapping[str, Any]) -> float | None:
    """The time on Prometheus' clock at which an instant-query answer was evaluated (its
    samples' time: ``[1700000000, "2.5"]`` -> 1700000000.0; for ``timestamp(up)`` the
    value is the scrape's time, the sample's time the evaluation's), or None for a
    failed or empty answer. The reference for the answers' ages: the operator's clock
    may be minutes off Prometheus'."""
    samples, problem = _samples(answer)
    if problem is not None or not samples:
        return None
    return _number(samples[0][1])


def parse_scalar(answer: Mapping[str, Any], *, now: float, max_age: float) -> Reading:
    """The single value of an instant-query answer.

    Unknown (None + problem) when: the query failed; the answer is empty (no such
    series: a wrong preset, pods not scraped, nothing ever observed); the value is NaN
    or +/-Inf (e.g. 0/0 for a mean when no request finished in the window); the answer's
    time is more than ``max_age`` seconds before ``now`` (``pdscaler.prometheus`` passes
    the snapshot's instant on Prometheus' clock, at which it evaluates every query, so this
    only catches an answer evaluated elsewhere, e.g. by a caching proxy; stale scrapes are
    caught by ``stale_pools``); or several series came back (the
    query lacks an aggregation such as ``sum(...)``). Worked example: ``{"status":
    "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value":
    [1700000000, "2.5"]}]}}`` at now=1700000001 -> ``Reading(2.5)``.
    """
    samples, problem = _samples(answer)
    if problem is not None:
        return Reading(None, problem)
    if not samples:
        return Reading(None, "no data (empty answer)")
    if len(samples) > 1:
        return Reading(
            None, f"{len(samples)} series where one was expected (aggregate with sum/avg)"
        )
    _, ts, raw = samples[0]
    value = _number(raw)
    if value is None:
        return Reading(None, f"value is {_describe(raw)}")
    stamp = _number(ts)
    if stamp is None:
        return Reading(None, f"malformed sample time {ts!r}")
    if now - stamp > max_age:
        return Reading(None, f"stale: sample {now - stamp:.0f}s old (max {max_age:.0f}s)")
    return Reading(value)


def parse_by_label(
    answer: Mapping[str, Any], label: str
) -> tuple[dict[str, float], tuple[str, ...]]:
    """A vector keyed by ``label`` (e.g. running requests per pod): ``{"pod-a": 3.0}``.
    Series without the label, or with a NaN/Inf value, are left out with a problem.
    An empty answer is an empty dict (the caller decides whether that is a problem)."""
    samples, problem = _samples(answer)
    if problem is not None:
        return {}, (problem,)
    out: dict[str, float] = {}
    problems: list[str] = []
    for labels, _, raw in samples:
        key = labels.get(label)
        value = _number(raw)
        if key is None:
            problems.append(f"a series without the {label!r} label")
        elif value is None:
            problems.append(f"{label}={key}: value is {_describe(raw)}")
        elif key in out:
            problems.append(f"several series for {label}={key}")
        else:
            out[key] = value
    return out, tuple(problems)


#: The largest KV capacity believed (the spec's own bound on ``decode.kvCacheTokens``).
MAX_KV_CAPACITY_TOKENS = 1_000_000_000
#: A positive count in ASCII digits (``str.isdigit`` also takes "٣", which int() reads).
_COUNT = re.compile(r"[1-9][0-9]{0,17}")


def parse_kv_capacity(answer: Mapping[str, Any]) -> tuple[float | None, tuple[str, ...]]:
    """The smallest ``num_gpu_blocks * block_size`` over the answer's series (the
    ``max by (num_gpu_blocks, block_size) (vllm:cache_config_info{...})`` vector):
    6,250 blocks of 16 and 7,000 of 16 -> 100,000 tokens. An empty answer is None with
    no problem (the engine does not report it); a series whose labels are not positive
    integers, or whose product is above ``MAX_KV_CAPACITY_TOKENS``, is left out with a
    problem (an engine's labels are tenant-controlled input)."""
    samples, problem = _samples(answer)
    if problem is not None:
        return None, (problem,)
    sizes: list[int] = []
    problems: list[str] = []
    for labels, _, _ in samples:
        blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if not (_COUNT.fullmatch(blocks) and _COUNT.fullmatch(size)):
            problems.append(f"num_gpu_blocks={blocks!r} block_size={size!r}: not positive integers")
            continue
        tokens = int(blocks) * int(size)
        if tokens > MAX_KV_CAPACITY_TOKENS:
            problems.append(f"{tokens} KV tokens is above {MAX_KV_CAPACITY_TOKENS}")
            continue
        sizes.append(tokens)
    return (float(min(sizes)) if sizes else None), tuple(problems)


def stale_pools(freshness: Mapping[str, Any], *, now: float, max_age: float) -> dict[Role, str]:
    """Pools whose newest scrape is older than ``max_age`` at ``now``, with the reason.

    ``freshness`` is the answer of ``max by (pdscaler_io_role) (timestamp(up{...}))``:
    the value of each role's series is the time of its newest scrape. A pool absent from
    it is not called stale here (its value queries come back empty, which says more).
    Worked example: prefill last scraped at 1000.0, now = 1100.0, max_age = 60 ->
    ``{Role.PREFILL: "stale: newest prefill scrape 100s old (max 60s)"}``.
    """
    newest, _ = parse_by_label(freshness, PROM_ROLE)
    out: dict[Role, str] = {}
    for role in Role:
        stamp = newest.get(role.value)
        if stamp is not None and now - stamp > max_age:
            out[role] = (
                f"stale: newest {role.value} scrape {now - stamp:.0f}s old (max {max_age:.0f}s)"
            )
    return out


def router_stale(freshness: Mapping[str, Any], *, now: float, max_age: float) -> str | None:
    """Why the routers' series are stale (their newest scrape older than ``max_age``), or
    None (fresh, or no router scraped: their arrival query then comes back empty)."""
    newest, _ = parse_by_label(freshness, PROM_ROLE)
    stamp = newest.get(ROUTER_ROLE)
    if stamp is not None and now - stamp > max_age:
        return f"stale: newest router scrape {now - stamp:.0f}s old (max {max_age:.0f}s)"
    return None


def routers_down(answer: Mapping[str, Any] | None) -> str | None:
    """Why the routers' arrivals cannot be trusted from ``count(up{routers} == 0)``: a
    router target not scraped drops its arrivals from the sum (R would read low, and a
    low R may shrink the pools), and an unanswered check cannot rule that out; None when
    the answer is empty (no router down). ``{"1"}`` -> ``"1 router target(s) down"``."""
    if answer is None:
        return "router targets not checked"
    samples, failed = _samples(answer)
    if failed is not None:
        return f"router targets not checked: {failed}"
    counts = [_number(value) for _, _, value in samples]
    if any(c is None for c in counts):
        return "router targets not checked: a count that is no number"
    down = sum(c for c in counts if c is not None)
    return f"{down:g} router target(s) down" if down > 0 else None


def choose_rate(arrivals: Reading | None, completions: Reading) -> tuple[Reading, RateSource]:
    """R and what it counts, from the two readings (pure). The routers' ``arrivals``
    when they are a known value (a fresh, finite answer; 0 is known: the routers saw no
    request), else the prefill pool's ``completions`` (no router series, NaN, stale, a
    failed query, or a preset without an arrival query: ``arrivals`` None).
    ``choose_rate(Reading(4.0), Reading(3.0))`` -> ``(Reading(4.0), ARRIVALS)``;
    ``choose_rate(Reading(None, "no data"), Reading(3.0))`` -> ``(Reading(3.0),
    COMPLETIONS)``."""
    if arrivals is not None and arrivals.value is not None:
        return arrivals, RateSource.ARRIVALS
    return completions, RateSource.COMPLETIONS


def targets_up(answer: Mapping[str, Any] | None) -> tuple[dict[Role, int | None], list[str]]:
    """Each pool's targets up from ``sum by (pdscaler_io_role) (up{...})``: a pool absent
    from a successful answer has 0 up; no answer or a failed one -> None (unknown) with
    the problem. ``{prefill: "1", decode: "2"}`` -> ``{PREFILL: 1, DECODE: 2}``."""
    if answer is None:
        return dict.fromkeys(Role), []
    got, issues = parse_by_label(answer, PROM_ROLE)
    _, failed = _samples(answer)
    if failed is not None:
        return dict.fromkeys(Role), [f"{Key.TARGETS_UP}: {failed}"]
    out: dict[Role, int | None] = {r: int(got.get(r.value, 0.0)) for r in Role}
    return out, [f"{Key.TARGETS_UP}: {i}" for i in issues]


def _pool_field(key: Key) -> tuple[Role, str] | None:
    """The pool and field a per-pool query fills (``PoolMetrics.missing`` names it):
    ``Key.DECODE_LATENCY`` -> (DECODE, "latency_seconds"); R and the token means (read
    on a pool, but the load's, not the pool's own signals) -> None."""
    role, _, name = key.value.partition(".")
    if not name or role not in {r.value for r in Role}:
        return None
    return Role(role), name


def assemble(
    queries: Sequence[Query],
    answers: Mapping[Key, Mapping[str, Any]],
    *,
    now: float,
    max_age: float = DEFAULT_MAX_AGE_SECONDS,
) -> MetricsSnapshot:
    """The snapshot from every query's answer (``answers[q.key]``). Pure.

    The values read on a stale pool (``Query.pool``, see ``stale_pools``) are None, e.g.
    R and L_p when the prefill pool is stale. A query with no answer is unknown.
    """
    stale = stale_pools(answers.get(Key.FRESHNESS, {}), now=now, max_age=max_age)
    problems: list[str] = [f"{role.value}: {why}" for role, why in stale.items()]
    values: dict[Key, float | None] = {}
    by_pod: dict[str, float] = {}
    missing: dict[Role, list[str]] = {r: [] for r in Role}
    up: dict[Role, int | None] = dict.fromkeys(Role)
    if any(q.key == Key.TARGETS_UP for q in queries):
        up, up_problems = targets_up(answers.get(Key.TARGETS_UP))
        problems.extend(up_problems)
        for role in Role:
            if up[role] is None:  # asked and not answered: the targets cannot be checked
                missing[role].append("targets_up")

    arrivals: Reading | None = None
    kv_capacity: float | None = None
    for q in queries:
        if q.key in (Key.FRESHNESS, Key.TARGETS_UP, Key.ROUTERS_DOWN) or q.key in HOLDER_QUERIES:
            continue
        if q.key == Key.KV_CAPACITY:  # optional: absent means "not reported"
            answer = answers.get(q.key)
            if answer is not None and q.pool not in stale:
                kv_capacity, issues = parse_kv_capacity(answer)
                problems.extend(f"{q.key}: {issue}" for issue in issues)
            continue
        if q.key == Key.ARRIVAL_RATE:  # no problem when absent: completions stand in
            stale_routers = router_stale(
                answers.get(Key.FRESHNESS, {}), now=now, max_age=max_age
            ) or routers_down(answers.get(Key.ROUTERS_DOWN))
            answer = answers.get(q.key)
            if stale_routers is not None or answer is None:
                arrivals = Reading(None, stale_routers or "not queried")
            else:
                arrivals = parse_scalar(answer, now=now, max_age=max_age)
            continue
        own = _pool_field(q.key)
        if q.pool in stale:
            values[q.key] = None
            if own is not None:
                missing[own[0]].append(own[1])
            continue
        answer = answers.get(q.key)
        if answer is None:
            values[q.key] = None
            problems.append(f"{q.key}: not queried")
            if own is not None:
                missing[own[0]].append(own[1])
            continue
        if q.by is not None:
            got, issues = parse_by_label(answer, q.by)
            by_pod = got
            problems.extend(f"{q.key}: {issue}" for issue in issues)
            continue
        reading = parse_scalar(answer, now=now, max_age=max_age)
        values[q.key] = reading.value
        if reading.problem is not None:
            problems.append(f"{q.key}: {reading.problem}")
            if own is not None:
                missing[own[0]].append(own[1])

    completions = Reading(values.get(Key.REQUEST_RATE))
    rate, source = choose_rate(arrivals, completions)
    if source is RateSource.ARRIVALS:  # R is known: the completions' problem is not one
        problems = [p for p in problems if not p.startswith(f"{Key.REQUEST_RATE}: ")]
    return MetricsSnapshot(
        time=now,
        request_rate=rate.value,
        rate_source=source,
        prompt_tokens=values.get(Key.PROMPT_TOKENS),
        output_tokens=values.get(Key.OUTPUT_TOKENS),
        prefill=PoolMetrics(
            queue_depth=values.get(Key.PREFILL_QUEUE),
            running=values.get(Key.PREFILL_RUNNING),
            latency_seconds=values.get(Key.PREFILL_LATENCY),
            tokens_per_second=values.get(Key.PREFILL_TPS),
            targets_up=up[Role.PREFILL],
            missing=tuple(missing[Role.PREFILL]),
        ),
        decode=PoolMetrics(
            queue_depth=values.get(Key.DECODE_QUEUE),
            running=values.get(Key.DECODE_RUNNING),
            latency_seconds=values.get(Key.DECODE_LATENCY),
            tokens_per_second=values.get(Key.DECODE_TPS),
            kv_usage=values.get(Key.DECODE_KV),
            kv_capacity_tokens=kv_capacity,
            running_by_pod=by_pod,
            targets_up=up[Role.DECODE],
            missing=tuple(missing[Role.DECODE]),
        ),
        problems=tuple(problems),
        holder=read_holder(answers, now=now, max_age=max_age),
    )


def _holder_value(answer: Mapping[str, Any] | None, *, now: float, max_age: float) -> float | None:
    if answer is None:
        return None
    return parse_scalar(answer, now=now, max_age=max_age).value


def read_holder(
    answers: Mapping[Key, Mapping[str, Any]], *, now: float, max_age: float
) -> HolderReading | None:
    """The holding proxy's reading (``queries.HOLDER_QUERIES``), or None when it was not
    asked, did not answer every query, or its newest scrape (``answers[FRESHNESS]``,
    role ``holder``) is older than ``max_age``. Held 3, tokens 120 / 24, none in flight, idle 0 ->
    ``HolderReading(3, 120, 24, 0, 0)``. Unknown is never 0: an empty answer (no holder
    scraped), a failed query or a stale holder leave the whole reading None, and the
    policy then neither wakes nor sleeps on it."""
    if Key.HOLDER_HELD not in answers:
        return None
    newest, _ = parse_by_label(answers.get(Key.FRESHNESS, {}), PROM_ROLE)
    stamp = newest.get(HOLDER_ROLE)
    if stamp is not None and now - stamp > max_age:
        return None
    got = {k: _holder_value(answers.get(k), now=now, max_age=max_age) for k in HOLDER_QUERIES}
    if any(v is None for v in got.values()):
        return None
    return HolderReading(
        held=got[Key.HOLDER_HELD],
        held_prompt_tokens=got[Key.HOLDER_PROMPT],
        held_output_tokens=got[Key.HOLDER_OUTPUT],
        in_flight=got[Key.HOLDER_IN_FLIGHT],
        idle_seconds=got[Key.HOLDER_IDLE],
    )
