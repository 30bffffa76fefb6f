"""``pdscaler plan profile``: a PDDeployment's capacity profile from NVIDIA
aiconfigurator's performance database, before deploying and without a GPU.

Owns: the command's options, asking the database (``pdscaler.profiling.aic``, imported
when the command runs: the ``profiles`` extra; without it a one-line error says how to
install it), and writing what it measured: the ``prefill`` and ``decode`` pool fields
(YAML, ``pdscaler.sim.profiles.pool_profiles``: the same points the simulator gives its
spec for that engine) on stdout or ``-o FILE``, and with ``--engine-out`` the engine
record (the answers, the fit and its error: ``pdscaler.sim.measured``). Must not: fit
or compute a point itself.

    pdscaler plan profile --model Qwen/Qwen3-32B --system h200_sxm --backend vllm \\
        --tp 2 --tpot-ms 50 -o qwen3-32b.yaml
        # Qwen/Qwen3-32B on 2 x h200_sxm, vllm 0.24.0 (aiconfigurator 0.12.0) ...
        prefill: {gpusPerReplica: 2, tokensPerSecond: ..., profile: [...]}
        decode: {gpusPerReplica: 2, kvCacheTokens: 751550, profile: [...]}

Merge the two pools' fields into ``spec.prefill`` / ``spec.decode`` of a manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from pdscaler.cli.common import fail

if TYPE_CHECKING:  # numpy (the sim extra): imported when the command runs
    from pdscaler.sim.measured import Answers, Deployment, MeasuredEngine

#: The one-line error without the extra (numpy or aiconfigurator missing).
EXTRA_HINT = "pdscaler plan profile needs the profiles extra: pip install 'pdscaler[profiles]'"


def open_answers(deployment: Deployment) -> Answers:
    """aiconfigurator's answers for ``deployment`` (the tests replace this function
    with recorded answers); a one-line error without the extra or for a deployment the
    database does not know."""
    from pdscaler.profiling import aic  # the profiles extra: only when asked

    try:
        return aic.open_database(deployment)
    except aic.AiconfiguratorMissingError as err:
        fail(str(err))
    except ValueError as err:
        fail(str(err))


def header(engine: MeasuredEngine, tpot_s: float) -> str:
    """The comment lines above the YAML: what was measured and how well the engine fits
    the database's answers."""
    pe, de = engine.prefill_fit.error, engine.decode_fit.error
    return (
        f"# pdscaler plan profile: {engine.label}\n"
        f"# decode at TPOT <= {tpot_s * 1e3:g} ms; fit to the database: prefill max "
        f"{pe.max_rel:.1%} mean {pe.mean_rel:.1%} ({pe.points} points), decode max "
        f"{de.max_rel:.1%} mean {de.mean_rel:.1%} ({de.points} points)\n"
        "# merge each pool's fields into spec.prefill / spec.decode\n"
    )


def render(engine: MeasuredEngine, tpot_s: float) -> str:
    """The profile file: ``header`` and the two pools' fields as YAML."""
    from pdscaler.sim.profiles import pool_profiles

    pools = pool_profiles(engine.params, tpot_s, engine.facts.max_context)
    return header(engine, tpot_s) + yaml.safe_dump(pools, sort_keys=False, default_flow_style=None)


def cmd_profile(
    model: Annotated[
        str,
        typer.Option("--model", help="Hugging Face id, e.g. Qwen/Qwen3-32B."),
    ],
    system: Annotated[str, typer.Option("--system", help="GPU kind, e.g. h100_sxm, h200_sxm.")],
    backend: Annotated[str, typer.Option("--backend", help="vllm, sglang or trtllm.")] = "vllm",
    tp: Annotated[
        int, typer.Option("--tp", min=1, help="Tensor parallelism (GPUs a replica).")
    ] = 1,
    moe_tp: Annotated[
        int | None, typer.Option("--moe-tp", min=1, help="MoE TP (default: --tp).")
    ] = None,
    moe_ep: Annotated[int | None, typer.Option("--moe-ep", min=1, help="MoE EP.")] = None,
    tpot_ms: Annotated[
        float, typer.Option("--tpot-ms", min=0.001, help="TPOT SLO the decode points keep.")
    ] = 50.0,
    max_seqs: Annotated[
        int, typer.Option("--max-seqs", min=1, help="Engine's --max-num-seqs.")
    ] = 1024,
    max_batched_tokens: Annotated[
        int, typer.Option("--max-batched-tokens", min=1, help="Engine's --max-num-batched-tokens.")
    ] = 8192,
    gpu_memory_utilization: Annotated[
        float,
        typer.Option("--gpu-memory-utilization", min=0.01, max=1.0, help="GPU memory share."),
    ] = 0.9,
    name: Annotated[str | None, typer.Option("--name", help="Name in --engine-out.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the profile here (YAML).")
    ] = None,
    engine_out: Annotated[
        Path | None,
        typer.Option("--engine-out", help="Also write the engine record (answers, fit; JSON)."),
    ] = None,
) -> None:
    """A PDDeployment's prefill and decode profile from aiconfigurator (no GPU).

    Needs the profiles extra: pip install 'pdscaler[profiles]'.
    """
    try:
        from pdscaler.sim.measured import Deployment, dumps_record, measure
    except ModuleNotFoundError as err:
        fail(f"{EXTRA_HINT} ({err})")
    deployment = Deployment(
        model=model,
        system=system,
        backend=backend,
        tp=tp,
        moe_tp=moe_tp,
        moe_ep=moe_ep,
        max_seqs=max_seqs,
        max_batched_tokens=max_batched_tokens,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    answers = open_answers(deployment)
    label = name or f"{model.split('/')[-1].lower()}-{system}-{backend}-tp{tp}"
    try:
        engine = measure(label, deployment, answers)
    except Exception as err:  # the database's own errors: an unknown model, no data
        fail(f"aiconfigurator could not answer for {model} on {system}: {err}")
    text = render(engine, tpot_ms / 1e3)
    if engine_out is not None:
        engine_out.write_text(dumps_record(engine))
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write_text(text)
    pe, de = engine.prefill_fit.error, engine.decode_fit.error
    typer.echo(
        f"wrote {output}: {engine.label}; fit max {pe.max_rel:.1%} (prefill), "
        f"{de.max_rel:.1%} (decode)"
    )
