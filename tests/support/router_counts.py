"""Reading a cell router's request counter through the lab's Prometheus, for the
router lab tests (vllm-router's and sglang-router's arrival counters).

Owns: the namespace's router targets up (``router_targets``) and router series, a
background load that counts the requests it tried and those answered (``CountedLoad``),
waiting for the preset's arrival query (``metricsql.Key.ARRIVAL_RATE``) to answer a
positive rate, and reading a counter once the last scrape holds its final value (the
same total twice, two scrape intervals apart). Must not: assert what the counter means
(each test checks it against the requests its client sent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from pdlab.cluster import prometheus
from pdlab.cluster.lab import Lab
from pdscaler import metricsql
from pdscaler.spec import PDDeploymentSpec
from support.labkit import wait_for

SCRAPE_S = 2.0  # the lab Prometheus' scrape interval


class CountedLoad:
    """``send()`` (an answer, or None when it failed) every 0.2 s in the background while
    entered, counting ``tried`` and ``ok``. ``first()`` waits for one answer and restarts
    the count at 1 of 1: the attempts before the path was up never reached a router."""

    def __init__(self, send: Callable[[], str | None]) -> None:
        self.tried = self.ok = 0
        self._send = send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="counted-load", daemon=True)

    def one(self) -> str | None:
        self.tried += 1
        answer = self._send()
        self.ok += answer is not None
        return answer

    def first(self) -> None:
        wait_for(self.one, 120, "a streamed completion via the front")
        self.tried = self.ok = 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.one()
            self._stop.wait(0.2)

    def __enter__(self) -> CountedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def __repr__(self) -> str:
        return f"CountedLoad(tried={self.tried}, ok={self.ok})"


def router_targets(lab: Lab, namespace: str) -> list[dict[str, Any]] | None:
    """The namespace's router targets up in the lab's Prometheus, or None while none are."""
    ours = [
        t
        for t in prometheus.active_targets(lab.prometheus_url)
        if t["labels"].get("namespace") == namespace
        and t["labels"].get("pdscaler_io_role") == "router"
        and t["health"] == "up"
    ]
    return ours or None


def router_selector(namespace: str, name: str) -> str:
    """The label matcher of a PDDeployment's router series in the lab's Prometheus."""
    return f'{{namespace="{namespace}",pdscaler_io_name="{name}",pdscaler_io_role="router"}}'


def wait_router_series(lab: Lab, namespace: str, name: str, metric: str) -> list[dict[str, Any]]:
    """The router series of ``metric`` once any is above 0 (60 s at most)."""
    sel = router_selector(namespace, name)
    return wait_for(lambda: lab.query(f"{metric}{sel} > 0"), 60, f"{metric} of the routers")


def wait_arrival_rate(
    lab: Lab, spec: PDDeploymentSpec, namespace: str, name: str
) -> list[dict[str, Any]]:
    """The answer of ``spec``'s arrival query once it is a positive rate (60 s at most)."""
    (q,) = [
        q
        for q in metricsql.build_queries(spec, namespace, name)
        if q.key == metricsql.Key.ARRIVAL_RATE
    ]

    def positive() -> list[dict[str, Any]] | None:
        got = lab.query(q.promql)
        return got if got and float(got[0]["value"][1]) > 0 else None

    return wait_for(positive, 60, f"a positive arrival rate from {q.promql}")


def settled_total(lab: Lab, promql: str) -> float:
    """``promql``'s (one-series) value once two reads ``2 x SCRAPE_S`` apart agree."""

    def settled() -> float | None:
        first = lab.query(promql)
        time.sleep(2 * SCRAPE_S)
        again = lab.query(promql)
        same = first and again and first[0]["value"][1] == again[0]["value"][1]
        return float(again[0]["value"][1]) if same else None

    return wait_for(settled, 60, f"{promql} settled in Prometheus")
