"""The request counters of kube.py and prometheus.py and their export on /metrics
(``pdscaler_kube_requests_total{verb,resource}``, ``pdscaler_prometheus_requests_total``,
``pdscaler_prometheus_connections_total``), without a cluster."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pdscaler.kube import request_kind
from pdscaler.telemetry import Telemetry
from support.fakekube import FakeKube


def test_request_kind_names_verb_and_resource() -> None:
    ns = "/api/v1/namespaces/s"
    assert request_kind("GET", f"{ns}/pods", {"labelSelector": "a=b"}) == ("list", "pods")
    assert request_kind("GET", f"{ns}/pods", {"watch": "1"}) == ("watch", "pods")
    assert request_kind("GET", f"{ns}/pods/p", None) == ("get", "pods")
    assert request_kind("PATCH", "/apis/apps/v1/namespaces/s/deployments/d", None) == (
        "patch",
        "deployments",
    )
    crd = "/apis/pdscaler.io/v1alpha1"
    assert request_kind("GET", f"{crd}/pddeployments", None) == ("list", "pddeployments")
    assert request_kind("PATCH", f"{crd}/namespaces/s/pddeployments/c/status", None) == (
        "patch",
        "pddeployments/status",
    )
    assert request_kind("POST", f"{ns}/events", None) == ("create", "events")


def test_every_read_and_write_is_counted() -> None:
    """observe = 3 LISTs (+ a GET per wanted object not found by label); a write, 1."""
    kube = FakeKube()
    kube.observe("s", "chat", [("ServiceAccount", "chat-router")])
    kube.get_pdd("s", "chat")
    assert kube.request_counts.snapshot() == {
        ("list", "deployments"): 1,
        ("list", "services"): 1,
        ("list", "pods"): 1,
        ("get", "serviceaccounts"): 1,
        ("get", "pddeployments"): 1,
    }
    assert kube.request_counts.total == 5


def test_the_counters_are_exported() -> None:
    tel = Telemetry()
    tel.track_requests(lambda: {("list", "pods"): 7, ("watch", "pods"): 1}, lambda: (14, 2))
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(tel.exposition().decode())
        for s in f.samples
    }
    assert got[("pdscaler_kube_requests_total", (("resource", "pods"), ("verb", "list")))] == 7
    assert got[("pdscaler_kube_requests_total", (("resource", "pods"), ("verb", "watch")))] == 1
    assert got[("pdscaler_prometheus_requests_total", ())] == 14
    assert got[("pdscaler_prometheus_connections_total", ())] == 2
