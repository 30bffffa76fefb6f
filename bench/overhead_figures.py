"""The figures of measurement 3 (one operator process, many PDDeployments), computed
from what the window recorded: ``Window`` in, rows of ``[quantity, value, how]`` out.

Owns: the arithmetic: ticks and their rate from the operator's reconcile histogram,
reconcile p50/p99 estimated from its buckets, mean CPU % of one core and its spread,
peak RSS, threads, writes/s from ``pdscaler_api_writes_total``, the API server's
request rate with and without the operator (``apiserver_request_total``, watches left
out) and their difference, and Prometheus' query rate. Pure: no I/O.

Worked numbers: 2,000 ticks in a 150 s window are 13.3 ticks/s (200 PDDeployments at
15 s); 8,000 API requests in the window with the operator and 30 in a 30 s baseline
without it give 53.3/s - 1.0/s = 52.3/s due to the operator, 3.9 per tick.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.overhead_proc import ProcSampler
from bench.overhead_stats import Exposition, fmt_seconds, histogram_quantile, percentile, rate

NOT_COUNTED_VERBS = frozenset({"WATCH", "CONNECT"})
QUERY_HANDLER = "/api/v1/query"


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


def api_requests(e: Exposition) -> float:
    """Requests the API server answered, watches and exec/proxy connections left out."""
    by_verb = e.by_label("apiserver_request_total", "verb")
    return sum(v for verb, v in by_verb.items() if verb not in NOT_COUNTED_VERBS)


def _mib(kib: float) -> str:
    return f"{kib / 1024:.0f} MiB"


def figures(w: Window) -> list[list[str]]:
    """The measured rows, [quantity, value, how]."""
    sc, sampler, win = w.scrapes, w.sampler, w.window_s
    op = sc.operator[1].minus(sc.operator[0])
    ticks = op.total("pdscaler_reconcile_duration_seconds_count")
    buckets = op.buckets("pdscaler_reconcile_duration_seconds")
    p50, p99 = histogram_quantile(0.5, buckets), histogram_quantile(0.99, buckets)
    tick_sum = op.total("pdscaler_reconcile_duration_seconds_sum")
    writes = op.total("pdscaler_api_writes_total")
    rate_with = rate(api_requests(sc.apiserver[1]) - api_requests(sc.apiserver[0]), win)
    rate_without = rate(api_requests(sc.apiserver[3]) - api_requests(sc.apiserver[2]), w.baseline_s)
    due = rate_with - rate_without
    tick_rate = rate(ticks, win)
    queries = sc.prometheus[1].minus(sc.prometheus[0])
    query_rate = rate(queries.total("prometheus_http_requests_total", handler=QUERY_HANDLER), win)
    steps = sampler.cpu_percent_steps()
    expected = w.reconciled * win / w.interval_s
    every = f"sampled every {w.sample_every_s:.0f} s"
    per_tick = f"{due / tick_rate:.1f} per tick" if tick_rate > 0 else "no ticks"
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
        ["API server requests, operator running", f"{rate_with:.1f}/s",
         "apiserver_request_total, all clients, watches excluded"],
        ["API server requests, operator stopped", f"{rate_without:.1f}/s",
         f"same, {w.baseline_s:.0f} s right after the window (the other clients)"],
        ["API server requests due to the operator", f"{due:.1f}/s", f"difference; {per_tick}"],
        ["Prometheus queries", f"{query_rate:.1f}/s",
         f"prometheus_http_requests_total{{handler=\"{QUERY_HANDLER}\"}}"],
    ]  # fmt: skip
