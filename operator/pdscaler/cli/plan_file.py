"""``pdscaler plan from-file`` (and ``plan --from-file``): the pools of a PDDeployment
manifest at a given load.

Owns: reading the one PDDeployment of a YAML file (any problem is a one-line error),
and planning its pools: the ratio model with the manifest's capacities and
utilisations (decode raised to its KV memory bound at the TPOT SLO when the manifest
sets ``decode.kvCacheTokens``, docs/models.md §2b), clamped to its replica bounds and
split under its maxGPUs (``models.split_budget``). Must not: talk to a cluster, or size
anything the models do not (the operator's policy adds forecasts, the drain model and
stabilization).

    pdscaler plan from-file deploy/examples/chat.yaml --rate 20 \\
        --prompt-tokens 2000 --output-tokens 500
        prefill 20, decode 18 replicas, 38 of 48 GPUs
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import pydantic
import typer
import yaml

from pdscaler import models
from pdscaler.cli.common import FormatOpt, Output, fail, output_format
from pdscaler.cli.plan_calc import RATIO_OPTIONS, JsonOpt, checked
from pdscaler.cli.plan_render import emit, from_file_blocks
from pdscaler.policy.refine import capacity_priors
from pdscaler.spec import KIND, PDDeployment
from pdscaler.types import Role


class Prefer(StrEnum):
    prefill = "prefill"
    decode = "decode"


def load_manifest(path: Path) -> PDDeployment:
    """The one PDDeployment in ``path`` (a YAML file, possibly multi-document), checked
    against the spec model; any problem is a one-line error."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror or err}")
    except yaml.YAMLError as err:
        fail(f"{path} is not valid YAML: {err}")
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
    if len(found) != 1:
        fail(f"{path} must hold exactly one {KIND}, found {len(found)}")
    try:
        return PDDeployment.model_validate(found[0])
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
        fail(f"{path}: {where}: {first['msg']}{more}")


def plan_manifest(
    manifest: PDDeployment,
    rate: float,
    prompt_tokens: float,
    output_tokens: float,
    prefer: Role | None,
) -> dict[str, Any]:
    """The pools for ``manifest`` at a load: the ratio model with the manifest's
    capacities and utilisations, wants clamped to [min, max] and split under maxGPUs
    (models.split_budget). Chat example at 20 req/s, 2000/500 tokens: 20 + 18 replicas,
    38 of 48 GPUs, not limited. A pool with a ``profile`` is sized at the profile's
    tokens/s for this mix (docs/models.md §2d), as the operator does."""
    spec = manifest.spec
    pools = {Role.PREFILL: spec.prefill, Role.DECODE: spec.decode}
    tps = capacity_priors(spec, {Role.PREFILL: prompt_tokens, Role.DECODE: output_tokens})
    ratio = checked(
        lambda: models.ratio_model(
            rate,
            prompt_tokens,
            output_tokens,
            tps[Role.PREFILL],
            tps[Role.DECODE],
            spec.prefill.target_utilization,
            spec.decode.target_utilization,
        ),
        RATIO_OPTIONS,
    )
    bound = None
    if spec.decode.kv_cache_tokens is not None:  # docs/models.md §2b, at the TPOT SLO
        memory = models.decode_memory(
            rate,
            prompt_tokens,
            output_tokens,
            spec.slo.tpot_seconds,
            float(spec.decode.kv_cache_tokens),
        )
        ratio, bound = models.with_memory(ratio, memory)
    split = models.split_budget(
        max_gpus=spec.scaling.max_gpus,
        want_prefill=ratio.prefill_replicas,
        want_decode=ratio.decode_replicas,
        prefill_gpus_per_replica=spec.prefill.gpus_per_replica,
        decode_gpus_per_replica=spec.decode.gpus_per_replica,
        prefill_min=spec.prefill.replicas.min,
        prefill_max=spec.prefill.replicas.max,
        decode_min=spec.decode.replicas.min,
        decode_max=spec.decode.replicas.max,
        prefill_load_replicas=ratio.n_prefill,
        decode_load_replicas=ratio.n_decode,
        prefer=prefer,
    )
    planned = {Role.PREFILL: split.prefill, Role.DECODE: split.decode}
    fractional = {Role.PREFILL: ratio.n_prefill, Role.DECODE: ratio.n_decode}
    wants = {Role.PREFILL: ratio.prefill_replicas, Role.DECODE: ratio.decode_replicas}
    loads = {Role.PREFILL: ratio.prefill_load_tps, Role.DECODE: ratio.decode_load_tps}
    out: dict[str, Any] = {
        "name": manifest.metadata.get("name"),
        "namespace": manifest.metadata.get("namespace"),
        "rate": rate,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
    }
    for role, pool in pools.items():
        bounds = pool.replicas
        out[str(role)] = {
            "load_tps": loads[role],
            "tokens_per_second": tps[role],
            "target_utilization": pool.target_utilization,
            "n": fractional[role],
            "want": wants[role],
            "min": bounds.min,
            "max": bounds.max,
            "bounded_want": min(max(wants[role], bounds.min), bounds.max),
            "replicas": planned[role],
            "gpus_per_replica": pool.gpus_per_replica,
            "gpus": planned[role] * pool.gpus_per_replica,
            "utilization": models.utilization(fractional[role], planned[role])
            * pool.target_utilization,
        }
    out["gpus_used"] = split.gpus(spec.prefill.gpus_per_replica, spec.decode.gpus_per_replica)
    out["max_gpus"] = spec.scaling.max_gpus
    out["limited"] = split.limited
    out["ratio"] = ratio.ratio
    out["decode_bound"] = bound.value if bound is not None else None
    return out


def run_from_file(
    manifest: Path,
    rate: float,
    prompt_tokens: float,
    output_tokens: float,
    prefer: Prefer | None,
    fmt: Output | None,
) -> None:
    """Load, plan and print (shared by ``plan --from-file`` and ``plan from-file``)."""
    deployment = load_manifest(manifest)
    role = None if prefer is None else Role(prefer.value)
    plan = plan_manifest(deployment, rate, prompt_tokens, output_tokens, role)
    emit(fmt, plan, *from_file_blocks(plan))


RateOpt = Annotated[float, typer.Option("--rate", help="Request rate R, req/s.")]
PromptOpt = Annotated[
    float, typer.Option("--prompt-tokens", help="Mean prompt tokens per request, L_p.")
]
OutputOpt = Annotated[
    float, typer.Option("--output-tokens", help="Mean output tokens per request, L_d.")
]
PreferOpt = Annotated[
    Prefer | None,
    typer.Option("--prefer", help="Pool that gets a tied GPU when short (the bottleneck)."),
]


def cmd_from_file(
    manifest: Annotated[Path, typer.Argument(help="A YAML file with one PDDeployment.")],
    rate: RateOpt,
    prompt_tokens: PromptOpt,
    output_tokens: OutputOpt,
    prefer: PreferOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = None,
) -> None:
    """The pools of a PDDeployment manifest at a given load.

    The ratio model with the manifest's capacities and utilisations,
    clamped to its replica bounds and split under its maxGPUs.
    Same as: pdscaler plan --from-file MANIFEST ...
    """
    run_from_file(
        manifest, rate, prompt_tokens, output_tokens, prefer, output_format(output, as_json)
    )
