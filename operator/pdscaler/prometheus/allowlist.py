"""Which Prometheus URLs the operator may contact at all (``PDSCALER_PROMETHEUS_ALLOWED_URLS``).

Owns: ``url_allowed`` (same scheme, host and port, the path on a ``/`` boundary; no user
information, query, fragment or dot segment in any percent-encoding), the list's
comma-separated form and the default (the CRD's default URL). Pure: must not contact
anything.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

#: The Prometheus an unconfigured operator may query (the CRD's default URL).
DEFAULT_ALLOWED_URLS = ("http://prometheus.monitoring:9090",)


#: how many rounds of percent-decoding a path is read through (``%252e`` -> ``%2e`` ->
#: ``.``): a proxy and the server behind it may each decode once
_DECODE_ROUNDS = 3


def _climbs(path: str) -> bool:
    """Whether ``path`` has a dot segment (``.`` or ``..``, a ``;`` parameter aside)
    as written or once percent-decoded up to ``_DECODE_ROUNDS`` times, where a server
    normalising it would leave the prefix it was allowed under:
    ``/prom/%2e%2e/admin`` -> True; ``/prom/v1.2`` and ``/prom/...`` -> False."""
    for _ in range(_DECODE_ROUNDS + 1):
        segments = path.replace("\\", "/").split("/")
        if any(seg.split(";", 1)[0] in (".", "..") for seg in segments):
            return True
        decoded = urllib.parse.unquote(path)
        if decoded == path:
            return False
        path = decoded
    return True  # still encoded after every round: not a path anyone means


def _origin(url: str) -> tuple[str, str, int, str] | None:
    """(scheme, host, port, path without trailing slash) of an http(s) URL with no user
    information, query, fragment or dot segment (``_climbs``); None for anything
    else."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    if "@" in parts.netloc or parts.query or parts.fragment or "\\" in url:
        return None
    if _climbs(parts.path):
        return None
    if port is None:
        port = 443 if scheme == "https" else 80
    return scheme, parts.hostname.lower().rstrip("."), port, parts.path.rstrip("/")


def url_allowed(url: str, allowed: Sequence[str]) -> bool:
    """True when ``url`` is one of the ``allowed`` prefixes or below one: same scheme,
    host and port (80/443 when absent), and the path equal to or under the prefix's path,
    on a ``/`` boundary. A URL with user information, a query, a fragment or a dot
    segment (``..``, ``%2e%2e``, ``%252e%252e``, ``..;``) is never allowed. Pure.

    >>> allowed = ["http://prometheus.monitoring:9090", "https://thanos.obs/prom"]
    >>> url_allowed("http://prometheus.monitoring:9090/", allowed)
    True
    >>> url_allowed("https://thanos.obs:443/prom/tenant-a", allowed)
    True
    >>> url_allowed("http://prometheus.monitoring:9090.evil.example", allowed)
    False
    >>> url_allowed("https://thanos.obs/prometheus", allowed)
    False
    >>> url_allowed("http://user@prometheus.monitoring:9090", allowed)
    False
    >>> url_allowed("https://thanos.obs/prom/%2e%2e/admin", allowed)
    False
    """
    want = _origin(url)
    if want is None:
        return False
    for prefix in allowed:
        have = _origin(prefix)
        if have is None or have[:3] != want[:3]:
            continue
        if want[3] == have[3] or want[3].startswith(have[3] + "/"):
            return True
    return False


def parse_allowed_urls(text: str) -> tuple[str, ...]:
    """The allow-list from its comma-separated form (blank items dropped):
    ``"http://a:9090, https://b/prom"`` -> ``("http://a:9090", "https://b/prom")``."""
    return tuple(item.strip() for item in text.split(",") if item.strip())
