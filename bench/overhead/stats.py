"""Numbers for the operator-overhead benchmark: percentiles of samples, quantiles from a
Prometheus histogram, and the operator's ``/metrics`` text read into plain numbers.

Owns: ``percentile`` (the simulator's, numpy's rule, refusing empty input),
``Summary`` / ``summarize`` (n, p50, p99, mean, max), ``histogram_quantile`` (the
simulator's ``pdscaler.sim.prom.histogram_quantile`` on cumulative buckets: what
PromQL's ``histogram_quantile`` does: linear interpolation inside the bucket holding
the rank), and ``Exposition`` (a parsed text exposition, with counter deltas between
two scrapes). Pure: no I/O, no clock reads. Must not: invent a number for an empty
input (it raises ``ValueError`` or returns ``None``, and the report says "not measured").

Worked numbers::

    percentile([1, 2, 3, 4], 50)  -> 2.5      # rank 1.5 between 2 and 3
    percentile([1, 2, 3, 4], 99)  -> 3.97     # rank 2.97
    histogram_quantile(0.5, [(0.01, 10), (0.025, 30), (inf, 40)]) -> 0.0175
        # rank 20 falls in (0.01, 0.025] holding counts 10..30: 0.01 + 0.015 * 10/20
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from pdscaler.sim.prom import histogram_quantile as sim_histogram_quantile
from pdscaler.sim.results import percentile as sim_percentile

Labels = frozenset[tuple[str, str]]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks
    (``pdscaler.sim.results.percentile``, numpy's rule), refusing empty input or a bad
    ``q``: ``percentile([4, 1, 3, 2], 50)`` -> 2.5."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    return sim_percentile(np.asarray(values, dtype=np.float64), q)


@dataclass(frozen=True)
class Summary:
    """n samples: p50, p99, mean and max, in the samples' unit."""

    n: int
    p50: float
    p99: float
    mean: float
    max: float

    def scaled(self, factor: float) -> Summary:
        """The same summary in another unit: seconds -> ms is ``scaled(1000)``."""
        return Summary(
            self.n, self.p50 * factor, self.p99 * factor, self.mean * factor, self.max * factor
        )


def summarize(values: Sequence[float]) -> Summary:
    """``summarize([1, 2, 3, 4])`` -> n 4, p50 2.5, p99 3.97, mean 2.5, max 4."""
    if not values:
        raise ValueError("summary of no values")
    return Summary(
        n=len(values),
        p50=percentile(values, 50),
        p99=percentile(values, 99),
        mean=math.fsum(values) / len(values),
        max=max(values),
    )


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Quantile ``q`` (0-1) of a cumulative histogram ``[(le, count), ...]`` as PromQL
    computes it (``pdscaler.sim.prom.histogram_quantile`` on the per-bucket counts); None
    when it holds no observations. A rank in the ``+Inf`` bucket returns the highest
    finite bound (PromQL's rule)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    ordered = sorted(buckets)
    bounds = [le for le, _ in ordered]
    cumulative = [count for _, count in ordered]
    counts = [c - p for c, p in zip(cumulative, [0.0, *cumulative], strict=False)]
    return sim_histogram_quantile(q, counts, bounds)


@dataclass(frozen=True)
class Exposition:
    """One scrape of a Prometheus text exposition: ``(sample name, labels) -> value``."""

    samples: Mapping[tuple[str, Labels], float]

    @staticmethod
    def parse(text: str) -> Exposition:
        out: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out[(s.name, frozenset(s.labels.items()))] = float(s.value)
        return Exposition(out)

    def total(self, name: str, **match: str) -> float:
        """Sum of the samples named ``name`` whose labels include ``match`` (0 if none)."""
        want = set(match.items())
        return math.fsum(
            v for (n, labels), v in self.samples.items() if n == name and want <= labels
        )

    def minus(self, earlier: Exposition) -> Exposition:
        """Counter deltas since ``earlier`` (a series absent then counts from 0)."""
        return Exposition({k: v - earlier.samples.get(k, 0.0) for k, v in self.samples.items()})

    def buckets(self, name: str) -> list[tuple[float, float]]:
        """``<name>_bucket`` summed over every label set but ``le``: [(le, count), ...]."""
        acc: dict[float, float] = {}
        for (n, labels), v in self.samples.items():
            if n != f"{name}_bucket":
                continue
            le = float(dict(labels)["le"])
            acc[le] = acc.get(le, 0.0) + v
        return sorted(acc.items())

    def by_label(self, name: str, label: str, **match: str) -> dict[str, float]:
        """``name`` summed per value of ``label``: {"GET": 120.0, "LIST": 300.0}."""
        return {k[0]: v for k, v in self.by_labels(name, (label,), **match).items()}

    def by_labels(
        self, name: str, labels: Sequence[str], **match: str
    ) -> dict[tuple[str, ...], float]:
        """``name`` summed per combination of ``labels``: by_labels("apiserver_request_total",
        ("verb", "resource")) -> {("LIST", "pods"): 300.0, ("GET", "pddeployments"): 150.0}."""
        want = set(match.items())
        out: dict[tuple[str, ...], float] = {}
        for (n, have), v in self.samples.items():
            if n == name and want <= have:
                d = dict(have)
                key = tuple(d.get(label, "") for label in labels)
                out[key] = out.get(key, 0.0) + v
        return out


def rate(delta: float, seconds: float) -> float:
    """Per-second rate of a counter delta: rate(300, 150) -> 2.0."""
    if seconds <= 0:
        raise ValueError("rate over a non-positive duration")
    return delta / seconds


def fmt_seconds(value: float | None) -> str:
    """Human latency: 0.000312 -> "312 µs", 0.0471 -> "47.1 ms", 2.5 -> "2.50 s"."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"
