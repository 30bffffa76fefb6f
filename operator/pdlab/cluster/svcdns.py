"""A cluster-DNS and kube-proxy stand-in for the HTTP clients the lab's pods run.

Owns: an HTTP/1.1 forward proxy on ``127.0.0.1:<port>`` (plain ``http``; no
``CONNECT``). A request for ``http://<service>.<namespace>.svc[.cluster.local]:<port>/…``
goes to one ready endpoint of that Service port (``svcproxy.service_endpoints``, the
pods' readiness probes run as the kubelet would), as cluster DNS would resolve the name
to the ClusterIP and kube-proxy would send it on; a Service with no ready endpoint
answers 503 (where a real client would see the connection refused). Any other host is
forwarded as it is. Must not: listen anywhere but loopback, or change anything in the
cluster.

Why: the lab's pods run as local processes on the lab host (``pdlab.cluster.podrunner``), whose
resolver knows no ``.svc`` names, and the lab cannot bind ClusterIPs. The pod runner
gives the processes it starts ``http_proxy`` pointing here (urllib, requests and curl
honour it), so the chart's ``helm test`` pod reaches the operator's metrics Service by
its DNS name, as in a cluster:

    with ClusterHttpProxy(lab.kubeconfig) as proxy:      # proxy.url: http://127.0.0.1:41235
        # GET http://pds-pdscaler-metrics.ops.svc:8080/healthz via proxy.url
        #   -> Service ops/pds-pdscaler-metrics port 8080 -> 127.64.0.7:8080/healthz
        ...
"""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from pdlab.cluster.svcproxy import ProbeState, service_endpoints

#: Headers that belong to one hop (RFC 9110 §7.6.1), not passed on.
HOP_BY_HOP = frozenset(
    {"connection", "proxy-connection", "keep-alive", "transfer-encoding", "te", "trailer",
     "upgrade", "proxy-authorization", "proxy-authenticate"}
)  # fmt: skip
CLUSTER_DOMAINS = (".svc", ".svc.cluster.local")


def service_of(host: str) -> tuple[str, str] | None:
    """``(namespace, service)`` a cluster DNS name stands for, else None.

    ``"pds-pdscaler-metrics.ops.svc"`` -> ``("ops", "pds-pdscaler-metrics")``;
    ``"chat.serving.svc.cluster.local"`` -> ``("serving", "chat")``;
    ``"prometheus.example.com"``, ``"ops.svc"`` -> None.
    """
    name = host.lower().rstrip(".")
    for domain in CLUSTER_DOMAINS[::-1]:  # the longer first
        if name.endswith(domain):
            parts = name[: -len(domain)].split(".")
            if len(parts) == 2 and all(parts):
                return parts[1], parts[0]
            return None
    return None


class ClusterHttpProxy:
    """The forward proxy (module docstring); ``url`` once started."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        port: int = 0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._core = client.CoreV1Api(api_client)
        self._discovery = client.DiscoveryV1Api(api_client)
        self._probes = ProbeState()
        self._probe_lock = threading.Lock()
        self.say: Callable[[str], None] = say or (lambda _line: None)
        self.requests = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                proxy.requests += 1
                proxy.relay(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        for verb in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
            setattr(Handler, f"do_{verb}", Handler._relay)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="svcdns", daemon=True
        )

    def target(self, host: str, port: int) -> tuple[str, int] | None:
        """Where a request for ``host:port`` goes: a ready endpoint of the Service the
        name stands for (None: it has none), or ``host:port`` itself."""
        named = service_of(host)
        if named is None:
            return host, port
        namespace, name = named
        service = self._core.read_namespaced_service(name, namespace, _request_timeout=5)
        ports = [p for p in (service.spec.ports if service.spec else None) or [] if p.port == port]
        if not ports:
            return None
        with self._probe_lock:
            found = service_endpoints(
                self._core, self._discovery, namespace, name, ports[0].name or port, self._probes
            )
        if not found:
            return None
        endpoint_host, _, endpoint_port = found[self.requests % len(found)].rpartition(":")
        return endpoint_host, int(endpoint_port)

    def relay(self, handler: Any) -> None:
        """Answer one proxied request on ``handler`` (a BaseHTTPRequestHandler)."""
        url = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if url.scheme != "http" or not url.hostname:
            return self._answer(handler, 400, f"not an absolute http URL: {handler.path}")
        try:
            where = self.target(url.hostname, url.port or 80)
        except client.ApiException as err:
            return self._answer(handler, 502, f"no such Service for {url.hostname}: {err.reason}")
        if where is None:
            return self._answer(handler, 503, f"no ready endpoint for {url.netloc}")
        path = url.path or "/"
        path += f"?{url.query}" if url.query else ""
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(*where, timeout=30)
        try:
            conn.request(handler.command, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as err:
            return self._answer(handler, 502, f"{where[0]}:{where[1]}: {err}")
        finally:
            conn.close()
        handler.send_response(resp.status, resp.reason)
        for key, value in resp.getheaders():
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        self.say(f"{handler.command} {handler.path} -> {where[0]}:{where[1]} {resp.status}")
        return None

    def _answer(self, handler: Any, code: int, message: str) -> None:
        data = f"{message}\n".encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        self.say(f"{handler.command} {handler.path}: {code} {message}")

    def start(self) -> ClusterHttpProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ClusterHttpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
