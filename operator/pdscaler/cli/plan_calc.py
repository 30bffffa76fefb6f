"""The calculators of ``pdscaler plan``: ``ratio``, ``drain``, ``migrate``, ``reconfigure``.

Owns: each calculator's options, calling ``pdscaler.models`` with them, and turning a
model's ``ValueError`` into a one-line error that names the option (``checked``). Must
not: hold a formula of its own (the models compute), format output (``plan_render``
does), or talk to a cluster or to Prometheus.

    pdscaler plan drain --arrival 3.5 --startup 10 --service 4.55 --deadline 60
        backlog 35 requests, drained at 43.3 s, meets 60 s: yes
    pdscaler plan ratio --rate 3.5 --prompt-tokens 12000 --output-tokens 350 \
        --prefill-tps 8500 --decode-tps 1400 --kv-cache-tokens 100000 --tpot 0.03
        decode sized by memory: N_D 4.97 -> 5 (throughput 1.25, memory 4.97)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from pdscaler import models
from pdscaler.cli.common import FormatOpt, fail, num, output_format
from pdscaler.cli.plan_render import (
    backlog_sentence,
    drain_table,
    drain_verdict,
    emit,
    memory_table,
    ratio_tables,
    table,
)

T = TypeVar("T")
GB = models.migration.GB
KIB = models.migration.KIB


def checked(call: Callable[[], T], options: dict[str, str]) -> T:
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


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]


RATIO_OPTIONS = {
    "rate": "--rate",
    "prompt_tokens": "--prompt-tokens",
    "output_tokens": "--output-tokens",
    "prefill_tps": "--prefill-tps",
    "decode_tps": "--decode-tps",
    "prefill_utilization": "--prefill-utilization",
    "decode_utilization": "--decode-utilization",
}


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
    kv_cache_tokens: Annotated[
        float | None,
        typer.Option(
            "--kv-cache-tokens",
            help=(
                "KV tokens ONE decode replica holds, M: also size decode by memory "
                "(docs/models.md §2b)."
            ),
        ),
    ] = None,
    tpot: Annotated[
        float,
        typer.Option("--tpot", help="TPOT a sequence decodes at, seconds (memory bound)."),
    ] = 0.05,
    kv_utilization: Annotated[
        float,
        typer.Option("--kv-utilization", help="Target KV utilisation u_kv (memory bound)."),
    ] = models.bottleneck.KV_LIMIT,
    as_json: JsonOpt = False,
    output: FormatOpt = None,
) -> None:
    """Steady-state replicas of each pool: N = load / (per-replica tokens/s x u), rounded up;
    with --kv-cache-tokens decode is the larger of that and its KV memory bound."""
    u_p = utilization if prefill_utilization is None else prefill_utilization
    u_d = utilization if decode_utilization is None else decode_utilization
    options = {**RATIO_OPTIONS}
    if prefill_utilization is None:
        options["prefill_utilization"] = "--utilization"
    if decode_utilization is None:
        options["decode_utilization"] = "--utilization"
    result = checked(
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
    lines = [
        f"R = {num(rate)} req/s, {num(prompt_tokens, 0)} prompt / {num(output_tokens, 0)} "
        f"output tokens per request",
        f"P:D ratio {num(result.ratio)} (N_P / N_D; {result.prefill_replicas}:"
        f"{result.decode_replicas} replicas)",
    ]
    doc: dict[str, Any] = {"inputs": inputs, **dataclasses.asdict(result)}
    tables: list[Table] = [ratio_tables(result, (prefill_tps, decode_tps), (u_p, u_d))]
    if kv_cache_tokens is not None:
        m = kv_cache_tokens
        memory = checked(
            lambda: models.decode_memory(
                rate, prompt_tokens, output_tokens, tpot, m, kv_utilization
            ),
            MEMORY_OPTIONS,
        )
        n_decode, bound = models.decode_bound(result.n_decode, memory)
        inputs.update(kv_cache_tokens=m, tpot_seconds=tpot, kv_utilization=kv_utilization)
        doc["memory"] = dataclasses.asdict(memory)
        doc["decode"] = {
            "n_decode": n_decode,
            "decode_replicas": models.ceil_replicas(n_decode),
            "bound": bound.value,
        }
        tables.append(memory_table(memory, m, kv_utilization))
        if bound is models.DecodeBound.MEMORY:
            lines[1] = (
                f"P:D ratio {num(result.n_prefill / n_decode)} (N_P / N_D by KV memory; "
                f"{result.prefill_replicas}:{models.ceil_replicas(n_decode)} replicas)"
            )
        lines.append(
            f"decode sized by {bound.value}: N_D {num(n_decode)} -> "
            f"{models.ceil_replicas(n_decode)} (throughput {num(result.n_decode)}, "
            f"memory {num(memory.n_decode)})"
        )
    emit(output_format(output, as_json), doc, *tables, *lines)


MEMORY_OPTIONS = {
    **RATIO_OPTIONS,
    "tpot_seconds": "--tpot",
    "kv_cache_tokens": "--kv-cache-tokens",
    "kv_utilization": "--kv-utilization",
}


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
    mu_min = checked(
        lambda: models.min_service_rate(arrival, backlog, startup, deadline), DRAIN_OPTIONS
    )
    replicas = None
    if per_replica is not None:
        replicas = checked(
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
    output: FormatOpt = None,
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
    backlog = checked(
        lambda: models.backlog(arrival, startup, queue, current_service), DRAIN_OPTIONS
    )
    scenarios = []
    for mu in services:
        result = checked(partial(models.drain_time, arrival, mu, startup, backlog), DRAIN_OPTIONS)
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
    emit(output_format(output, as_json), data, *blocks)


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
        checked(partial(models.kv_bytes, requests, context_tokens, kib * KIB), MIGRATE_OPTIONS) / GB
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
    return checked(partial(models.kv_bytes, 1.0, decode_tps, kv_kib_per_token * KIB), options) / GB


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
    output: FormatOpt = None,
) -> None:
    """Catch-up migration: time for a live KV copy to catch up, and the state added.

    t = S_0 / (bw - growth), added = growth x t; never when bw <= growth.
    """
    state = state_gb_of(state_gb, requests, context_tokens, kv_kib_per_token)
    growth = growth_gbps_of(growth_gbps, decode_tps, kv_kib_per_token)
    # The model is unit-free (seconds = size / rate): GB and GB/s in, seconds and GB out.
    result = checked(partial(models.catch_up, state, growth, bandwidth_gbps), MIGRATE_OPTIONS)
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
    emit(
        output_format(output, as_json),
        data,
        table("Catch-up migration (docs/models.md §5)", ("", "value"), rows),
        note,
    )


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
    output: FormatOpt = None,
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
    base = checked(partial(models.reconfigure_time, bytes_gb, bandwidth_gbps, prep), options)
    rows = [(num(bandwidth_gbps, 3), num(base - prep, 3), num(prep, 3), num(base, 3), "-")]
    faster = []
    for k in speedup or [4.0]:
        gain = checked(partial(models.bandwidth_gain, bytes_gb, bandwidth_gbps, k, prep), options)
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
        output_format(output, as_json),
        data,
        table(
            "Reconfiguration (docs/models.md §5)",
            ("bandwidth (GB/s)", "transfer (s)", "prep (s)", "total (s)", "shorter by"),
            rows,
        ),
        "The preparation is the floor: pre-building groups and pre-capturing graphs is the "
        "only cure (and costs memory that would otherwise hold KV).",
    )
