"""``pdscaler run``: start the operator (kopf, the handlers of ``pdscaler.handlers``).

Owns: the run options and turning them into a kopf run: watched namespaces
(``--namespace``, repeatable, or ``--all-namespaces``), standalone vs peering
(``--standalone`` / ``--peering [--peering-name N --priority P]``), the metrics and
liveness port (``--metrics-port``, 0 = off), the log format, and the kubeconfig
(``--kubeconfig``, else ``$KUBECONFIG``, else in-cluster config inside a pod, else
``~/.kube/config``). Must not: hold operator logic.

    pdscaler run --namespace serving --metrics-port 8080
    pdscaler run --all-namespaces --peering --peering-name pdscaler --priority 100
    python -m pdscaler run -n serving --log-format json

Bad arguments (neither or both of ``--namespace``/``--all-namespaces``, an unknown log
format) are one line on stderr with exit code 2.
"""

from __future__ import annotations

import logging
import os
import threading
from enum import StrEnum
from typing import Annotated

import kopf
import typer

from pdscaler.cli.common import OneLineCommand, fail

DEFAULT_METRICS_PORT = 8080


class LogFormat(StrEnum):
    plain = "plain"
    full = "full"
    json = "json"


_KOPF_FORMATS = {
    LogFormat.plain: kopf.LogFormat.PLAIN,
    LogFormat.full: kopf.LogFormat.FULL,
    LogFormat.json: kopf.LogFormat.JSON,
}


def cmd_run(
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Watch this namespace (repeatable)."),
    ] = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Watch every namespace.")
    ] = False,
    standalone: Annotated[
        bool,
        typer.Option(
            "--standalone/--peering",
            help="Run alone (default) or coordinate replicas through a kopf peering object.",
        ),
    ] = True,
    peering_name: Annotated[
        str, typer.Option("--peering-name", help="The kopf peering object's name.")
    ] = "pdscaler",
    priority: Annotated[
        int, typer.Option("--priority", help="Peering priority (highest acts).")
    ] = 0,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port", min=0, max=65535, help="Port of /metrics and /healthz (0: off)."
        ),
    ] = DEFAULT_METRICS_PORT,
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", case_sensitive=False, help="Log line format.")
    ] = LogFormat.full,
    kubeconfig: Annotated[
        str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logs.")] = False,
) -> None:
    """Start the operator against the current kubeconfig (in-cluster inside a pod)."""
    namespaces = list(namespace or [])
    if bool(namespaces) == all_namespaces:
        fail("pass either --namespace NS (repeatable) or --all-namespaces")
    if kubeconfig:
        if not os.path.isfile(kubeconfig):
            fail(f"--kubeconfig {kubeconfig}: no such file")
        os.environ["KUBECONFIG"] = kubeconfig
    kopf.configure(verbose=verbose, debug=verbose, log_format=_KOPF_FORMATS[log_format])
    run_operator(
        namespaces=namespaces,
        standalone=standalone,
        peering_name=peering_name,
        priority=priority,
        metrics_port=metrics_port,
    )


def run_operator(
    *,
    namespaces: list[str],
    standalone: bool = True,
    peering_name: str = "pdscaler",
    priority: int = 0,
    metrics_port: int = DEFAULT_METRICS_PORT,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run kopf with pdscaler's handlers until stopped (SIGTERM/SIGINT or ``stop_flag``)."""
    from pdscaler import handlers, reconcile, telemetry

    runtime = reconcile.Runtime.from_environment()
    handlers.install(runtime)
    server = None
    if metrics_port:
        server = telemetry.MetricsServer(runtime.telemetry, metrics_port).start()
        logging.getLogger("pdscaler").info("metrics and /healthz on port %d", server.port)
    try:
        kopf.run(
            standalone=standalone,
            peering_name=None if standalone else peering_name,
            priority=priority,
            clusterwide=not namespaces,
            namespaces=namespaces,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if server is not None:
            server.stop()


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``pdscaler`` app."""
    app.command("run", cls=OneLineCommand)(cmd_run)
