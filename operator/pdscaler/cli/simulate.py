"""``pdscaler simulate``: replay a request trace against pdscaler's policy and the
baselines in the offline simulator, and compare them.

Owns: the options, reading the trace file, the progress bar, the comparison table, the
JSON result (``--out``; ``--json`` prints it instead of the table) and the PNG plot
(``--plot``). Must not: hold simulation logic (``pdscaler.sim`` does it all) or talk to
a cluster. Bad arguments (missing trace, unknown policy, non-positive numbers, an
invalid spec value) are one line on stderr and exit code 2.

    pdscaler simulate --trace data/traces/AzureLLMInferenceTrace_conv.csv --policy all
    pdscaler simulate --trace conv.csv --rate-scale 10 --startup 90 --policy pdscaler,hpa-queue
    pdscaler simulate --trace mooncake.jsonl --duration 600 --json

``--rate-scale`` multiplies the request RATE (requests are replicated or thinned,
seeded), never the time axis. ``--startup`` is both the engine's true mean start-up
time and the PDDeployment's prior; ``--prefill-tps``/``--decode-tps`` are the priors
declared in the PDDeployment, ``--true-prefill-tps``/``--true-decode-speed`` the
simulated engine's real capacities (defaults: priors 15% over / 20% under the truth).
``--ttft-slo-per-token`` makes the TTFT SLO length-aware when scoring (limit = ``--ttft``
+ that many seconds per prompt token; the policy still sees ``--ttft``). The oracle row
is the SLO-feasible clairvoyant schedule (``pdscaler.sim.compare.feasible_oracle``),
"x oracle" a ratio to it; the lower bound and the work floor are printed under it.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Annotated, Any

import pydantic
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdscaler.cli.common import OneLineCommand, fail, percent
from pdscaler.models.migration import SOFTWARE_PREP_SECONDS
from pdscaler.sim.compare import KNOWN, Comparison, compare, parse_policies
from pdscaler.sim.engine import QUEUE_DISCIPLINES, EngineParams
from pdscaler.sim.loop import LoopConfig
from pdscaler.sim.plot import render_png
from pdscaler.sim.profiles import with_measured_profile
from pdscaler.sim.setup import DECODE_PRIOR_TPS, PREFILL_PRIOR_TPS, sim_spec
from pdscaler.sim.traces import Trace, load_trace, scale_rate
from pdscaler.types import FlipOptions

#: Console width when stdout is not a terminal (rich would assume 80 and wrap the table).
WIDE = 132


def _positive(name: str, value: float) -> float:
    if not value > 0:
        fail(f"{name} must be > 0, got {value:g}")
    return value


def load(path: Path, rate_scale: float, duration: float | None, seed: int) -> Trace:
    """The trace to replay: parsed, cut to ``duration`` seconds, rate-scaled."""
    if not path.is_file():
        fail(f"--trace {path}: no such file")
    try:
        trace = load_trace(path)
    except (ValueError, OSError) as err:
        fail(f"--trace {path}: {err}")
    if duration is not None and duration < trace.span:
        trace = trace.window(0.0, duration)
        if len(trace) == 0:
            fail(f"--duration {duration:g}: no request in the first {duration:g} s")
    return scale_rate(trace, rate_scale, seed=seed)


def _seconds(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    if value == float("inf"):
        return "never"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def table(comparison: Comparison) -> Table:
    """The comparison as a rich table; the oracle and work floor as the last rows."""
    data = comparison.to_json()
    oracle_h = comparison.oracle.gpu_hours
    front = set(data["pareto_front"])
    out = Table(title=f"{comparison.trace.name}: {len(comparison.trace):,} requests")
    for col in (
        "policy",
        "SLO met",
        "after 5 min",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "GPU-h",
        "x oracle",
        "actions",
        "reversals",
    ):
        out.add_column(col, justify="left" if col == "policy" else "right", no_wrap=col == "policy")
    for s in comparison.summaries:
        name = f"{s.policy} *" if s.policy in front else s.policy
        out.add_row(
            name,
            percent(s.slo_attainment),
            percent(s.slo_attainment_settled),
            _seconds(s.ttft_p50_s),
            _seconds(s.ttft_p99_s),
            _seconds(s.tpot_p50_s),
            _seconds(s.tpot_p99_s),
            f"{s.gpu_hours:.2f}",
            f"{s.gpu_hours / oracle_h:.2f}" if oracle_h else "-",
            str(s.scale_actions),
            str(s.reversals),
        )
    o = comparison.oracle
    out.add_row(
        "oracle (SLO-feasible)",
        percent(o.attainment),
        "-",
        *["-"] * 4,
        f"{oracle_h:.2f}",
        "1.00",
        "-",
        "-",
    )
    for label, hours in (
        ("lower bound", comparison.lower_bound.gpu_hours),
        ("work floor", comparison.work_floor_gpu_hours),
    ):
        ratio = f"{hours / oracle_h:.2f}" if oracle_h else "-"
        out.add_row(label, *["-"] * 6, f"{hours:.2f}", ratio, "-", "-")
    out.caption = (
        "* on the Pareto front (SLO met vs GPU-hours); after 5 min: SLO met by the requests "
        "arriving 5 minutes or more into the replay (the start, pools sized for the first "
        "two minutes' mean and metric windows empty, left out); feasibility ceiling "
        f"{percent(comparison.feasibility_ceiling)} (requests that fit the SLO alone)"
        + _unservable(comparison)
    )
    return out


def _unservable(comparison: Comparison) -> str:
    """``; 12 requests never servable (...)`` when the trace has any (the same for every
    policy: it depends on the requests and the engine only), else nothing."""
    n = max((s.unservable for s in comparison.summaries), default=0)
    if not n:
        return ""
    return (
        f"; {n:,} requests never servable (prompt + output > one decode replica's KV: "
        "answered with an error on arrival, counted as misses, never queued)"
    )


def cmd_simulate(
    trace: Annotated[
        Path, typer.Option("--trace", help="Azure CSV or Mooncake JSONL request trace.")
    ],
    rate_scale: Annotated[
        float, typer.Option(help="Multiply the request rate (not the time axis).")
    ] = 1.0,
    startup: Annotated[float, typer.Option(help="Replica start-up time, seconds.")] = 60.0,
    policy: Annotated[
        str, typer.Option(help=f"all, or a comma list of: {', '.join(KNOWN)}.")
    ] = "all",
    ttft: Annotated[float, typer.Option(help="TTFT SLO, seconds.")] = 2.0,
    ttft_slo_per_token: Annotated[
        float,
        typer.Option(help="Length-aware TTFT SLO: seconds added per prompt token (scoring)."),
    ] = 0.0,
    tpot: Annotated[float, typer.Option(help="TPOT SLO, seconds.")] = 0.05,
    slo_percentile: Annotated[
        float, typer.Option(help="Percentile the policy holds the SLOs at (0-1).")
    ] = 0.99,
    recovery: Annotated[float, typer.Option(help="SLO recovery deadline, seconds.")] = 60.0,
    prefill_tps: Annotated[
        float, typer.Option(help="Declared (prior) prefill tokens/s per replica.")
    ] = PREFILL_PRIOR_TPS,
    decode_tps: Annotated[
        float, typer.Option(help="Declared (prior) decode tokens/s per replica.")
    ] = DECODE_PRIOR_TPS,
    true_prefill_tps: Annotated[
        float, typer.Option(help="The engine's real prefill tokens/s per replica.")
    ] = EngineParams().prefill_tps,
    true_decode_speed: Annotated[
        float, typer.Option(help="Multiply the engine's decode speed (1 = calibrated).")
    ] = 1.0,
    queue: Annotated[
        str,
        typer.Option(
            help="Queue discipline of the simulated engine, for every policy: fcfs, or "
            "deadline (a request that can no longer meet its TTFT yields to one that can)."
        ),
    ] = "fcfs",
    profile: Annotated[
        bool,
        typer.Option(
            "--profile/--no-profile",
            help="Give pdscaler the engine's measured capacity profile (what a team measures "
            "before deploying, docs/models.md 2d), or size with the constant priors alone.",
        ),
    ] = True,
    role_flips: Annotated[
        bool,
        typer.Option(
            "--role-flips/--no-role-flips",
            help="Let pdscaler move ready replicas between the pools by a role change "
            "(both pools on the same hardware, the engine's KV connector in both roles; "
            "docs/models.md 5a); the operator does the same live with spec.scaling.roleFlips.",
        ),
    ] = False,
    reconfigure: Annotated[
        float,
        typer.Option(
            help="The simulated engine's role change time, seconds, from a replica empty "
            "to serving; pdscaler plans with the model's floor (docs/models.md 5) whatever "
            "this is, as it would live."
        ),
    ] = SOFTWARE_PREP_SECONDS,
    utilization: Annotated[float, typer.Option(help="Target utilisation of both pools.")] = 0.7,
    max_replicas: Annotated[int, typer.Option(help="Max replicas per pool.")] = 64,
    interval: Annotated[str, typer.Option(help="Scaling interval (duration).")] = "15s",
    duration: Annotated[
        float | None, typer.Option(help="Replay only the first N seconds of the trace.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed (rate scaling, start-up jitter).")] = 0,
    out: Annotated[Path, typer.Option(help="Write the JSON result here.")] = Path(
        "pdscaler-simulate.json"
    ),
    plot: Annotated[Path, typer.Option(help="Write the PNG plot here.")] = Path(
        "pdscaler-simulate.png"
    ),
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Do not draw the plot.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the JSON result instead of the table.")
    ] = False,
) -> None:
    """Replay a trace against pdscaler and the baselines; compare SLO and GPU-hours."""
    for name, value in (
        ("--rate-scale", rate_scale),
        ("--startup", startup),
        ("--true-prefill-tps", true_prefill_tps),
        ("--true-decode-speed", true_decode_speed),
    ):
        _positive(name, value)
    if duration is not None:
        _positive("--duration", duration)
    if not 0 <= reconfigure < math.inf:
        fail(f"--reconfigure must be a finite number of seconds >= 0, got {reconfigure:g}")
    if queue not in QUEUE_DISCIPLINES:
        fail(f"--queue must be one of {', '.join(QUEUE_DISCIPLINES)}, got {queue!r}")
    if not ttft_slo_per_token >= 0:
        fail(f"--ttft-slo-per-token must be >= 0, got {ttft_slo_per_token:g}")
    try:
        names = parse_policies(policy)
    except ValueError as err:
        fail(f"--policy: {err}")
    try:
        spec = sim_spec(
            startup_s=startup,
            ttft_s=ttft,
            tpot_s=tpot,
            percentile=slo_percentile,
            recovery_s=recovery,
            prefill_tps=prefill_tps,
            decode_tps=decode_tps,
            utilization=utilization,
            max_replicas=max_replicas,
            interval=interval,
        )
    except pydantic.ValidationError as err:
        first = err.errors()[0]
        fail(f"invalid value for {'.'.join(str(p) for p in first['loc'])}: {first['msg']}")
    base = EngineParams()
    params = EngineParams(
        prefill_tps=true_prefill_tps,
        decode_step_base_s=base.decode_step_base_s / true_decode_speed,
        decode_step_per_seq_s=base.decode_step_per_seq_s / true_decode_speed,
        decode_step_per_kv_token_s=base.decode_step_per_kv_token_s / true_decode_speed,
        queue_discipline=queue,
        ttft_deadline_s=ttft,
    )
    if profile:
        spec = with_measured_profile(spec, params)
    data = load(trace, rate_scale, duration, seed)
    cfg = LoopConfig(
        spec=spec,
        params=params,
        startup_s=startup,
        seed=seed,
        ttft_per_token_s=ttft_slo_per_token,
        reconfigure_s=reconfigure,
        flips=FlipOptions() if role_flips else None,
    )
    err_console = Console(stderr=True)
    started = time.perf_counter()
    with Progress(
        TextColumn("{task.description:>14}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        tasks = {n: bar.add_task(n, total=1.0) for n in names}
        # the tuned baselines and the oracle replay many candidates before their run
        result = compare(
            data,
            names,
            cfg,
            progress=lambda n, f: bar.update(tasks[n], completed=f),
            meta={
                "rate_scale": rate_scale,
                "source": str(trace),
                "profile": profile,
                "role_flips": role_flips,
                "reconfigure_seconds": reconfigure,
            },
        )
    elapsed = time.perf_counter() - started
    doc: dict[str, Any] = result.to_json()
    doc["meta"]["replay_seconds"] = round(elapsed, 3)
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    if not no_plot:
        plot.write_bytes(render_png(data, result.runs, result.oracle.schedule))
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=WIDE)
    console.print(table(result))
    hours = data.span / 3600.0
    console.print(
        f"replayed {hours:.2f} h of trace ({len(data):,} requests) x {len(names)} "
        f"policies in {elapsed:.1f} s; JSON: {out}" + ("" if no_plot else f"; plot: {plot}")
    )


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to the ``pdscaler`` app."""
    app.command("simulate", cls=OneLineCommand)(cmd_simulate)
