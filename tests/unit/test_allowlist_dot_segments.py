"""The Prometheus allow-list refuses dot segments (issue 30, item 6): a URL under an
allowed prefix whose path climbs out of it once a server or proxy normalises it
(``/prom/../admin``, percent-encoded ``%2e%2e``, double-encoded ``%252e``, an encoded
slash ``..%2f``, a ``;`` parameter ``..;``) is never contacted."""

from __future__ import annotations

import pytest

from pdscaler.prometheus import url_allowed

ALLOWED = ("http://prometheus.monitoring:9090", "https://thanos.obs/prom")


@pytest.mark.parametrize(
    "url",
    [
        "https://thanos.obs/prom/../admin",
        "https://thanos.obs/prom/..",
        "https://thanos.obs/prom/./tenant",
        "https://thanos.obs/prom/%2e%2e/admin",
        "https://thanos.obs/prom/%2E%2E/admin",
        "https://thanos.obs/prom/.%2e/admin",
        "https://thanos.obs/prom/%2e./admin",
        "https://thanos.obs/prom/%252e%252e/admin",
        "https://thanos.obs/prom/tenant/..%2f..%2fadmin",
        "https://thanos.obs/prom/tenant%2f%2e%2e%2f%2e%2e/admin",
        "https://thanos.obs/prom/..;/admin",
        "http://prometheus.monitoring:9090/%2e%2e/%2e%2e/metrics",
        "http://prometheus.monitoring:9090/api/%2e",
    ],
)
def test_a_dot_segment_in_any_encoding_is_refused(url: str) -> None:
    assert not url_allowed(url, ALLOWED)


@pytest.mark.parametrize(
    "url",
    [
        "https://thanos.obs/prom/tenant-a",
        "https://thanos.obs/prom/v1.2/tenant",
        "https://thanos.obs/prom/...",
        "https://thanos.obs/prom/.well-known",
        "https://thanos.obs/prom/tenant%2Da",
        "http://prometheus.monitoring:9090/",
    ],
)
def test_names_with_dots_are_still_allowed(url: str) -> None:
    assert url_allowed(url, ALLOWED)


def test_an_allowed_prefix_with_a_dot_segment_allows_nothing() -> None:
    assert not url_allowed("https://thanos.obs/prom/x", ("https://thanos.obs/a/../prom",))
