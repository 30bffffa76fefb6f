"""A tenant whose queries take close to the deadline is backed off (issue 30, item 3):
queries that finish just under the 5 s deadline were never paused, so one tenant's slow
custom queries held tick threads for ~2 deadlines every interval. A snapshot that took
at least ``SLOW_SNAPSHOT_FRACTION`` of the query deadline is used, and then that
PDDeployment's Prometheus is not asked again for ``prometheus_pause`` seconds, doubled for
each slow snapshot in a row (at most ``MAX_PAUSE_DOUBLINGS`` times), its ticks failing at
once with a message the status shows (MetricsAvailable=False). A fast snapshot resets
it; other PDDeployments are not affected.

The server sleeps ``delay`` before each answer (timeout 0.5 s: 0.35 s is 70 %, and a
snapshot, a probe then the rest at once, takes two of them)."""

from __future__ import annotations

import json
import time
import traceback
import urllib.parse
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest

from pdscaler import metricsql as mq
from pdscaler.prometheus import MetricsUnavailableError
from pdscaler.runtime import SLOW_SNAPSHOT_FRACTION, Runtime
from support.fakekube import FakeKube
from support.httpkit import QuietHandler, serving
from support.prom_answers import NAME, NOW, NS, full_answers, spec

SPEC = spec()
BY_PROMQL = {q.promql: q.key for n in (NAME, "other") for q in mq.build_queries(SPEC, NS, n)}
ANSWERS = full_answers(SPEC)
TIMEOUT = 0.5


class Slow(QuietHandler):
    delay: ClassVar[float] = 0.0
    queries: ClassVar[int] = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server)
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        type(self).queries += 1
        time.sleep(self.delay)
        body = json.dumps(ANSWERS[BY_PROMQL[form["query"][0]]]).encode()
        self.reply(200, body, "application/json")


@contextmanager
def runtime(delay: float) -> Iterator[tuple[Runtime, list[float]]]:
    Slow.delay, Slow.queries = delay, 0
    shift = [0.0]
    with serving(Slow) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        rt = Runtime(
            kube=FakeKube(),
            prometheus_url=url,
            prometheus_timeout=TIMEOUT,
            prometheus_pause=30.0,
            monotonic=lambda: time.monotonic() + shift[0],
        )
        yield rt, shift


def test_a_snapshot_close_to_the_deadline_backs_its_tenant_off() -> None:
    assert 0.35 / TIMEOUT >= SLOW_SNAPSHOT_FRACTION / 2  # two phases of 0.35 s each
    with runtime(delay=0.35) as (rt, shift):
        snap = rt.snapshot(SPEC, NS, NAME, NOW)  # slow, but used
        assert snap.request_rate == pytest.approx(4.0)
        sent = Slow.queries
        with pytest.raises(MetricsUnavailableError) as paused:
            rt.snapshot(SPEC, NS, NAME, NOW)
        assert Slow.queries == sent  # not asked
        assert "of the 0.5s deadline" in paused.value.message
        assert "not read again for 30s" in paused.value.message
        # another PDDeployment is read
        assert rt.snapshot(SPEC, NS, "other", NOW).request_rate == pytest.approx(4.0)
        shift[0] = 31.0  # the pause is over: read, slow again: the pause doubles
        rt.snapshot(SPEC, NS, NAME, NOW)
        with pytest.raises(MetricsUnavailableError, match="not read again for 60s"):
            rt.snapshot(SPEC, NS, NAME, NOW)
        shift[0] = 31.0 + 61.0
        Slow.delay = 0.0  # fast again: no pause after it, and the doubling is reset
        rt.snapshot(SPEC, NS, NAME, NOW)
        assert rt.snapshot(SPEC, NS, NAME, NOW).request_rate == pytest.approx(4.0)


def test_a_fast_tenant_is_never_paused() -> None:
    with runtime(delay=0.01) as (rt, _):
        for _ in range(3):
            assert rt.snapshot(SPEC, NS, NAME, NOW).complete


class Payload:
    """What a tick's frame holds (D17: its 3,000 cached objects)."""


def test_a_paused_tenant_keeps_no_paused_tick_s_frames() -> None:
    """Every paused tick fails with the tenant's stored error. Raising that same
    exception object again added each raise's frames to its traceback, so the stored
    error kept every paused tick's frames and their locals alive: D17's noisy tenant
    (3,000 labelled objects deep-copied per tick, ticks every 2 s) took the operator's
    RSS to 480 MiB in 180 s. Each paused tick's error starts a fresh traceback."""
    with runtime(delay=0.35) as (rt, _):
        rt.snapshot(SPEC, NS, NAME, NOW)  # slow: the tenant is paused

        def paused_tick(payload: Payload) -> None:
            rt.snapshot(SPEC, NS, NAME, NOW)

        depths: list[int] = []
        kept: list[weakref.ref[Payload]] = []
        for _ in range(5):
            payload = Payload()
            kept.append(weakref.ref(payload))
            with pytest.raises(MetricsUnavailableError, match="not read again") as err:
                paused_tick(payload)
            depths.append(len(list(traceback.walk_tb(err.value.__traceback__))))
            del payload, err
        assert len(set(depths)) == 1, depths  # was [3, 6, 9, 12, 15]
        assert [ref() is None for ref in kept[:-1]] == [True] * 4  # earlier ticks freed
