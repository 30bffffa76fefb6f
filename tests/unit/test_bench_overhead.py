"""The operator-overhead benchmark's plumbing (bench/overhead/), without a cluster:
percentiles, histogram quantiles, exposition deltas, /proc parsing and sampling, the
report's rendering, the policy timing on a small recorded trace, the figures of the
200-PDDeployment run from synthetic scrapes, and the command line."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from bench.overhead import cli as overhead
from bench.overhead import policy as overhead_policy
from bench.overhead.cluster import BenchError, pdd_manifest, reconciled
from bench.overhead.figures import (
    Scrapes,
    Window,
    api_requests,
    breakdown,
    figures,
    per_tick_breakdown,
    request_rates,
)
from bench.overhead.fleet import Plan, handlers_after_stop, measure
from bench.overhead.private_lab import PORT_OFFSET, exclusive, nodes_for, private_config
from bench.overhead.process import (
    ProcSample,
    ProcSampler,
    cpu_seconds,
    parse_stat_cpu,
    parse_status_int,
    status_numbers,
)
from bench.overhead.report import Section, markdown_table, render
from bench.overhead.stats import Exposition, histogram_quantile, percentile, summarize
from pdlab.cluster.config import DEFAULT_PORTS
from pdscaler.spec import PDDeploymentSpec
from pdscaler.telemetry import Telemetry
from pdscaler.types import TickInput

# ------------------------------------------------------------------------ statistics


def test_percentile_worked_numbers() -> None:
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 99) == pytest.approx(3.97)
    assert percentile([7.0], 99) == 7.0
    assert percentile([1, 2, 3], 0) == 1
    assert percentile([1, 2, 3], 100) == 3


@pytest.mark.parametrize("q", [1, 25, 50, 90, 99, 99.9])
def test_percentile_matches_numpy_linear(q: float) -> None:
    values = list(np.random.default_rng(3).lognormal(size=1001))
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_refuses_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile([1.0], 101)


def test_summarize_and_scale() -> None:
    s = summarize([1, 2, 3, 4])
    assert (s.n, s.p50, s.mean, s.max) == (4, 2.5, 2.5, 4)
    ms = summarize([0.001, 0.003]).scaled(1000)
    assert ms.p50 == pytest.approx(2.0)
    assert ms.max == pytest.approx(3.0)
    with pytest.raises(ValueError, match="no values"):
        summarize([])


def test_histogram_quantile_worked_example() -> None:
    buckets = [(0.01, 10.0), (0.025, 30.0), (math.inf, 40.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.0175)
    # rank 5 in the first bucket: from 0 to 0.01
    assert histogram_quantile(0.125, buckets) == pytest.approx(0.005)
    # rank 39.6 lies in +Inf: PromQL answers the highest finite bound
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.025)
    assert histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]) is None
    assert histogram_quantile(0.5, []) is None


def test_histogram_quantile_close_to_exact_for_uniform_samples() -> None:
    values = np.random.default_rng(1).uniform(0.0, 1.0, 20_000)
    bounds = [i / 20 for i in range(1, 21)] + [math.inf]
    buckets = [(b, float(np.sum(values <= b))) for b in bounds]
    for q in (0.5, 0.9, 0.99):
        assert histogram_quantile(q, buckets) == pytest.approx(np.quantile(values, q), abs=0.01)


# ---------------------------------------------------------------------- expositions


def _telemetry_text(durations: list[float], writes: int) -> str:
    tel = Telemetry(CollectorRegistry())
    for k, seconds in enumerate(durations):
        tel.duration.labels("ns", f"pdd-{k % 3}").observe(seconds)
    for _ in range(writes):
        tel.record_write("apply", "Deployment")
    return tel.exposition().decode()


def test_exposition_of_the_operators_telemetry() -> None:
    before = Exposition.parse(_telemetry_text([0.02] * 10, writes=2))
    after = Exposition.parse(_telemetry_text([0.02] * 10 + [0.04] * 30, writes=5))
    delta = after.minus(before)
    assert delta.total("pdscaler_reconcile_duration_seconds_count") == 30
    assert delta.total("pdscaler_reconcile_duration_seconds_sum") == pytest.approx(1.2)
    assert delta.total("pdscaler_api_writes_total", verb="apply") == 3
    assert delta.total("pdscaler_api_writes_total", verb="delete") == 0
    buckets = delta.buckets("pdscaler_reconcile_duration_seconds")
    assert dict(buckets)[0.025] == 0
    assert dict(buckets)[0.05] == 30
    q50 = histogram_quantile(0.5, buckets)
    assert q50 is not None
    assert 0.025 < q50 <= 0.05


APISERVER_TEXT = """\
# TYPE apiserver_request_total counter
apiserver_request_total{{code="200",resource="pods",verb="LIST"}} {list}
apiserver_request_total{{code="200",resource="pods",verb="WATCH"}} {watch}
apiserver_request_total{{code="200",resource="pddeployments",verb="GET"}} {get}
apiserver_request_total{{code="404",resource="pddeployments",verb="GET"}} 1
"""


def _apiserver(list_: int, watch: int, get: int) -> Exposition:
    return Exposition.parse(APISERVER_TEXT.format(list=list_, watch=watch, get=get))


def test_api_requests_leave_out_watches() -> None:
    e = _apiserver(100, 7, 50)
    assert api_requests(e) == {("LIST", "pods"): 100, ("GET", "pddeployments"): 51}
    assert api_requests(e, frozenset({"pods"})) == {("LIST", "pods"): 100}
    assert e.by_label("apiserver_request_total", "verb") == {"LIST": 100, "WATCH": 7, "GET": 51}
    later = _apiserver(400, 9, 50)
    assert request_rates(e, later, 100.0) == {("LIST", "pods"): 3.0}  # GET unchanged: dropped
    assert per_tick_breakdown({("LIST", "pods"): 3.0, ("GET", "x"): 6.0}, 3.0) == (
        "GET x 2.00, LIST pods 1.00"
    )


# --------------------------------------------------------------------------- /proc

STAT = "4242 (python -m (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 {u} {s} 0 0 20 0 9 0 1"


def test_parse_stat_counts_fields_after_the_command_name() -> None:
    assert parse_stat_cpu(STAT.format(u=250, s=50), clk_tck=100) == pytest.approx(3.0)


def test_parse_status_numbers() -> None:
    text = "Name:\tpython\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t12\n"
    assert parse_status_int(text, "VmRSS") == 102400
    assert parse_status_int(text, "Threads") == 12
    with pytest.raises(KeyError):
        parse_status_int(text, "VmSwap")


def test_sampler_cpu_of_this_process_follows_process_time() -> None:
    pid = os.getpid()
    sampler = ProcSampler(pid)
    first = sampler.sample()
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:  # burn 0.3 s of CPU
        sum(range(1000))
    last = sampler.sample()
    burnt = time.process_time() - t0
    # /proc counts in clock ticks (10 ms): within two of them of the interpreter's figure
    assert last.cpu - first.cpu == pytest.approx(burnt, abs=0.03)
    assert sampler.cpu_percent() > 0
    rss, hwm, threads = status_numbers(pid)
    assert 0 < rss <= hwm
    assert threads >= 1
    assert sampler.peak_rss_kib() >= first.rss_kib
    assert cpu_seconds(pid) >= last.cpu


def _synthetic_sampler(points: list[tuple[float, float, int]]) -> ProcSampler:
    s = ProcSampler(pid=0)
    s.samples = [ProcSample(w, c, rss, rss + 100, 20) for w, c, rss in points]
    return s


def test_sampler_arithmetic() -> None:
    s = _synthetic_sampler([(0.0, 10.0, 1000), (5.0, 11.0, 3000), (10.0, 13.0, 2000)])
    assert s.cpu_percent() == pytest.approx(30.0)  # 3 CPU s over 10 s
    assert s.cpu_percent_steps() == pytest.approx([20.0, 40.0])
    assert s.peak_rss_kib() == 3000
    assert s.hwm_kib() == 2100
    assert s.seconds == 10.0
    with pytest.raises(ValueError, match="two samples"):
        _synthetic_sampler([(0.0, 1.0, 1)]).cpu_percent()


# -------------------------------------------------------------------------- report


def test_markdown_table_and_not_measured_sections() -> None:
    table = markdown_table(["what", "p50"], [["tick", "12.0 ms"]])
    assert table.splitlines() == ["| what | p50 |", "|---|---:|", "| tick | 12.0 ms |"]
    with pytest.raises(ValueError, match="one cell per header"):
        markdown_table(["a", "b"], [["only one"]])
    text = render(
        {"cores": "2"},
        [
            Section("Measured", "how", ["a"], [["1"]]),
            Section.skipped("Skipped", "the lab is not up"),
        ],
        "python -m bench.overhead",
    )
    assert "## Measured" in text
    assert "| 1 |" in text
    skipped = text.split("## Skipped", 1)[1]
    assert "not measured: the lab is not up" in skipped
    assert "|" not in skipped
    assert "`python -m bench.overhead`" in text
    assert "| cores | 2 |" in text


# ------------------------------------------------------------------------- policy


def _trace_csv(path: Path, minutes: int = 8, rate: float = 4.0) -> Path:
    rng = np.random.default_rng(0)
    n = int(minutes * 60 * rate)
    arrivals = np.sort(rng.uniform(0, minutes * 60, n))
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for t in arrivals:
        whole = int(t)
        stamp = f"2023-11-16 18:{whole // 60:02d}:{whole % 60:02d}.{int((t % 1) * 1e7):07d}"
        lines.append(f"{stamp},{rng.integers(200, 3000)},{rng.integers(20, 600)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_record_inputs_are_the_ticks_the_policy_saw(tmp_path: Path) -> None:
    rec = overhead_policy.record_inputs(_trace_csv(tmp_path / "AzureLLMInferenceTrace_t.csv"))
    assert len(rec.inputs) == len(rec.actions) >= 8 * 60 // 15 - 1
    assert all(isinstance(ti, TickInput) for ti in rec.inputs)
    times = [ti.now for ti in rec.inputs]
    assert times == sorted(times)
    assert times[1] - times[0] == pytest.approx(15.0)
    # the memory grows: later inputs carry the rate history of earlier ticks
    assert len(rec.inputs[-1].memory.rate_history) > len(rec.inputs[0].memory.rate_history)


def test_time_calls_round_robin_with_warmup() -> None:
    seen: list[int] = []
    clock_values = iter(float(i) for i in range(100))
    inputs = [1, 2, 3]
    out = overhead_policy.time_calls(
        inputs,  # type: ignore[arg-type]
        4,
        fn=lambda x: seen.append(x),  # type: ignore[arg-type]
        clock=lambda: next(clock_values),
    )
    assert out == [1.0] * 4
    warmup, timed = seen[:4], seen[4:]  # min(WARMUP_CALLS, 4) untimed calls first
    assert warmup == timed == [1, 2, 3, 1]
    with pytest.raises(ValueError, match="no inputs"):
        overhead_policy.time_calls([], 3)


def test_policy_section_times_real_decide(tmp_path: Path) -> None:
    path = _trace_csv(tmp_path / "AzureLLMInferenceTrace_t.csv", minutes=5)
    section = overhead_policy.measure(calls_per_trace=100, traces=[path])
    assert section.measured
    assert section.rows[0][0] == "AzureLLMInferenceTrace_t"
    assert section.rows[0][2] == "100"
    assert section.rows[0][3].endswith(("µs", "ms"))
    missing = overhead_policy.measure(traces=[])
    assert not missing.measured
    assert "no AzureLLMInferenceTrace" in (missing.not_measured or "")


def test_find_traces_prefers_the_first_directory_with_any(tmp_path: Path) -> None:
    empty, full = tmp_path / "a", tmp_path / "b"
    empty.mkdir()
    full.mkdir()
    for name in ("AzureLLMInferenceTrace_z.csv", "AzureLLMInferenceTrace_a.csv", "x.csv"):
        (full / name).write_text("")
    found = overhead_policy.find_traces([tmp_path / "missing", empty, full])
    assert [p.name for p in found] == [
        "AzureLLMInferenceTrace_a.csv",
        "AzureLLMInferenceTrace_z.csv",
    ]


# ------------------------------------------------------------------ cluster pieces


def test_pdd_manifest_is_a_valid_chat_example() -> None:
    doc = pdd_manifest("chat-007", "ns", "http://127.0.0.1:30090", mode="Recommend", decode=(2, 6))
    spec = PDDeploymentSpec.model_validate(doc["spec"])
    assert doc["metadata"] == {"name": "chat-007", "namespace": "ns"}
    assert (spec.decode.replicas.min, spec.decode.replicas.max) == (2, 6)
    assert spec.scaling.mode == "Recommend"
    assert spec.scaling.max_gpus == 4 + 6
    assert spec.metrics.prometheus.url == "http://127.0.0.1:30090"
    for pool in ("prefill", "decode"):
        tmpl = doc["spec"][pool]["template"]
        assert tmpl["metadata"]["annotations"]["pdscaler.io/startup-delay"] == "2s"
        res = tmpl["spec"]["containers"][0]["resources"]
        assert res == {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}


def test_reconciled_needs_the_current_generation() -> None:
    assert reconciled({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}})
    assert not reconciled({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}})
    assert not reconciled({"metadata": {"generation": 1}})


def test_private_lab_sizing_and_ports() -> None:
    assert nodes_for(400, 400) == 8  # 480 GPUs / 64
    assert nodes_for(1000, 10) == 11  # 1200 pods / 110 per node
    cfg = private_config(400, 400, Path("/tmp/x"))
    assert cfg.nodes == 8
    assert cfg.lab_dir == Path("/tmp/x")
    assert all(cfg.ports[n] == p + PORT_OFFSET for n, p in DEFAULT_PORTS.items())
    assert not set(cfg.ports.values()) & set(DEFAULT_PORTS.values())


def test_a_second_run_cannot_take_the_private_lab(tmp_path: Path) -> None:
    lab_dir = tmp_path / "lab-bench-overhead"
    with exclusive(lab_dir):
        assert (tmp_path / "lab-bench-overhead.lock").read_text() == str(os.getpid())
        refused = pytest.raises(BenchError, match=f"another overhead run \\(pid {os.getpid()}\\)")
        with refused, exclusive(lab_dir):
            pass
    with exclusive(lab_dir):  # released: the next run gets it
        pass


# ------------------------------------------------------------ the process figures


def _window(reconciled: int = 200) -> Window:
    sampler = _synthetic_sampler([(0.0, 100.0, 200_000), (75.0, 115.0, 300_000)])
    sampler.samples.append(ProcSample(150.0, 130.0, 250_000, 400_000, 40))
    sc = Scrapes(
        operator=[
            Exposition.parse(_telemetry_text([0.01] * 100, writes=400)),
            Exposition.parse(_telemetry_text([0.01] * 100 + [0.02] * 2000, writes=400)),
        ],
        apiserver=[
            _apiserver(1000, 5, 1000),
            _apiserver(7000, 9, 3000),  # +8000 in the 150 s window
            _apiserver(7000, 9, 3000),
            _apiserver(7030, 20, 3000),  # +30 in the 30 s baseline
        ],
        prometheus=[
            Exposition.parse('prometheus_http_requests_total{handler="/api/v1/query"} 10\n'),
            Exposition.parse('prometheus_http_requests_total{handler="/api/v1/query"} 20010\n'),
        ],
    )
    return Window(200, reconciled, 15.0, sampler, sc, window_s=150.0, baseline_s=30.0)


def test_process_figures_from_synthetic_scrapes() -> None:
    rows = {r[0]: r[1] for r in figures(_window())}
    assert rows["PDDeployments reconciled"] == "200 of 200"
    assert rows["reconcile ticks"] == "2000 (13.3/s)"
    assert rows["CPU, mean"] == "20.0% of one core"
    assert rows["RSS, peak in window"] == "293 MiB"
    assert rows["RSS, peak since start"] == "391 MiB"
    assert rows["threads"] == "40"
    assert rows["operator API writes"] == "0.00/s"
    assert rows["API requests for the operator's resources"] == "53.3/s (4.0 per tick)"
    hows = {r[0]: r[2] for r in figures(_window())}
    assert hows["API requests for the operator's resources"].endswith(
        "1.0/s with the operator stopped"
    )
    assert rows["API requests, all clients"] == "53.3/s"
    assert breakdown(_window()) == (
        "API requests per tick: LIST pods 3.00, GET pddeployments 1.00; with the operator "
        "stopped, the busiest: LIST pods 1.0/s"
    )
    assert rows["Prometheus queries"] == "133.3/s"
    p50, _p99 = rows["reconcile duration p50 / p99"].split(" / ")
    assert p50.endswith("ms")
    assert 10.0 < float(p50.split()[0]) <= 25.0
    assert rows["reconcile duration mean"] == "20.0 ms"


def test_process_figures_expect_ticks_of_the_reconciled_only() -> None:
    hows = {r[0]: r[2] for r in figures(_window(reconciled=8))}
    values = {r[0]: r[1] for r in figures(_window(reconciled=8))}
    assert values["PDDeployments reconciled"] == "8 of 200"
    assert hows["reconcile ticks"].startswith("expected 80 ")


def test_handlers_after_stop_counts_only_after_sigterm() -> None:
    ok = "Handler 'on_create' succeeded.\n"
    log = ok * 3 + "Signal SIGTERM is received. Operator is stopping.\n" + ok * 2
    assert handlers_after_stop(log) == 2
    assert handlers_after_stop(ok * 3) == 0


def test_process_measure_reports_why_it_could_not_run() -> None:
    def failing(plan: Plan) -> Any:
        raise BenchError("the operator exited", {"private lab": "8 fake nodes"})

    section = measure(Plan(pdds=3), scenario=failing)
    assert not section.measured
    assert section.title.endswith("3 at a 15s interval")
    assert section.not_measured == "the operator exited"
    assert list(section.notes) == ["private lab: 8 fake nodes"]


# -------------------------------------------------------------------- command line


def test_only_parses_and_orders() -> None:
    assert overhead.parse_only("tick, policy") == ["policy", "tick"]
    with pytest.raises(ValueError, match="comma list"):
        overhead.parse_only("cpu")


def test_main_runs_only_what_is_asked_and_writes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []

    def fake_policy(calls_per_trace: int) -> Section:
        calls.append(calls_per_trace)
        return Section(overhead_policy.TITLE, "how", ["p50"], [["1 µs"]])

    monkeypatch.setattr(overhead_policy, "measure", fake_policy)
    out = tmp_path / "overhead.md"
    assert overhead.main(["--only", "policy", "--calls", "7", "--out", str(out)]) == 0
    assert calls == [7]
    text = out.read_text()
    assert "| 1 µs |" in text
    assert text.count("not measured: not run in this invocation") == 2
    assert "--only policy --calls 7" in text
    assert "python" in text
    assert text in capsys.readouterr().out


def test_main_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert overhead.main(["--only", "gpu"]) == 2
    assert overhead.main(["--only", "policy", "--calls", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("bench.overhead:") == 2
    assert "Traceback" not in err


def test_reads_per_tick_are_counted_not_described() -> None:
    """The tick section states the API requests its converged ticks sent (the client's
    counts), not a fixed description: 20 GETs of the PDDeployment and 60 LISTs over 20
    ticks -> 4.0 in all."""
    from bench.overhead.tick import reads_per_tick

    before = {("get", "pddeployments"): 5, ("list", "pods"): 3}
    after = {
        ("get", "pddeployments"): 25,
        ("list", "pods"): 23,
        ("list", "services"): 20,
        ("list", "deployments"): 20,
    }
    assert reads_per_tick(before, after, 20) == (
        "4.0 in all: get pddeployments 1.0, list deployments 1.0, list pods 1.0, list services 1.0"
    )
    assert reads_per_tick(after, after, 20) == "none counted"


def test_the_fleet_waits_for_the_engine_pods_not_the_routers() -> None:
    """The private lab runs no router (no pod runner): its router pods are never Ready,
    so steadiness counts the engine pods alone (the run at ca29ca6 waited for 800 pods,
    448 Ready, and started its window NOT steady)."""
    from types import SimpleNamespace

    from bench.overhead.cluster import ENGINE_PODS, ready_pods

    asked: list[str] = []

    def pod(ready: bool) -> SimpleNamespace:
        cond = SimpleNamespace(type="Ready", status="True" if ready else "False")
        return SimpleNamespace(status=SimpleNamespace(conditions=[cond]))

    def list_namespaced_pod(namespace: str, label_selector: str, **_: object) -> object:
        asked.append(label_selector)
        return SimpleNamespace(items=[pod(True), pod(True), pod(False)])

    kube = SimpleNamespace(core=SimpleNamespace(list_namespaced_pod=list_namespaced_pod))
    assert ready_pods(kube, "ns") == (2, 3)  # type: ignore[arg-type]
    assert asked == [ENGINE_PODS] == ["pdscaler.io/role in (prefill,decode)"]
