"""The comparison plot as PNG bytes (matplotlib's Agg canvas, no pyplot global state).

Owns: the figure of ``pdscaler simulate`` and the bench: (1) request rate (1-minute
windows) and the P:D token ratio (prompt tokens / output tokens) over time; (2) prefill
and (3) decode replicas asked for, per policy, with the oracle's schedule dashed;
(4) SLO attainment per minute of arrival, per policy. Must not: write files (callers
write the bytes) or open windows.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pdscaler.sim.loop import Run
from pdscaler.sim.oracle import Schedule
from pdscaler.sim.results import attainment_over_time
from pdscaler.sim.traces import Trace, load_profile

MINUTE = 60.0


def render_png(
    trace: Trace,
    runs: Sequence[Run],
    schedule: Schedule | None = None,
    title: str = "",
) -> bytes:
    """The four-panel figure; x axes in minutes from the trace's start."""
    fig = Figure(figsize=(11, 11), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    ax_load, ax_p, ax_d, ax_slo = fig.subplots(4, 1, sharex=True)
    prof = load_profile(trace, MINUTE)
    minutes = prof.start / MINUTE
    ax_load.step(minutes, prof.rate, where="post", color="black", label="request rate")
    ax_load.set_ylabel("req/s")
    twin = ax_load.twinx()
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(prof.output_tps > 0, prof.prompt_tps / prof.output_tps, np.nan)
    twin.step(minutes, ratio, where="post", color="tab:orange", label="P:D token ratio")
    twin.set_ylabel("prompt / output tokens", color="tab:orange")
    ax_load.set_title(title or f"{trace.name}: load")
    ax_load.legend(loc="upper left")
    twin.legend(loc="upper right")
    if schedule is not None:
        sched_min = schedule.times / MINUTE
        for ax, col in ((ax_p, schedule.prefill), (ax_d, schedule.decode)):
            ax.step(sched_min, col, where="post", color="grey", ls="--", lw=1, label="oracle")
    for run in runs:
        tl = run.timeline
        t = tl.time / MINUTE
        (line,) = ax_p.step(t, tl.prefill_desired, where="post", lw=1.2, label=run.policy)
        ax_d.step(t, tl.decode_desired, where="post", lw=1.2, color=line.get_color())
        at, frac = attainment_over_time(run, MINUTE)
        ax_slo.plot(at / MINUTE, 100.0 * frac, lw=1.2, color=line.get_color())
    ax_p.set_ylabel("prefill replicas")
    ax_d.set_ylabel("decode replicas")
    ax_slo.set_ylabel("SLO attainment %")
    ax_slo.set_ylim(-2, 102)
    ax_slo.set_xlabel("minutes")
    ax_p.legend(loc="upper left", fontsize="small", ncol=4)
    for ax in (ax_load, ax_p, ax_d, ax_slo):
        ax.grid(alpha=0.3)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
