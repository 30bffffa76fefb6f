"""``pdscaler get [NAME] [-n NS | -A] [-o json|yaml]`` (``kubectl pdd get``): the
PDDeployments of a namespace (or of all), one line each, or as objects.

Owns: the table (the CRD's printer columns: Ready, Version, P and D ready/desired,
Ratio, TTFT, TPOT, the last action, and the age, kubectl-style ``45s``/``12m``/
``3h``/``2d``) and the objects with ``-o`` (one object for NAME, else a ``v1`` ``List``
as kubectl prints; ``metadata.managedFields`` left out, as kubectl does). Must not:
write to the cluster.

    $ pdscaler get -n serving
    NAME  READY  VERSION  P      D    RATIO  TTFT   TPOT  LAST ACTION   AGE
    chat  True   v1       20/20  4/6  1:0.3  850ms  62ms  ScaledDecode  3h
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from pdscaler.cli.common import FormatOpt, OneLineCommand, dump, fail
from pdscaler.cli.explain import (
    ContextOpt,
    KubeconfigOpt,
    NamespaceOpt,
    connect,
    default_namespace,
    read_pdd,
    reading,
)

COLUMNS = ("NAME", "READY", "VERSION", "P", "D", "RATIO", "TTFT", "TPOT", "LAST ACTION", "AGE")


def age(created: str | None, now: datetime) -> str:
    """kubectl's short age: ``"2025-01-01T00:00:00Z"`` at 03:10 -> ``"3h"``; 45 s ->
    ``"45s"``; 12 min -> ``"12m"``; 2 days -> ``"2d"``; unknown -> ``"<unknown>"``."""
    if not created:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def row(pdd: dict[str, Any], now: datetime) -> list[str]:
    """One PDDeployment as the table's cells (``COLUMNS``; missing: ``-``)."""
    meta = pdd.get("metadata") or {}
    st = pdd.get("status") or {}
    ready = next(
        (c.get("status") for c in st.get("conditions") or [] if c.get("type") == "Ready"), None
    )
    cells = [
        meta.get("name"),
        ready,
        st.get("activeVersion"),
        (st.get("prefill") or {}).get("summary"),
        (st.get("decode") or {}).get("summary"),
        st.get("ratio"),
        st.get("ttft"),
        st.get("tpot"),
        (st.get("lastDecision") or {}).get("action"),
    ]
    return [str(c) if c not in (None, "") else "-" for c in cells] + [
        age(meta.get("creationTimestamp"), now)
    ]


def table(pdds: list[dict[str, Any]], all_namespaces: bool, now: datetime) -> str:
    """The PDDeployments as kubectl's aligned columns (NAMESPACE first with ``-A``),
    sorted by namespace and name."""
    header = ["NAMESPACE", *COLUMNS] if all_namespaces else list(COLUMNS)
    ordered = sorted(
        pdds,
        key=lambda p: ((p.get("metadata") or {}).get("namespace") or "", _name(p)),
    )
    rows = [
        ([str((p.get("metadata") or {}).get("namespace"))] if all_namespaces else []) + row(p, now)
        for p in ordered
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines)


def _name(pdd: dict[str, Any]) -> str:
    return str((pdd.get("metadata") or {}).get("name") or "")


def as_object(pdd: dict[str, Any]) -> dict[str, Any]:
    """``pdd`` without ``metadata.managedFields`` (kubectl's default)."""
    out = copy.deepcopy(pdd)
    (out.get("metadata") or {}).pop("managedFields", None)
    return out


def as_list(pdds: list[dict[str, Any]]) -> dict[str, Any]:
    """A kubectl ``List`` of the objects, sorted by namespace and name."""
    items = sorted(
        (as_object(p) for p in pdds),
        key=lambda p: ((p.get("metadata") or {}).get("namespace") or "", _name(p)),
    )
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def cmd_get(
    name: Annotated[
        str | None, typer.Argument(help="One PDDeployment (default: every one).")
    ] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")
    ] = False,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    output: FormatOpt = None,
) -> None:
    """List PDDeployments: readiness, pools, ratio, latencies, the last action."""
    if all_namespaces and (namespace or name):
        fail("--all-namespaces goes without a NAME or --namespace")
    ns = None if all_namespaces else namespace or default_namespace(kubeconfig, context)
    if name is not None:
        pdds = [read_pdd(name, ns, kubeconfig, context)]
    else:
        kube = connect(kubeconfig, context)
        pdds = reading(lambda: kube.list_pdds(ns))
    if output is not None:
        typer.echo(dump(as_object(pdds[0]) if name is not None else as_list(pdds), output))
        return
    if not pdds:
        where = "any namespace" if all_namespaces else f"namespace {ns}"
        typer.echo(f"No PDDeployments found in {where}.", err=True)
        return
    typer.echo(table(pdds, all_namespaces, datetime.now(UTC)))


def register(app: typer.Typer) -> None:
    """Add ``get`` to an app (``pdscaler``, ``kubectl pdd``)."""
    app.command("get", cls=OneLineCommand)(cmd_get)
