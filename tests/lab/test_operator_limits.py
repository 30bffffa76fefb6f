"""The operator when things go wrong, against the lab: Prometheus stops (for this
operator: its PDDeployment reads Prometheus through a TCP proxy the test closes, so the
shared Prometheus keeps serving other tests) and more GPUs are wanted than the fake
nodes have (the PDDeployment's pods are pinned to private fake nodes with 4 GPUs).
"""

from __future__ import annotations

import time

from pdlab.cluster.lab import Lab
from pdscaler.types import ConditionReason, ConditionType, Role
from support.exporter import EngineExporter
from support.labkit import Kube, private_gpu_nodes, wait_for
from support.opkit import (
    TcpProxy,
    create_pdd,
    get_pdd,
    operator_runtime,
    pdd_manifest,
    ready_count,
    ticking,
    total,
    wait_condition,
    wait_stable,
)

#: ticks the blind hold is checked over at least (20 s at 1 tick/s, each ~0.2 s)
BLIND_TICKS = 15


def serve(exp: EngineExporter, namespace: str, name: str, output: float, tpot: float) -> None:
    exp.set_deployment(
        namespace, name, [f"{name}-p0"], [f"{name}-d0"], rate=2.0, prompt_tokens=500,
        output_tokens=output, ttft=0.3, tpot=tpot,
    )  # fmt: skip


def test_prometheus_stopped_holds_and_recovers(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    """Decode grown by long outputs (2 req/s x 1500 tokens -> >= 6 replicas); then the
    load falls AND Prometheus goes away for longer than the 10 s stabilization window:
    no scale-down, MetricsAvailable=False (PrometheusUnreachable); Prometheus back ->
    MetricsAvailable=True again."""
    name = "outage"
    proxy = TcpProxy(lab.prometheus_url.removeprefix("http://"))
    proxy.up()
    serve(exporter, namespace, name, output=1500, tpot=0.03)
    rt = operator_runtime(lab)
    try:
        with ticking(rt, namespace, name):
            create_pdd(kube, namespace, pdd_manifest(name, proxy.url, stabilization="10s"))
            wait_for(lambda: total(kube, namespace, name, Role.DECODE) >= 6, 90, "decode >= 6")
            _, high = wait_stable(kube, namespace, name)
            proxy.down()
            serve(exporter, namespace, name, output=200, tpot=0.02)
            # a tick just after a scale-up may already say MetricsIncomplete (a new pod not
            # scraped yet); the outage must turn it into PrometheusUnreachable
            wait_condition(
                kube, namespace, name, ConditionType.METRICS_AVAILABLE, "False", 30,
                reason=ConditionReason.PROMETHEUS_UNREACHABLE,
            )  # fmt: skip
            # twice the stabilization window, and as many ticks as an idle machine runs in
            # it (1 tick/s): a loaded one stretches the wait, not the ticks it checks
            t_down, ticks_down = time.time(), rt.ticks
            while time.time() - t_down < 20.0 or rt.ticks - ticks_down < BLIND_TICKS:
                assert total(kube, namespace, name, Role.DECODE) == high, "scaled down blind"
                assert time.time() - t_down < 80.0, f"{rt.ticks - ticks_down} ticks in 80 s"
                time.sleep(0.5)
            last = get_pdd(kube, namespace, name)["status"]["lastDecision"]
            assert last["action"] == "HoldMetricsUnavailable"

            proxy.up()
            wait_condition(kube, namespace, name, ConditionType.METRICS_AVAILABLE, "True", 30)
    finally:
        proxy.down()


def test_more_gpus_than_nodes_is_capacity_limited_and_favours_the_bottleneck(
    lab: Lab, kube: Kube, crd: str, namespace: str, exporter: EngineExporter
) -> None:
    """One private node with 4 GPUs; decode wants >= 6 replicas (2 req/s x 1500 output
    tokens), prefill needs 1. The pods beyond 4 GPUs stay Pending ("Insufficient
    nvidia.com/gpu") -> CapacityLimited=True, and the 4 schedulable GPUs are re-split:
    prefill keeps its 1 (its min), decode, the bottleneck, gets the other 3."""
    name = "cap"
    owner = namespace[-12:].strip("-")
    serve(exporter, namespace, name, output=200, tpot=0.02)
    rt = operator_runtime(lab)
    with private_gpu_nodes(kube, owner, count=1, gpus=4) as fields, ticking(rt, namespace, name):
        create_pdd(kube, namespace, pdd_manifest(name, lab.prometheus_url, node_fields=fields))
        wait_for(
            lambda: ready_count(kube, namespace, name, Role.DECODE) >= 1,
            60,
            "the first decode pod Ready",
        )
        serve(exporter, namespace, name, output=1500, tpot=0.03)
        c = wait_condition(kube, namespace, name, ConditionType.CAPACITY_LIMITED, "True", 90)
        assert c["reason"] == ConditionReason.INSUFFICIENT_GPUS
        wait_for(
            lambda: (
                total(kube, namespace, name, Role.DECODE) == 3
                and total(kube, namespace, name, Role.PREFILL) == 1
            ),
            90,
            "the 4 schedulable GPUs re-split as prefill 1, decode 3",
        )
        wait_for(
            lambda: ready_count(kube, namespace, name, Role.DECODE) == 3,
            60,
            "3 decode pods Ready",
        )
        assert ready_count(kube, namespace, name, Role.PREFILL) == 1
