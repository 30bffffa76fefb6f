"""``pdscaler healthcheck URL``: ask a pdscaler ``/healthz`` and exit by its answer.

Owns: one HTTP GET of ``URL`` (``http`` or ``https`` only), printing the status and the
body's first line, exit 0 on a 2xx answer and 1 on anything else (a non-2xx status, a
refused or timed-out connection, a bad certificate). It is the chart's ``helm test``
(charts/pdscaler/templates/tests/test-healthz.yaml runs it in the operator's own image,
whose entrypoint is ``pdscaler``), so it needs nothing but the standard library. It
honours ``http_proxy``/``https_proxy`` as urllib does. Must not: read more than 4 KiB of
the answer.

    $ pdscaler healthcheck http://pds-pdscaler-metrics.ops.svc:8080/healthz
    200 ok
    $ echo $?
    0
    $ pdscaler healthcheck http://127.0.0.1:1/healthz     # nothing listens there
    Error: http://127.0.0.1:1/healthz: <urlopen error [Errno 111] Connection refused>
    (exit code 1)
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Annotated

import typer

from pdscaler.cli.common import OneLineCommand, fail

#: The most of the answer read (the operator's /healthz is a few bytes).
MAX_BODY_BYTES = 4096


def check(url: str, timeout: float) -> tuple[bool, str]:
    """(healthy?, one line saying why) for one GET of ``url``: healthy on 2xx.

    ``check("http://127.0.0.1:8080/healthz", 10)`` -> ``(True, "200 ok")`` against a
    beating operator; ``(False, "503 unhealthy")`` against a stalled one.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = resp.read(MAX_BODY_BYTES).decode(errors="replace").strip()
            status = int(resp.status)
    except urllib.error.HTTPError as err:
        body = err.read(MAX_BODY_BYTES).decode(errors="replace").strip()
        return False, f"{err.code} {body.splitlines()[0] if body else err.reason}"
    except (OSError, ValueError) as err:
        return False, f"{url}: {err}"
    line = body.splitlines()[0] if body else ""
    return 200 <= status < 300, f"{status} {line}".strip()


def register(app: typer.Typer) -> None:
    """Add ``healthcheck`` to ``app``."""

    @app.command(
        "healthcheck",
        cls=OneLineCommand,
        help="GET a pdscaler /healthz URL; exit 0 on a 2xx answer, 1 otherwise "
        "(the chart's helm test).",
    )
    def healthcheck(
        url: Annotated[str, typer.Argument(help="http(s)://host:port/healthz")],
        timeout: Annotated[
            float, typer.Option(help="Seconds to wait for the answer.", min=0.1)
        ] = 10.0,
    ) -> None:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            fail(f"healthcheck: {url!r} is not an http(s) URL")
        healthy, line = check(url, timeout)
        if not healthy:
            typer.echo(f"Error: {line}", err=True)
            raise typer.Exit(1)
        typer.echo(line)
