"""The demo's record and its report: the timeline, the per-phase summary, the plot.

Owns: ``Row`` (one observation per second: the scenario phase, each pool's ready and
desired replicas, client-side TTFT/TPOT (aiperf), the operator's TTFT/TPOT (its status,
from Prometheus), queues), ``summarize`` (per phase: replicas,
P:D ratio and prefill share over the settled second half of the phase, and whether the
client's and the operator's TPOT agree, ``tpot_agrees``), ``token_counts`` (aiperf's
output-token count against the engines'), and writing ``timeline.csv``, ``summary.json``
and ``demo.png``. Must not: talk to Kubernetes, the engine simulator or the operator
(``pdlab.demo.run`` does), or read clocks.

Worked example: a chat phase from t=0 to 90 s is judged on its rows with t in
[45, 90); if prefill had 4 ready pods and decode 4 there, the phase's ratio is 1.0 and
its prefill share 0.5; a long-docs phase with 11 and 2 gives 5.5 and 0.85.

The two TPOTs agree when they differ by at most the width of the TPOT histogram bucket
holding the operator's figure (``tpot_tolerance_s``): the operator reads a p95 from the
decode pods' per-request TPOT histogram (``histogram_quantile``, linear inside the bucket
that holds it, vLLM's bounds ``TPOT_BUCKETS``), so its figure says only which bucket the
p95 is in; aiperf's p95 is exact over its requests (decode time / (output tokens - 1),
each request's), over the last 15 s where the operator's is over its metrics window. An
operator figure of 99 ms (bucket 75-100 ms) agrees with a client p95 within 74-124 ms;
154 ms (bucket 150-200 ms) with 104-204 ms. Before the engines' text tokenized one to one
(``pdlab.engine.text``), the chat phase read 25 ms against 99 ms: no agreement.
"""

from __future__ import annotations

import bisect
import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from pdscaler.sim.engine import TPOT_BUCKETS


@dataclass(frozen=True)
class Row:
    """One second of the demo. ``t`` is seconds since the scenario started (negative
    while the pools come up); None = unknown."""

    t: float
    phase: str | None
    prefill_ready: int
    decode_ready: int
    prefill_desired: int | None
    decode_desired: int | None
    request_rate: float | None
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    prefill_queue: float | None
    decode_queue: float | None
    operator_ttft_s: float | None = None
    operator_tpot_s: float | None = None

    @property
    def ratio(self) -> float | None:
        """Ready prefill / ready decode replicas (None without decode)."""
        return self.prefill_ready / self.decode_ready if self.decode_ready else None


@dataclass(frozen=True)
class PhaseSummary:
    """A phase judged on its second half (the pools had time to follow the mix)."""

    name: str
    start_s: float
    end_s: float
    prefill_mean: float
    decode_mean: float
    ratio: float | None
    prefill_share: float | None
    max_gpus: int
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    operator_ttft_s: float | None = None
    operator_tpot_s: float | None = None
    #: aiperf's TPOT p95 within ``tpot_tolerance_s`` of the operator's (None: either unknown)
    tpot_agrees: bool | None = None


def tpot_tolerance_s(operator_s: float) -> float:
    """The width of the TPOT histogram bucket holding ``operator_s`` (its upper bound
    included, as Prometheus' ``le``): 0.099 -> 0.025 (75-100 ms), 0.1 -> 0.025,
    0.154 -> 0.05 (150-200 ms), 0.005 -> 0.01 (0-10 ms)."""
    i = bisect.bisect_left(TPOT_BUCKETS, operator_s)
    return TPOT_BUCKETS[i] - (TPOT_BUCKETS[i - 1] if i else 0.0)


def tpot_agrees(client_s: float | None, operator_s: float | None) -> bool | None:
    """Whether aiperf's TPOT p95 and the operator's differ by at most the operator's
    histogram resolution there (module docstring): (0.090, 0.099) -> True,
    (0.025, 0.099) -> False; None when either is unknown."""
    if client_s is None or operator_s is None:
        return None
    return abs(client_s - operator_s) <= tpot_tolerance_s(operator_s)


def token_counts(export: dict[str, Any]) -> dict[str, float | None]:
    """aiperf's output-token count against the engines', from its
    ``profile_export_aiperf.json``: ``client`` (``total_osl``, its tokenizer's count of
    the streamed text), ``server`` (``total_usage_completion_tokens``, the engines'
    ``usage``), ``osl_mismatch_pct`` (its mean of (counted - requested) / requested, in
    %) and ``osl_mismatch_requests`` (requests off by more than 5%, 0 when aiperf wrote
    none). The shortened demo's 453 requests read 5,752, 5,752, 0.0 and 0 with the
    engines' text one token per engine token (``pdlab.engine.text``), and 19,523, 5,752,
    225.9 and 453 when they streamed ``" tok<i>"``."""

    def avg(tag: str) -> float | None:
        entry = export.get(tag)
        value = entry.get("avg") if isinstance(entry, dict) else None
        return float(value) if isinstance(value, (int, float)) else None

    return {
        "client": avg("total_osl"),
        "server": avg("total_usage_completion_tokens"),
        "osl_mismatch_pct": avg("osl_mismatch_diff_pct"),
        "osl_mismatch_requests": avg("osl_mismatch_count") or 0.0,
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def summarize_phase(
    name: str, start: float, end: float, rows: Sequence[Row], gpus_per_replica: int = 1
) -> PhaseSummary:
    """The phase's settled half: rows with ``start + (end-start)/2 <= t < end``.
    ``ratio`` is mean prefill / mean decode; ``ttft_p95_s``/``tpot_p95_s`` are the
    medians of the per-second client-side 15 s p95s seen there, ``operator_ttft_s``/
    ``operator_tpot_s`` the medians of what the operator's status showed, and
    ``tpot_agrees`` whether those two TPOTs agree (``tpot_agrees``)."""
    half = [r for r in rows if start + (end - start) / 2.0 <= r.t < end]
    p = _mean([r.prefill_ready for r in half]) or 0.0
    d = _mean([r.decode_ready for r in half]) or 0.0
    shares = [
        r.prefill_ready / (r.prefill_ready + r.decode_ready)
        for r in half
        if r.prefill_ready + r.decode_ready > 0
    ]
    client_tpot = _median([r.tpot_p95_s for r in half if r.tpot_p95_s is not None])
    operator_tpot = _median([r.operator_tpot_s for r in half if r.operator_tpot_s is not None])
    return PhaseSummary(
        name=name,
        start_s=start,
        end_s=end,
        prefill_mean=p,
        decode_mean=d,
        ratio=p / d if d > 0 else None,
        prefill_share=_mean(shares),
        max_gpus=max(
            ((r.prefill_ready + r.decode_ready) * gpus_per_replica for r in half), default=0
        ),
        ttft_p95_s=_median([r.ttft_p95_s for r in half if r.ttft_p95_s is not None]),
        tpot_p95_s=client_tpot,
        operator_ttft_s=_median([r.operator_ttft_s for r in half if r.operator_ttft_s is not None]),
        operator_tpot_s=operator_tpot,
        tpot_agrees=tpot_agrees(client_tpot, operator_tpot),
    )


def summarize(
    phases: Sequence[tuple[str, float, float]], rows: Sequence[Row]
) -> list[PhaseSummary]:
    """One summary per phase, in order."""
    return [summarize_phase(name, start, end, rows) for name, start, end in phases]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_timeline(path: Path, rows: Sequence[Row]) -> None:
    """``timeline.csv``: one line per row, the Row's fields as columns."""
    names = [f.name for f in fields(Row)]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(names)
        for r in rows:
            writer.writerow(["" if getattr(r, n) is None else getattr(r, n) for n in names])


def write_summary(path: Path, doc: dict[str, Any], summaries: Sequence[PhaseSummary]) -> None:
    """``summary.json``: ``doc`` (run facts) plus ``phases`` (the PhaseSummary list)."""
    out = {**doc, "phases": [{k: _clean(v) for k, v in asdict(s).items()} for s in summaries]}
    path.write_text(json.dumps(out, indent=2) + "\n")


def plot(
    path: Path,
    rows: Sequence[Row],
    phases: Sequence[tuple[str, float, float]],
    slo: tuple[float, float],
    decisions: Sequence[tuple[float, str]] = (),
) -> None:
    """``demo.png``: replicas per pool (ready solid, desired dashed) with the decisions
    as ticks, the P:D ratio, and TTFT/TPOT (aiperf's p95 solid, the operator's dashed)
    against the SLO, with the
    scenario's phases shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r.t for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    ax_rep, ax_ratio, ax_lat = axes
    colours = ("#f3f1e8", "#e3eef7")
    for k, (name, start, end) in enumerate(phases):
        for ax in axes:
            ax.axvspan(start, end, color=colours[k % 2], zorder=0)
        ax_rep.text((start + end) / 2, 1.01, name, ha="center", va="bottom",
                    transform=ax_rep.get_xaxis_transform(), fontsize=9)  # fmt: skip
    ax_rep.step(t, [r.prefill_ready for r in rows], where="post", label="prefill ready", c="C0")
    ax_rep.step(t, [r.decode_ready for r in rows], where="post", label="decode ready", c="C1")
    for attr, colour in (("prefill_desired", "C0"), ("decode_desired", "C1")):
        pts = [(r.t, getattr(r, attr)) for r in rows if getattr(r, attr) is not None]
        if pts:
            ax_rep.step(*zip(*pts, strict=True), where="post", ls="--", c=colour, alpha=0.6,
                        label=attr.replace("_", " "))  # fmt: skip
    for when, _ in decisions:
        ax_rep.axvline(when, ymin=0, ymax=0.04, c="k", lw=0.8)
    ax_rep.set_ylabel("replicas (1 GPU each)")
    ax_rep.legend(loc="upper left", fontsize=8, ncol=2)
    ratio = [(r.t, r.ratio) for r in rows if r.ratio is not None]
    if ratio:
        ax_ratio.plot(*zip(*ratio, strict=True), c="C2")
    ax_ratio.set_ylabel("P:D ratio (ready)")
    for attr, colour, style, label in (
        ("ttft_p95_s", "C3", "-", "TTFT p95 aiperf"),
        ("tpot_p95_s", "C4", "-", "TPOT p95 aiperf"),
        ("operator_ttft_s", "C3", "--", "TTFT p95 operator"),
        ("operator_tpot_s", "C4", "--", "TPOT p95 operator"),
    ):
        pts = [(r.t, getattr(r, attr)) for r in rows if getattr(r, attr) is not None]
        if pts:
            ax_lat.plot(*zip(*pts, strict=True), c=colour, ls=style, label=label)
    ax_lat.axhline(slo[0], c="C3", ls=":", label=f"TTFT SLO {slo[0]:g}s")
    ax_lat.axhline(slo[1], c="C4", ls=":", label=f"TPOT SLO {slo[1] * 1000:g}ms")
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("seconds (client: 15 s; operator: Prometheus)")
    ax_lat.set_xlabel("seconds since the scenario started")
    ax_lat.legend(loc="upper left", fontsize=8, ncol=2)
    fig.suptitle("pdscaler demo: prefill/decode pools following the request mix")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
