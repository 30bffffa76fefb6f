"""Checks of a custom query template before any query runs: known placeholders,
balanced brackets, and scoping to the deployment.

Owns: ``check_template`` / ``check_queries`` and the scoping rule (every vector selector
carries ``{selector}`` or ``{matchers}``, and none matches on ``namespace``, ``pod`` or
``pdscaler_io_*`` itself). Must not: render queries for a pool or parse answers.

>>> check_template("sum(vllm:num_requests_waiting)")
['not scoped to the deployment: use {selector} or {matchers}']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pdscaler.metricsql.templates import (
    _PLACEHOLDER,
    PLACEHOLDERS,
    PROM_NAMESPACE,
    PROM_POD,
    render,
)
from pdscaler.spec import CustomQueries


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
