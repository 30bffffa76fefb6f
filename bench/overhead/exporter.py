"""The overhead benchmark's stand-in for the engines: every pool pod and router pod of
the private lab answers ``/metrics`` at its pod IP with a steady load's series, so the
operator's Prometheus queries return real answers (issue 30, item 9).

Why a stand-in: the lab's engine simulator (``python -m pdlab engine-sim``) runs one
serving model per PDDeployment, stepped every 0.5 s, and the router pods through the pod
runner; at 1,000 PDDeployments (2,000 engine pods, 1,000 routers) on the benchmark's 2
cores it would cost more than the operator it is there to feed. This exporter keeps
what the operator sees: the same exposition (``pdlab.engine.expo.render_pod``, the
engine simulator's vLLM series, names, types and buckets), served at each pod's IP and
port (its container port named ``http``; a router's named ``metrics``), found by the
lab's Prometheus through Kubernetes discovery with the labels of
``deploy/prometheus/kubernetes-sd.yaml``, and counters that grow with wall time at a
fixed rate per PDDeployment, shared by its pods (``steady``): so ``rate()``, the
histogram quantiles, ``up`` and ``timestamp(up)`` answer as on a serving fleet.
What it leaves out: load that moves (the policy holds; the tick's decision path is the
same, its scaling writes are not exercised) and the engines' request path.

Owns: ``steady`` (the PodStats of a pod ``seconds`` into a steady load, pure),
``router_page`` (vllm-router's processed-requests counter, what the ``vllm`` preset's
arrival query reads), ``PodTargets`` (the pods to serve, from one LIST) and
``main`` (``python -m bench.overhead.exporter --kubeconfig K --namespace NS``: poll the
pods every ``--poll`` s, bind a site per pod IP and port, serve its page). Must not:
write to the cluster.

Worked numbers (``DEPLOYMENT_RPS`` 0.5 req/s per PDDeployment, 1,000 prompt and 200
output tokens; its one prefill pod at 500 of the 3,000 tokens/s the chat example says a
prefill replica does, its decode pod at 100 of 800): 60 s into the load the prefill pod
has served 30 requests, 30,000 prompt tokens, its TTFT histogram holds 30 observations,
27 of them (90%) <= 0.25 s; the decode pod has generated 6,000 tokens; the cell's
routers have counted 2 x 30 = 60 picks between them (one prefill, one decode per
request), so the preset's R = rate / 2 = 0.5 req/s. A pod's counters advance by its
share of the PDDeployment's rate at each scrape, so they never go back when a pod is
added.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from pdlab.cluster.kubeclient import Kube
from pdlab.engine.expo import render_pod
from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS, PodStats

#: Requests per second of each PDDeployment, shared by its pods of each role.
DEPLOYMENT_RPS = 0.5
PROMPT_TOKENS = 1000.0
OUTPUT_TOKENS = 200.0
#: (seconds, share of observations): TTFT p95 0.375 s (interpolated in vLLM's buckets),
#: per-token latency p95 37.5 ms; both inside the chat example's SLO (TTFT 2 s, TPOT
#: 50 ms at p95), so the policy holds (a TPOT shape with 5% at 60 ms read p95 = 50 ms, at
#: the SLO, and scaled decode: seen).
TTFT_SHAPE: tuple[tuple[float, float], ...] = ((0.09, 0.3), (0.2, 0.6), (0.4, 0.1))
TPOT_SHAPE: tuple[tuple[float, float], ...] = ((0.02, 0.9), (0.04, 0.1))
KV_CAPACITY_TOKENS = 500_000.0
ENGINE_PORT = 8000
ROUTER_METRICS_PORT = 9090
ROLES = ("prefill", "decode", "router")


def _counts(bounds: Sequence[float], shape: Sequence[tuple[float, float]], n: float) -> list[float]:
    """``n`` observations spread by ``shape`` into per-bucket counts (not cumulative):
    each value lands in the first bucket whose bound holds it."""
    out = [0.0] * len(bounds)
    for value, share in shape:
        out[bisect.bisect_left(bounds, value)] += n * share
    return out


def _total(shape: Sequence[tuple[float, float]], n: float) -> float:
    return n * sum(v * s for v, s in shape)


def steady(role: str, done: float) -> PodStats:
    """The series of a ``role`` pod that has served ``done`` requests of the steady load
    (module docstring's numbers): counters proportional to ``done``, gauges constant. A
    prefill pod outputs 1 token a request (vLLM's P/D proxy sends ``max_tokens=1``), a
    decode pod ``OUTPUT_TOKENS``, with their per-token latencies."""
    prefill = role == "prefill"
    tokens = done * (1.0 if prefill else OUTPUT_TOKENS)
    stats = PodStats(
        request_success=done,
        prompt_tokens=done * PROMPT_TOKENS,
        generation_tokens=tokens,
        request_prompt_tokens_sum=done * PROMPT_TOKENS,
        request_generation_tokens_sum=tokens,
        ttft_counts=_counts(TTFT_BUCKETS, TTFT_SHAPE, done),
        ttft_sum=_total(TTFT_SHAPE, done),
        running=1.0 if prefill else 8.0,
        kv_usage=0.05 if prefill else 0.4,
        kv_capacity_tokens=KV_CAPACITY_TOKENS,
    )
    if not prefill:
        stats.itl_counts = _counts(TPOT_BUCKETS, TPOT_SHAPE, tokens)
        stats.itl_sum = _total(TPOT_SHAPE, tokens)
        stats.request_tpot_counts = _counts(TPOT_BUCKETS, TPOT_SHAPE, done)
        stats.request_tpot_sum = _total(TPOT_SHAPE, done)
    return stats


def router_page(done: float) -> str:
    """vllm-router's ``vllm_router_processed_requests_total`` of a router that has routed
    ``done`` requests: one pick of a prefill and one of a decode worker each."""
    picks = done
    name = "vllm_router_processed_requests_total"
    return (
        f"# HELP {name} Requests processed per worker.\n# TYPE {name} counter\n"
        f'{name}{{worker="prefill"}} {picks:.3f}\n{name}{{worker="decode"}} {picks:.3f}\n'
    )


@dataclass(frozen=True)
class Target:
    """One pod to serve: where (``ip``, ``port``) and as what."""

    ip: str
    port: int
    role: str
    deployment: str


def _port(pod: Any, name: str, default: int) -> int:
    for c in pod.spec.containers or []:
        for p in c.ports or []:
            if p.name == name:
                return int(p.container_port)
    return default


def targets_of(pods: Sequence[Any]) -> dict[tuple[str, int], Target]:
    """Running pods with an IP, keyed (ip, port): an engine's port ``http``, a router's
    ``metrics`` (what the scrape job keeps)."""
    out: dict[tuple[str, int], Target] = {}
    for pod in pods:
        labels = pod.metadata.labels or {}
        role = labels.get(LABEL_ROLE)
        ip = pod.status.pod_ip
        if role not in ROLES or not ip or pod.status.phase != "Running":
            continue
        port = (
            _port(pod, "metrics", ROUTER_METRICS_PORT)
            if role == "router"
            else _port(pod, "http", ENGINE_PORT)
        )
        out[(ip, port)] = Target(ip, port, role, labels.get(LABEL_NAME, ""))
    return out


@dataclass
class Served:
    """A pod's requests so far, advanced at its share of the rate on each scrape."""

    done: float
    at: float

    def advance(self, now: float, share: float) -> float:
        self.done += DEPLOYMENT_RPS * share * max(0.0, now - self.at)
        self.at = now
        return self.done


class Exporter:
    """The sites, one per target, and the page of each; a pod's counters start at its
    first scrape (``Served``) and grow by its share of its PDDeployment's rate."""

    def __init__(self) -> None:
        self.sites: dict[tuple[str, int], tuple[Target, web.TCPSite]] = {}
        self.served: dict[tuple[str, int], Served] = {}
        self.app = web.Application()
        self.app.router.add_get("/metrics", self.metrics)
        self.runner = web.AppRunner(self.app, access_log=None)
        #: (PDDeployment, role) -> its pods served
        self.pods_of: Mapping[tuple[str, str], int] = {}

    async def metrics(self, request: web.Request) -> web.Response:
        sock = request.transport.get_extra_info("sockname") if request.transport else None
        key = (str(sock[0]), int(sock[1])) if sock else ("", 0)
        entry = self.sites.get(key)
        if entry is None:
            return web.Response(status=404)
        t, now = entry[0], time.monotonic()
        served = self.served.setdefault(key, Served(0.0, now))
        done = served.advance(now, 1.0 / max(1, self.pods_of.get((t.deployment, t.role), 1)))
        text = router_page(done) if t.role == "router" else render_pod(steady(t.role, done))
        return web.Response(text=text, content_type="text/plain")

    async def sync(self, targets: Mapping[tuple[str, int], Target]) -> None:
        for key in [k for k in self.sites if k not in targets]:
            _, site = self.sites.pop(key)
            self.served.pop(key, None)
            await site.stop()
        for key, t in targets.items():
            if key in self.sites:
                continue
            site = web.TCPSite(self.runner, t.ip, t.port, reuse_address=True)
            try:
                await site.start()
            except OSError as err:
                print(f"exporter: cannot bind {t.ip}:{t.port}: {err}", flush=True)
                continue
            self.sites[key] = (t, site)
        per: dict[tuple[str, str], int] = {}
        for t in targets.values():
            per[(t.deployment, t.role)] = per.get((t.deployment, t.role), 0) + 1
        self.pods_of = per


async def serve(kubeconfig: str, namespace: str, poll_s: float) -> None:
    core = Kube.from_kubeconfig(Path(kubeconfig)).core
    ex = Exporter()
    await ex.runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    selector = f"{LABEL_ROLE} in ({','.join(ROLES)})"
    while not stop.is_set():
        try:
            pods = await asyncio.to_thread(
                core.list_namespaced_pod, namespace, label_selector=selector, _request_timeout=30
            )
            before = len(ex.sites)
            await ex.sync(targets_of(pods.items))
            if len(ex.sites) != before:
                print(f"exporter: serving {len(ex.sites)} pods", flush=True)
        except Exception as err:  # the API server may lag under the fleet's load
            print(f"exporter: pod poll failed: {err!r}", flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), poll_s)
    await ex.runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.overhead.exporter")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--poll", type=float, default=5.0, help="pod poll period, s (5)")
    args = p.parse_args(argv)
    asyncio.run(serve(args.kubeconfig, args.namespace, args.poll))
    return 0


if __name__ == "__main__":
    sys.exit(main())
