"""The simulated deployment's declared side: the PDDeployment spec the autoscalers are
given (priors deliberately off the engine's TRUE capacities), and the warm start.

Owns: ``sim_spec`` (a valid ``PDDeploymentSpec`` built from a few numbers) and
``warm_start`` (the replicas every dynamic policy starts with: the ratio model on the
first two minutes of the trace with the spec's priors, as if the operator had been
running). Must not: know the engine's true capacities (``EngineParams``) or read files.

Priors vs truth with the defaults: prefill 10,000 tokens/s declared vs 8,500 true
(-15%), decode 1,400 declared vs ~1,730 true at the chat mix (+23%), so an autoscaler
that trusts its priors under-provisions prefill and over-provisions decode.
"""

from __future__ import annotations

import math

from pdscaler.models import ratio_model
from pdscaler.sim.traces import Trace
from pdscaler.spec import PDDeploymentSpec

#: Declared (prior) per-replica throughputs of the simulated PDDeployment.
PREFILL_PRIOR_TPS = 10_000.0
DECODE_PRIOR_TPS = 1_400.0
#: The warm start sizes the pools for the trace's first WARM_WINDOW seconds.
WARM_WINDOW = 120.0


def sim_spec(
    *,
    startup_s: float = 60.0,
    ttft_s: float = 2.0,
    tpot_s: float = 0.05,
    percentile: float = 0.99,
    recovery_s: float = 60.0,
    prefill_tps: float = PREFILL_PRIOR_TPS,
    decode_tps: float = DECODE_PRIOR_TPS,
    utilization: float = 0.7,
    min_replicas: int = 1,
    max_replicas: int = 64,
    interval: str = "15s",
    window: str = "2m",
    stabilization: str = "5m",
) -> PDDeploymentSpec:
    """A PDDeployment for the simulator (1 GPU per replica, budget never binding:
    ``maxGPUs`` = both pools at max). Raises pydantic's ValidationError on bad values."""
    pool = {
        "gpusPerReplica": 1,
        "replicas": {"min": min_replicas, "max": max_replicas},
        "targetUtilization": utilization,
    }
    return PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "vllm/vllm-openai", "version": "v0.11.0"},
            "prefill": {**pool, "tokensPerSecond": prefill_tps},
            "decode": {**pool, "tokensPerSecond": decode_tps},
            "slo": {
                "ttftSeconds": ttft_s,
                "tpotSeconds": tpot_s,
                "percentile": percentile,
                "recoverySeconds": recovery_s,
            },
            "startupSeconds": startup_s,
            "metrics": {"window": window},
            "scaling": {
                "interval": interval,
                "maxGPUs": 2 * max_replicas,
                "scaleDownStabilization": stabilization,
            },
        }
    )


def clamp(n: int, low: int, high: int) -> int:
    return max(low, min(high, n))


def size_for(spec: PDDeploymentSpec, rate: float, prompt: float, output: float) -> tuple[int, int]:
    """Ratio-model replicas with the spec's priors, inside the spec's bounds. 5.5 req/s
    of 1,155 + 211 tokens at u 0.7: N_P = 6,353 / 7,000 -> 1, N_D = 1,161 / 980 -> 2."""
    r = ratio_model(
        rate,
        prompt,
        output,
        spec.prefill.tokens_per_second,
        spec.decode.tokens_per_second,
        spec.prefill.target_utilization,
        spec.decode.target_utilization,
    )
    return (
        clamp(r.prefill_replicas, spec.prefill.replicas.min, spec.prefill.replicas.max),
        clamp(r.decode_replicas, spec.decode.replicas.min, spec.decode.replicas.max),
    )


def warm_start(trace: Trace, spec: PDDeploymentSpec) -> tuple[int, int]:
    """Replicas at t=0 for every dynamic policy: sized for the first two minutes."""
    head = trace.window(0.0, min(WARM_WINDOW, max(trace.span, 1.0)))
    if len(head) == 0:
        return spec.prefill.replicas.min, spec.decode.replicas.min
    rate = len(head) / head.span
    prompt = float(head.prompt.mean())
    output = float(head.output.mean())
    if not all(math.isfinite(x) for x in (rate, prompt, output)):
        return spec.prefill.replicas.min, spec.decode.replicas.min
    return size_for(spec, rate, prompt, output)
