"""A minimal HTTPS JSON client for the lab's API server, authenticated as the lab admin.

Owns: health probes (`/readyz`), node registration and the "nodes Ready" check used by
`up`. Kept on the standard library so `pdlab up` starts fast without the `kubernetes`
client. Must not be used by pdscaler itself (the product talks to Kubernetes in
`pdscaler.kube`).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class KubeAPI:
    """GET/POST/DELETE JSON against `server` with the admin client certificate in `pki`."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._ctx = ctx

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 5.0,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """(status, parsed JSON or text). HTTP errors are returned, not raised.

        ``content_type`` names a PATCH's kind, e.g. "application/merge-patch+json"."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        text = raw.decode(errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def ready(self) -> bool:
        """True if GET /readyz answers 200 "ok"."""
        try:
            status, _ = self.request("GET", "/readyz", timeout=2.0)
        except OSError:
            return False
        return status == 200


def node_ready(node: dict[str, Any]) -> bool:
    """Ready=True and no `node.kubernetes.io/not-ready` taint left (the scheduler needs both)."""
    conds = node.get("status", {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)
    taints = node.get("spec", {}).get("taints") or []
    tainted = any(t.get("key", "").startswith("node.kubernetes.io/") for t in taints)
    return ready and not tainted
