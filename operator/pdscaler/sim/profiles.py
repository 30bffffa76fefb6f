"""The capacity profile a platform team measures on the TRUE engine before deploying
(NVIDIA Dynamo's pre-deployment profiling): one replica's prefill tokens/s over the
prompt length, its decode output tokens/s over the mean context per sequence.

Owns: the sweep points (``PREFILL_PROMPTS``, ``DECODE_CONTEXTS``),
``measured_profile``, the table the operator interpolates linearly in tokens (flat
beyond its ends), and ``with_measured_profile``, a simulated PDDeployment given that
table (both pools' ``profile``). Must not: run the engine (the points are its closed
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

from pdscaler.sim.engine import EngineParams
from pdscaler.spec import PDDeploymentSpec, ProfilePoint

#: Prompt lengths of the prefill sweep, tokens.
PREFILL_PROMPTS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
#: Mean contexts per sequence (prompt + output / 2) of the decode sweep, tokens.
DECODE_CONTEXTS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
#: Output tokens per sequence in the decode sweep.
PROFILE_OUTPUT_TOKENS = 256.0

#: (tokens, tokens/s) points, sorted by tokens.
Points = tuple[tuple[int, float], ...]


def measured_profile(params: EngineParams, tpot_cap: float) -> tuple[Points, Points]:
    """(prefill points, decode points) of one replica of ``params``, values rounded to
    whole tokens/s; decode at the TPOT cap ``tpot_cap``, skipping the contexts whose
    sequence does not fit the KV. Defaults, 50 ms: prefill ``(1024, 8215.0)``, decode
    ``(1024, 2018.0)`` (module docstring)."""
    prefill = tuple((n, float(round(params.prefill_profile_tps(n)))) for n in PREFILL_PROMPTS)
    half = PROFILE_OUTPUT_TOKENS / 2.0
    decode = tuple(
        (c, float(round(params.decode_profile_tps(c, tpot_cap, PROFILE_OUTPUT_TOKENS))))
        for c in DECODE_CONTEXTS
        if max(1.0, c - half) + PROFILE_OUTPUT_TOKENS <= params.decode_kv_tokens
    )
    return prefill, decode


def with_measured_profile(spec: PDDeploymentSpec, params: EngineParams) -> PDDeploymentSpec:
    """``spec`` with both pools' ``profile`` measured on the engine ``params`` describes,
    at the spec's TPOT SLO (docs/models.md §2d). Defaults, 50 ms: prefill (256, 8330.0)
    ... (131072, 2460.0), decode (256, 4631.0) ... (65536, 35.0)."""
    prefill, decode = measured_profile(params, spec.slo.tpot_seconds)

    def points(table: Points) -> list[ProfilePoint]:
        return [ProfilePoint(tokens=n, tokens_per_second=tps) for n, tps in table]

    return spec.model_copy(
        update={
            "prefill": spec.prefill.model_copy(update={"profile": points(prefill)}),
            "decode": spec.decode.model_copy(update={"profile": points(decode)}),
        }
    )
