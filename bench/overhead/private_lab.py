"""A private lab for the 200-PDDeployment measurement, so it neither disturbs nor is
disturbed by the shared lab other work is testing on.

Owns: the private lab's settings (its own directory ``~/.cache/pdscaler/lab-bench-
overhead``, every port of ``pdlab.cluster.config.DEFAULT_PORTS`` + 1000, enough fake GPU nodes
for the pods it will hold, 15 s scrapes) and ``private_lab``: up on entry (from a clean slate), down
on exit, purged unless the run failed (it is this benchmark's own lab; the shared one is
never touched).
Must not: touch the shared lab's directory, ports or processes.

    with private_lab(gpus_needed=400) as lab:     # 8 nodes x 64 GPUs, 110 pods each
        ...                                        # lab.kubeconfig, lab.prometheus_url
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from bench.overhead.cluster import BenchError
from pdlab.cluster.config import DEFAULT_PORTS, LabConfig
from pdlab.cluster.kubeapi import KubeAPI
from pdlab.cluster.kwok import cpu_node
from pdlab.cluster.lab import Lab, LabError

LAB_DIR = Path(
    os.environ.get(
        "PDSCALER_BENCH_LAB_DIR", str(Path.home() / ".cache" / "pdscaler" / "lab-bench-overhead")
    )
)
PORT_OFFSET = 1000
GPUS_PER_NODE = 64
PODS_PER_NODE = 110  # the fake node's pod capacity (deploy/local/gpu-node.yaml)
START_TIMEOUT_S = 240.0
#: Pod addresses of the private lab: neither the shared lab's (127.64.0.0/16, whose
#: engine simulator binds its pods' IPs) nor the quick-start test's (127.91.0.0/16), so
#: ``bench.overhead.exporter`` can bind every pod IP here.
POD_CIDR = "127.93.0.0/16"


def nodes_for(pods: int, gpus: int) -> int:
    """Fake nodes holding ``pods`` pods using ``gpus`` GPUs with 20% headroom:
    400 pods of 1 GPU -> 480 GPUs / 64 = 8 nodes (and 480 pods / 110 = 5)."""
    want_gpus = math.ceil(gpus * 1.2)
    want_pods = math.ceil(pods * 1.2)
    return max(1, math.ceil(want_gpus / GPUS_PER_NODE), math.ceil(want_pods / PODS_PER_NODE))


def private_config(pods: int, gpus: int, lab_dir: Path = LAB_DIR) -> LabConfig:
    ports = {name: port + PORT_OFFSET for name, port in DEFAULT_PORTS.items()}
    return LabConfig(
        lab_dir=lab_dir,
        ports=ports,
        nodes=nodes_for(pods, gpus),
        gpus_per_node=GPUS_PER_NODE,
        startup_delay="2s",
        scrape_interval="15s",
        pod_cidr=POD_CIDR,
    )


def port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:``port`` (connections of a stopped server lingering
    in TIME_WAIT do not count: the lab's servers bind with SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def exclusive(lab_dir: Path) -> Iterator[None]:
    """One run at a time per private lab (``<lab_dir>.lock``, holding the owner's PID):
    a second run (``make bench`` started twice) is refused at once, never let to stop
    the first one's lab."""
    lab_dir.parent.mkdir(parents=True, exist_ok=True)
    path = lab_dir.parent / f"{lab_dir.name}.lock"
    with path.open("a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            raise BenchError(
                f"another overhead run (pid {owner}) is using the private lab {lab_dir}"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cpu_nodes_for(routers: int) -> int:
    """CPU nodes holding ``routers`` router pods with 20% headroom, 110 pods each: 2,000
    routers (1,000 PDDeployments) -> 22; at least the lab's one."""
    return max(1, math.ceil(routers * 1.2 / PODS_PER_NODE))


def add_cpu_nodes(lab: Lab, count: int) -> None:
    """``cpu-node-1`` ... up to ``count`` CPU nodes in all (the lab makes ``cpu-node-0``,
    110 pods: 400 router pods of 200 PDDeployments would leave most Pending), as
    ``pdlab.cluster.kwok.cpu_node`` makes them, managed by the lab's kwok."""
    api = KubeAPI(lab.apiserver_url, lab.pki_dir)
    for i in range(1, count):
        node = cpu_node()
        name = f"cpu-node-{i}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        status, resp = api.request("POST", "/api/v1/nodes", node)
        if status not in (200, 201, 409):
            raise BenchError(f"creating node {name} failed: {status} {resp}")


@contextlib.contextmanager
def private_lab(pods: int, gpus: int, lab_dir: Path = LAB_DIR, routers: int = 0) -> Iterator[Lab]:
    """The private lab, up for the block (from a clean slate), with room for
    ``routers`` router pods, then stopped: purged after a good run, its logs and data
    kept after a failed one (to read why)."""
    with exclusive(lab_dir), _private_lab(pods, gpus, lab_dir) as lab:
        add_cpu_nodes(lab, cpu_nodes_for(routers))
        yield lab


@contextlib.contextmanager
def _private_lab(pods: int, gpus: int, lab_dir: Path) -> Iterator[Lab]:
    cfg = private_config(pods, gpus, lab_dir)
    lab = Lab(cfg)
    missing = lab.missing_binaries()
    if missing:
        raise BenchError(f"lab binaries {missing} not built (make lab-build)")
    lab.down(purge=True)  # a previous run's leftovers: only this lab's own processes
    busy = [f"{n} {p}" for n, p in cfg.ports.items() if not port_free(p)]
    if busy:
        raise BenchError(f"ports of the private lab are in use: {', '.join(busy)}")
    ok = False
    try:
        lab.ensure_up(timeout=START_TIMEOUT_S)
        yield lab
        ok = True
    except LabError as err:
        raise BenchError(f"the private lab did not come up: {str(err).splitlines()[0]}") from err
    finally:
        lab.down(purge=ok)
