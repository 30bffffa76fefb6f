"""``pdscaler run --log-format json`` writes every line logged in a PDDeployment's tick
with structured ``namespace``, ``name`` and ``tick`` fields (logcontext.py, the run
command's ``configure_logging``); lines of kopf about an object carry its namespace and
name; other lines carry none."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from pdscaler import logcontext
from pdscaler.cli.run import LogFormat, configure_logging
from pdscaler.handlers import TickLoop
from pdscaler.liveness import Health


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """The operator's JSON logging, its handler writing into a buffer; the root
    logger's handlers and level restored afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    (handler,) = configure_logging(LogFormat.json, verbose=False)
    assert isinstance(handler, logging.StreamHandler)
    buffer = io.StringIO()
    handler.setStream(buffer)
    try:
        yield buffer
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def tick(namespace: str, name: str) -> None:
    """A tick that logs from two of the operator's loggers, then fails."""
    logging.getLogger("pdscaler.reconcile").info("%s/%s: apply Deployment", namespace, name)
    logging.getLogger("pdscaler.kube").warning("PATCH ...: 429; try 2 in 0.5s")
    raise RuntimeError("boom")


def test_every_line_of_a_tick_carries_namespace_name_and_tick(
    json_lines: io.StringIO,
) -> None:
    loop = TickLoop(tick, lambda _ns, _n: 15.0, lambda: True, Health())
    loop.notice("serving", "chat", 1)
    loop.notice("batch", "summarize", 1)
    try:
        for future in [loop.running[k] for k in loop.run_once(0.0)]:  # in the tick threads
            future.result(timeout=10)
    finally:
        loop.pool.shutdown(wait=True)
    logging.getLogger("pdscaler.handlers").info("between ticks")
    out = lines(json_lines)
    by_object: dict[tuple[object, object], list[dict[str, object]]] = {}
    for line in out[:-1]:
        by_object.setdefault((line["namespace"], line["name"]), []).append(line)
    assert set(by_object) == {("serving", "chat"), ("batch", "summarize")}
    for (namespace, name), got in by_object.items():
        messages = [str(line["message"]) for line in got]
        assert messages[0] == f"{namespace}/{name}: apply Deployment"
        assert messages[2] == f"tick of {namespace}/{name} failed"  # the loop's own line
        assert "RuntimeError: boom" in str(got[2]["exc_info"])
        assert len({line["tick"] for line in got}) == 1  # one tick, one number
        assert [line["severity"] for line in got] == ["info", "warn", "error"]
    ticks = {by_object[k][0]["tick"] for k in by_object}
    assert len(ticks) == 2
    assert all(isinstance(t, int) and t > 0 for t in ticks)
    last = out[-1]
    assert last["message"] == "between ticks"
    assert not {"namespace", "name", "tick", logcontext.RECORD_ATTR} & set(last)


def test_a_kopf_object_line_carries_namespace_and_name(json_lines: io.StringIO) -> None:
    """kopf's object loggers put the object on the record (``k8s_ref``)."""
    ref = {"kind": "PDDeployment", "namespace": "serving", "name": "chat", "uid": "u"}
    logging.getLogger("kopf.objects").info("Handler 'on_event' succeeded.", extra={"k8s_ref": ref})
    (line,) = lines(json_lines)
    assert (line["namespace"], line["name"]) == ("serving", "chat")
    assert "tick" not in line


def test_ticks_are_numbered_in_order_and_nest_back() -> None:
    assert logcontext.current() is None
    with logcontext.object_tick("a", "x") as first:
        assert logcontext.current() == first
    with logcontext.object_tick("a", "x") as second:
        pass
    assert second.tick == first.tick + 1
    assert logcontext.current() is None


def test_text_formats_are_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full format stays kopf's ``[time] logger [LEVEL] message`` (no JSON)."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        (handler,) = configure_logging(LogFormat.plain, verbose=False)
        buffer = io.StringIO()
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(buffer)
        with logcontext.object_tick("serving", "chat"):
            logging.getLogger("pdscaler.reconcile").info("serving/chat: apply")
        assert buffer.getvalue() == "serving/chat: apply\n"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
