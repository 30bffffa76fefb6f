"""`python -m pdlab.demo.engine`: the engine simulator as the demo runs it, serving only
real requests (no synthetic load), with engines slow enough for a two-core lab.

Owns: the demo's engine capacities (``DEMO_ENGINE``: one replica's true prefill and
decode speed, in the simulator's tokens, which are whitespace words) and running
``pdlab.engine.sim.EngineSim`` with them over the demo's namespace: every prefill and
decode pod served at its pod IP from Running on (``StartedPods``) until its preStop
sleep has passed after it left (``pdlab.engine.pods.LingeringPods``), the router pods run by
``pdlab.cluster.podrunner``, the control port's ``/status`` (plus each pool's queued and
running requests summed over its pods, ``queues``) and ``/requests`` (every
request's record). Must not: generate load (aiperf sends it through the front
Service) or change anything in the cluster.

Why slower engines: the demo's requests are real HTTP, every output token one SSE chunk
through the router, so its load is a few requests per second with outputs of tens of
tokens. For the ratio model to ask for several replicas of each pool at that load, one
replica must serve tens of output tokens and a few hundred prompt words per second,
not the ~1,900 and ~8,500 of ``EngineParams()``. ``deploy/demo/demo.yaml``'s priors
are 14-20% below these (decode: at the TPOT SLO), as in the simulator benchmark.

    python -m pdlab.demo.engine --namespace pdscaler-demo --name demo --port 29400
    # chat (3 req/s, ~120 prompt words, 16 output tokens): the ratio model asks
    # 360 / (150 x 0.7) = 3.4 -> 4 prefill and 48 / (32 x 0.7) = 2.1 -> 3 decode
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

from pdlab.engine.pods import LingeringPods, PodInfo, PodLister, to_info
from pdlab.engine.sim import EngineSim, serve
from pdscaler.sim.engine import EngineParams

#: One replica of the demo: prefill 175 words/s (a 120-word chat prompt in 0.7 s, a
#: 330-word document in 1.9 s); decode steps of 60 ms + 10 ms per running sequence
#: (14 tokens/s alone, 40 at 4 sequences with TPOT 100 ms, the SLO; never above 100):
#: below the SLO every step falls in one TPOT bucket (75-100 ms), so its p95 breaches
#: only when a pod runs 5 or more sequences.
DEMO_ENGINE = EngineParams(
    prefill_tps=175.0,
    prefill_overhead_s=0.015,
    decode_step_base_s=0.06,
    decode_step_per_seq_s=0.01,
    decode_step_per_kv_token_s=0.0,
)


class StartedPods(PodLister):
    """``PodLister`` whose pods are served from Running on (IP assigned, not deleted),
    not only once Ready: a real engine answers ``/health`` before the kubelet's next
    readiness probe marks it Ready, so a router that adds a pod on Ready finds it up
    (kwok's Ready is a timer, and a router whose first health check is refused waits
    tens of seconds before it retries)."""

    def list(self) -> list[PodInfo]:
        assert self.namespace is not None  # the demo's: one namespace
        out: list[PodInfo] = []
        for pod in self._pods.items():
            info = to_info(pod)
            if info is None:
                continue
            started = (
                pod.metadata is not None
                and pod.metadata.deletion_timestamp is None
                and pod.status is not None
                and pod.status.phase == "Running"
                and bool(info.ip)
            )
            out.append(replace(info, ready=started))
        return out


class DemoEngineSim(EngineSim):
    """``EngineSim`` whose ``/status`` also carries each pool's queued and running
    requests over its served pods: ``{"queues": {"prefill": 2.0, "decode": 0.0},
    "running": {...}}``."""

    def step(self, mono: float) -> None:
        super().step(mono)
        if self.servers is None:
            return
        queues = {"prefill": 0.0, "decode": 0.0}
        running = {"prefill": 0.0, "decode": 0.0}
        for server in list(self.servers.servers.values()):
            role = server.pod.role.value
            queues[role] = queues.get(role, 0.0) + server.stats.waiting
            running[role] = running.get(role, 0.0) + server.stats.running
        doc = json.loads(self.pages.status)
        doc.update(queues=queues, running=running)
        self.pages.status = json.dumps(doc).encode()


def main(argv: list[str] | None = None) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 2 without a lab."""
    from pdlab.cluster.lab import Lab

    parser = argparse.ArgumentParser(prog="python -m pdlab.demo.engine")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True, help="the PDDeployment")
    parser.add_argument("--port", type=int, required=True, help="control port on 127.0.0.1")
    args = parser.parse_args(argv)
    lab = Lab()
    if not lab.kubeconfig.exists():
        print(f"demo-engine: no lab kubeconfig at {lab.kubeconfig}", file=sys.stderr)
        return 2
    sim = DemoEngineSim(
        LingeringPods(StartedPods(lab.kubeconfig, args.namespace, args.name)),
        None,
        DEMO_ENGINE,
        port=args.port,
    )
    serve(
        sim,
        lab,
        args.namespace,
        f"demo engines: control http://127.0.0.1:{args.port}/status; pods at their IPs",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
