"""bench/results/speed.md says what the diurnal matrix replays from diurnal.json (its
spans, its cuts, its replays' rates), not "a day", and is what bench.speed renders from
speed.json and diurnal.json (``python -m bench.speed --render`` after either changes)."""

from __future__ import annotations

import json
from typing import Any

from bench import speed


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((speed.RESULTS / name).read_text(encoding="utf-8")))


def test_the_committed_speed_report_is_what_its_files_render() -> None:
    doc = load("speed.json")
    text = speed.report(doc["rows"], doc["measured_at"], doc["command"], load("diurnal.json"))
    assert (speed.RESULTS / "speed.md").read_text(encoding="utf-8") == text, (
        "run: python -m bench.speed --render"
    )


def test_the_diurnal_note_takes_the_spans_cuts_and_rates_from_the_file() -> None:
    doc = load("diurnal.json")
    plan = doc["plan"]
    note = speed.diurnal_note(doc)
    assert f"day 0's last {plan['warmup_hours']:g} h replayed as every" in note
    assert f"the {plan['scored_hours']:g} h from day 1's start scored" in note
    assert f"commit {doc['measured_at']['commit']}" in note
    cut = doc["cuts"]
    assert (f"; CUT from the full matrix: {cut}; its own" if cut else "; nothing cut;") in note
    doc["plan"] = {**plan, "warmup_hours": 24.0, "scored_hours": 24.0}
    doc["cuts"] = ""
    for r in doc["rows"]:
        r["requests_per_s"] = None
    r = doc["rows"][0]
    r["requests_per_s"] = 123456.0
    note = speed.diurnal_note(doc)
    assert "day 0's last 24 h replayed" in note
    assert "the 24 h from day 1's start scored" in note
    assert "; nothing cut; its own replays ran at 123,456-123,456 requests/s" in note
    assert speed.diurnal_note(None) == "The diurnal matrix: not measured (no diurnal.json)."
