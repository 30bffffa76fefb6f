"""``pdscaler plan``: the capacity calculators of MODELS.md on the command line.

Owns: the calculators' arguments, calling ``pdscaler.models``, and printing the answer
as a table with units (or JSON with ``--json``). Must not: hold a formula of its own (the
models compute, this module only reads, calls and prints), talk to a cluster or to
Prometheus. Bad arguments are one line on stderr (``Error: ...``) and exit code 2,
never a traceback: usage errors from click are folded to one line by ``PlanGroup`` /
``OneLineCommand``, a model's ``ValueError`` names the offending option.

Worked examples (the golden numbers of MODELS.md)::

    pdscaler plan ratio --rate 20 --prompt-tokens 2000 --output-tokens 500 \\
        --prefill-tps 3000 --decode-tps 800 --utilization 0.7
        prefill N_P 19.05 -> 20, decode N_D 17.86 -> 18, P:D 1.07
    pdscaler plan drain --arrival 3.5 --startup 10 --service 4.55 --deadline 60
        backlog 35 requests, drained at 43.3 s, meets 60 s: yes
        (--service 4.17 -> 62.2 s, no; --service 3.02 -> never)
    pdscaler plan drain --arrival 3.5 --startup 10 --deadline 60 --per-replica 0.65
        smallest service rate 4.2 req/s = 7 replicas
    pdscaler plan migrate --state-gb 41.1 --growth-gbps 0.172 --bandwidth-gbps 25
        catch-up 1.655 s, 0.285 GB added meanwhile
    pdscaler plan reconfigure --bytes-gb 66 --bandwidth-gbps 25 --prep 9
        11.64 s; at 4x the bandwidth 9.66 s, only 17% shorter
    pdscaler plan --from-file deploy/examples/chat.yaml --rate 20 \\
        --prompt-tokens 2000 --output-tokens 500
        prefill 20, decode 18 replicas, 38 of 48 GPUs
        (``pdscaler plan from-file MANIFEST ...`` is the same as a subcommand)

Units: rates in req/s, throughputs in tokens/s, times in seconds, sizes in GB and
bandwidths in GB/s (1 GB = 10^9 bytes; ``--*-gbps`` are gigaBYTES per second).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pydantic
import typer
import yaml
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from pdscaler import models
from pdscaler.cli.common import OneLineCommand, fail, num, one_line
from pdscaler.spec import KIND, PDDeployment
from pdscaler.types import Role

T = TypeVar("T")
GB = models.migration.GB
KIB = models.migration.KIB


class PlanGroup(TyperGroup):
    """The ``plan`` group: its own option errors and unknown subcommands are one line."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        return one_line(lambda: super(PlanGroup, self).make_context(*args, **kwargs))

    def resolve_command(self, *args: Any, **kwargs: Any) -> Any:
        return one_line(lambda: super(PlanGroup, self).resolve_command(*args, **kwargs))


def _checked(call: Callable[[], T], options: dict[str, str]) -> T:
    """Call a model; its ``ValueError`` ("prefill_tps must be > 0, got 0.0") becomes a
    one-line error naming the option ("--prefill-tps must be > 0, got 0.0")."""
    try:
        return call()
    except ValueError as err:
        message = str(err)
        for name, option in options.items():
            if message.startswith(f"{name} "):
                message = option + message[len(name) :]
                break
        fail(message)


# ------------------------------------------------------------------ output helpers


def _jsonable(value: Any) -> Any:
    """Non-finite floats become ``null`` (JSON has no inf/nan); dataclasses and enums
    their plain values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, StrEnum):
        return str(value)
    return value


def emit(as_json: bool, data: dict[str, Any], *blocks: Table | str) -> None:
    """Print ``data`` as JSON, or the human ``blocks`` (tables and lines)."""
    if as_json:
        typer.echo(json.dumps(_jsonable(data), indent=2))
        return
    console = Console(highlight=False, soft_wrap=True)
    for block in blocks:
        console.print(block)


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    """A table whose first column is left-aligned and the others (numbers) right."""
    out = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        out.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*row)
    return out


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]

# ------------------------------------------------------------------ ratio


RATIO_OPTIONS = {
    "rate": "--rate",
    "prompt_tokens": "--prompt-tokens",
    "output_tokens": "--output-tokens",
    "prefill_tps": "--prefill-tps",
    "decode_tps": "--decode-tps",
    "prefill_utilization": "--prefill-utilization",
    "decode_utilization": "--decode-utilization",
}


def ratio_tables(
    result: models.RatioResult,
    capacities: tuple[float, float],
    utilizations: tuple[float, float],
) -> Table:
    """The ratio model as a table: one row per pool, load, per-replica capacity at the
    target utilisation and ``N 19.05 -> 20``."""
    rows = []
    for role, label, load, n, whole, tps, u in (
        (Role.PREFILL, "N_P", result.prefill_load_tps, result.n_prefill,
         result.prefill_replicas, capacities[0], utilizations[0]),
        (Role.DECODE, "N_D", result.decode_load_tps, result.n_decode,
         result.decode_replicas, capacities[1], utilizations[1]),
    ):  # fmt: skip
        rows.append(
            (
                str(role),
                num(load, 0),
                f"{num(tps, 0)} x {num(u * 100, 1)}% = {num(tps * u, 1)}",
                f"{label} {num(n)} -> {whole}",
            )
        )
    return table(
        "Ratio model (MODELS.md §2)",
        ("pool", "load (tok/s)", "per replica (tok/s)", "replicas"),
        rows,
    )


def cmd_ratio(
    rate: Annotated[float, typer.Option("--rate", help="Request rate R, req/s.")],
    prompt_tokens: Annotated[
        float, typer.Option("--prompt-tokens", help="Mean prompt tokens per request, L_p.")
    ],
    output_tokens: Annotated[
        float, typer.Option("--output-tokens", help="Mean output tokens per request, L_d.")
    ],
    prefill_tps: Annotated[
        float,
        typer.Option("--prefill-tps", help="Prompt tokens/s ONE prefill replica sustains."),
    ],
    decode_tps: Annotated[
        float,
        typer.Option("--decode-tps", help="Output tokens/s ONE decode replica sustains."),
    ],
    utilization: Annotated[
        float, typer.Option("--utilization", help="Target utilisation of both pools, (0, 1].")
    ] = 0.7,
    prefill_utilization: Annotated[
        float | None,
        typer.Option("--prefill-utilization", help="u_P (default: --utilization)."),
    ] = None,
    decode_utilization: Annotated[
        float | None,
        typer.Option("--decode-utilization", help="u_D (default: --utilization)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Steady-state replicas of each pool: N = load / (per-replica tokens/s x u), rounded up."""
    u_p = utilization if prefill_utilization is None else prefill_utilization
    u_d = utilization if decode_utilization is None else decode_utilization
    options = {**RATIO_OPTIONS}
    if prefill_utilization is None:
        options["prefill_utilization"] = "--utilization"
    if decode_utilization is None:
        options["decode_utilization"] = "--utilization"
    result = _checked(
        lambda: models.ratio_model(
            rate, prompt_tokens, output_tokens, prefill_tps, decode_tps, u_p, u_d
        ),
        options,
    )
    inputs = {
        "rate": rate,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "prefill_tps": prefill_tps,
        "decode_tps": decode_tps,
        "prefill_utilization": u_p,
        "decode_utilization": u_d,
    }
    emit(
        as_json,
        {"inputs": inputs, **dataclasses.asdict(result)},
        ratio_tables(result, (prefill_tps, decode_tps), (u_p, u_d)),
        f"R = {num(rate)} req/s, {num(prompt_tokens, 0)} prompt / {num(output_tokens, 0)} "
        f"output tokens per request",
        f"P:D ratio {num(result.ratio)} (N_P / N_D; {result.prefill_replicas}:"
        f"{result.decode_replicas} replicas)",
    )


# ------------------------------------------------------------------ drain


DRAIN_OPTIONS = {
    "arrival_rate": "--arrival",
    "startup_seconds": "--startup",
    "queued": "--queue",
    "current_service_rate": "--current-service",
    "service_rate": "--service",
    "deadline": "--deadline",
    "per_replica_rate": "--per-replica",
}


def drain_inverse(
    arrival: float,
    backlog: float,
    startup: float,
    deadline: float,
    per_replica: float | None,
) -> tuple[dict[str, Any], str]:
    """The inverse drain model as JSON fields and a sentence: the smallest service rate
    (and replica count) that drains by the deadline, or infeasible when D <= T_s."""
    mu_min = _checked(
        lambda: models.min_service_rate(arrival, backlog, startup, deadline), DRAIN_OPTIONS
    )
    replicas = None
    if per_replica is not None:
        replicas = _checked(
            lambda: models.replicas_for_deadline(arrival, backlog, startup, deadline, per_replica),
            DRAIN_OPTIONS,
        )
    data = {"min_service_rate": mu_min, "feasible": mu_min is not None, "replicas": replicas}
    if mu_min is None:
        return data, (
            f"Deadline {num(deadline)} s <= startup {num(startup)} s: infeasible, no scale-up "
            "can meet it; scale to the best achievable."
        )
    text = (
        f"Smallest service rate that drains by {num(deadline)} s: {num(mu_min, 3)} req/s "
        f"(= {num(arrival, 3)} + {num(backlog)} / ({num(deadline)} - {num(startup)}))"
    )
    if replicas is not None and per_replica is not None:
        text += f" = {replicas} replicas of {num(per_replica, 3)} req/s"
    return data, text + "."


def backlog_sentence(
    arrival: float, startup: float, queue: float, current_service: float, backlog: float
) -> str:
    """``Backlog B = 3.5 req/s x 10 s = 35 requests`` (the queue and the current
    service rate appear when given: ``12 queued + (3.5 - 2) req/s x 10 s = 27``)."""
    if queue == 0 and current_service == 0:
        terms = f"{num(arrival, 3)} req/s x {num(startup)} s"
    else:
        terms = (
            f"{num(queue)} queued + ({num(arrival, 3)} - {num(current_service, 3)}) req/s"
            f" x {num(startup)} s"
        )
    return f"Backlog B = {terms} = {num(backlog)} requests"


def drain_table(scenarios: list[dict[str, Any]], deadline: float | None) -> Table:
    """One row per service rate: margin, drained at (or never), meets the deadline."""
    columns = ["mu (req/s)", "margin (req/s)", "drained at (s)"]
    if deadline is not None:
        columns.append(f"meets {num(deadline)} s")
    rows = []
    for s in scenarios:
        row = [num(s["service"], 3), f"{s['margin']:+.3g}", num(s["drain_seconds"], 1)]
        if deadline is not None:
            row.append("yes" if s["meets_deadline"] else "no")
        rows.append(row)
    return table("Drain-time model (MODELS.md §3)", columns, rows)


def drain_verdict(scenario: dict[str, Any], deadline: float | None) -> str:
    """``mu 4.55 req/s: drained at 43.3 s, meets the 60 s deadline.``"""
    head = f"mu {num(scenario['service'], 3)} req/s: "
    if scenario["drain_seconds"] is None:
        head += "never drained (mu <= lambda)"
    else:
        head += f"drained at {num(scenario['drain_seconds'], 1)} s"
    if deadline is not None:
        head += ", meets" if scenario["meets_deadline"] else ", misses"
        head += f" the {num(deadline)} s deadline"
    return head + "."


def cmd_drain(
    arrival: Annotated[float, typer.Option("--arrival", help="Arrival rate lambda, req/s.")],
    startup: Annotated[
        float, typer.Option("--startup", help="Startup time T_s of new replicas, seconds.")
    ],
    service: Annotated[
        list[float] | None,
        typer.Option("--service", help="Service rate mu after scaling, req/s (repeat to compare)."),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option("--deadline", help="Recovery deadline D, seconds from the decision."),
    ] = None,
    queue: Annotated[float, typer.Option("--queue", help="Requests already waiting, Q_0.")] = 0.0,
    current_service: Annotated[
        float,
        typer.Option("--current-service", help="Req/s the current capacity serves during T_s."),
    ] = 0.0,
    per_replica: Annotated[
        float | None,
        typer.Option("--per-replica", help="Req/s one replica serves: turns mu_min into replicas."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Drain-time model: backlog, drain time and deadline, or the rate that meets it.

    Backlog B = Q_0 + (lambda - mu_0) x T_s.
    Drained at T_s + B / (mu - lambda); never when mu <= lambda.
    With --deadline: mu_min = lambda + B / (D - T_s), infeasible if D <= T_s.
    With --per-replica: the fewest replicas that meet the deadline.
    """
    services = list(service or [])
    if not services and deadline is None:
        fail("give --service (when is it drained?) and/or --deadline (what rate meets it?)")
    backlog = _checked(
        lambda: models.backlog(arrival, startup, queue, current_service), DRAIN_OPTIONS
    )
    scenarios = []
    for mu in services:
        result = _checked(partial(models.drain_time, arrival, mu, startup, backlog), DRAIN_OPTIONS)
        scenarios.append(
            {
                "service": mu,
                "margin": result.margin,
                "drain_seconds": result.drain_seconds,
                "meets_deadline": None if deadline is None else result.meets(deadline),
            }
        )
    data: dict[str, Any] = {
        "arrival": arrival,
        "startup_seconds": startup,
        "queue": queue,
        "current_service": current_service,
        "deadline": deadline,
        "backlog": backlog,
        "scenarios": scenarios,
    }
    blocks: list[Table | str] = [
        backlog_sentence(arrival, startup, queue, current_service, backlog)
    ]
    if scenarios:
        blocks.append(drain_table(scenarios, deadline))
    if len(scenarios) == 1:
        blocks.append(drain_verdict(scenarios[0], deadline))
    if deadline is not None:
        inverse, sentence = drain_inverse(arrival, backlog, startup, deadline, per_replica)
        data.update(inverse)
        blocks.append(sentence)
    emit(as_json, data, *blocks)


# ------------------------------------------------------------------ migrate

MIGRATE_OPTIONS = {
    "state_bytes": "--state-gb",
    "growth_bytes_per_s": "--growth-gbps",
    "bandwidth_bytes_per_s": "--bandwidth-gbps",
    "requests": "--requests",
    "tokens_per_request": "--context-tokens",
    "bytes_per_token": "--kv-kib-per-token",
}


def state_gb_of(
    state_gb: float | None,
    requests: float | None,
    context_tokens: float | None,
    kv_kib_per_token: float | None,
) -> float:
    """S_0 in GB: ``--state-gb``, or requests x context tokens x KiB/token
    (32 x 8,704 x 144 KiB = 41.07 GB)."""
    if state_gb is not None:
        if requests is not None or context_tokens is not None:
            fail("give --state-gb or --requests with --context-tokens, not both")
        return state_gb
    if requests is None or context_tokens is None or kv_kib_per_token is None:
        fail("give --state-gb, or --requests, --context-tokens and --kv-kib-per-token")
    kib = kv_kib_per_token
    return (
        _checked(partial(models.kv_bytes, requests, context_tokens, kib * KIB), MIGRATE_OPTIONS)
        / GB
    )


def growth_gbps_of(
    growth_gbps: float | None, decode_tps: float | None, kv_kib_per_token: float | None
) -> float:
    """Growth in GB/s: ``--growth-gbps``, or decode tokens/s x KiB/token
    (1,166 x 144 KiB = 0.172 GB/s)."""
    if growth_gbps is not None:
        if decode_tps is not None:
            fail("give --growth-gbps or --decode-tps, not both")
        return growth_gbps
    if decode_tps is None or kv_kib_per_token is None:
        fail("give --growth-gbps, or --decode-tps with --kv-kib-per-token")
    options = {**MIGRATE_OPTIONS, "tokens_per_request": "--decode-tps"}
    return _checked(partial(models.kv_bytes, 1.0, decode_tps, kv_kib_per_token * KIB), options) / GB


def cmd_migrate(
    bandwidth_gbps: Annotated[
        float, typer.Option("--bandwidth-gbps", help="Copy bandwidth, GB/s.")
    ],
    state_gb: Annotated[
        float | None, typer.Option("--state-gb", help="KV state to copy S_0, GB.")
    ] = None,
    growth_gbps: Annotated[
        float | None,
        typer.Option("--growth-gbps", help="How fast the state grows while copying, GB/s."),
    ] = None,
    requests: Annotated[
        float | None,
        typer.Option("--requests", help="Requests on the worker (instead of --state-gb)."),
    ] = None,
    context_tokens: Annotated[
        float | None, typer.Option("--context-tokens", help="Mean context tokens per request.")
    ] = None,
    kv_kib_per_token: Annotated[
        float | None, typer.Option("--kv-kib-per-token", help="KV cache per token, KiB.")
    ] = None,
    decode_tps: Annotated[
        float | None,
        typer.Option(
            "--decode-tps", help="Decode tokens/s (instead of --growth-gbps, with KiB/token)."
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Catch-up migration: time for a live KV copy to catch up, and the state added.

    t = S_0 / (bw - growth), added = growth x t; never when bw <= growth.
    """
    state = state_gb_of(state_gb, requests, context_tokens, kv_kib_per_token)
    growth = growth_gbps_of(growth_gbps, decode_tps, kv_kib_per_token)
    # The model is unit-free (seconds = size / rate): GB and GB/s in, seconds and GB out.
    result = _checked(partial(models.catch_up, state, growth, bandwidth_gbps), MIGRATE_OPTIONS)
    data = {
        "state_gb": state,
        "growth_gbps": growth,
        "bandwidth_gbps": bandwidth_gbps,
        "catch_up_seconds": result.seconds,
        "added_gb": result.added_bytes,
    }
    never = result.seconds is None
    rows = [
        ("KV state S_0", f"{num(state, 3)} GB"),
        ("state growth", f"{num(growth, 3)} GB/s"),
        ("copy bandwidth", f"{num(bandwidth_gbps, 3)} GB/s"),
        ("catch-up time", "never" if never else f"{num(result.seconds, 3)} s"),
        ("added meanwhile", "never" if never else f"{num(result.added_bytes, 3)} GB"),
    ]
    note = (
        "Never: the copy bandwidth does not exceed the growth rate."
        if never
        else "Then a final hand-over (state version + ownership) so the source's last "
        "updates are not lost."
    )
    emit(as_json, data, table("Catch-up migration (MODELS.md §5)", ("", "value"), rows), note)


# ------------------------------------------------------------------ reconfigure


def cmd_reconfigure(
    bytes_gb: Annotated[float, typer.Option("--bytes-gb", help="Bytes to move, GB.")],
    bandwidth_gbps: Annotated[float, typer.Option("--bandwidth-gbps", help="Link, GB/s.")],
    prep: Annotated[
        float,
        typer.Option("--prep", help="Software preparation (groups, graphs, traffic), s."),
    ] = models.migration.SOFTWARE_PREP_SECONDS,
    speedup: Annotated[
        list[float] | None,
        typer.Option("--speedup", help="Also show k x the bandwidth (repeatable; default 4)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Reconfiguration time: bytes / bandwidth + software preparation.

    Also shows k x the bandwidth (--speedup, default 4): the preparation is the floor.
    """
    options = {
        "bytes_to_move": "--bytes-gb",
        "bandwidth": "--bandwidth-gbps",
        "software_prep": "--prep",
        "factor": "--speedup",
    }
    # The model is unit-free (seconds = size / rate): GB and GB/s in, seconds out.
    base = _checked(partial(models.reconfigure_time, bytes_gb, bandwidth_gbps, prep), options)
    rows = [(num(bandwidth_gbps, 3), num(base - prep, 3), num(prep, 3), num(base, 3), "-")]
    faster = []
    for k in speedup or [4.0]:
        gain = _checked(partial(models.bandwidth_gain, bytes_gb, bandwidth_gbps, k, prep), options)
        seconds = models.reconfigure_time(bytes_gb, bandwidth_gbps * k, prep)
        faster.append(
            {"factor": k, "bandwidth_gbps": bandwidth_gbps * k, "seconds": seconds, "gain": gain}
        )
        rows.append(
            (
                f"{num(bandwidth_gbps * k, 3)} ({num(k)}x)",
                num(seconds - prep, 3),
                num(prep, 3),
                num(seconds, 3),
                f"{gain:.0%}",
            )
        )
    data = {
        "bytes_gb": bytes_gb,
        "bandwidth_gbps": bandwidth_gbps,
        "prep_seconds": prep,
        "seconds": base,
        "speedups": faster,
    }
    emit(
        as_json,
        data,
        table(
            "Reconfiguration (MODELS.md §5)",
            ("bandwidth (GB/s)", "transfer (s)", "prep (s)", "total (s)", "shorter by"),
            rows,
        ),
        "The preparation is the floor: pre-building groups and pre-capturing graphs is the "
        "only cure (and costs memory that would otherwise hold KV).",
    )


# ------------------------------------------------------------------ from-file


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
    38 of 48 GPUs, not limited."""
    spec = manifest.spec
    pools = {Role.PREFILL: spec.prefill, Role.DECODE: spec.decode}
    ratio = _checked(
        lambda: models.ratio_model(
            rate,
            prompt_tokens,
            output_tokens,
            spec.prefill.tokens_per_second,
            spec.decode.tokens_per_second,
            spec.prefill.target_utilization,
            spec.decode.target_utilization,
        ),
        RATIO_OPTIONS,
    )
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
            "tokens_per_second": pool.tokens_per_second,
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
    return out


def _from_file_blocks(plan: dict[str, Any]) -> list[Table | str]:
    """Human view of ``plan_manifest``'s answer: one row per pool, the GPU total, and a
    note for every pool held away from the ratio model's count."""
    rows = []
    notes = []
    for role in (Role.PREFILL, Role.DECODE):
        p = plan[str(role)]
        rows.append(
            (
                str(role),
                num(p["load_tps"], 0),
                f"{num(p['n'])} -> {p['want']}",
                f"{p['min']}-{p['max']}",
                str(p["replicas"]),
                f"{p['gpus']}",
                f"{num(p['utilization'] * 100, 1)}%",
            )
        )
        if p["want"] > p["max"]:
            notes.append(f"{role}: wants {p['want']} replicas, held at replicas.max {p['max']}.")
        elif p["want"] < p["min"]:
            notes.append(f"{role}: wants {p['want']} replicas, kept at replicas.min {p['min']}.")
    name = "/".join(str(x) for x in (plan["namespace"], plan["name"]) if x)
    title = f"Pools for {name or 'the manifest'} at {num(plan['rate'])} req/s"
    columns = ("pool", "load (tok/s)", "N -> want", "min-max", "plan", "GPUs", "utilisation")
    blocks: list[Table | str] = [
        table(title, columns, rows),
        f"GPUs used: {plan['gpus_used']} of maxGPUs {plan['max_gpus']}; "
        f"P:D ratio {num(plan['ratio'])}; utilisation = load / (plan x tokensPerSecond).",
        *notes,
    ]
    if plan["limited"]:
        blocks.append(
            "Limited by maxGPUs: the wants did not fit, so the scarce GPUs went to the pool "
            "that would otherwise run hotter (the worse utilisation is minimised)."
        )
    return blocks


def run_from_file(
    manifest: Path,
    rate: float,
    prompt_tokens: float,
    output_tokens: float,
    prefer: Prefer | None,
    as_json: bool,
) -> None:
    """Load, plan and print (shared by ``plan --from-file`` and ``plan from-file``)."""
    deployment = load_manifest(manifest)
    role = None if prefer is None else Role(prefer.value)
    plan = plan_manifest(deployment, rate, prompt_tokens, output_tokens, role)
    emit(as_json, plan, *_from_file_blocks(plan))


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
) -> None:
    """The pools of a PDDeployment manifest at a given load.

    The ratio model with the manifest's capacities and utilisations,
    clamped to its replica bounds and split under its maxGPUs.
    Same as: pdscaler plan --from-file MANIFEST ...
    """
    run_from_file(manifest, rate, prompt_tokens, output_tokens, prefer, as_json)


def plan_callback(
    ctx: typer.Context,
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from-file", help="Plan a PDDeployment manifest (with --rate and token lengths)."
        ),
    ] = None,
    rate: Annotated[float | None, typer.Option("--rate", help="With --from-file.")] = None,
    prompt_tokens: Annotated[
        float | None, typer.Option("--prompt-tokens", help="With --from-file.")
    ] = None,
    output_tokens: Annotated[
        float | None, typer.Option("--output-tokens", help="With --from-file.")
    ] = None,
    prefer: PreferOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Capacity calculators of MODELS.md; --from-file plans a PDDeployment manifest.

    pdscaler plan --from-file MANIFEST --rate R --prompt-tokens Lp --output-tokens Ld
    """
    given = [from_file, rate, prompt_tokens, output_tokens, prefer]
    if ctx.invoked_subcommand is not None:
        if any(v is not None for v in given) or as_json:
            fail(
                f"--from-file and its options go without a subcommand; "
                f"put options after '{ctx.invoked_subcommand}'"
            )
        return
    if from_file is None and not any(v is not None for v in given) and not as_json:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if from_file is None:
        fail("give a subcommand (ratio, drain, migrate, reconfigure, from-file) or --from-file")
    missing = [
        flag
        for flag, value in (
            ("--rate", rate),
            ("--prompt-tokens", prompt_tokens),
            ("--output-tokens", output_tokens),
        )
        if value is None
    ]
    if missing:
        fail(f"--from-file needs {', '.join(missing)}")
    load = (rate or 0.0, prompt_tokens or 0.0, output_tokens or 0.0)  # all given (checked)
    run_from_file(from_file, *load, prefer, as_json)


def register(app: typer.Typer) -> None:
    """Add ``plan`` and its subcommands to the ``pdscaler`` app."""
    plan = typer.Typer(
        name="plan",
        cls=PlanGroup,
        invoke_without_command=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    plan.callback()(plan_callback)
    for name, func in (
        ("ratio", cmd_ratio),
        ("drain", cmd_drain),
        ("migrate", cmd_migrate),
        ("reconfigure", cmd_reconfigure),
        ("from-file", cmd_from_file),
    ):
        plan.command(name, cls=OneLineCommand)(func)
    app.add_typer(plan, name="plan")
