"""The figures of measurement 3 (one operator process, many PDDeployments), computed
from what the window recorded: ``Window`` in, rows of ``[quantity, value, how]`` out.

Owns: the arithmetic: ticks and their rate from the operator's reconcile histogram,
reconcile p50/p99 estimated from its buckets, mean CPU % of one core and its spread,
peak RSS, threads, writes/s from ``pdscaler_api_writes_total``, the API server's
request rate (``apiserver_request_total``, watches left out) for the resources the
operator uses, per tick and by verb, and for all clients, each with the operator running
and stopped, and Prometheus' query rate. Pure: no I/O.

Worked numbers: 2,000 ticks in a 150 s window are 13.3 ticks/s (200 PDDeployments at
15 s); 8,000 requests for pods and PDDeployments in that window are 53.3/s, 4.0 per
tick (a GET of the PDDeployment and three LISTs).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.overhead.process import ProcSampler
from bench.overhead.stats import Exposition, fmt_seconds, histogram_quantile, percentile, rate

NOT_COUNTED_VERBS = frozenset({"WATCH", "CONNECT"})
#: What the operator reads and writes (in steady state nothing else asks for these
#: without a watch: the controllers and kwok use informers).
OPERATOR_RESOURCES = frozenset({"pddeployments", "deployments", "services", "pods", "events"})
QUERY_HANDLER = "/api/v1/query"
LATENESS = "pdscaler_tick_lateness_seconds"


@dataclass
class Scrapes:
    """Expositions: operator and Prometheus at the window's start and end; the API
    server at the window's start and end, then at the baseline's start and end."""

    operator: list[Exposition] = field(default_factory=list)
    apiserver: list[Exposition] = field(default_factory=list)
    prometheus: list[Exposition] = field(default_factory=list)


@dataclass
class Window:
    """What one sampling window recorded. ``reconciled`` PDDeployments of ``pdds`` got
    their first tick (all of them, in a healthy run)."""

    pdds: int
    reconciled: int
    interval_s: float
    sampler: ProcSampler
    scrapes: Scrapes = field(default_factory=Scrapes)
    window_s: float = 0.0
    baseline_s: float = 0.0
    sample_every_s: float = 5.0
    #: the machine's 1-min load average at each sample of the window
    loads: list[float] = field(default_factory=list)


def api_requests(
    e: Exposition, resources: frozenset[str] | None = None
) -> dict[tuple[str, str], float]:
    """Requests the API server answered per (verb, resource), watches and exec/proxy
    connections left out; only ``resources`` if given."""
    by = e.by_labels("apiserver_request_total", ("verb", "resource"))
    return {
        (verb, res): v
        for (verb, res), v in by.items()
        if verb not in NOT_COUNTED_VERBS and (resources is None or res in resources)
    }


def request_rates(
    before: Exposition, after: Exposition, seconds: float, resources: frozenset[str] | None = None
) -> dict[tuple[str, str], float]:
    """Per (verb, resource), requests/s between two scrapes (zero rates dropped)."""
    old = api_requests(before, resources)
    new = api_requests(after, resources)
    rates = {k: rate(v - old.get(k, 0.0), seconds) for k, v in new.items()}
    return {k: r for k, r in rates.items() if r > 0}


def per_tick_breakdown(rates: dict[tuple[str, str], float], tick_rate: float) -> str:
    """ "LIST pods 1.00, GET pddeployments 1.00, ..." per tick, largest first."""
    if tick_rate <= 0:
        return "no ticks"
    ordered = sorted(rates.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{verb} {res} {r / tick_rate:.2f}" for (verb, res), r in ordered)


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def breakdown(w: Window) -> str:
    """The operator's requests per tick by verb and resource, from the window."""
    a = w.scrapes.apiserver
    op = w.scrapes.operator[1].minus(w.scrapes.operator[0])
    tick_rate = rate(op.total("pdscaler_reconcile_duration_seconds_count"), w.window_s)
    ours = request_rates(a[0], a[1], w.window_s, OPERATOR_RESOURCES)
    others = request_rates(a[2], a[3], w.baseline_s)
    top = sorted(others.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    stopped = ", ".join(f"{verb} {res or '(non-resource)'} {r:.1f}/s" for (verb, res), r in top)
    return (
        f"API requests per tick: {per_tick_breakdown(ours, tick_rate)}; with the operator "
        f"stopped, the busiest: {stopped or 'none'}"
    )


def _none(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def numbers(w: Window) -> dict[str, float | int | None]:
    """The window's figures as numbers (``overhead.json``): CPU in cores (the operator's
    own CPU seconds over the window's wall seconds, robust to other load on the
    machine), RSS in MiB, rates per second, tick lateness p50/p99 in seconds (from the
    operator's ``pdscaler_tick_lateness_seconds`` buckets, as PromQL's
    histogram_quantile), the machine's load. Worked numbers: 30 CPU-s in a 150 s window
    -> ``cpu_cores`` 0.2; 2,000 ticks -> ``ticks_per_s`` 13.33."""
    sc, sampler, win = w.scrapes, w.sampler, w.window_s
    op = sc.operator[1].minus(sc.operator[0])
    ticks = op.total("pdscaler_reconcile_duration_seconds_count")
    dur = op.buckets("pdscaler_reconcile_duration_seconds")
    late = op.buckets(LATENESS)
    a = sc.apiserver
    queries = sc.prometheus[1].minus(sc.prometheus[0])
    late_n = op.total(f"{LATENESS}_count")
    return {
        "pdds": w.pdds,
        "reconciled": w.reconciled,
        "interval_s": w.interval_s,
        "window_s": round(win, 1),
        "ticks": int(ticks),
        "ticks_per_s": round(rate(ticks, win), 3),
        "expected_ticks": round(w.reconciled * win / w.interval_s),
        "cpu_cores": round(sampler.cpu_percent() / 100.0, 4),
        "cpu_cores_step_max": round(max(sampler.cpu_percent_steps()) / 100.0, 4),
        "rss_mib_peak": round(sampler.peak_rss_kib() / 1024, 1),
        "rss_mib_hwm": round(sampler.hwm_kib() / 1024, 1),
        "threads": max(s.threads for s in sampler.samples),
        "reconcile_p50_s": _none(histogram_quantile(0.5, dur)),
        "reconcile_p99_s": _none(histogram_quantile(0.99, dur)),
        "lateness_ticks": int(late_n),
        "lateness_p50_s": _none(histogram_quantile(0.5, late)) if late_n else None,
        "lateness_p99_s": _none(histogram_quantile(0.99, late)) if late_n else None,
        # PromQL's rule returns the top finite bound (60 s) for a rank in +Inf: a floor
        "lateness_top_s": max((le for le, _ in late if math.isfinite(le)), default=None),
        "writes_per_s": round(rate(op.total("pdscaler_api_writes_total"), win), 3),
        "api_requests_per_s": round(
            sum(request_rates(a[0], a[1], win, OPERATOR_RESOURCES).values()), 2
        ),
        "api_requests_per_s_all_clients": round(sum(request_rates(a[0], a[1], win).values()), 2),
        "operator_kube_requests_per_s": round(
            rate(op.total("pdscaler_kube_requests_total"), win), 2
        ),
        "prometheus_queries_per_s": round(
            rate(queries.total("prometheus_http_requests_total", handler=QUERY_HANDLER), win), 2
        ),
        "operator_prometheus_requests_per_s": round(
            rate(op.total("pdscaler_prometheus_requests_total"), win), 2
        ),
        "prometheus_cpu_cores": round(rate(queries.total("process_cpu_seconds_total"), win), 3),
        "load1_mean": round(sum(w.loads) / len(w.loads), 2) if w.loads else None,
        "load1_max": round(max(w.loads), 2) if w.loads else None,
    }


def figures(w: Window) -> list[list[str]]:
    """The measured rows, [quantity, value, how]."""
    sc, sampler, win = w.scrapes, w.sampler, w.window_s
    op = sc.operator[1].minus(sc.operator[0])
    ticks = op.total("pdscaler_reconcile_duration_seconds_count")
    buckets = op.buckets("pdscaler_reconcile_duration_seconds")
    p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
    tick_sum = op.total("pdscaler_reconcile_duration_seconds_sum")
    writes = op.total("pdscaler_api_writes_total")
    a = sc.apiserver
    all_with = sum(request_rates(a[0], a[1], win).values())
    all_without = sum(request_rates(a[2], a[3], w.baseline_s).values())
    ours_rate = sum(request_rates(a[0], a[1], win, OPERATOR_RESOURCES).values())
    ours_without = sum(request_rates(a[2], a[3], w.baseline_s, OPERATOR_RESOURCES).values())
    tick_rate = rate(ticks, win)
    queries = sc.prometheus[1].minus(sc.prometheus[0])
    query_rate = rate(queries.total("prometheus_http_requests_total", handler=QUERY_HANDLER), win)
    steps = sampler.cpu_percent_steps()
    expected = w.reconciled * win / w.interval_s
    every = f"sampled every {w.sample_every_s:.0f} s"
    per_tick = f" ({ours_rate / tick_rate:.1f} per tick)" if tick_rate > 0 else ""
    return [
        ["PDDeployments reconciled", f"{w.reconciled} of {w.pdds}",
         "status.observedGeneration = metadata.generation before the window"],
        ["sampling window", f"{win:.0f} s", f"{len(sampler.samples)} samples"],
        ["reconcile ticks", f"{ticks:.0f} ({tick_rate:.1f}/s)",
         f"expected {expected:.0f} (reconciled x window / interval); operator histogram"],
        ["CPU, mean", f"{sampler.cpu_percent():.1f}% of one core",
         "/proc/PID/stat utime+stime over the window"],
        [f"CPU, {w.sample_every_s:.0f}-s steps p50 / max",
         f"{percentile(steps, 50):.1f}% / {max(steps):.1f}%", every],
        ["RSS, peak in window", _mib(sampler.peak_rss_kib()), f"/proc/PID/status VmRSS, {every}"],
        ["RSS, peak since start", _mib(sampler.hwm_kib()), "VmHWM (includes the start-up burst)"],
        ["threads", str(max(s.threads for s in sampler.samples)), "/proc/PID/status Threads"],
        ["reconcile duration p50 / p99", f"{fmt_seconds(p50)} / {fmt_seconds(p99)}",
         "estimated from the operator's histogram buckets (as PromQL histogram_quantile)"],
        ["reconcile duration mean", fmt_seconds(tick_sum / ticks if ticks else None),
         "histogram sum / count"],
        ["operator API writes", f"{rate(writes, win):.2f}/s",
         "pdscaler_api_writes_total (steady state: should be 0)"],
        ["API requests for the operator's resources", f"{ours_rate:.1f}/s{per_tick}",
         "apiserver_request_total on " + ", ".join(sorted(OPERATOR_RESOURCES))
         + f", watches excluded; {ours_without:.1f}/s with the operator stopped"],
        ["API requests, all clients", f"{all_with:.1f}/s",
         f"same, every resource; {all_without:.1f}/s in {w.baseline_s:.0f} s with the "
         "operator stopped"],
        ["Prometheus queries", f"{query_rate:.1f}/s",
         f"prometheus_http_requests_total{{handler=\"{QUERY_HANDLER}\"}}"],
        *_extra_rows(numbers(w)),
    ]  # fmt: skip


def late_text(n: Mapping[str, Any], key: str) -> str:
    """A lateness quantile; at the histogram's top finite bound it is a floor:
    ">= 60.00 s"."""
    v = n.get(key)
    if v is None:
        return "n/a"
    floor = n.get("lateness_top_s") is not None and v >= n["lateness_top_s"]
    return (">= " if floor else "") + fmt_seconds(float(v))


def _extra_rows(n: dict[str, float | int | None]) -> list[list[str]]:
    """Tick lateness, the operator's own request counters, Prometheus' CPU, the load."""

    def s(x: float | int | None) -> str:
        return fmt_seconds(None if x is None else float(x))

    load = f"{n['load1_mean']:.1f} / {n['load1_max']:.1f}" if n["load1_mean"] is not None else "n/a"
    return [
        ["tick lateness p50 / p99", f"{late_text(n, 'lateness_p50_s')} / "
         f"{late_text(n, 'lateness_p99_s')}",
         f"{n['lateness_ticks']} ticks: how long after it was due each started "
         "(pdscaler_tick_lateness_seconds buckets)"],
        ["API requests, operator's count", f"{n['operator_kube_requests_per_s']:.1f}/s",
         "pdscaler_kube_requests_total (watches, the Lease, Events included)"],
        ["Prometheus queries, operator's count", f"{n['operator_prometheus_requests_per_s']:.1f}/s",
         "pdscaler_prometheus_requests_total"],
        ["Prometheus CPU", f"{100 * float(n['prometheus_cpu_cores'] or 0):.1f}% of one core",
         "its process_cpu_seconds_total (scrapes and queries)"],
        ["machine load, 1-min mean / max", load, f"os.getloadavg() at each sample, "
         f"{os.cpu_count()} cores"],
    ]  # fmt: skip
