"""The dashboard preview (pdlab.dashboard_preview): the panels come from the dashboard
JSON as Grafana lays them out, legends fill as Grafana fills them, and every panel is
drawn (the lab test draws it from real series; here from made-up ones)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pdlab.dashboard_preview import fill, legend, panels, render

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "pdscaler.json"


def test_the_panels_are_the_dashboards_with_their_grid_places() -> None:
    doc = json.loads(DASHBOARD.read_text())
    board = panels(doc)
    assert [p.title for p in board] == [p["title"] for p in doc["panels"]]
    ttft = next(p for p in board if p.title == "TTFT vs SLO")
    assert (ttft.x, ttft.y, ttft.w, ttft.h, ttft.unit) == (0, 18, 12, 8, "s")
    assert len(ttft.targets) == 3
    assert all(not p.targets for p in board if p.kind == "row")


def test_legends_and_variables_fill_as_grafana_fills_them() -> None:
    assert legend("{{pool}} ready", {"pool": "decode"}) == "decode ready"
    assert legend("{{ pool }} {{missing}}", {"pool": "prefill"}) == "prefill"
    assert legend("", {"b": "2", "a": "1"}) == '{a="1",b="2"}'
    expr = 'rate(x{namespace="$namespace",name="$name"}[$__rate_interval])'
    variables = {"namespace": "ops", "name": "chat", "__rate_interval": "30s"}
    assert fill(expr, variables) == 'rate(x{namespace="ops",name="chat"}[30s])'


def test_every_panel_is_drawn_into_a_png(tmp_path: Path) -> None:
    board = panels(json.loads(DASHBOARD.read_text()))
    for i, p in enumerate(board):
        for fmt, _ in p.targets:
            p.series[legend(fmt, {"pool": "decode"})] = [(t, float(i + t % 3)) for t in range(30)]
    out = tmp_path / "preview.png"
    drawn = render(board, out, "(test)")
    assert drawn == sum(p.kind != "row" for p in board) == 14
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width == 16 * 80  # 16 in at 80 dpi
    assert height > width  # 57 grid rows: taller than wide
