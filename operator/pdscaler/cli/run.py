"""``pdscaler run``: start the operator (kopf, the handlers of ``pdscaler.handlers``).

Owns: the run options and turning them into a kopf run: watched namespaces
(``--namespace``, repeatable, or ``--all-namespaces``), standalone vs leader election
over a Lease (``--standalone`` / ``--leader-elect`` with ``--lease-name``,
``--lease-namespace``, ``--lease-duration``, ``--renew-deadline``, ``--retry-period``,
``--identity``; each also from a ``PDSCALER_*`` variable), the API client's rate limit
(``--kube-qps``, ``--kube-burst``), the metrics and liveness
endpoint (``--metrics-port``, 0 = off, on ``--metrics-address``, loopback unless
told), the log format, and the kubeconfig (``--kubeconfig``, else ``$KUBECONFIG``, else
in-cluster config inside a pod, else ``~/.kube/config``). Must not: hold operator logic.

    pdscaler run --namespace serving --metrics-port 8080
    pdscaler run --all-namespaces --leader-elect --lease-namespace pdscaler-system \
        --metrics-address 0.0.0.0
    python -m pdscaler run -n serving --log-format json

Bad arguments (neither or both of ``--namespace``/``--all-namespaces``, an unknown log
format, lease timings that break leaseDuration > renewDeadline > 1.2 x retryPeriod) are
one line on stderr with exit code 2.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated

import kopf
import typer
from kopf._core.actions.loggers import ObjectJsonFormatter

from pdscaler import lease, logcontext
from pdscaler.cli.common import OneLineCommand, fail
from pdscaler.kube import DEFAULT_BURST, DEFAULT_QPS

DEFAULT_METRICS_PORT = 8080
DEFAULT_METRICS_BIND = "127.0.0.1"
DEFAULT_LEASE_NAME = "pdscaler-leader"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LogFormat(StrEnum):
    plain = "plain"
    full = "full"
    json = "json"


#: python-json-logger's reserved record attributes (kopf's JSON formatter adds its own).
_JSON_RESERVED = (*logging.makeLogRecord({}).__dict__, "message", "asctime")

_KOPF_FORMATS = {
    LogFormat.plain: kopf.LogFormat.PLAIN,
    LogFormat.full: kopf.LogFormat.FULL,
    LogFormat.json: kopf.LogFormat.JSON,
}


class TickJsonFormatter(ObjectJsonFormatter):
    """kopf's JSON log lines plus the structured ``namespace``, ``name`` and ``tick`` of
    the tick a line was logged in (``logcontext.json_fields``)."""

    def __init__(self) -> None:
        super().__init__(reserved_attrs=[*_JSON_RESERVED, logcontext.RECORD_ATTR])

    def add_fields(
        self,
        log_record: dict[str, object],
        record: logging.LogRecord,
        message_dict: dict[str, object],
    ) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record.update(logcontext.json_fields(record))


def configure_logging(log_format: LogFormat, verbose: bool) -> list[logging.Handler]:
    """kopf's logging setup (the root handler, ``log_format``, INFO or DEBUG), with the
    tick fields stamped on every record its handler emits and, in JSON, written as
    fields. Returns the handlers kopf added."""
    root = logging.getLogger()
    before = list(root.handlers)
    kopf.configure(verbose=verbose, debug=verbose, log_format=_KOPF_FORMATS[log_format])
    added = [h for h in root.handlers if h not in before]
    for handler in added:
        handler.addFilter(logcontext.TickFields())
        if log_format is LogFormat.json:
            handler.setFormatter(TickJsonFormatter())
    return added


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
            "--standalone/--leader-elect",
            envvar="PDSCALER_STANDALONE",
            help="Run alone (default) or elect one writing replica through a Lease.",
        ),
    ] = True,
    lease_name: Annotated[
        str,
        typer.Option("--lease-name", envvar="PDSCALER_LEASE_NAME", help="The Lease's name."),
    ] = DEFAULT_LEASE_NAME,
    lease_namespace: Annotated[
        str | None,
        typer.Option(
            "--lease-namespace",
            envvar=["PDSCALER_LEASE_NAMESPACE", "POD_NAMESPACE"],
            help="The Lease's namespace (default: the pod's, else the first --namespace, "
            "else default).",
        ),
    ] = None,
    lease_duration: Annotated[
        float,
        typer.Option(
            "--lease-duration",
            envvar="PDSCALER_LEASE_DURATION",
            help="Seconds a follower waits before taking an unrenewed Lease.",
        ),
    ] = 15.0,
    renew_deadline: Annotated[
        float,
        typer.Option(
            "--renew-deadline",
            envvar="PDSCALER_RENEW_DEADLINE",
            help="Seconds after its last renewal a leader stops writing.",
        ),
    ] = 10.0,
    retry_period: Annotated[
        float,
        typer.Option(
            "--retry-period",
            envvar="PDSCALER_RETRY_PERIOD",
            help="Seconds between two Lease rounds.",
        ),
    ] = 2.0,
    identity: Annotated[
        str | None,
        typer.Option(
            "--identity",
            envvar=["PDSCALER_IDENTITY", "POD_NAME"],
            help="The Lease holder identity (default: hostname_pid).",
        ),
    ] = None,
    metrics_port: Annotated[
        int,
        typer.Option(
            "--metrics-port", min=0, max=65535, help="Port of /metrics and /healthz (0: off)."
        ),
    ] = DEFAULT_METRICS_PORT,
    metrics_bind_address: Annotated[
        str,
        typer.Option(
            "--metrics-address",
            envvar="PDSCALER_METRICS_ADDRESS",
            help="Address of /metrics and /healthz (0.0.0.0: every interface).",
        ),
    ] = DEFAULT_METRICS_BIND,
    log_format: Annotated[
        LogFormat, typer.Option("--log-format", case_sensitive=False, help="Log line format.")
    ] = LogFormat.full,
    kubeconfig: Annotated[
        str | None, typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG).")
    ] = None,
    kube_qps: Annotated[
        float,
        typer.Option(
            "--kube-qps",
            min=0.0,
            envvar="PDSCALER_KUBE_QPS",
            help="API requests a second the ticks may make (token bucket; 0: no limit).",
        ),
    ] = DEFAULT_QPS,
    kube_burst: Annotated[
        int,
        typer.Option(
            "--kube-burst",
            min=1,
            envvar="PDSCALER_KUBE_BURST",
            help="API requests the ticks may make at once above --kube-qps.",
        ),
    ] = DEFAULT_BURST,
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
    os.environ["PDSCALER_KUBE_QPS"] = f"{kube_qps:g}"  # read by Runtime.from_environment
    os.environ["PDSCALER_KUBE_BURST"] = str(kube_burst)
    try:
        timings = lease.Timings(lease_duration, renew_deadline, retry_period)
    except ValueError as err:
        fail(str(err))
    configure_logging(log_format, verbose)
    election = None
    if not standalone:
        election = Election(
            name=lease_name,
            namespace=lease_namespace or _default_lease_namespace(namespaces),
            identity=identity or f"{socket.gethostname()}_{os.getpid()}",
            timings=timings,
        )
    run_operator(
        namespaces=namespaces,
        election=election,
        metrics_port=metrics_port,
        metrics_host=metrics_bind_address,
    )


@dataclass(frozen=True)
class Election:
    """Where and as whom to take part in leader election."""

    name: str
    namespace: str
    identity: str
    timings: lease.Timings = field(default_factory=lease.Timings)


def _default_lease_namespace(namespaces: list[str]) -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            found = f.read().strip()
            if found:
                return found
    except OSError:
        pass
    return namespaces[0] if namespaces else "default"


def run_operator(
    *,
    namespaces: list[str],
    election: Election | None = None,
    metrics_port: int = DEFAULT_METRICS_PORT,
    metrics_host: str = DEFAULT_METRICS_BIND,
    stop_flag: threading.Event | None = None,
    ready_flag: threading.Event | None = None,
) -> None:
    """Run kopf with pdscaler's handlers until stopped (SIGTERM/SIGINT or ``stop_flag``).

    With ``election``, ticks write through a ``FencedKube`` (only while this replica
    holds the Lease) and the Lease is released at the end, after the ticks stopped."""
    from pdscaler import handlers, telemetry
    from pdscaler.kube import FencedKube
    from pdscaler.leader import Elector
    from pdscaler.runtime import Runtime

    runtime = Runtime.from_environment()
    elector = None
    if election is not None:
        elector = Elector(
            runtime.kube, election.namespace, election.name, election.identity, election.timings
        )
        plain = runtime.kube
        runtime.kube = FencedKube(
            plain.api,
            plain.audit,
            fence=elector.may_write,
            instance=election.identity,
            qps=plain.limiter.qps,
            burst=plain.limiter.burst,
            cache=plain.cache,
            term=elector.term,
        )
        runtime.kube.request_counts = elector.kube.request_counts  # one count for both
    handlers.install(runtime)
    handlers.install_leader(elector.may_write if elector is not None else None)
    health = handlers.health()
    audit = runtime.kube.audit
    runtime.telemetry.track_writes_sent(lambda: audit.count)
    if elector is not None:
        leading = elector.may_write
        runtime.telemetry.leader.set_function(lambda: 1.0 if leading() else 0.0)
    else:
        runtime.telemetry.leader.set(1.0)
    server = None
    if metrics_port:
        server = telemetry.MetricsServer(
            runtime.telemetry,
            metrics_port,
            host=metrics_host,
            healthy=lambda: health.alive(
                time.monotonic(), elector.facts() if elector is not None else None
            ),
        ).start()
        logging.getLogger("pdscaler").info(
            "metrics and /healthz on %s:%d", metrics_host, server.port
        )
    if elector is not None:
        elector.start()
    try:
        kopf.run(
            standalone=True,  # kopf's peering is not used: the Lease elects
            clusterwide=not namespaces,
            namespaces=namespaces,
            stop_flag=stop_flag,
            ready_flag=ready_flag,
        )
    finally:
        if elector is not None:
            elector.stop(release=True)
        handlers.install_leader(None)
        stop_caches = getattr(runtime.kube, "stop_caches", None)
        if stop_caches is not None:
            stop_caches()
        if server is not None:
            server.stop()


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``pdscaler`` app."""
    app.command("run", cls=OneLineCommand)(cmd_run)
