"""The lab's Prometheus: install check, config, command line, scrape targets, probes.

Owns: rendering the lab's `prometheus.yml` (`deploy/local/prometheus.yml` plus the
user-facing Kubernetes service discovery snippet `deploy/prometheus/kubernetes-sd.yaml`,
pointed at the lab's API server), Prometheus' argv (loopback port, own TSDB under the
lab dir, `--web.enable-lifecycle`), and HTTP probes (`/-/ready`, `/api/v1/targets`,
`/api/v1/query`). Must not start processes (lab.py does), keep any file-based target
list, or touch a system Prometheus.

Prometheus finds engine pods as in a cluster: `role: pod` discovery, keep pods labelled
`pdscaler.io/role=prefill|decode` (or `frontend`) with a port named `http` and router pods
(`pdscaler.io/role=router`) on their port named `metrics`, scrape `podIP:port/metrics`.
A Ready kwok pod 127.64.0.7 of `chat` (prefill, revision r1) becomes the target
`http://127.64.0.7:8000/metrics` with labels namespace, pod, pdscaler_io_name="chat",
pdscaler_io_role="prefill", pdscaler_io_revision="r1", pdscaler_io_version.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster.config import (
    PACKAGE_DIR,
    PROMETHEUS_VERSION,
    REPO_DIR,
    TEMPLATES_DIR,
    cache_dir,
)

#: The scrape jobs users paste into their Prometheus (the lab uses the same file).
SD_SNIPPET = REPO_DIR / "deploy" / "prometheus" / "kubernetes-sd.yaml"
BUILD_SCRIPT = PACKAGE_DIR / "build-prometheus.sh"


def binary() -> str:
    """Path of a `prometheus` with Kubernetes service discovery; built once if missing.

    ``$PDLAB_PROMETHEUS`` if set, else the build of `build-prometheus.sh` in the cache
    (``~/.cache/pdscaler/tools/prometheus-<version>/prometheus``), built now if absent
    (Debian's package has no kubernetes_sd_configs).
    """
    explicit = os.environ.get("PDLAB_PROMETHEUS")
    if explicit:
        return explicit
    path = cache_dir() / "tools" / f"prometheus-{PROMETHEUS_VERSION}" / "prometheus"
    if path.exists():
        return str(path)
    print(f"pdlab: building Prometheus {PROMETHEUS_VERSION} with Kubernetes discovery")
    env = {**os.environ, "PROMETHEUS_VERSION": PROMETHEUS_VERSION}
    proc = subprocess.run(["bash", str(BUILD_SCRIPT), str(path.parent)], env=env)
    if proc.returncode != 0 or not path.exists():
        raise RuntimeError(f"{BUILD_SCRIPT} failed (exit {proc.returncode})")
    return str(path)


def scrape_jobs(api_server: str, pki_dir: Path) -> list[dict[str, Any]]:
    """The jobs of `deploy/prometheus/kubernetes-sd.yaml` pointed at the lab's API server.

    Each `kubernetes_sd_configs` entry gets `api_server` and a `tls_config` with the lab's
    CA and admin client certificate; the relabelling is the user-facing snippet's, as is.
    """
    jobs: list[dict[str, Any]] = yaml.safe_load(SD_SNIPPET.read_text())
    tls = {
        "ca_file": str(pki_dir / "ca.crt"),
        "cert_file": str(pki_dir / "admin.crt"),
        "key_file": str(pki_dir / "admin.key"),
    }
    for job in jobs:
        for sd in job.get("kubernetes_sd_configs", []):
            sd["api_server"] = api_server
            sd["tls_config"] = dict(tls)
    return jobs


def render_config(scrape_interval: str, api_server: str, pki_dir: Path) -> str:
    """The lab's prometheus.yml: `deploy/local/prometheus.yml` + `scrape_jobs`."""
    text = (TEMPLATES_DIR / "prometheus.yml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text.replace("@SCRAPE_INTERVAL@", scrape_interval))
    doc["scrape_configs"] = scrape_jobs(api_server, pki_dir)
    return yaml.safe_dump(doc, sort_keys=False)


def write_config(prom_dir: Path, scrape_interval: str, api_server: str, pki_dir: Path) -> Path:
    """Write `<prom_dir>/prometheus.yml` (see `render_config`); its path."""
    prom_dir.mkdir(parents=True, exist_ok=True)
    path = prom_dir / "prometheus.yml"
    path.write_text(render_config(scrape_interval, api_server, pki_dir))
    return path


def argv(binary_path: str, prom_dir: Path, port: int) -> list[str]:
    """Prometheus on 127.0.0.1:`port`, its TSDB in `<prom_dir>/data`, reloadable."""
    return [
        binary_path,
        f"--config.file={prom_dir / 'prometheus.yml'}",
        f"--storage.tsdb.path={prom_dir / 'data'}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]


def http_get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    """(status, body); connection errors raise OSError."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")


def ready(base_url: str) -> bool:
    """True if Prometheus answers /-/ready with 200."""
    try:
        return http_get(base_url + "/-/ready", timeout=2.0)[0] == 200
    except OSError:
        return False


def query(base_url: str, promql: str) -> list[dict[str, Any]]:
    """Instant query; the `result` list of a vector answer. Errors raise RuntimeError."""
    url = base_url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    status, body = http_get(url)
    doc = json.loads(body)
    if status != 200 or doc.get("status") != "success":
        raise RuntimeError(f"query {promql!r} failed: {status} {body[:500]}")
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def active_targets(base_url: str) -> list[dict[str, Any]]:
    """Prometheus' active targets (scrapeUrl, health, labels, lastError, ...)."""
    status, body = http_get(base_url + "/api/v1/targets?state=active")
    if status != 200:
        raise RuntimeError(f"/api/v1/targets answered {status}")
    targets: list[dict[str, Any]] = json.loads(body)["data"]["activeTargets"]
    return targets


def reload(base_url: str) -> bool:
    """POST /-/reload (needs --web.enable-lifecycle): re-read the config; True on 200."""
    req = urllib.request.Request(base_url + "/-/reload", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5.0) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False
