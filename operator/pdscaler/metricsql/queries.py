"""The queries of one snapshot: which preset's templates a spec uses, and each template
rendered for the pool it is read on (module ``pdscaler.metricsql``: where each quantity
is read).

Owns: ``preset_for``, ``Key`` (what each query measures), ``Query`` and
``build_queries`` (at most 15, the staleness and targets-up queries first; R twice: as
the routers' arrivals and as the prefill pool's completions, ``answers`` picks). Must not:
parse answers (``answers``) or open a connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pdscaler.metricsql.check import InvalidQueryError, check_queries
from pdscaler.metricsql.templates import (
    PROM_POD,
    PROM_ROLE,
    ROUTER_ROLE,
    matchers,
    promql_duration,
    render,
    selector,
)
from pdscaler.presets import PRESETS, Preset
from pdscaler.spec import CustomQueries, PDDeploymentSpec
from pdscaler.types import Role

# ---------------------------------------------------------------------- which preset


def custom_preset(queries: CustomQueries) -> Preset:
    """The ``custom`` preset from ``spec.metrics.queries``. Each template sees the
    selector of the pool it is read on (module docstring); there is no per-pod or
    tokens/s template, so those stay unknown. Raises ``InvalidQueryError`` with every
    problem ``check_queries`` finds."""
    problems = check_queries(queries)
    if problems:
        raise InvalidQueryError("; ".join(problems))
    return Preset(
        request_rate=queries.request_rate,
        prompt_tokens=queries.prompt_tokens,
        output_tokens=queries.output_tokens,
        ttft=queries.ttft,
        tpot=queries.tpot,
        queue_depth=queries.queue_depth,
        running=queries.running,
        kv_usage=queries.kv_usage,
    )


def preset_for(spec: PDDeploymentSpec) -> Preset:
    """The templates ``spec.metrics.preset`` names: ``vllm`` -> ``presets.VLLM``;
    ``custom`` -> ``custom_preset(spec.metrics.queries)``."""
    if spec.metrics.preset == "custom":
        if spec.metrics.queries is None:  # the spec's validator forbids it; be explicit
            raise ValueError("metrics.preset is custom but metrics.queries is missing")
        return custom_preset(spec.metrics.queries)
    return PRESETS[spec.metrics.preset]


# ---------------------------------------------------------------------------- queries


class Key(StrEnum):
    """What each query measures; ``prefill.``/``decode.`` prefixes mark per-pool ones."""

    FRESHNESS = "freshness"
    TARGETS_UP = "targets_up"
    REQUEST_RATE = "request_rate"
    ARRIVAL_RATE = "arrival_rate"  # R on the cells' routers (pool None, role "router")
    ROUTERS_DOWN = "routers_down"  # router targets not scraped (up 0): arrivals read low
    PROMPT_TOKENS = "prompt_tokens"
    OUTPUT_TOKENS = "output_tokens"
    PREFILL_LATENCY = "prefill.latency_seconds"  # TTFT
    DECODE_LATENCY = "decode.latency_seconds"  # TPOT
    PREFILL_QUEUE = "prefill.queue_depth"
    DECODE_QUEUE = "decode.queue_depth"
    PREFILL_RUNNING = "prefill.running"
    DECODE_RUNNING = "decode.running"
    PREFILL_TPS = "prefill.tokens_per_second"
    DECODE_TPS = "decode.tokens_per_second"
    DECODE_KV = "decode.kv_usage"
    DECODE_RUNNING_BY_POD = "decode.running_by_pod"
    # the decode replicas' KV capacity as the engine reports it (read on decode; not
    # one of the pool's required signals: absent, the memory term needs the spec's M)
    KV_CAPACITY = "kv_capacity"
    # the holding proxy's gauges (``HOLDER_QUERIES`` below): demand at zero replicas
    HOLDER_HELD = "holder.held"
    HOLDER_PROMPT = "holder.held_prompt_tokens"
    HOLDER_OUTPUT = "holder.held_output_tokens"
    HOLDER_IN_FLIGHT = "holder.in_flight"
    HOLDER_IDLE = "holder.idle_seconds"


@dataclass(frozen=True)
class Query:
    """One PromQL instant query. ``by``: the answer is a vector keyed by that label
    (per pod, per role); None: exactly one series is expected. ``pool``: the pool whose
    pods it reads (None: the whole deployment, e.g. Dynamo's frontend)."""

    key: Key
    promql: str
    by: str | None = None
    pool: Role | None = None  # the pool it is read on (its staleness voids the value)


# Which pool each per-quantity query is rendered for, when load_scope == "pool".
_POOL_OF: Mapping[Key, Role] = {
    Key.REQUEST_RATE: Role.PREFILL,
    Key.PROMPT_TOKENS: Role.PREFILL,
    Key.PREFILL_LATENCY: Role.PREFILL,
    Key.OUTPUT_TOKENS: Role.DECODE,
    Key.DECODE_LATENCY: Role.DECODE,
}


def build_queries(spec: PDDeploymentSpec, namespace: str, name: str) -> list[Query]:
    """Every query of one snapshot, in the order they are run (at most 16, and the
    holder's 5 when both pools may stand at zero).

    The first, ``max by (pdscaler_io_role) (timestamp(up{...}))``, gives the time of
    each pool's newest scrape, for the staleness check; the second,
    ``sum by (pdscaler_io_role) (up{...})``, each pool's targets up.
    """
    preset = preset_for(spec)
    window = promql_duration(spec.metrics.window_seconds)
    quantile = spec.slo.percentile

    def fill(template: str, role: Role | str | None) -> str:
        return render(
            template,
            sel=selector(namespace, name, role),
            match=matchers(namespace, name, role),
            window=window,
            quantile=quantile,
        )

    deployment = selector(namespace, name, None)
    queries = [
        Query(Key.FRESHNESS, f"max by ({PROM_ROLE}) (timestamp(up{deployment}))", by=PROM_ROLE),
        Query(Key.TARGETS_UP, f"sum by ({PROM_ROLE}) (up{deployment})", by=PROM_ROLE),
    ]
    for key, template in (
        (Key.REQUEST_RATE, preset.request_rate),
        (Key.PROMPT_TOKENS, preset.prompt_tokens),
        (Key.OUTPUT_TOKENS, preset.output_tokens),
        (Key.PREFILL_LATENCY, preset.ttft),
        (Key.DECODE_LATENCY, preset.tpot),
    ):
        role = None if preset.load_scope == "deployment" else _POOL_OF[key]
        queries.append(Query(key, fill(template, role), pool=role))
    if preset.arrival_rate is not None:
        queries.append(Query(Key.ARRIVAL_RATE, fill(preset.arrival_rate, ROUTER_ROLE)))
        routers = selector(namespace, name, ROUTER_ROLE)
        queries.append(Query(Key.ROUTERS_DOWN, f"count(up{routers} == 0)"))
    per_pool: list[tuple[Key, str | None, Role, str | None]] = [
        (Key.PREFILL_QUEUE, preset.queue_depth, Role.PREFILL, None),
        (Key.DECODE_QUEUE, preset.queue_depth, Role.DECODE, None),
        (Key.PREFILL_RUNNING, preset.running, Role.PREFILL, None),
        (Key.DECODE_RUNNING, preset.running, Role.DECODE, None),
        (Key.PREFILL_TPS, preset.prefill_tokens_per_second, Role.PREFILL, None),
        (Key.DECODE_TPS, preset.decode_tokens_per_second, Role.DECODE, None),
        (Key.DECODE_KV, preset.kv_usage, Role.DECODE, None),
        (Key.DECODE_RUNNING_BY_POD, preset.running_by_pod, Role.DECODE, PROM_POD),
    ]
    for key, maybe, role, by in per_pool:
        if maybe is not None:
            queries.append(Query(key, fill(maybe, role), by=by, pool=role))
    if preset.kv_capacity is not None:
        kv = Query(Key.KV_CAPACITY, fill(preset.kv_capacity, Role.DECODE), pool=Role.DECODE)
        queries.append(kv)
    if holder_wanted(spec):  # both pools may stand at zero: ask the holding proxy
        queries.extend(holder_queries(namespace, name))
    return queries


# ------------------------------------------------------------ the holding proxy
# Its gauges (``pdscaler.holder``, issue 29 item 3) say there is demand at zero. The
# holder's pods carry ``pdscaler.io/name`` and ``pdscaler.io/role: holder`` and are
# scraped as the routers are (their port named ``metrics``), so its series have the same
# scope labels; ``answers.read_holder`` reads them.

#: The role label of the holding proxy's pods.
HOLDER_ROLE = "holder"

#: Each reading's query template (``{selector}``: the holder's pods of one PDDeployment).
#: Sums over the holder's pods, but ``idle_seconds``: the least of them (one pod busy is
#: not idle).
HOLDER_QUERIES: Mapping[Key, str] = {
    Key.HOLDER_HELD: "sum(pdscaler_holder_held_requests{selector})",
    Key.HOLDER_PROMPT: "sum(pdscaler_holder_held_prompt_tokens{selector})",
    Key.HOLDER_OUTPUT: "sum(pdscaler_holder_held_output_tokens{selector})",
    Key.HOLDER_IN_FLIGHT: "sum(pdscaler_holder_in_flight_requests{selector})",
    Key.HOLDER_IDLE: "min(pdscaler_holder_idle_seconds{selector})",
}


def holder_wanted(spec: PDDeploymentSpec) -> bool:
    """Both pools may stand at zero (both ``replicas.min`` 0): only then is the holder
    asked (5 queries more a tick)."""
    return spec.prefill.replicas.min == 0 and spec.decode.replicas.min == 0


def holder_queries(namespace: str, name: str) -> list[Query]:
    """The holder's five queries for one PDDeployment:

    >>> [q.promql for q in holder_queries("serving", "chat")][0]
    'sum(pdscaler_holder_held_requests{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="holder"})'
    """
    sel = selector(namespace, name, HOLDER_ROLE)
    return [Query(key, tpl.replace("{selector}", sel)) for key, tpl in HOLDER_QUERIES.items()]
