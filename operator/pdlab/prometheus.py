"""The lab's Prometheus: install check, config, command line, scrape targets, probes.

Owns: rendering `deploy/local/prometheus.yml`, Prometheus' argv (loopback port, own TSDB
under the lab dir, `--web.enable-lifecycle`), the file_sd target files
`<lab>/prometheus/targets/<name>.json`, and HTTP probes (`/-/ready`, `/api/v1/targets`,
`/api/v1/query`). Must not start processes (lab.py does) and never touches a system
Prometheus.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from pdlab.config import TEMPLATES_DIR

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def binary() -> str:
    """Path of the `prometheus` binary; installs Debian's package with apt-get if missing."""
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None
    )
    if found:
        return found
    apt = ["apt-get"] if os.geteuid() == 0 else ["sudo", "-n", "apt-get"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("pdlab: prometheus is missing; installing the Debian package with apt-get")
    for args in (
        ["update", "-qq"],
        ["install", "-y", "-qq", "--no-install-recommends", "prometheus"],
    ):
        proc = subprocess.run([*apt, *args], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"apt-get {' '.join(args)} failed: {proc.stderr.strip()[-2000:]}")
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(found).exists():
        raise RuntimeError("apt-get installed prometheus but no prometheus binary was found")
    return found


def write_config(prom_dir: Path, scrape_interval: str) -> Path:
    """Write `<prom_dir>/prometheus.yml`; target files go to `<prom_dir>/targets/`."""
    targets = prom_dir / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    text = (TEMPLATES_DIR / "prometheus.yml").read_text()
    text = text.replace("@SCRAPE_INTERVAL@", scrape_interval).replace("@TARGETS_DIR@", str(targets))
    path = prom_dir / "prometheus.yml"
    path.write_text(text)
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


def write_targets(prom_dir: Path, name: str, groups: list[dict[str, Any]]) -> Path:
    """Register target groups under `name`: `<targets>/<name>.json`, atomic (tmp + rename).

    Each group is file_sd's shape, `{"targets": ["127.0.0.1:9400"], "labels": {...}}`;
    labels may set `__metrics_path__` (one exporter port serving one path per pod) or
    `job`. Prometheus re-reads the directory every 2 s (refresh_interval).
    """
    if not _NAME.match(name):
        raise ValueError(f"target name {name!r} must match {_NAME.pattern}")
    path = prom_dir / "targets" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.replace(path)
    return path


def write_target(prom_dir: Path, name: str, host_port: str, labels: dict[str, str]) -> Path:
    """One target: write_target(d, "sim", "127.0.0.1:9400", {}) scrapes its /metrics."""
    return write_targets(prom_dir, name, [{"targets": [host_port], "labels": labels}])


def remove_target(prom_dir: Path, name: str) -> bool:
    """Unregister a target; True if its file existed."""
    path = prom_dir / "targets" / f"{name}.json"
    if path.exists():
        path.unlink()
        return True
    return False


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
