"""The operator's allow-list of Prometheus endpoints: a PDDeployment's
``metrics.prometheus.url`` is queried only when it is under one of the operator's
allowed prefixes; any other URL gets no request at all and the condition
MetricsAvailable=False, reason PrometheusNotAllowed, naming what is allowed."""

from __future__ import annotations

import copy
import json
import socket
import time
from typing import Any, ClassVar

import pytest

from pdscaler import runtime
from pdscaler.prometheus import (
    DEFAULT_ALLOWED_URLS,
    MetricsUnavailableError,
    parse_allowed_urls,
    url_allowed,
)
from pdscaler.reconcile import reconcile_once
from pdscaler.runtime import Runtime
from pdscaler.spec import PDDeploymentSpec
from support.builders import pdd_object
from support.fakekube import FakeKube
from support.httpkit import QuietHandler, serving

NS, NAME = "serving", "chat"
PDD_PATH = f"/apis/pdscaler.io/v1alpha1/namespaces/{NS}/pddeployments/{NAME}"
ALLOWED = ("http://prometheus.monitoring:9090", "https://thanos.obs/prom")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://prometheus.monitoring:9090", True),
        ("http://prometheus.monitoring:9090/", True),
        ("HTTP://Prometheus.Monitoring:9090", True),
        ("https://thanos.obs/prom", True),
        ("https://thanos.obs:443/prom/tenant-a", True),
        ("https://thanos.obs/prom/", True),
        # look-alikes of an allowed prefix
        ("http://prometheus.monitoring:9090.evil.example", False),
        ("http://prometheus.monitoring:9090@evil.example", False),
        ("http://prometheus.monitoring:90901", False),
        ("http://prometheus.monitoring", False),  # port 80, not 9090
        ("https://prometheus.monitoring:9090", False),  # another scheme
        ("https://thanos.obs/prometheus", False),  # not on a "/" boundary
        ("https://thanos.obs/", False),
        ("http://thanos.obs/prom", False),
        # never: user information, a query, a fragment, other schemes
        ("http://user:pw@prometheus.monitoring:9090", False),
        ("http://prometheus.monitoring:9090/?x=1", False),
        ("http://prometheus.monitoring:9090/#x", False),
        ("file:///etc/passwd", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("not a url", False),
    ],
)
def test_url_allowed(url: str, ok: bool) -> None:
    assert url_allowed(url, ALLOWED) is ok


def test_parse_allowed_urls() -> None:
    assert parse_allowed_urls(" http://a:9090, ,https://b/prom ,") == (
        "http://a:9090",
        "https://b/prom",
    )
    assert parse_allowed_urls("") == ()


def test_from_environment_reads_the_allow_list_and_defaults_to_the_crd_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runtime, "load_api_client", lambda: None)
    monkeypatch.setattr(runtime, "Kube", lambda client: FakeKube())
    monkeypatch.delenv(runtime.PROMETHEUS_URL_ENV, raising=False)
    monkeypatch.delenv(runtime.PROMETHEUS_ALLOWED_URLS_ENV, raising=False)
    monkeypatch.delenv(runtime.PROMETHEUS_MAX_BODY_ENV, raising=False)
    rt = Runtime.from_environment()
    assert rt.prometheus_allowed == DEFAULT_ALLOWED_URLS == ("http://prometheus.monitoring:9090",)
    assert rt.prometheus_url is None
    monkeypatch.setenv(runtime.PROMETHEUS_ALLOWED_URLS_ENV, "http://a:1,http://b:2/p")
    monkeypatch.setenv(runtime.PROMETHEUS_MAX_BODY_ENV, "1024")
    rt = Runtime.from_environment()
    assert rt.prometheus_allowed == ("http://a:1", "http://b:2/p")
    assert rt.prometheus_max_body_bytes == 1024
    assert rt.prometheus("http://b:2/p/x").max_body_bytes == 1024
    monkeypatch.setenv(runtime.PROMETHEUS_MAX_BODY_ENV, "0")
    with pytest.raises(ValueError, match="PDSCALER_PROMETHEUS_MAX_BODY_BYTES"):
        Runtime.from_environment()


class Recorder(QuietHandler):
    """A Prometheus that records every request and answers an empty vector."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:  # noqa: N802
        Recorder.seen.append(self.path)
        body = {"status": "success", "data": {"resultType": "vector", "result": []}}
        self.reply(200, json.dumps(body).encode(), "application/json")


def metrics_condition(kube: FakeKube) -> dict[str, Any]:
    conditions = copy.deepcopy(kube.store[PDD_PATH])["status"]["conditions"]
    (c,) = [c for c in conditions if c["type"] == "MetricsAvailable"]
    return dict(c)


def test_a_url_outside_the_allow_list_is_never_contacted() -> None:
    """The tenant names a server the operator does not allow: no request reaches it, the
    tick goes on (holding replicas), and the condition says why and what is allowed."""
    Recorder.seen = []
    with serving(Recorder) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        kube = FakeKube()
        kube.put(PDD_PATH, pdd_object(NS, NAME, url))
        rt = Runtime(kube=kube, clock=lambda: 1_000_000.0, prometheus_allowed=ALLOWED)
        rep = reconcile_once(rt, NS, NAME)
        assert Recorder.seen == []
        assert rep.metrics is None
        cond = metrics_condition(kube)
        assert cond["status"] == "False"
        assert cond["reason"] == "PrometheusNotAllowed"
        assert cond["message"].startswith(
            "metrics.prometheus.url is not one the operator may query (allowed: "
            "http://prometheus.monitoring:9090, https://thanos.obs/prom); no query sent"
        )

        # the same URL allowed: queried
        kube = FakeKube()
        kube.put(PDD_PATH, pdd_object(NS, NAME, url))
        rt = Runtime(kube=kube, clock=lambda: 1_000_000.0, prometheus_allowed=(url,))
        reconcile_once(rt, NS, NAME)
        assert Recorder.seen
        assert set(Recorder.seen) == {"/api/v1/query"}
        assert metrics_condition(kube)["reason"] == "MetricsIncomplete"


def test_the_operator_override_replaces_the_url_and_skips_the_allow_list() -> None:
    """``$PDSCALER_PROMETHEUS_URL`` (operator-level) is queried instead of the tenant's
    URL, which is never contacted, allowed or not."""
    Recorder.seen = []
    with serving(Recorder) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        kube = FakeKube()
        kube.put(PDD_PATH, pdd_object(NS, NAME, "http://169.254.169.254"))
        rt = Runtime(
            kube=kube, clock=lambda: 1_000_000.0, prometheus_url=url, prometheus_allowed=ALLOWED
        )
        reconcile_once(rt, NS, NAME)
    assert Recorder.seen
    assert metrics_condition(kube)["reason"] == "MetricsIncomplete"


def connections(listener: socket.socket) -> int:
    """How many connections the kernel accepted on ``listener`` since the last call
    (each is taken and closed)."""
    n = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def test_a_pdd_whose_query_ran_into_the_deadline_is_paused() -> None:
    """A server that never answers holds a tick for the whole deadline once; for the
    next ``prometheus_pause`` seconds that PDDeployment's ticks fail at once with the
    same error, without a connection. Other PDDeployments are not paused; after the
    pause (or with another URL) it is read again."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # accepts (the kernel does) and never answers
    listener.setblocking(False)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    clock = [0.0]
    kube = FakeKube()
    kube.put(PDD_PATH, pdd_object(NS, NAME, url))
    rt = Runtime(
        kube=kube,
        clock=lambda: 1_000_000.0,
        prometheus_allowed=(url,),
        prometheus_timeout=0.3,
        prometheus_pause=30.0,
        monotonic=lambda: clock[0],
    )
    spec = PDDeploymentSpec.model_validate(pdd_object(NS, NAME, url)["spec"])
    try:
        start = time.monotonic()
        with pytest.raises(MetricsUnavailableError) as first:
            rt.snapshot(spec, NS, NAME, 0.0)
        assert time.monotonic() - start >= 0.3
        assert first.value.timed_out
        # the status says the tenant is backed off (D17 saw only "no answer within")
        assert first.value.message == (
            f"cannot connect to {url}: no answer within 0.3s; not read again for 30s"
        )
        assert connections(listener) >= 1
        clock[0] = 29.0
        start = time.monotonic()
        with pytest.raises(MetricsUnavailableError) as again:
            rt.snapshot(spec, NS, NAME, 0.0)
        assert connections(listener) == 0  # paused: not even a connection
        assert time.monotonic() - start < 0.3  # less than the deadline (a loaded CI box)
        assert again.value.message == first.value.message
        # another PDDeployment on the same server is not paused by this one
        start = time.monotonic()
        with pytest.raises(MetricsUnavailableError):
            rt.snapshot(spec, NS, "other", 0.0)
        assert time.monotonic() - start >= 0.3
        # after the pause: read again
        clock[0] = 31.0
        start = time.monotonic()
        with pytest.raises(MetricsUnavailableError):
            rt.snapshot(spec, NS, NAME, 0.0)
        assert time.monotonic() - start >= 0.3
    finally:
        listener.close()
