"""The overhead bench's fleet run with real series (issue 30, item 9), without a cluster:
the engines' stand-in (bench/overhead/exporter.py) serving pages over real sockets,
its steady series read back as the operator's queries read them, the figures as
numbers with tick lateness, the goal's verdict and the sentence README and
docs/operator.md quote, the sizes on the command line and the stack sampler's
arithmetic."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from bench.overhead import cli
from bench.overhead.exporter import (
    DEPLOYMENT_RPS,
    Exporter,
    Target,
    router_page,
    steady,
    targets_of,
)
from bench.overhead.figures import Scrapes, Window, numbers
from bench.overhead.private_lab import POD_CIDR, cpu_nodes_for, private_config
from bench.overhead.process import ProcSample, ProcSampler
from bench.overhead.report import fleet_sentence, goal_misses
from bench.overhead.sampled import Sampler, package_of, share
from bench.overhead.stats import Exposition, histogram_quantile
from pdlab.cluster.config import DEFAULT_POD_CIDR
from pdscaler.sim.engine import TPOT_BUCKETS, TTFT_BUCKETS
from pdscaler.telemetry import Telemetry


def _p95(bounds: tuple[float, ...], counts: list[float]) -> float | None:
    return histogram_quantile(0.95, list(zip(bounds, itertools.accumulate(counts), strict=True)))


def test_the_steady_load_is_inside_the_chat_examples_slo() -> None:
    """60 s at 0.5 req/s: 30 requests, 30,000 prompt tokens on the prefill pod, 6,000
    generated on the decode pod; TTFT p95 0.375 s < 2 s, TPOT p95 37.5 ms < 50 ms (the
    first shape read 50 ms, at the SLO, and the policy scaled decode)."""
    done = DEPLOYMENT_RPS * 60
    p, d = steady("prefill", done), steady("decode", done)
    assert p.request_success == 30
    assert p.prompt_tokens == 30_000
    assert d.generation_tokens == 6_000
    assert sum(p.ttft_counts) == pytest.approx(30)
    assert _p95(TTFT_BUCKETS, p.ttft_counts) == pytest.approx(0.375)
    assert _p95(TPOT_BUCKETS, d.request_tpot_counts) == pytest.approx(0.0375)
    assert "vllm_router_processed_requests_total" in router_page(30)


def _pod(
    name: str, role: str, ip: str, phase: str = "Running", port: tuple[str, int] = ("http", 8000)
) -> Any:
    ports = [SimpleNamespace(name=port[0], container_port=port[1])]
    return SimpleNamespace(
        metadata=SimpleNamespace(labels={"pdscaler.io/role": role, "pdscaler.io/name": name}),
        spec=SimpleNamespace(containers=[SimpleNamespace(ports=ports)]),
        status=SimpleNamespace(pod_ip=ip, phase=phase),
    )


def test_targets_are_running_pods_at_their_scraped_port() -> None:
    pods = [
        _pod("chat", "prefill", "127.93.0.1"),
        _pod("chat", "router", "127.93.0.2", port=("metrics", 29000)),
        _pod("chat", "decode", "127.93.0.3", phase="Pending"),
        _pod("chat", "frontend", "127.93.0.4"),
        _pod("chat", "decode", ""),
    ]
    assert targets_of(pods) == {
        ("127.93.0.1", 8000): Target("127.93.0.1", 8000, "prefill", "chat"),
        ("127.93.0.2", 29000): Target("127.93.0.2", 29000, "router", "chat"),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_exporter_serves_each_pod_its_share_and_never_goes_back() -> None:
    """Two prefill pods of one PDDeployment on two ports: each serves half the rate;
    a third pod added later does not lower what the first two counted."""

    async def run() -> list[float]:
        ex = Exporter()
        await ex.runner.setup()
        a, b, c = (Target("127.0.0.1", _free_port(), "prefill", "chat") for _ in range(3))
        await ex.sync({(t.ip, t.port): t for t in (a, b)})

        def scrape(t: Target) -> float:
            url = f"http://{t.ip}:{t.port}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            return Exposition.parse(text).total("vllm:request_success_total")

        first = await asyncio.to_thread(scrape, a)
        await asyncio.sleep(0.4)
        second = await asyncio.to_thread(scrape, a)
        await ex.sync({(t.ip, t.port): t for t in (a, b, c)})
        third = await asyncio.to_thread(scrape, a)
        await ex.runner.cleanup()
        return [first, second, third]

    first, second, third = asyncio.run(run())
    assert first == 0.0
    assert second == pytest.approx(DEPLOYMENT_RPS / 2 * 0.4, rel=0.5)
    assert third >= second


def test_the_private_lab_has_its_own_pod_addresses_and_room_for_routers() -> None:
    assert private_config(2000, 2000).pod_cidr == POD_CIDR != DEFAULT_POD_CIDR
    assert cpu_nodes_for(2000) == 22  # 2,400 / 110
    assert cpu_nodes_for(0) == 1


QUERIES = 'prometheus_http_requests_total{handler="/api/v1/query"}'


def _lateness_window() -> Window:
    def text(late: list[float], ticks: int) -> str:
        tel = Telemetry(CollectorRegistry())
        for s in late:
            tel.lateness.observe(s)
        for k in range(ticks):
            tel.duration.labels("ns", f"p{k}").observe(0.05)
        return tel.exposition().decode()

    sampler = ProcSampler(pid=0, wall=lambda: 0.0)
    sampler.samples += [ProcSample(0.0, 10.0, 100_000, 120_000, 30)]
    sampler.samples += [ProcSample(60.0, 40.0, 204_800, 220_000, 30)]
    sc = Scrapes(
        operator=[
            Exposition.parse(text([], 0)),
            Exposition.parse(text([0.3] * 90 + [12.0] * 10, 100)),
        ],
        apiserver=[Exposition({}), Exposition({})],
        prometheus=[
            Exposition.parse(QUERIES + " 0\nprocess_cpu_seconds_total 5\n"),
            Exposition.parse(QUERIES + " 1800\nprocess_cpu_seconds_total 35\n"),
        ],
    )
    return Window(100, 100, 15.0, sampler, sc, window_s=60.0, loads=[4.0, 6.0])


def test_numbers_hold_cpu_in_cores_rates_and_tick_lateness() -> None:
    """30 CPU-s in 60 s: 0.5 cores; 1,800 queries: 30/s; 90 ticks 0.3 s late and 10
    ticks 12 s late: p50 in the (0.25, 0.5] bucket, p99 in (10, 15]."""
    n = numbers(_lateness_window())
    assert n["cpu_cores"] == 0.5
    assert n["rss_mib_peak"] == 200.0
    assert n["prometheus_queries_per_s"] == 30.0
    assert n["prometheus_cpu_cores"] == 0.5
    assert n["ticks"] == 100
    assert n["lateness_ticks"] == 100
    p50, p99 = n["lateness_p50_s"], n["lateness_p99_s"]
    assert p50 is not None
    assert 0.25 < p50 <= 0.5
    assert p99 is not None
    assert 10.0 < p99 <= 15.0
    assert (n["load1_mean"], n["load1_max"]) == (5.0, 6.0)


def _fleet(pdds: int, cores: float, rss: float, late: float | None) -> dict[str, Any]:
    return {
        "pdds": pdds, "reconciled": pdds, "interval_s": 15.0, "cpu_cores": cores,
        "rss_mib_peak": rss, "api_requests_per_s": 3.14, "prometheus_queries_per_s": 240.4,
        "lateness_p50_s": None if late is None else late / 2, "lateness_p99_s": late,
        "load1_mean": 6.84,
    }  # fmt: skip


def test_the_goal_names_each_bound_missed() -> None:
    assert goal_misses(_fleet(1000, 0.8, 700, 1.0)) == []
    assert goal_misses(_fleet(1000, 1.31, 1100, 40.0)) == [
        "CPU 1.31 cores >= 1",
        "RSS 1100 MiB >= 1024",
        "tick lateness p99 40.00 s >= the 15 s interval",
    ]
    assert goal_misses({**_fleet(1000, 0.5, 100, None), "reconciled": 900}) == [
        "tick lateness p99 not measured >= the 15 s interval",
        "900 of 1000 reconciled",
    ]


def test_the_fleet_sentence_says_every_size_and_the_verdict() -> None:
    doc = {"fleets": [_fleet(200, 0.21, 180.4, 0.48), _fleet(1000, 1.31, 700, 40.0)]}
    text = fleet_sentence(doc)
    assert text.startswith(
        "200 PDDeployments at a 15 s interval: 0.21 cores (its own CPU seconds), a peak RSS "
        "of 180 MiB, 3.1 API requests/s, 240 Prometheus queries/s, ticks started 0.24 s "
        "(p50) and 0.48 s (p99) after they were due, machine load 6.8 on 2 cores; 1000 "
    )
    assert text.endswith(
        "the goal at 1000 (< 1 core, < 1 GiB, ticks on time): not met (CPU 1.31 cores >= 1, "
        "tick lateness p99 40.00 s >= the 15 s interval)"
    )
    assert fleet_sentence({"fleets": [_fleet(200, 0.2, 100, 0.4)]}).endswith(": not measured")
    assert fleet_sentence({}) == "the many-PDDeployments run: not measured"


def test_sizes_parse_and_bad_ones_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.parse_sizes("200, 1000") == [200, 1000]
    for bad in ("", "0", "x"):
        with pytest.raises(ValueError, match="--pdds"):
            cli.parse_sizes(bad)
    assert cli.main(["--only", "process", "--pdds", "0"]) == 2
    assert "--pdds" in capsys.readouterr().err


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_the_sampler_charges_thread_cpu_to_the_stack_that_used_it() -> None:
    """A thread spinning 0.6 CPU-s beside one sleeping: the spinner's function gets
    (nearly) all the charged CPU, the sleeper none."""
    assert package_of("/v/lib/python3.11/site-packages/kubernetes/client/api_client.py") == (
        "kubernetes"
    )
    assert package_of("/r/operator/pdscaler/metricsql/answers.py") == "pdscaler.metricsql"
    assert share({"a": 3.0, "b": 1.0, "c": 0.0}, 2) == {"a": 0.75, "b": 0.25}
    sampler = Sampler(hz=20)
    sampler.start()
    threads = [
        threading.Thread(target=_spin, args=(0.6,)),
        threading.Thread(target=time.sleep, args=(0.8,)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(0.2)
    report = sampler.report()
    functions = report["cpu_by_function"]
    assert isinstance(functions, dict)
    assert sampler.charged > 0.3
    assert functions.get("test_bench_overhead_fleet.py:_spin", 0.0) > 0.8
    assert "threading.py:sleep" not in functions


def test_the_command_line_shown_names_no_machine_path() -> None:
    assert cli.shown_command(["--out", "/tmp/x1/overhead.md", "--pdds", "200"]) == (
        "python -m bench.overhead --out <scratch dir>/overhead.md --pdds 200"
    )
    inside = str(cli.RESULTS)
    assert cli.shown_command(["--out", inside]) == (
        "python -m bench.overhead --out bench/results/overhead.md"
    )


def test_a_lateness_at_the_top_bucket_is_a_floor() -> None:
    """1,000 PDDeployments that fell behind: every tick over 60 s late reads p99 60 s by
    PromQL's rule; the results say 'at least' (the 1,000 run's first report said 60.00)."""
    f = {**_fleet(1000, 0.2, 434, 60.0), "lateness_top_s": 60.0}
    assert "ticks started at least 30.00 s" not in fleet_sentence({"fleets": [f]})
    assert "and at least 60.00 s (p99)" in fleet_sentence({"fleets": [f]})
    assert "tick lateness p99 at least 60.00 s >= the 15 s interval" in goal_misses(f)
