"""The demo's live view: what one look at the screen should tell.

Owns: ``Snapshot`` (what the demo loop read this second: the scenario's phase, the
client-side latencies aiperf measured, the engines' queues, the PDDeployment's status
with the operator's own TTFT/TPOT, the pods) and rendering it, as a
rich renderable for a terminal or as one plain log line otherwise. Must not: fetch
anything or keep state between calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


@dataclass(frozen=True)
class Snapshot:
    """One second of the demo as shown (None = not known yet)."""

    phase: str | None
    scenario_time_s: float | None
    duration_s: float
    request_rate: float | None
    prefill_ready: int
    decode_ready: int
    prefill_desired: int | None
    decode_desired: int | None
    prefill_queue: float | None
    decode_queue: float | None
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    operator_ttft: str | None
    operator_tpot: str | None
    operator_ratio: str | None
    decisions: Sequence[tuple[str, str]]  # (clock time, sentence), newest last
    slo: tuple[float, float]
    client: str = ""  # aiperf's and the engines' request counts, one sentence


def _s(value: float | None, unit: str = "s", scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}{unit}"


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


def ratio_text(prefill: int, decode: int) -> str:
    """``4:4 = 1.00``; ``11:2 = 5.50``; ``3:0 = -``."""
    return f"{prefill}:{decode} = {prefill / decode:.2f}" if decode else f"{prefill}:{decode} = -"


def line(s: Snapshot) -> str:
    """A plain line: ``[ 42s/300s chat] 21.3 req/s  P 4/4  D 4/4  P:D 1.00 ...``."""
    t = "-" if s.scenario_time_s is None else f"{s.scenario_time_s:4.0f}s"
    return (
        f"[{t}/{s.duration_s:.0f}s {s.phase or 'waiting'}] {_s(s.request_rate, ' req/s', digits=1)}"
        f"  P {s.prefill_ready}/{_count(s.prefill_desired)}"
        f"  D {s.decode_ready}/{_count(s.decode_desired)}"
        f"  P:D {ratio_text(s.prefill_ready, s.decode_ready)}"
        f"  client TTFT p95 {_s(s.ttft_p95_s)} TPOT p95 {_s(s.tpot_p95_s, 'ms', 1000, 0)}"
        f"  operator TTFT {s.operator_ttft or '-'} TPOT {s.operator_tpot or '-'}"
        f"  queues P {_s(s.prefill_queue, '', digits=0)} D {_s(s.decode_queue, '', digits=0)}"
    )


def _latency(value: float | None, slo: float, unit: str, scale: float, digits: int) -> Text:
    style = "" if value is None else ("bold red" if value > slo else "green")
    return Text(_s(value, unit, scale, digits), style=style)


def render(s: Snapshot, title: str) -> RenderableType:
    """Header (phase, clock, rate), the pools table, latencies vs SLO, the decisions."""
    done = 0.0 if s.scenario_time_s is None else min(1.0, s.scenario_time_s / s.duration_s)
    bar = "█" * int(done * 30) + "·" * (30 - int(done * 30))
    header = Text.assemble(
        ("phase ", "dim"),
        (f"{s.phase or 'waiting for pods'}", "bold cyan"),
        ("   ", ""),
        (bar, "cyan"),
        (f" {_s(s.scenario_time_s, 's', digits=0)}/{s.duration_s:.0f}s", ""),
        ("   load ", "dim"),
        (_s(s.request_rate, " req/s", digits=1), "bold"),
    )
    pools = Table(expand=True, show_edge=False)
    for col in ("pool", "ready", "desired", "queue", "p95 client (aiperf)", "operator", "SLO"):
        pools.add_column(col, justify="right" if col != "pool" else "left")
    ttft = (_latency(s.ttft_p95_s, s.slo[0], "s", 1.0, 2), f"TTFT {s.slo[0]:g}s")
    tpot = (_latency(s.tpot_p95_s, s.slo[1], "ms", 1000.0, 0), f"TPOT {s.slo[1] * 1000:g}ms")
    for pool, ready, desired, queue, (latency, slo), seen in (
        ("prefill", s.prefill_ready, s.prefill_desired, s.prefill_queue, ttft, s.operator_ttft),
        ("decode", s.decode_ready, s.decode_desired, s.decode_queue, tpot, s.operator_tpot),
    ):
        queue_text = _s(queue, "", digits=0)
        pools.add_row(pool, str(ready), _count(desired), queue_text, latency, seen or "-", slo)
    ratio = Text.assemble(
        ("P:D ready ", "dim"),
        (ratio_text(s.prefill_ready, s.decode_ready), "bold magenta"),
        ("   operator sees: ratio ", "dim"),
        (s.operator_ratio or "-", ""),
        ("  TTFT ", "dim"),
        (s.operator_ttft or "-", ""),
        ("  TPOT ", "dim"),
        (s.operator_tpot or "-", ""),
    )
    log = Table.grid(padding=(0, 1))
    log.add_column(style="dim", no_wrap=True)
    log.add_column(no_wrap=True, overflow="ellipsis")
    for when, sentence in list(s.decisions)[-8:]:
        log.add_row(when, sentence)
    if not s.decisions:
        log.add_row("", Text("no decision yet", style="dim"))
    return Panel(
        Group(
            header,
            Text(""),
            pools,
            Text(""),
            ratio,
            Text(s.client, style="dim"),
            Text(""),
            Panel(log, title="decisions (newest last)", border_style="dim"),
        ),
        title=title,
        border_style="cyan",
    )
