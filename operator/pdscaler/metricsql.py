"""PromQL for one PDDeployment: templates filled and checked, the queries of a preset
(``presets``) scoped to its pools, and the reading of Prometheus' answers into a
``MetricsSnapshot``. Pure: builds strings and parses JSON already fetched; it never
opens a connection (``prometheus.py`` does).

Scoping. Every engine series carries the labels ``namespace``, ``pod``,
``pdscaler_io_name`` and ``pdscaler_io_role`` (the pod labels ``pdscaler.io/name`` and
``pdscaler.io/role``, sanitised as Prometheus' Kubernetes discovery does). The scrape
configuration that gives them: docs/operator.md, "Scraping the engines". A pool's
selector is then

>>> selector("serving", "chat", Role.PREFILL)
'{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="prefill"}'

Label values are escaped as PromQL string literals, so a name cannot inject PromQL:

>>> selector("ns", 'x"} or vector(1) #', None)
'{namespace="ns",pdscaler_io_name="x\\\\"} or vector(1) #"}'

Where each quantity is read (the same for every preset, documented once):

* R, the request rate, and L_p, the mean prompt tokens: on the PREFILL pool (every
  request passes there once; in vLLM's P/D setups the decode side also re-counts the
  prompt, so the decode pool would count it too but later).
* L_d, the mean output tokens: on the DECODE pool (the prefill side of a P/D pair runs
  each request with ``max_tokens=1``, so its output histogram says 1).
* TTFT at the SLO percentile: on the PREFILL pool. In a P/D pair the client's TTFT is
  the prefill-side TTFT (queue + prefill) plus the decode side's KV pull and first step;
  the prefill side is the part the prefill pool's size controls, and the decode side's
  waiting shows up as the decode queue depth, which the policy reads separately.
* TPOT at the SLO percentile, KV usage and per-pod running requests: on the DECODE pool.
* Queue depth, running requests and tokens/s: per pool.

The Dynamo preset is the exception: Dynamo's HTTP frontend observes R, L_p, L_d, TTFT and
TPOT end to end, so those are read with the deployment selector (no role): label the
frontend pods ``pdscaler.io/name: <name>`` too. Its per-pool signals come from the engine
metrics Dynamo's workers pass through (vLLM's, or SGLang's).

Unknown is never 0: an empty answer, NaN, +/-Inf, a stale sample, several series where
one was expected, or a query error each give ``None`` plus a sentence in
``MetricsSnapshot.problems``. A pool whose newest scrape (``timestamp(up)``) is older
than ``max_age`` has all its values set to ``None``: without that check a gauge would
keep answering its last value for Prometheus' 5 min lookback. That check is per pool (the
newest of its pods), and ``up`` is written on every scrape, failed or not, so it cannot
see targets that fail: ``sum by (pdscaler_io_role) (up{...})`` counts each pool's
targets whose last scrape succeeded (``PoolMetrics.targets_up``; a pool absent from the
answer has 0), which the policy compares with the pool's Ready pods. Each pool's own
signals that came back unknown are named in ``PoolMetrics.missing`` (all of them for a
stale pool), so the policy never scales that pool down on them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from pdscaler.presets import PRESETS, Preset
from pdscaler.spec import CustomQueries, PDDeploymentSpec
from pdscaler.types import MetricsSnapshot, PoolMetrics, Role

# Prometheus label names of the pod labels, as a pod scrape's relabelling produces them.
PROM_NAMESPACE = "namespace"
PROM_POD = "pod"


def prom_label(k8s_label: str) -> str:
    """The Prometheus label name of a Kubernetes pod label, sanitised the way Prometheus'
    Kubernetes discovery does: ``pdscaler.io/role`` -> ``pdscaler_io_role``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", k8s_label)


PROM_NAME = prom_label(LABEL_NAME)  # pdscaler_io_name
PROM_ROLE = prom_label(LABEL_ROLE)  # pdscaler_io_role

# Default age beyond which a pool's newest scrape is "stale". Scrape intervals are
# typically 15-30 s; Prometheus itself would keep serving a gauge's last value for its
# 5 min lookback, far too long for a 15 s autoscaling tick.
DEFAULT_MAX_AGE_SECONDS = 60.0

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_label_value(value: str) -> str:
    """Escape a string for a double-quoted PromQL label value: backslash, double quote
    and line breaks. ``a"b\\c`` -> ``a\\"b\\\\c``; other characters (UTF-8) pass as is.

    >>> escape_label_value('a"b')
    'a\\\\"b'
    """
    return "".join(_ESCAPES.get(c, c) for c in value)


def matchers(namespace: str, name: str, role: Role | None) -> str:
    """The label matchers of a pool (or of the whole deployment when ``role`` is None),
    without braces: ``namespace="ns",pdscaler_io_name="chat",pdscaler_io_role="decode"``."""
    parts = [
        f'{PROM_NAMESPACE}="{escape_label_value(namespace)}"',
        f'{PROM_NAME}="{escape_label_value(name)}"',
    ]
    if role is not None:
        parts.append(f'{PROM_ROLE}="{escape_label_value(role.value)}"')
    return ",".join(parts)


def selector(namespace: str, name: str, role: Role | None) -> str:
    """``matchers`` in braces: a complete PromQL selector to append to a metric name."""
    return "{" + matchers(namespace, name, role) + "}"


def promql_duration(seconds: float) -> str:
    """A PromQL range duration for ``seconds``, in a form every Prometheus accepts
    (no fractions, no compound units): 120.0 -> ``120s``, 0.5 -> ``500ms``."""
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


PLACEHOLDERS = ("selector", "matchers", "window", "quantile")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def render(template: str, *, sel: str, match: str, window: str, quantile: float) -> str:
    """Fill a query template. Placeholders: ``{selector}`` (a complete selector with
    braces, ``metric{selector}``), ``{matchers}`` (the same without braces, to add your
    own: ``metric{{matchers},job="x"}``), ``{window}`` and ``{quantile}``. One pass over
    the template, so PromQL's own braces need no doubling and a placeholder-like text
    inside a substituted value is left alone.

    >>> render("rate(x{selector}[{window}])", sel='{a="b"}', match='a="b"', window="2m",
    ...        quantile=0.95)
    'rate(x{a="b"}[2m])'
    """
    values = {"selector": sel, "matchers": match, "window": window, "quantile": repr(quantile)}

    def fill(m: re.Match[str]) -> str:
        return values.get(m.group(1), m.group(0))

    return _PLACEHOLDER.sub(fill, template)


class InvalidQueryError(ValueError):
    """A custom query template that cannot be used; the message names the field."""


def _balanced(text: str) -> str | None:
    """None if ``()``, ``[]`` and ``{}`` nest properly outside string literals, else
    what is wrong: ``sum(rate(x[2m])`` -> ``"unclosed '('"``."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    quote: str | None = None
    escaped = False
    for c in text:
        if quote is not None:
            if escaped:
                escaped = False
            elif c == "\\" and quote != "`":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'`":
            quote = c
        elif c in "([{":
            stack.append(c)
        elif c in pairs and (not stack or stack.pop() != pairs[c]):
            return f"unbalanced {c!r}"
    if quote is not None:
        return "unterminated string literal"
    return f"unclosed {stack[-1]!r}" if stack else None


# ------------------------------------------------------------------ scoping checks

#: Labels pdscaler's own matchers set; a template may not match on them itself.
SCOPE_LABELS = (PROM_NAMESPACE, PROM_POD)
SCOPE_LABEL_PREFIX = "pdscaler_io_"
_TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<comment>\#[^\n]*)
      | (?P<placeholder>\{[A-Za-z_][A-Za-z0-9_]*\})
      | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<number>\.?[0-9][0-9A-Za-z_.]*)
      | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
      | (?P<op>!=|=~|!~|==|>=|<=|[-+*/%^<>=,()\[\]{}@])
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
# Identifiers that are never a metric name where they stand.
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"})
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_MATCH_OPS = frozenset({"=", "!=", "=~", "!~"})


def _tokens(template: str) -> list[tuple[str, str]]:
    """(kind, text) of every PromQL token of a template, placeholders as one token each,
    spaces and comments dropped."""
    out: list[tuple[str, str]] = []
    for m in _TOKEN.finditer(template):
        kind = m.lastgroup or "other"
        if kind not in ("space", "comment"):
            out.append((kind, m.group()))
    return out


def _skip_group(toks: Sequence[tuple[str, str]], i: int, open_: str, close: str) -> int:
    """The index after the bracket that closes the one at ``i`` (``len`` if none)."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j] == ("op", open_):
            depth += 1
        elif toks[j] == ("op", close):
            depth -= 1
            if depth == 0:
                return j + 1
    return len(toks)


def _unquote(text: str) -> str:
    return text[1:-1] if text[:1] in "\"'`" else text


def _matcher_block(toks: Sequence[tuple[str, str]], i: int) -> tuple[bool, list[str], int]:
    """Read the ``{...}`` at ``i``: (holds ``{matchers}``, the scope labels it matches
    on itself, the index after it)."""
    end = _skip_group(toks, i, "{", "}")
    scoped = False
    refused: list[str] = []
    body = toks[i + 1 : end - 1]
    for k, (kind, text) in enumerate(body):
        if (kind, text) == ("placeholder", "{matchers}"):
            scoped = True
        elif kind in ("ident", "string") and k + 1 < len(body):
            nxt = body[k + 1]
            label = _unquote(text)
            if (
                nxt[0] == "op"
                and nxt[1] in _MATCH_OPS
                and (label in SCOPE_LABELS or label.startswith(SCOPE_LABEL_PREFIX))
            ):
                refused.append(label)
    return scoped, refused, end


def scope_problems(template: str) -> list[str]:
    """Every vector selector of ``template`` that could read series outside the
    PDDeployment's own: a selector without ``{selector}`` (``metric{selector}``, or
    ``{selector}`` alone) or ``{matchers}`` inside its braces, and any matcher on the
    labels pdscaler scopes with (``namespace``, ``pod``, ``pdscaler_io_*``). Function
    names, grouping labels (``by (pod)``), keywords, strings, ranges and comments are
    not selectors. Pure; assumes balanced brackets (``check_template`` checks first).

    >>> for p in scope_problems('sum(x{selector}) or sum(x{namespace="other"}) or y'):
    ...     print(p)
    selector x{...} has no {selector} or {matchers}: it would read other deployments
    selector x{...} matches on namespace: pdscaler sets that label itself
    selector y has no {selector} or {matchers}: it would read other deployments
    >>> scope_problems('sum by (pod) (x{{matchers},job="a"}[{window}])')
    []
    """
    toks = _tokens(template)
    problems: list[str] = []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else ("", "")
        if kind == "ident" and text.lower() in _GROUPING:
            i = _skip_group(toks, i + 1, "(", ")") if nxt == ("op", "(") else i + 1
            continue
        aggregation = nxt[0] == "ident" and nxt[1].lower() in ("by", "without")
        if kind == "ident" and (text.lower() in _KEYWORDS or nxt == ("op", "(") or aggregation):
            i += 1  # a keyword, or a function / aggregation name
            continue
        if (kind, text) == ("op", "["):
            i = _skip_group(toks, i, "[", "]")  # a range or subquery: durations only
            continue
        if kind == "ident" or (kind, text) == ("op", "{"):
            name = text if kind == "ident" else ""
            start = i + 1 if kind == "ident" else i
            if kind == "ident" and nxt == ("placeholder", "{selector}"):
                i += 2
                continue
            braces = start < len(toks) and toks[start] == ("op", "{")
            if braces:
                scoped, refused, i = _matcher_block(toks, start)
            else:
                scoped, refused, i = False, [], start
            shown = name + ("{...}" if braces else "")
            if not scoped:
                problems.append(
                    f"selector {shown} has no {{selector}} or {{matchers}}: "
                    "it would read other deployments"
                )
            problems.extend(
                f"selector {shown} matches on {label}: pdscaler sets that label itself"
                for label in refused
            )
            continue
        i += 1
    return problems


def check_template(template: str) -> list[str]:
    """What is wrong with one custom query template (empty list: usable).

    It must be scoped to the deployment: every vector selector carries ``{selector}``
    or ``{matchers}`` and none matches on ``namespace``, ``pod`` or ``pdscaler_io_*``
    itself (``scope_problems``; otherwise ``... or sum(x{namespace="other"})`` would
    read another tenant's series). It uses only the known placeholders, and has balanced
    brackets (checked after substitution, outside string literals). Prometheus' own
    parser has the last word (a syntax error comes back as a failed query); this
    catches the mistakes worth reporting before any query runs.

    >>> check_template("sum(vllm:num_requests_waiting{selector})")
    []
    >>> check_template("sum(vllm:num_requests_waiting)")
    ['not scoped to the deployment: use {selector} or {matchers}']
    """
    problems: list[str] = []
    used = set(_PLACEHOLDER.findall(template))
    unknown = sorted(used - set(PLACEHOLDERS))
    if unknown:
        known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
        names = ", ".join("{" + u + "}" for u in unknown)
        problems.append(f"unknown placeholder {names} (known: {known})")
    scoped = bool(used & {"selector", "matchers"})
    if not scoped:
        problems.append("not scoped to the deployment: use {selector} or {matchers}")
    filled = render(template, sel='{a="b"}', match='a="b"', window="1m", quantile=0.5)
    wrong = _balanced(filled)
    if wrong is not None:
        problems.append(wrong)
    elif scoped:
        problems.extend(scope_problems(template))
    return problems


def check_queries(queries: CustomQueries) -> list[str]:
    """``check_template`` on every template of ``metrics.queries``, each problem
    prefixed with its field: ``metrics.queries.ttft: unknown placeholder {foo} ...``."""
    out: list[str] = []
    for field_name, field_info in CustomQueries.model_fields.items():
        template = getattr(queries, field_name)
        if template is None:
            continue
        alias = field_info.alias or field_name
        out.extend(f"metrics.queries.{alias}: {p}" for p in check_template(template))
    return out


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
    """Every query of one snapshot, in the order they are run (at most 14).

    The first, ``max by (pdscaler_io_role) (timestamp(up{...}))``, gives the time of
    each pool's newest scrape, for the staleness check; the second,
    ``sum by (pdscaler_io_role) (up{...})``, each pool's targets up.
    """
    preset = preset_for(spec)
    window = promql_duration(spec.metrics.window_seconds)
    quantile = spec.slo.percentile

    def fill(template: str, role: Role | None) -> str:
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
    return queries


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


def parse_scalar(answer: Mapping[str, Any], *, now: float, max_age: float) -> Reading:
    """The single value of an instant-query answer.

    Unknown (None + problem) when: the query failed; the answer is empty (no such
    series: a wrong preset, pods not scraped, nothing ever observed); the value is NaN
    or +/-Inf (e.g. 0/0 for a mean when no request finished in the window); the answer's
    time is more than ``max_age`` seconds before ``now`` (``prometheus.py`` evaluates at
    ``now``, so this only catches an answer evaluated elsewhere, e.g. by a caching proxy;
    stale scrapes are caught by ``stale_pools``); or several series came back (the
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

    for q in queries:
        if q.key in (Key.FRESHNESS, Key.TARGETS_UP):
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

    return MetricsSnapshot(
        time=now,
        request_rate=values.get(Key.REQUEST_RATE),
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
            running_by_pod=by_pod,
            targets_up=up[Role.DECODE],
            missing=tuple(missing[Role.DECODE]),
        ),
        problems=tuple(problems),
    )
