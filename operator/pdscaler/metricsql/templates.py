"""The PromQL text of one PDDeployment's pools: Prometheus label names of the pod
labels, escaped selectors and matchers, range durations and the template renderer.

Owns: turning (namespace, name, role) into a selector a value cannot escape from, and
filling a template's placeholders in one pass. Must not: check templates (``check``),
choose a preset (``queries``) or read answers (``answers``).

>>> selector("serving", "chat", Role.PREFILL)
'{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="prefill"}'
"""

from __future__ import annotations

import re

from pdscaler.naming import LABEL_NAME, LABEL_ROLE, ROLE_ROUTER
from pdscaler.types import Role

# Prometheus label names of the pod labels, as a pod scrape's relabelling produces them.
PROM_NAMESPACE = "namespace"
PROM_POD = "pod"


def prom_label(k8s_label: str) -> str:
    """The Prometheus label name of a Kubernetes pod label, sanitised the way Prometheus'
    Kubernetes discovery does: ``pdscaler.io/role`` -> ``pdscaler_io_role``."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", k8s_label)


PROM_NAME = prom_label(LABEL_NAME)  # pdscaler_io_name
PROM_ROLE = prom_label(LABEL_ROLE)  # pdscaler_io_role
#: The role label value of a cell's router pods (their series: the arrivals).
ROUTER_ROLE = ROLE_ROUTER

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


def matchers(namespace: str, name: str, role: Role | str | None) -> str:
    """The label matchers of a pool (or of the whole deployment when ``role`` is None; of
    the cells' routers for ``ROUTER_ROLE``), without braces:
    ``namespace="ns",pdscaler_io_name="chat",pdscaler_io_role="decode"``."""
    parts = [
        f'{PROM_NAMESPACE}="{escape_label_value(namespace)}"',
        f'{PROM_NAME}="{escape_label_value(name)}"',
    ]
    if role is not None:
        parts.append(f'{PROM_ROLE}="{escape_label_value(str(role))}"')
    return ",".join(parts)


def selector(namespace: str, name: str, role: Role | str | None) -> str:
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
