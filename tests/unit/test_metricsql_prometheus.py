"""prometheus.py against an in-process fake Prometheus (a local HTTP server): every way
Prometheus can fail is one typed error with a reason; answers are read by metricsql.
The real Prometheus is exercised in tests/lab/test_prometheus_snapshot.py."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pdscaler import metricsql as mq
from pdscaler.prometheus import (
    MetricsUnavailableError,
    PrometheusClient,
    read_snapshot,
)
from pdscaler.spec import LENIENT, PDDeploymentSpec
from pdscaler.types import MetricsErrorReason
from support.httpkit import QuietHandler, serving

Responder = Callable[[dict[str, str]], tuple[int, bytes]]
NOW = 1_700_000_000.0
SPEC = PDDeploymentSpec.model_validate(
    {
        "engine": {"image": "img", "version": "v1"},
        "prefill": {"tokensPerSecond": 3000},
        "decode": {"tokensPerSecond": 800},
    }
)


def success(result: list[dict[str, Any]]) -> tuple[int, bytes]:
    doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return 200, json.dumps(doc).encode()


@contextlib.contextmanager
def fake_prometheus(respond: Responder, seen: list[dict[str, str]] | None = None) -> Iterator[str]:
    """A server answering POST /api/v1/query with ``respond(form)``; yields its URL."""

    class Handler(QuietHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server dispatches on this name)
            length = int(self.headers.get("Content-Length", "0"))
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            if seen is not None:
                seen.append({"path": self.path, **form})
            status, body = respond(form)
            with contextlib.suppress(ConnectionError):  # the client gave up (timeout test)
                self.reply(status, body, "application/json")

    # a snapshot's queries arrive at once: a deep listen backlog
    with serving(Handler, queue_size=64, poll_seconds=0.05) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def unavailable(url: str, timeout: float = 2.0) -> MetricsUnavailableError:
    with pytest.raises(MetricsUnavailableError) as info:
        read_snapshot(PrometheusClient(url, timeout), SPEC, "ns", "chat", now=NOW)
    return info.value


def test_query_is_a_form_post_evaluated_at_now() -> None:
    seen: list[dict[str, str]] = []
    with fake_prometheus(lambda form: success([]), seen) as url:
        PrometheusClient(url + "/", timeout=3.0).query("up", at=NOW)
    assert seen == [
        {"path": "/api/v1/query", "query": "up", "timeout": "3s", "time": "1700000000.000"}
    ]


def test_connection_refused_is_unreachable() -> None:
    with fake_prometheus(lambda form: success([])) as url:
        pass  # the server is closed again: its port now refuses connections
    err = unavailable(url)
    assert err.reason == MetricsErrorReason.UNREACHABLE
    assert err.message == f"cannot connect to {url}: connection refused"


def test_no_answer_in_time_is_unreachable() -> None:
    """A server slower than the 0.3 s timeout: unreachable after about one timeout, well
    under the 14 x 0.3 = 4.2 s the snapshot's queries would take one after another."""

    def slow(form: dict[str, str]) -> tuple[int, bytes]:
        time.sleep(1.0)
        return success([])

    with fake_prometheus(slow) as url:
        start = time.monotonic()
        err = unavailable(url, timeout=0.3)
        elapsed = time.monotonic() - start
    assert err.reason == MetricsErrorReason.UNREACHABLE
    assert err.message == f"cannot connect to {url}: no answer within 0.3s"
    assert elapsed < 2.0


def test_query_rejected_by_prometheus_names_the_query() -> None:
    """HTTP 400 with Prometheus' error document, for the TTFT query only."""

    def respond(form: dict[str, str]) -> tuple[int, bytes]:
        if "time_to_first_token" in form["query"]:
            doc = {"status": "error", "errorType": "bad_data", "error": "parse error"}
            return 400, json.dumps(doc).encode()
        return success([])

    with fake_prometheus(respond) as url:
        err = unavailable(url)
    assert err.reason == MetricsErrorReason.QUERY_FAILED
    assert err.message == "prefill.latency_seconds: bad_data: parse error"


@pytest.mark.parametrize(
    ("status", "body", "reason", "detail"),
    [
        (
            503,
            b"Service Unavailable",
            MetricsErrorReason.HTTP_ERROR,
            "HTTP 503: Service Unavailable",
        ),
        (
            503,
            b'{"status":"error","errorType":"timeout","error":"query timed out"}',
            MetricsErrorReason.HTTP_ERROR,
            "HTTP 503: timeout: query timed out",
        ),
        (404, b"404 page not found", MetricsErrorReason.HTTP_ERROR, "HTTP 404: Not Found"),
        (200, b"<html>login</html>", MetricsErrorReason.BAD_ANSWER, "answered 200 with no JSON"),
        (200, b'{"status":"error","error":"x"}', MetricsErrorReason.QUERY_FAILED, "error: x"),
    ],
)
def test_server_failures(status: int, body: bytes, reason: str, detail: str) -> None:
    with fake_prometheus(lambda form: (status, body)) as url:
        err = unavailable(url)
    assert err.reason == reason
    assert detail in err.message, err.message


def test_invalid_custom_template_is_refused_before_sending() -> None:
    doc = SPEC.model_dump(by_alias=True)
    doc["metrics"] = {
        "preset": "custom",
        "queries": {
            "requestRate": "sum(rate(req_total[{window}]))",
            "promptTokens": "avg(p{selector})",
            "outputTokens": "avg(o{selector})",
            "queueDepth": "sum(q{selector})",
            "ttft": "max(t{selector})",
            "tpot": "max(u{selector})",
        },
    }
    seen: list[dict[str, str]] = []
    bad = PDDeploymentSpec.model_validate(doc, context=LENIENT)  # the operator's read
    with (
        fake_prometheus(lambda form: success([]), seen) as url,
        pytest.raises(MetricsUnavailableError) as info,
    ):
        read_snapshot(PrometheusClient(url), bad, "ns", "c", NOW)
    assert info.value.reason == MetricsErrorReason.INVALID_QUERY
    assert "metrics.queries.requestRate: not scoped" in info.value.message
    assert seen == []


def test_snapshot_from_answers() -> None:
    """Each query answered with a value the test picks by metric name; an empty answer
    for KV usage stays unknown, not 0."""
    values = {
        "vllm:request_success_total": "4",
        "vllm:request_prompt_tokens": "2000",
        "vllm:request_generation_tokens": "500",
        "vllm:time_to_first_token_seconds": "0.8",
        "vllm:inter_token_latency_seconds": "0.04",
        "vllm:num_requests_waiting": "3",
        "vllm:num_requests_running": "7",
        "vllm:prompt_tokens_total": "8000",
        "vllm:generation_tokens_total": "2000",
    }

    def respond(form: dict[str, str]) -> tuple[int, bytes]:
        q = form["query"]
        if q.startswith("max by (pdscaler_io_role)"):
            return success([{"metric": {"pdscaler_io_role": "decode"}, "value": [NOW, str(NOW)]}])
        if q.startswith("sum by (pod)"):
            return success([{"metric": {"pod": "d-0"}, "value": [NOW, "7"]}])
        for metric, value in values.items():
            if metric in q:
                return success([{"metric": {}, "value": [float(form["time"]), value]}])
        return success([])

    with fake_prometheus(respond) as url:
        snap = read_snapshot(PrometheusClient(url), SPEC, "ns", "chat", now=NOW)
    assert (snap.request_rate, snap.prompt_tokens, snap.output_tokens) == (4.0, 2000.0, 500.0)
    assert (snap.prefill.latency_seconds, snap.decode.latency_seconds) == (0.8, 0.04)
    assert (snap.prefill.queue_depth, snap.decode.running) == (3.0, 7.0)
    assert snap.decode.running_by_pod == {"d-0": 7.0}
    assert snap.decode.kv_usage is None
    assert snap.problems == (f"{mq.Key.DECODE_KV}: no data (empty answer)",)
