"""A preview image of the Grafana dashboard, drawn from its own queries.

Owns: reading deploy/grafana/pdscaler.json's panels (title, type, ``gridPos``, unit,
each target's ``expr`` and ``legendFormat``), asking a Prometheus for each target's range
(``fetch``: ``/api/v1/query_range`` with the template variables filled), and drawing
every panel where the dashboard places it on Grafana's 24-column grid (``render``, with
matplotlib): ``timeseries`` and ``state-timeline`` panels as lines, ``table`` panels as
their rows' last values, ``row`` panels as section headings. Must not: claim to be
Grafana: the image says what drew it (Grafana itself is AGPL-licensed, which this
project does not use, so the README shows this preview instead of a screenshot).

``make dashboard-preview`` draws docs/img/dashboard-preview.png during the lab test
tests/lab/test_lab_grafana_dashboard.py (the operator ticking a PDDeployment whose pods
the engine simulator serves). A legend ``{{pool}} ready`` over a series labelled
``pool="decode"`` reads ``decode ready``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Grafana's grid: 24 columns; one row unit is 30 px high (and a column ~ 1/24 of 1,600).
GRID_COLUMNS = 24
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
FOOTER = (
    "Preview drawn by pdlab.dashboard_preview from deploy/grafana/pdscaler.json's own "
    "queries against the lab's Prometheus; not a Grafana screenshot."
)


@dataclass
class Panel:
    """One dashboard panel and, once fetched, its series: legend -> [(t, value)]."""

    title: str
    kind: str
    x: int
    y: int
    w: int
    h: int
    unit: str | None
    targets: list[tuple[str, str]]  # (legendFormat, expr)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def panels(doc: Mapping[str, Any]) -> list[Panel]:
    """The dashboard's panels in order (rows included, with no targets)."""
    out = []
    for p in doc["panels"]:
        grid = p["gridPos"]
        unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
        targets = [(t.get("legendFormat") or "", t["expr"]) for t in p.get("targets", [])]
        out.append(Panel(p["title"], p["type"], grid["x"], grid["y"], grid["w"], grid["h"],
                         unit, targets))  # fmt: skip
    return out


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """``legend("{{pool}} ready", {"pool": "decode"})`` -> ``"decode ready"`` (a label
    the series lacks reads empty, as in Grafana)."""
    text = LEGEND_LABEL.sub(lambda m: labels.get(m.group(1), ""), fmt).strip()
    return text or "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def fill(expr: str, variables: Mapping[str, str]) -> str:
    """``expr`` with ``$name`` variables replaced, the longest names first
    (``$__rate_interval`` before ``$name``)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${name}", variables[name])
    return expr


def fetch(
    prometheus: str,
    board: Sequence[Panel],
    variables: Mapping[str, str],
    start: float,
    end: float,
    step: float = 2.0,
) -> None:
    """Fill every panel's ``series`` from ``prometheus``' range queries."""
    for panel in board:
        for fmt, expr in panel.targets:
            form = {"query": fill(expr, variables), "start": f"{start:.3f}",
                    "end": f"{end:.3f}", "step": f"{step:g}"}  # fmt: skip
            body = urllib.parse.urlencode(form).encode()
            url = f"{prometheus.rstrip('/')}/api/v1/query_range"
            with urllib.request.urlopen(url, data=body, timeout=30) as resp:
                answer = json.load(resp)
            for result in answer["data"]["result"]:
                points = [(float(t), float(v)) for t, v in result["values"]]
                panel.series[legend(fmt, result["metric"])] = points


def _number(value: float, unit: str | None) -> str:
    if unit == "percentunit":
        return f"{value:.0%}"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.3g}"


def render(board: Sequence[Panel], out: Path, subtitle: str = "") -> int:
    """Draw ``board`` into the PNG ``out``; the number of panels drawn (rows excluded).

    A panel at ``gridPos`` (x 12, y 18, w 12, h 8) fills the right half of the figure
    from grid row 18 to 26; the figure is as tall as the lowest panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bottom = max(p.y + p.h for p in board)
    fig = plt.figure(figsize=(16, (bottom + 4) * 0.3), facecolor="#111217")
    scale_x, scale_y = 1 / GRID_COLUMNS, 1 / (bottom + 4)  # 2 grid rows above, 2 below
    drawn = 0
    for p in board:
        left, top = p.x * scale_x, 1 - (p.y + 3) * scale_y
        if p.kind == "row":
            fig.text(left + 0.005, top + 0.2 * scale_y, p.title, color="#ccccdc",
                     fontsize=12, weight="bold", va="bottom")  # fmt: skip
            continue
        height = (p.h - 1.6) * scale_y
        ax = fig.add_axes((left + 0.7 * scale_x, top - height,
                           (p.w - 1) * scale_x, height))  # fmt: skip
        ax.set_facecolor("#181b1f")
        ax.set_title(p.title, color="#ccccdc", fontsize=10, loc="left")
        ax.tick_params(colors="#8e8e8e", labelsize=7)
        for spine in ax.spines.values():
            spine.set_color("#2c3235")
        drawn += 1
        if p.kind == "table":
            rows = sorted((name, pts[-1][1]) for name, pts in p.series.items() if pts)
            ax.set_axis_off()
            for i, (name, value) in enumerate(rows[:8]):
                ax.text(0.02, 0.9 - i * 0.11, f"{name}", color="#ccccdc", fontsize=8,
                        transform=ax.transAxes)  # fmt: skip
                ax.text(0.95, 0.9 - i * 0.11, _number(value, p.unit), color="#73bf69",
                        fontsize=8, ha="right", transform=ax.transAxes)  # fmt: skip
            continue
        if not p.series:
            ax.text(0.5, 0.5, "No data", color="#8e8e8e", ha="center", transform=ax.transAxes)
        t0 = min((pts[0][0] for pts in p.series.values() if pts), default=0.0)
        for name, pts in sorted(p.series.items()):
            step = p.kind == "state-timeline"
            xs, ys = [t - t0 for t, _ in pts], [v for _, v in pts]
            if step:
                ax.step(xs, ys, where="post", label=name, linewidth=1.2)
            else:
                ax.plot(xs, ys, label=name, linewidth=1.2)
        if p.series:
            ax.legend(fontsize=6, loc="upper left", facecolor="#181b1f", edgecolor="#2c3235",
                      labelcolor="#ccccdc", ncol=2)  # fmt: skip
        if p.unit == "percentunit":
            ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
        ax.set_xlabel("s", color="#8e8e8e", fontsize=7, loc="right")
    fig.text(0.005, 0.5 * scale_y, f"{FOOTER} {subtitle}".strip(), color="#8e8e8e",
             fontsize=8)  # fmt: skip
    fig.text(0.005, 1 - 1.2 * scale_y, "pdscaler", color="#ccccdc", fontsize=14, va="top")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80, facecolor=fig.get_facecolor())
    plt.close(fig)
    return drawn
