"""The lab's settings: directories, pinned versions, loopback ports, fake-node shape.

Owns: reading `versions.env`, the defaults, and the environment overrides (`PDLAB_DIR`,
`PDLAB_PORT_<NAME>`, `PDLAB_POD_CIDR`, `PDSCALER_CACHE`). Must not start processes or
touch the network.

Pods get loopback addresses (`pod_cidr`, default 127.64.0.0/16, env `PDLAB_POD_CIDR`).
Ports are chosen away from the usual ones (6443, 2379, 9090, 10250-10259) so the lab can
run beside a real cluster or a system Prometheus: etcd 23790/23800, API server 26443,
controller-manager 20257, scheduler 20259, kwok 20247, Prometheus 29090.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
REPO_DIR = PACKAGE_DIR.parents[2]
TEMPLATES_DIR = REPO_DIR / "deploy" / "local"
BUILD_SCRIPT = PACKAGE_DIR / "build-bins.sh"

DEFAULT_PORTS: dict[str, int] = {
    "etcd": 23790,
    "etcd_peer": 23800,
    "apiserver": 26443,
    "controller_manager": 20257,
    "scheduler": 20259,
    "kwok": 20247,
    "prometheus": 29090,
}

#: Pod addresses (kwok --cidr): a loopback range, 127.0.0.0/8 being all local on Linux.
#: Two labs on one host need distinct ranges (PDLAB_POD_CIDR=127.65.0.0/16).
DEFAULT_POD_CIDR = "127.64.0.0/16"

#: Built from source (build-prometheus.sh): Debian's 2.42 has no Kubernetes discovery.
PROMETHEUS_VERSION = "3.13.5"

_DURATION = re.compile(r"^(\d+(\.\d+)?(ms|s|m|h))+$")


def read_versions(path: Path = PACKAGE_DIR / "versions.env") -> dict[str, str]:
    """Parse `KEY=value` lines of versions.env, e.g. {"KUBE_VERSION": "1.36.3", ...}."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip("\"'")
    return out


def bin_dir() -> Path:
    """Where build-bins.sh puts the binaries.

    e.g. ~/.cache/pdscaler/lab/k8s-1.36.3-etcd-3.6.16-kwok-0.8.0/bin
    """
    v = read_versions()
    name = f"k8s-{v['KUBE_VERSION']}-etcd-{v['ETCD_VERSION']}-kwok-{v['KWOK_VERSION']}"
    return cache_dir() / "lab" / name / "bin"


def cache_dir() -> Path:
    """``$PDSCALER_CACHE``, else ~/.cache/pdscaler: where builds are kept between runs."""
    return Path(os.environ.get("PDSCALER_CACHE", str(Path.home() / ".cache" / "pdscaler")))


def helm_path() -> Path:
    """The helm binary build-bins.sh builds for the chart's lab test, e.g.
    ~/.cache/pdscaler/tools/helm-3.22.0/helm."""
    return cache_dir() / "tools" / f"helm-{read_versions()['HELM_VERSION']}" / "helm"


def promtool_path() -> Path:
    """The promtool build-prometheus.sh builds beside Prometheus (the chart's alerting
    rules are unit-tested with ``promtool test rules``), e.g.
    ~/.cache/pdscaler/tools/prometheus-3.13.5/promtool."""
    return cache_dir() / "tools" / f"prometheus-{PROMETHEUS_VERSION}" / "promtool"


def monitoring_crds_dir() -> Path:
    """Where fetch-monitoring-crds.sh puts the prometheus-operator CRDs (ServiceMonitor,
    PodMonitor, PrometheusRule), e.g. ~/.cache/pdscaler/tools/prometheus-operator-crds-0.85.0."""
    version = read_versions()["PROMETHEUS_OPERATOR_VERSION"]
    return cache_dir() / "tools" / f"prometheus-operator-crds-{version}"


def go_duration_ms(text: str) -> int:
    """A Go duration like "2s", "1m30s" or "500ms" in milliseconds: "1m30s" -> 90000."""
    if not _DURATION.match(text):
        raise ValueError(f"not a Go duration: {text!r} (use e.g. 2s, 500ms, 1m30s)")
    scale = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
    return int(sum(float(n) * scale[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(ms|s|m|h)", text)))


@dataclass(frozen=True)
class LabConfig:
    """Everything `up` needs; persisted in the state file so later commands agree."""

    lab_dir: Path
    ports: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_PORTS))
    nodes: int = 4
    gpus_per_node: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    startup_delay: str = "2s"
    scrape_interval: str = "2s"
    #: kwok gives pods addresses here: loopback, so the lab host can serve each pod IP.
    pod_cidr: str = field(
        default_factory=lambda: os.environ.get("PDLAB_POD_CIDR", DEFAULT_POD_CIDR)
    )

    @staticmethod
    def from_env(**overrides: Any) -> LabConfig:
        """Defaults, then `PDLAB_DIR` / `PDLAB_PORT_APISERVER`..., then explicit overrides."""
        lab_dir = Path(
            os.environ.get("PDLAB_DIR", str(Path.home() / ".cache" / "pdscaler" / "lab-run"))
        )
        ports = dict(DEFAULT_PORTS)
        for name in ports:
            env = os.environ.get(f"PDLAB_PORT_{name.upper()}")
            if env:
                ports[name] = int(env)
        cfg = LabConfig(lab_dir=lab_dir, ports=ports)
        clean = {k: v for k, v in overrides.items() if v is not None}
        return dataclasses.replace(cfg, **clean)

    def __post_init__(self) -> None:
        go_duration_ms(self.startup_delay)
        if self.nodes < 0 or self.gpus_per_node < 0:
            raise ValueError("nodes and gpus_per_node must be >= 0")
        net = ipaddress.ip_network(self.pod_cidr)
        if not net.subnet_of(ipaddress.ip_network("127.0.0.0/8")):  # type: ignore[arg-type]
            raise ValueError(f"pod_cidr {self.pod_cidr} must be inside 127.0.0.0/8")

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (paths as strings) for the state file."""
        d = dataclasses.asdict(self)
        d["lab_dir"] = str(self.lab_dir)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> LabConfig:
        """Inverse of `to_json`."""
        return LabConfig(**{**d, "lab_dir": Path(d["lab_dir"]), "ports": dict(d["ports"])})

    @property
    def startup_delay_seconds(self) -> float:
        """The default pod start-up delay in seconds: "2s" -> 2.0."""
        return go_duration_ms(self.startup_delay) / 1000

    @property
    def apiserver_url(self) -> str:
        """https://127.0.0.1:26443 with the default ports."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def prometheus_url(self) -> str:
        """http://127.0.0.1:29090 with the default ports."""
        return f"http://127.0.0.1:{self.ports['prometheus']}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig users and tests point KUBECONFIG at."""
        return self.lab_dir / "kubeconfig"
