"""``pdscaler healthcheck``: the chart's helm test, against the operator's real
``/healthz`` server (``telemetry.MetricsServer``): exit 0 while the loop beats, 1 when
it answers 503 or nothing answers, 2 for a URL that is not http(s)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from pdscaler.cli import main
from pdscaler.telemetry import MetricsServer, Telemetry


@pytest.fixture
def server() -> Iterator[tuple[str, list[bool]]]:
    healthy = [True]
    srv = MetricsServer(Telemetry(), 0, host="127.0.0.1", healthy=lambda: healthy[0]).start()
    try:
        yield f"http://127.0.0.1:{srv.port}", healthy
    finally:
        srv.stop()


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return int(exit_info.value.code or 0)


def test_a_beating_operator_passes_and_a_stalled_one_fails(
    server: tuple[str, list[bool]], capsys: pytest.CaptureFixture[str]
) -> None:
    base, healthy = server
    assert run(["healthcheck", f"{base}/healthz"]) == 0
    assert capsys.readouterr().out.strip() == "200 ok"
    healthy[0] = False
    assert run(["healthcheck", f"{base}/healthz"]) == 1
    assert capsys.readouterr().err.strip() == "Error: 503 unhealthy"
    assert run(["healthcheck", f"{base}/nosuch"]) == 1  # a 404 is not healthy either
    assert "404" in capsys.readouterr().err


def test_nothing_listening_fails_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago: refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert run(["healthcheck", f"http://127.0.0.1:{port}/healthz", "--timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: http://127.0.0.1:")
    assert "refused" in err
    assert len(err.strip().splitlines()) == 1


def test_a_url_that_is_not_http_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["healthcheck", "file:///etc/passwd"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err
