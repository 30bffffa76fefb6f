"""How the drills count ticks instead of seconds: their reading of the operator's
/metrics (drills.faults.scraped: the successful ticks per PDDeployment and the conditions
it reports, from one scrape, on the text the operator's own Telemetry renders, so a
renamed series or label fails here, not in a drill waiting for ticks that never show),
and a fed snapshot held for its ticks (support.metrics_feed.Feed.hold)."""

from __future__ import annotations

import threading
import time
from typing import Any

from prometheus_client import generate_latest

from drills.faults import scraped
from pdscaler.telemetry import Telemetry
from support.builders import snapshot
from support.metrics_feed import Feed


def test_ticks_and_conditions_come_from_one_scrape() -> None:
    t = Telemetry()
    for _ in range(3):
        t.duration.labels("ns", "d7").observe(0.2)
    t.duration.labels("ns", "other").observe(0.1)
    t.record_status("ns", "d7", [("MetricsAvailable", "False"), ("Progressing", "True")], None)
    ticks, conditions = scraped(generate_latest(t.registry).decode())
    assert ticks == {"d7": 3.0, "other": 1.0}
    assert conditions == {("d7", "MetricsAvailable", "False"), ("d7", "Progressing", "True")}
    assert scraped("") == ({}, set())


def test_a_fed_snapshot_is_held_for_its_seconds_and_its_reads() -> None:
    """Feed.hold: the seconds AND the ticks that read the snapshot since ``set``; a tick
    that stalls stretches the hold instead of letting it end on fewer reads."""
    feed = Feed(snapshot(4.0))
    spec: Any = None
    done = threading.Event()

    def ticks() -> None:  # a slow tick loop: one read every 0.3 s
        while not done.wait(0.3):
            feed.source(spec, "ns", "d", 0.0)

    thread = threading.Thread(target=ticks, daemon=True)
    thread.start()
    try:
        feed.source(spec, "ns", "d", 0.0)
        feed.set(snapshot(1.0))
        assert feed.reads == 0  # reads of the snapshot just set
        t0 = time.monotonic()
        feed.hold(0.1, reads=3)
        assert feed.reads >= 3
        assert time.monotonic() - t0 >= 0.8  # 3 reads 0.3 s apart, not the 0.1 s
    finally:
        done.set()
        thread.join(5)
