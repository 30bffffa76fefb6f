"""``pdscaler explain NAME [-n NS] [--kubeconfig F] [--context C] [-o json|yaml]``: the
last decision of a PDDeployment, for a person (``-o``: the status it reads).

Owns: reading PDDeployments (through ``kube``: ``read_pdd``, the options and errors
``get`` and ``why-not-scaling`` share) and printing one's last decision with the
inputs the policy saw, the models' numbers and the reason, plus the pools and the
conditions; the namespace default, as kubectl's: ``-n``, else the
namespace of the kubeconfig context used (``--context``, else current-context), else
the pod's own namespace in a cluster, else ``default``. Must not: decide or recompute
anything (it prints what the operator published), or write to the cluster.

    $ pdscaler explain chat -n serving
    chat (serving)  version v0.11.0  mode Auto
    last decision   ScaledDecode at 2025-01-01T10:00:15Z
      Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s
    inputs          R 20 req/s, L_p 2,000, L_d 500 tokens; queues P 0, D 12;
                    TTFT 850ms, TPOT 62ms
    model           N_P 19.05, N_D 17.86, ratio 1.07, drain 38s, T_s 60s, ...
    pools           prefill 20/20 ready/desired, decode 4/6
    conditions      Ready=True (Serving), MetricsAvailable=True (MetricsOK), ...
                    MetricsAvailable: load shape known; R = arriving requests/s
                    (vllm_router_processed_requests_total / 2, cell routers)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import yaml

from pdscaler import status
from pdscaler.cli.common import FormatOpt, OneLineCommand, dump, fail, num, output_format
from pdscaler.spec import PDDeploymentStatus
from pdscaler.types import ConditionType

if TYPE_CHECKING:
    from pdscaler.kube import Kube

T = TypeVar("T")
LABEL_WIDTH = 16
#: Where a pod's ServiceAccount namespace is mounted (kubectl's in-cluster default).
POD_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    """``--kubeconfig``, else the files of ``$KUBECONFIG`` (``:``-separated), else
    ``~/.kube/config``."""
    if kubeconfig:
        return [Path(kubeconfig)]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def default_namespace(
    kubeconfig: str | None,
    context: str | None,
    pod_namespace_file: Path = POD_NAMESPACE_FILE,
) -> str:
    """The namespace kubectl would use without ``-n``: the context's ``namespace``
    (the first file naming the current-context or a context wins, like kubectl's
    merge), else the pod's own namespace when running in a cluster without a
    kubeconfig, else ``default``. Example: a kubeconfig whose current-context ``lab``
    has ``namespace: serving`` gives ``serving``."""
    docs: list[dict[str, Any]] = []
    for path in kubeconfig_paths(kubeconfig):
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append(doc)
    if not docs and kubeconfig is None and context is None:
        try:
            return pod_namespace_file.read_text().strip() or "default"
        except OSError:
            return "default"
    name = context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    for doc in docs:
        for entry in doc.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name:
                namespace = (entry.get("context") or {}).get("namespace")
                return str(namespace) if namespace else "default"
    return "default"


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
        lines.append(
            "  is its namespace one the operator watches (the chart's watchNamespaces), and "
            "is the operator running? (docs/troubleshooting.md, where to look first)"
        )
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
        if c.type == ConditionType.METRICS_AVAILABLE:  # False: why; True: what R counts
            lines.append(_line("", f"{c.type}: {c.message}"))
    return "\n".join(lines)


NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Its namespace (default: the kubeconfig context's, else default).",
        show_default=False,
    ),
]
KubeconfigOpt = Annotated[
    str | None,
    typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG)."),
]
ContextOpt = Annotated[
    str | None,
    typer.Option("--context", help="Kubeconfig context (default: current-context)."),
]


def connect(kubeconfig: str | None, context: str | None) -> Kube:
    """A client for the kubeconfig's cluster; exit 2 for a missing ``--kubeconfig``, 1
    for an unknown context."""
    from pdscaler.kube import Kube, load_api_client

    if kubeconfig and not os.path.isfile(kubeconfig):
        fail(f"--kubeconfig {kubeconfig}: no such file")
    return reading(lambda: Kube(load_api_client(kubeconfig, context)))


def reading(call: Callable[[], T]) -> T:
    """Run a read of the cluster: a refusal or an unreachable cluster is one line on
    stderr and exit 1."""
    from pdscaler.kube import KubeError

    try:
        return call()
    except KubeError as err:
        typer.echo(f"Error: {err}", err=True)
        raise typer.Exit(1) from None
    except Exception as err:  # no kubeconfig, unknown context, cluster unreachable
        typer.echo(f"Error: cannot reach the cluster: {' '.join(str(err).split())}", err=True)
        raise typer.Exit(1) from None


def read_pdd(
    name: str, namespace: str | None, kubeconfig: str | None, context: str | None
) -> dict[str, Any]:
    """PDDeployment ``name`` as the API server returns it (exit 2 when it does not
    exist), in ``namespace`` or kubectl's default namespace."""
    ns = namespace or default_namespace(kubeconfig, context)
    kube = connect(kubeconfig, context)
    pdd = reading(lambda: kube.get_pdd(ns, name))
    if pdd is None:
        fail(f"PDDeployment {ns}/{name} not found")
    return pdd


def cmd_explain(
    name: Annotated[str, typer.Argument(help="The PDDeployment's name.")],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="The raw status as JSON.")] = False,
    output: FormatOpt = None,
) -> None:
    """Print the last decision of a PDDeployment: inputs, model outputs, reason."""
    pdd = read_pdd(name, namespace, kubeconfig, context)
    fmt = output_format(output, as_json)
    if fmt is not None:  # the status the explanation reads, as published
        typer.echo(dump(pdd.get("status") or {}, fmt))
        return
    typer.echo(render(pdd))


def register(app: typer.Typer) -> None:
    """Add ``explain`` to the ``pdscaler`` app."""
    app.command("explain", cls=OneLineCommand)(cmd_explain)
