"""A test's own Prometheus next to the lab's: the lab's binary and scrape jobs (it
discovers and scrapes the lab's engine pods as the lab's Prometheus does), plus jobs
the test adds (e.g. an in-process operator's /metrics) and optionally a
``--web.config.file`` (TLS, basic authentication). On a free loopback port, its TSDB
and log in the test's directory; stopped (SIGTERM, then SIGKILL) on exit. Must not
touch the lab's own Prometheus.

    with own_prometheus(lab, tmp_path, jobs=[static_job("op", "127.0.0.1:8123")]) as url:
        ...  # url == "http://127.0.0.1:<port>"
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster import prometheus as labprom
from pdlab.cluster.lab import Lab
from support.labkit import free_port, wait_for


def static_job(name: str, target: str) -> dict[str, Any]:
    """A scrape job for one ``host:port`` target's /metrics."""
    return {"job_name": name, "static_configs": [{"targets": [target]}]}


@contextlib.contextmanager
def own_prometheus(
    lab: Lab,
    workdir: Path,
    *,
    jobs: Sequence[dict[str, Any]] = (),
    web_config: dict[str, Any] | None = None,
    ready: Callable[[str], bool] | None = None,
) -> Iterator[str]:
    """Start it, wait until ``ready(url)`` (default: ``/-/ready`` answers 200), yield its
    URL (https when ``web_config`` has ``tls_server_config``)."""
    prom_dir = workdir / "prometheus"
    labprom.write_config(prom_dir, lab.config.scrape_interval, lab.apiserver_url, lab.pki_dir)
    config = prom_dir / "prometheus.yml"
    doc = yaml.safe_load(config.read_text())
    doc["scrape_configs"] = [*doc["scrape_configs"], *jobs]
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    port = free_port()
    argv = labprom.argv(labprom.binary(), prom_dir, port)
    scheme = "http"
    if web_config is not None:
        web = prom_dir / "web.yml"
        web.write_text(json.dumps(web_config))
        argv.append(f"--web.config.file={web}")
        scheme = "https" if "tls_server_config" in web_config else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    log_path = workdir / "prometheus.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            probe = ready or labprom.ready

            def up() -> bool:
                assert proc.poll() is None, log_path.read_text()[-2000:]
                return probe(url)

            wait_for(up, 60, "the test's Prometheus answering")
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
