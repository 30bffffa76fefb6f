"""The demo's record and its report: the timeline, the per-phase summary, the plot.

Owns: ``Row`` (one observation per second: the scenario phase, each pool's ready and
desired replicas, client-side TTFT/TPOT (aiperf), the operator's TTFT/TPOT (its status,
from Prometheus), queues), ``summarize`` (per phase: replicas,
P:D ratio and prefill share over the settled second half of the phase), and writing
``timeline.csv``, ``summary.json`` and ``demo.png``. Must not: talk to Kubernetes, the
engine simulator or the operator (``pdlab.demo.run`` does), or read clocks.

Worked example: a chat phase from t=0 to 90 s is judged on its rows with t in
[45, 90); if prefill had 4 ready pods and decode 4 there, the phase's ratio is 1.0 and
its prefill share 0.5; a long-docs phase with 11 and 2 gives 5.5 and 0.85.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any


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
    ``operator_tpot_s`` the medians of what the operator's status showed."""
    half = [r for r in rows if start + (end - start) / 2.0 <= r.t < end]
    p = _mean([r.prefill_ready for r in half]) or 0.0
    d = _mean([r.decode_ready for r in half]) or 0.0
    shares = [
        r.prefill_ready / (r.prefill_ready + r.decode_ready)
        for r in half
        if r.prefill_ready + r.decode_ready > 0
    ]
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
        tpot_p95_s=_median([r.tpot_p95_s for r in half if r.tpot_p95_s is not None]),
        operator_ttft_s=_median([r.operator_ttft_s for r in half if r.operator_ttft_s is not None]),
        operator_tpot_s=_median([r.operator_tpot_s for r in half if r.operator_tpot_s is not None]),
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
    as ticks, the P:D ratio, and TTFT/TPOT (client p95 solid, the operator's dashed)
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
        ("ttft_p95_s", "C3", "-", "TTFT p95 client"),
        ("tpot_p95_s", "C4", "-", "TPOT p95 client"),
        ("operator_ttft_s", "C3", "--", "TTFT operator"),
        ("operator_tpot_s", "C4", "--", "TPOT operator"),
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
