"""The capacity profile a platform team measures on the TRUE engine before deploying
(NVIDIA Dynamo's pre-deployment profiling): one replica's prefill tokens/s over the
prompt length, its decode output tokens/s over the mean context per sequence.

Owns: the sweep points (``PREFILL_PROMPTS``, ``DECODE_CONTEXTS``),
``measured_profile``, the table the operator interpolates linearly in tokens (flat
beyond its ends), ``with_measured_profile``, a simulated PDDeployment given that
table (both pools' ``profile``), and ``pool_profiles``, the same table as the pool fields
``pdscaler plan profile`` writes for a measured engine (``pdscaler.sim.measured``), so
the operator and the simulator read one profile (``with_pool_profiles``: a simulated
spec with those fields). Must not: run the engine (the points are its closed
forms, ``EngineParams.prefill_profile_tps`` and ``decode_profile_tps``, what a
saturating sweep converges to).

Golden (``EngineParams()``, TPOT cap 50 ms, 256 output tokens a sequence), tokens/s:

    prompt   256    512  1,024  2,048  4,096  8,192  16,384  32,768  65,536  131,072
    prefill 8,330 8,291  8,215  8,065  7,782  7,271   6,466   5,255   3,813    2,460

    context  256    512  1,024  2,048  4,096  8,192  16,384  32,768  65,536
    decode  4,631 3,280  2,018  1,138    608    318     161      81      35

Prefill falls with the prompt by the attention term (full 8,192-token batches of
prompts of the length; one prompt a batch from 8,192 on); decode by the KV each step
reads and by how few sequences of that context fit the KV (100,000 tokens: 86 of
1,024, one of 65,536). A context whose sequence (context + output / 2) does not fit
one replica's KV is not measured: no request of it can be served.
"""

from __future__ import annotations

from typing import Any

from pdscaler.models.profile import capacity_at
from pdscaler.sim.engine import EngineParams
from pdscaler.spec import PDDeploymentSpec, PoolSpec, ProfilePoint

#: Prompt lengths of the prefill sweep, tokens.
PREFILL_PROMPTS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: Mean contexts per sequence (prompt + output / 2) of the decode sweep, tokens.
DECODE_CONTEXTS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
#: Output tokens per sequence in the decode sweep.
PROFILE_OUTPUT_TOKENS = 256.0
#: The tokens at which ``pool_profiles`` reads a pool's constant ``tokensPerSecond``.
CONSTANT_AT = 1024

#: (tokens, tokens/s) points, sorted by tokens.
Points = tuple[tuple[int, float], ...]


def measured_profile(
    params: EngineParams, tpot_cap: float, max_context: int | None = None
) -> tuple[Points, Points]:
    """(prefill points, decode points) of one replica of ``params``, values rounded to
    whole tokens/s; decode at the TPOT cap ``tpot_cap``, skipping the contexts whose
    sequence does not fit the KV, and with ``max_context`` (a measured engine's model)
    the prompts and sequences longer than the model's context. Defaults, 50 ms: prefill
    ``(1024, 8215.0)``, decode ``(1024, 2018.0)`` (module docstring)."""
    limit = params.decode_kv_tokens if max_context is None else max_context
    prefill = tuple(
        (n, float(round(params.prefill_profile_tps(n))))
        for n in PREFILL_PROMPTS
        if max_context is None or n <= max_context
    )
    half = PROFILE_OUTPUT_TOKENS / 2.0
    decode = tuple(
        (c, float(round(params.decode_profile_tps(c, tpot_cap, PROFILE_OUTPUT_TOKENS))))
        for c in DECODE_CONTEXTS
        if max(1.0, c - half) + PROFILE_OUTPUT_TOKENS <= min(params.decode_kv_tokens, limit)
    )
    return prefill, decode


def _points(table: Points) -> list[ProfilePoint]:
    return [ProfilePoint(tokens=n, tokens_per_second=tps) for n, tps in table]


def with_measured_profile(
    spec: PDDeploymentSpec, params: EngineParams, max_context: int | None = None
) -> PDDeploymentSpec:
    """``spec`` with both pools' ``profile`` measured on the engine ``params`` describes,
    at the spec's TPOT SLO (docs/models.md §2d). Defaults, 50 ms: prefill (256, 8330.0)
    ... (131072, 2460.0), decode (256, 4631.0) ... (65536, 35.0). A measured engine
    (``pdscaler.sim.measured``) passes its model's context: the profile is then the one
    ``pdscaler plan profile`` writes (``pool_profiles``)."""
    prefill, decode = measured_profile(params, spec.slo.tpot_seconds, max_context)
    return spec.model_copy(
        update={
            "prefill": spec.prefill.model_copy(update={"profile": _points(prefill)}),
            "decode": spec.decode.model_copy(update={"profile": _points(decode)}),
        }
    )


def pool_profiles(
    params: EngineParams, tpot_cap: float, max_context: int | None = None
) -> dict[str, dict[str, Any]]:
    """The ``prefill`` and ``decode`` pool fields (camelCase, as in a manifest) a
    PDDeployment takes from a measured engine: ``gpusPerReplica``, ``tokensPerSecond``
    (the profile at ``CONSTANT_AT`` tokens, the constant a spec without the profile
    would use), ``kvCacheTokens`` (decode) and ``profile``, the points of
    ``measured_profile``. Defaults, 50 ms: prefill 8,215 tokens/s, decode 2,018."""
    prefill, decode = measured_profile(params, tpot_cap, max_context)

    def pool(table: Points, gpus: int) -> dict[str, Any]:
        return {
            "gpusPerReplica": gpus,
            "tokensPerSecond": capacity_at(1.0, table, CONSTANT_AT),
            "profile": [p.model_dump(by_alias=True) for p in _points(table)],
        }

    return {
        "prefill": pool(prefill, params.prefill_gpus),
        "decode": {**pool(decode, params.decode_gpus), "kvCacheTokens": params.decode_kv_tokens},
    }


def with_pool_profiles(
    spec: PDDeploymentSpec, params: EngineParams, max_context: int | None = None
) -> PDDeploymentSpec:
    """``spec`` with both pools' fields set as ``pdscaler plan profile`` writes them for
    the engine ``params`` at the spec's TPOT SLO (``pool_profiles``: GPUs a replica, the
    constant, the decode KV and the profile), the spec a team deploys after measuring:
    a measured engine's priors are its own (Qwen3-8B on one H100: prefill 46,780
    tokens/s, decode 12,583 at 50 ms), not the hand-made engine's."""
    pools = pool_profiles(params, spec.slo.tpot_seconds, max_context)

    def merged(pool: PoolSpec, fields: dict[str, Any]) -> PoolSpec:
        return PoolSpec.model_validate({**pool.model_dump(by_alias=True), **fields})

    return spec.model_copy(
        update={
            "prefill": merged(spec.prefill, pools["prefill"]),
            "decode": merged(spec.decode, pools["decode"]),
        }
    )
