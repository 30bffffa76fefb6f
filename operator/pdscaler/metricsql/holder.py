"""The holding proxy's gauges (``pdscaler.holder``) as queries and as a
``types.HolderReading`` (issue 29, item 3).

Owns: which series say there is demand at zero (``HOLDER_QUERIES``), when they are asked
(``holder_wanted``: both pools may reach zero, i.e. both ``replicas.min`` 0), and reading
their answers (``read_holder``). The holder's pods carry ``pdscaler.io/name`` and
``pdscaler.io/role: holder`` and are scraped as the routers are (their port named
``metrics``), so its series have the same scope labels:

>>> [q.promql for q in holder_queries("serving", "chat")][0]
'sum(pdscaler_holder_held_requests{namespace="serving",pdscaler_io_name="chat",pdscaler_io_role="holder"})'

Sums over the holder's pods, but ``idle_seconds``: the least of them (one pod busy is
not idle). Unknown is never 0: an empty answer (no holder scraped), a failed query or a
holder whose newest scrape is older than ``max_age`` leave the whole reading None, and
the policy then neither wakes nor sleeps on it. Must not: open a connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pdscaler.metricsql.queries import Key, Query
from pdscaler.metricsql.templates import PROM_ROLE, selector
from pdscaler.spec import PDDeploymentSpec
from pdscaler.types import HolderReading

#: The role label of the holding proxy's pods.
HOLDER_ROLE = "holder"

#: Each reading's query template (``{selector}``: the holder's pods of one PDDeployment).
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
    """The holder's five queries for one PDDeployment (module docstring)."""
    sel = selector(namespace, name, HOLDER_ROLE)
    return [Query(key, tpl.replace("{selector}", sel)) for key, tpl in HOLDER_QUERIES.items()]


def _value(answer: Mapping[str, Any] | None, *, now: float, max_age: float) -> float | None:
    from pdscaler.metricsql.answers import parse_scalar  # answers imports this module

    if answer is None:
        return None
    return parse_scalar(answer, now=now, max_age=max_age).value


def read_holder(
    answers: Mapping[Key, Mapping[str, Any]], *, now: float, max_age: float
) -> HolderReading | None:
    """The reading from the holder's answers, or None when it was not asked, did not
    answer every query, or its newest scrape (``answers[FRESHNESS]``, role ``holder``)
    is older than ``max_age``. Held 3, tokens 120 / 24, none in flight, idle 0 ->
    ``HolderReading(3, 120, 24, 0, 0)``."""
    from pdscaler.metricsql.answers import parse_by_label

    if Key.HOLDER_HELD not in answers:
        return None
    newest, _ = parse_by_label(answers.get(Key.FRESHNESS, {}), PROM_ROLE)
    stamp = newest.get(HOLDER_ROLE)
    if stamp is not None and now - stamp > max_age:
        return None
    got = {k: _value(answers.get(k), now=now, max_age=max_age) for k in HOLDER_QUERIES}
    if any(v is None for v in got.values()):
        return None
    return HolderReading(
        held=got[Key.HOLDER_HELD],
        held_prompt_tokens=got[Key.HOLDER_PROMPT],
        held_output_tokens=got[Key.HOLDER_OUTPUT],
        in_flight=got[Key.HOLDER_IN_FLIGHT],
        idle_seconds=got[Key.HOLDER_IDLE],
    )
