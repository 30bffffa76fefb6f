"""The human and JSON output of ``pdscaler plan``: tables with units, sentences, JSON.

Owns: how each calculator's answer is printed (``emit``: JSON with ``-o json`` or
``--json``, YAML with ``-o yaml``, else rich tables and lines) and the tables and
sentences themselves. Must not: compute anything (the numbers come from
``pdscaler.models`` through ``plan_calc`` and ``plan_file``) or parse arguments.

>>> backlog_sentence(3.5, 10.0, 0.0, 0.0, 35.0)
'Backlog B = 3.5 req/s x 10 s = 35 requests'
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from pdscaler import models
from pdscaler.cli.common import Output, dump, num
from pdscaler.types import Role


def jsonable(value: Any) -> Any:
    """Non-finite floats become ``null`` (JSON has no inf/nan); dataclasses and enums
    their plain values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, StrEnum):
        return str(value)
    return value


def emit(fmt: Output | None, data: dict[str, Any], *blocks: Table | str) -> None:
    """Print ``data`` as JSON or YAML (``-o``; ``--json`` keeps its key order), or the
    human ``blocks`` (tables and lines)."""
    if fmt is Output.json:
        typer.echo(json.dumps(jsonable(data), indent=2))
        return
    if fmt is Output.yaml:
        typer.echo(dump(jsonable(data), fmt))
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
        "Ratio model (docs/models.md §2)",
        ("pool", "load (tok/s)", "per replica (tok/s)", "replicas"),
        rows,
    )


def memory_table(
    memory: models.MemoryResult, kv_cache_tokens: float, kv_utilization: float
) -> Table:
    """The decode memory bound as a table: residence, resident sequences and tokens, and
    ``N_D 4.97 -> 5`` (docs/models.md §2b)."""
    rows = [
        ("t_d = L_d x TPOT", f"{num(memory.residence_seconds)} s"),
        ("resident sequences R x t_d", num(memory.resident_sequences)),
        ("tokens per sequence L_p + L_d/2", num(memory.tokens_per_sequence, 0)),
        ("resident KV tokens", num(memory.resident_tokens, 0)),
        (
            "per replica M x u_kv",
            f"{num(kv_cache_tokens, 0)} x {num(kv_utilization * 100, 1)}% = "
            f"{num(kv_cache_tokens * kv_utilization, 0)}",
        ),
        ("replicas", f"N_D {num(memory.n_decode)} -> {memory.decode_replicas}"),
    ]
    return table("Decode memory bound (docs/models.md §2b)", ("", "value"), rows)


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
    return table("Drain-time model (docs/models.md §3)", columns, rows)


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


def from_file_blocks(plan: dict[str, Any]) -> list[Table | str]:
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
