"""``pdscaler explain NAME [-n NS]``: the last decision of a PDDeployment, for a person.

Owns: reading one PDDeployment's status (through ``kube.py``) and printing its last
decision with the inputs the policy saw, the models' numbers and the reason, plus the
pools and the conditions. Must not: decide or recompute anything (it prints what the
operator published), or write to the cluster.

    $ pdscaler explain chat -n serving
    chat (serving)  version v0.11.0  mode Auto
    last decision   ScaledDecode at 2025-01-01T10:00:15Z
      Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s
    inputs          R 20 req/s, L_p 2,000, L_d 500 tokens; queues P 0, D 12;
                    TTFT 850ms, TPOT 62ms
    model           N_P 19.05, N_D 17.86, ratio 1.07, drain 38s, T_s 60s, ...
    pools           prefill 20/20 ready/desired, decode 4/6
    conditions      Ready=True (Serving), MetricsAvailable=True (MetricsOK), ...
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from pdscaler import status
from pdscaler.cli.common import OneLineCommand, fail, num
from pdscaler.spec import PDDeploymentStatus
from pdscaler.types import ConditionType

LABEL_WIDTH = 16


def _line(label: str, text: str) -> str:
    return f"{label:<{LABEL_WIDTH}}{text}"


def _secs(value: float | None) -> str:
    return status.duration_text(value) or "unknown"


def _n(value: float | None, digits: int = 2) -> str:
    return "unknown" if value is None else num(value, digits)


def render(pdd: dict[str, Any]) -> str:
    """The explanation of one PDDeployment object (as the API returns it)."""
    meta = pdd.get("metadata") or {}
    spec = pdd.get("spec") or {}
    st = status.parse_status(pdd.get("status")) or PDDeploymentStatus()
    mode = (spec.get("scaling") or {}).get("mode", "Auto")
    lines = [
        f"{meta.get('name')} ({meta.get('namespace')})  version "
        f"{st.active_version or 'none yet'}  mode {mode}"
    ]
    ld = st.last_decision
    if ld is None:
        lines.append(_line("last decision", "none yet (the operator has not ticked)"))
    else:
        when = ld.time.strftime("%Y-%m-%dT%H:%M:%SZ") if ld.time else "?"
        pool = f" ({ld.pool})" if ld.pool else ""
        lines.append(_line("last decision", f"{ld.action}{pool} at {when}"))
        lines.append(" " * 2 + (ld.message or ""))
        i = ld.inputs
        if i is not None:
            lines.append(
                _line(
                    "inputs",
                    f"R {_n(i.request_rate)} req/s, L_p {_n(i.prompt_tokens, 0)}, "
                    f"L_d {_n(i.output_tokens, 0)} tokens; queues P {_n(i.prefill_queue, 1)}, "
                    f"D {_n(i.decode_queue, 1)}; TTFT {_secs(i.ttft_seconds)}, "
                    f"TPOT {_secs(i.tpot_seconds)}",
                )
            )
        else:
            lines.append(_line("inputs", "none (Prometheus did not answer)"))
        m = ld.model
        if m is not None:
            lines.append(
                _line(
                    "model",
                    f"N_P {_n(m.n_prefill)}, N_D {_n(m.n_decode)}, ratio {_n(m.ratio)}, "
                    f"drain {_secs(m.drain_seconds)}, T_s {_secs(m.startup_seconds)}, "
                    f"P_prefill {_n(m.prefill_tokens_per_second, 0)} tok/s, "
                    f"P_decode {_n(m.decode_tokens_per_second, 0)} tok/s, "
                    f"forecast R {_n(m.forecast_rate)} req/s",
                )
            )
    pools = []
    for role, p in (("prefill", st.prefill), ("decode", st.decode)):
        if p is not None:
            pools.append(f"{role} {p.ready_replicas}/{p.desired_replicas} ready/desired")
    lines.append(_line("pools", ", ".join(pools) or "none yet"))
    conds = [f"{c.type}={c.status} ({c.reason})" for c in st.conditions or []]
    lines.append(_line("conditions", ", ".join(conds) or "none yet"))
    for c in st.conditions or []:
        if c.status == "True" and c.type in (
            ConditionType.CAPACITY_LIMITED,
            ConditionType.DEADLINE_INFEASIBLE,
        ):
            lines.append(_line("", f"{c.type}: {c.message}"))
        if c.type == ConditionType.METRICS_AVAILABLE and c.status == "False":
            lines.append(_line("", f"{c.type}: {c.message}"))
    return "\n".join(lines)


def cmd_explain(
    name: Annotated[str, typer.Argument(help="The PDDeployment's name.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Its namespace.")] = (
        "default"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="The raw status as JSON.")] = False,
) -> None:
    """Print the last decision of a PDDeployment: inputs, model outputs, reason."""
    from pdscaler.kube import Kube, KubeError, load_api_client

    try:
        pdd = Kube(load_api_client()).get_pdd(namespace, name)
    except KubeError as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(1) from None
    except Exception as err:  # no kubeconfig, cluster unreachable: one line, exit 1
        typer.echo(f"Error: cannot reach the cluster: {' '.join(str(err).split())}", err=True)
        raise typer.Exit(1) from None
    if pdd is None:
        fail(f"PDDeployment {namespace}/{name} not found")
    if as_json:
        typer.echo(json.dumps(pdd.get("status") or {}, indent=2, sort_keys=True))
        return
    typer.echo(render(pdd))


def register(app: typer.Typer) -> None:
    """Add ``explain`` to the ``pdscaler`` app."""
    app.command("explain", cls=OneLineCommand)(cmd_explain)
