"""The live engine simulator (`python -m pdlab engine-sim`).

Without the lab (driven with fake pods and a hand-moved clock): its pages parse as
Prometheus text exposition and carry every vLLM series the operator's `vllm` preset
queries; the pool queue is shared out over the pool's pods; pods that go away stop
being served. On local sockets (pod IPs in 127.0.0.0/8, no lab): every Ready pod is
served at its IP with the OpenAI API, the NixlConnector hand-off and its metrics, and a
decode naming a prefill of another cell is a pairing error. Against the lab: pods
labelled like a PDDeployment's pools are found by the lab's Prometheus through
Kubernetes service discovery with the pod labels, and the operator's own snapshot code
reads the scenario's rate and request shape back from Prometheus.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from pdlab.cluster import prometheus
from pdlab.cluster.lab import Lab
from pdlab.engine import scenarios
from pdlab.engine.expo import render_pod
from pdlab.engine.pods import PodInfo, engine_dialect
from pdlab.engine.serve import PodServers
from pdlab.engine.sim import DeploymentSim, EngineSim, Workload, workload
from pdlab.engine.text import text as streamed_text
from pdscaler import presets
from pdscaler.prometheus import PrometheusClient, read_snapshot
from pdscaler.sim.engine import EngineParams
from pdscaler.spec import PDDeployment
from pdscaler.types import MetricsSnapshot, Role
from support.labkit import Kube, free_port, gpu_deployment, wait_for

REPO = Path(__file__).resolve().parents[2]


def pods(prefill: int, decode: int, name: str = "chat", ns: str = "ns") -> list[PodInfo]:
    """Ready pods p0.. and d0.. of one PDDeployment."""
    return [PodInfo(ns, f"p{i}", name, Role.PREFILL, "v1", True) for i in range(prefill)] + [
        PodInfo(ns, f"d{i}", name, Role.DECODE, "v1", True) for i in range(decode)
    ]


def chat_sim(seconds: float, rate_scale: float = 1.0) -> DeploymentSim:
    scenario = scenarios.scaled(scenarios.get("chat"), seconds)
    trace = scenarios.generate(scenario, seed=1)
    if rate_scale != 1.0:
        from pdscaler.sim.traces import scale_rate

        trace = scale_rate(trace, rate_scale, 1)
    return DeploymentSim("ns", "chat", trace, scenario, EngineParams(), 1, created=0.0)


def pod_path(namespace: str, pod: str) -> str:
    """``/pods/ns/p0/metrics``: how these tests name a pod's page."""
    return f"/pods/{namespace}/{pod}/metrics"


def text(pages: dict[tuple[str, str], Any], path: str) -> str:
    """The exposition of the pod named by ``pod_path``."""
    _, _, ns, pod, _ = path.split("/")
    return render_pod(pages[(ns, pod)])


def run(
    sim: DeploymentSim, start: float, end: float, step: float = 0.5
) -> dict[tuple[str, str], Any]:
    """Step the simulator on a hand-moved clock; the last pages."""
    pages: dict[tuple[str, str], Any] = {}
    t = start
    while t < end:
        t += step
        pages = sim.step(t)
    return pages


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


# ------------------------------------------------------------------ without the lab


def test_pages_parse_and_carry_every_series_the_vllm_preset_queries() -> None:
    """Every metric name in the vllm preset's PromQL (for each `a or b`, at least one
    side) is a sample name on a prefill and on a decode pod's page."""
    sim = chat_sim(30.0)
    sim.sync(pods(2, 2), 0.0)
    pages = run(sim, 0.0, 20.0)
    assert {pod_path(*k) for k in pages} == {
        f"/pods/ns/{p}/metrics" for p in ("p0", "p1", "d0", "d1")
    }
    templates = [v for v in vars(presets.VLLM).values() if isinstance(v, str) and "vllm:" in v]
    assert len(templates) >= 10
    for path in ("/pods/ns/p0/metrics", "/pods/ns/d0/metrics"):
        names = sample_names(text(pages, path))
        for template in templates:
            alternatives = [set(re.findall(r"vllm:[a-z_]+", alt)) for alt in template.split(" or ")]
            assert any(alt <= names for alt in alternatives), (path, template)


def test_sglang_pods_speak_every_series_the_sglang_preset_queries() -> None:
    """A pod running SGLang (``engine_dialect``) is rendered in SGLang's names: every
    metric name the sglang preset's PromQL reads without a fall-back (the hand-off
    queues are optional there) is on its page, with the same load as the vLLM names."""
    sim = chat_sim(30.0)
    sim.sync(pods(2, 2), 0.0)
    pages = run(sim, 0.0, 20.0)
    handoff = set(re.findall(r"sglang:[a-z_]+", presets._SGLANG_HANDOFF))
    templates = [v for v in vars(presets.SGLANG).values() if isinstance(v, str) and "sglang:" in v]
    for pod in ("p0", "d0"):
        stats = pages[("ns", pod)]
        page = render_pod(stats, dialect="sglang")
        names = sample_names(page)
        for template in templates:
            alternatives = [
                set(re.findall(r"sglang:[a-z_]+", alt)) - handoff for alt in template.split(" or ")
            ]
            assert any(alt <= names for alt in alternatives), (pod, template)
        served = {
            sample.name: sample.value
            for fam in text_string_to_metric_families(page)
            for sample in fam.samples
        }
        assert served["sglang:num_requests_total"] == stats.request_success > 0
        assert not any(n.startswith("vllm:") for n in names)


def test_the_engine_container_names_the_dialect() -> None:
    def pod(image: str, command: list[str]) -> Any:
        c = argparse.Namespace(name="engine", image=image, command=command, args=[])
        side = argparse.Namespace(name="sidecar", image="sglang-ish", command=[], args=[])
        return argparse.Namespace(spec=argparse.Namespace(containers=[side, c]))

    assert engine_dialect(pod("lmsysorg/sglang", ["python3", "-m", "sglang.launch_server"])) == (
        "sglang"
    )
    assert engine_dialect(pod("vllm/vllm-openai", ["vllm", "serve"])) == "vllm"


def test_counters_follow_the_scenario_and_roles() -> None:
    """20 s of chat at 21 req/s on 4+4 pods (the ratio model's sizing): the prefill pods'
    request_success adds up to about 420 (less what is still in prefill), mean prompt
    ~1000 tokens on the prefill side, mean output ~200 on the decode side, TTFT
    observed on both sides."""
    sim = chat_sim(30.0)
    sim.sync(pods(4, 4), 0.0)
    pages = run(sim, 0.0, 20.0)

    def value(path: str, sample: str) -> float:
        fam = families(text(pages, path))
        return float(sum(s.value for f in fam.values() for s in f.samples if s.name == sample))

    arrived = sim.status()["arrived"]
    assert 300 <= arrived <= 540  # Poisson at 21 req/s for 20 s
    prefilled = sum(value(f"/pods/ns/p{i}/metrics", "vllm:request_success_total") for i in range(4))
    assert 0.9 * arrived <= prefilled <= arrived
    prompt_sum = sum(
        value(f"/pods/ns/p{i}/metrics", "vllm:request_prompt_tokens_sum") for i in range(4)
    )
    assert 800 <= prompt_sum / prefilled <= 1200
    done = sum(value(f"/pods/ns/d{i}/metrics", "vllm:request_success_total") for i in range(4))
    gen_sum = sum(
        value(f"/pods/ns/d{i}/metrics", "vllm:request_generation_tokens_sum") for i in range(4)
    )
    assert done > 0.5 * arrived
    assert 130 <= gen_sum / done <= 260  # finished ones skew short; the mean is 200
    for path in ("/pods/ns/p0/metrics", "/pods/ns/d1/metrics"):
        assert value(path, "vllm:time_to_first_token_seconds_count") > 0
    assert value("/pods/ns/d0/metrics", "vllm:inter_token_latency_seconds_count") > 1000
    # the per-request TPOT histogram (what the vllm preset reads first): one observation
    # per finished request of more than one token, so about the decode side's successes
    per_request = sum(
        value(f"/pods/ns/d{i}/metrics", "vllm:request_time_per_output_token_seconds_count")
        for i in range(4)
    )
    assert 0.9 * done <= per_request <= done
    tpot_sum = sum(
        value(f"/pods/ns/d{i}/metrics", "vllm:request_time_per_output_token_seconds_sum")
        for i in range(4)
    )
    assert 0.001 < tpot_sum / per_request < 1.0  # seconds per output token, per request


def test_pool_queue_is_shared_out_over_the_pool_pods() -> None:
    """Chat at 3x the rate on 1 prefill pod (63 req/s x 1000 tokens vs ~8,400 tokens/s)
    builds a prefill queue; with a second and third pod added later, the waiting gauges
    of the three pods add up to the pool queue and differ by at most one."""
    sim = chat_sim(60.0, rate_scale=3.0)
    sim.sync(pods(1, 3), 0.0)
    run(sim, 0.0, 10.0)
    sim.sync(pods(3, 3), 10.0)
    pages = run(sim, 10.0, 10.5)
    waiting = [
        families(text(pages, f"/pods/ns/p{i}/metrics"))["vllm:num_requests_waiting"]
        .samples[0]
        .value
        for i in range(3)
    ]
    queue = sim.status()["prefill_queue"]
    assert queue > 100
    assert sum(waiting) == pytest.approx(queue)
    assert max(waiting) - min(waiting) <= 1


def test_pods_that_go_away_stop_being_served_and_the_scenario_waits_for_both_pools() -> None:
    sim = chat_sim(30.0)
    sim.sync(pods(2, 0), 0.0)
    run(sim, 0.0, 5.0)
    assert sim.status()["scenario_time_s"] is None  # no decode pod yet: no traffic
    assert sim.status()["arrived"] == 0
    sim.sync(pods(2, 1), 5.0)
    run(sim, 5.0, 10.0)
    assert sim.status()["scenario_time_s"] == pytest.approx(5.0)
    assert sim.status()["arrived"] > 50
    sim.sync([p for p in pods(2, 1) if p.name != "p1"], 10.0)
    pages = run(sim, 10.0, 12.0)
    assert {pod_path(*k) for k in pages} == {"/pods/ns/p0/metrics", "/pods/ns/d0/metrics"}
    assert sim.status()["pods"] == {"prefill": ["p0"], "decode": ["d0"]}


class FakePods:
    def __init__(self, listing: list[PodInfo]) -> None:
        self.listing = listing

    def list(self) -> list[PodInfo]:
        return list(self.listing)


def served_pods(base: str, port: int, rev_b: str = "r2") -> list[PodInfo]:
    """A prefill and a decode pod of cell r1 and a prefill pod of cell ``rev_b``, at
    loopback pod IPs ``<base>.1``-``.3`` (no lab: the sockets are local)."""
    return [
        PodInfo("serving", "chat-r1-prefill-a", "chat", Role.PREFILL, "v1", True,
                ip=f"{base}.1", port=port, revision="r1", config="r1", uid="uid-p1"),
        PodInfo("serving", "chat-r1-decode-a", "chat", Role.DECODE, "v1", True,
                ip=f"{base}.2", port=port, revision="r1", config="r1", uid="uid-d1"),
        PodInfo("serving", f"chat-{rev_b}-prefill-a", "chat", Role.PREFILL, "v2", True,
                ip=f"{base}.3", port=port, revision=rev_b, config=rev_b, uid="uid-p2"),
    ]  # fmt: skip


def post(url: str, body: dict[str, Any], timeout: float = 10.0) -> tuple[int, str]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def sse(body: str) -> list[Any]:
    """The ``data:`` payloads of an SSE body (``[DONE]`` kept as a string)."""
    out: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


@pytest.fixture
def pod_servers() -> Iterator[tuple[PodServers, list[PodInfo]]]:
    servers = PodServers(EngineParams())
    listing = served_pods(f"127.66.{secrets.randbelow(200) + 20}", free_port())
    servers.sync(listing)
    try:
        yield servers, listing
    finally:
        servers.close()


def test_a_prefill_and_decode_pair_serve_a_completion_with_the_nixl_hand_off(
    pod_servers: tuple[PodServers, list[PodInfo]],
) -> None:
    """Prefill with do_remote_decode -> one token and the NixlConnector params naming the
    prefill pod; the decode with those params streams max_tokens tokens (SSE, usage on
    request), no earlier than the KV transfer; the record pairs the two pods of r1."""
    servers, (p1, d1, _p2) = pod_servers
    prompt = " ".join(["word"] * 160)
    status, body = post(
        f"http://{p1.address}/v1/completions",
        {"prompt": prompt, "max_tokens": 20, "kv_transfer_params": {"do_remote_decode": True}},
    )
    assert status == 200
    pre = json.loads(body)
    kv = pre["kv_transfer_params"]
    assert pre["usage"] == {"prompt_tokens": 160, "completion_tokens": 1, "total_tokens": 161}
    assert kv["do_remote_prefill"] is True
    assert (kv["remote_engine_id"], kv["remote_host"], kv["remote_port"]) == (
        "uid-p1", p1.ip, p1.port,
    )  # fmt: skip
    assert kv["remote_block_ids"] == list(range(10))  # 160 tokens in blocks of 16
    assert kv["tp_size"] == 1
    t0 = time.monotonic()
    status, body = post(
        f"http://{d1.address}/v1/completions",
        {"prompt": prompt, "max_tokens": 20, "stream": True, "kv_transfer_params": kv,
         "stream_options": {"include_usage": True}},
    )  # fmt: skip
    took = time.monotonic() - t0
    chunks = sse(body)
    assert chunks[-1] == "[DONE]"
    texts = [c["choices"][0]["text"] for c in chunks[:-1] if c["choices"]]
    assert len(texts) == 20
    assert "".join(texts) == streamed_text(20)  # one token of aiperf's tokenizer each
    assert chunks[-2]["usage"]["completion_tokens"] == 20
    # 20 decode steps of >= 12 ms each plus the 5 ms + 160 x 20 us transfer
    assert took >= 20 * 0.012 + 0.005
    records = servers.records.since(0)
    assert [r["kind"] for r in records] == ["prefill", "decode"]
    dec = records[1]
    assert (dec["prefill_pod"], dec["decode_pod"]) == (p1.name, d1.name)
    assert (dec["prefill_revision"], dec["decode_revision"]) == ("r1", "r1")
    assert dec["ok"] is True
    assert dec["kv_transfer"] is True
    assert 0 < dec["ttft_s"] <= dec["e2e_s"]
    assert servers.records.pairing_errors == 0


def test_a_decode_of_another_cells_prefill_or_of_none_is_a_pairing_error(
    pod_servers: tuple[PodServers, list[PodInfo]],
) -> None:
    servers, (_p1, d1, p2) = pod_servers
    _, body = post(
        f"http://{p2.address}/v1/completions",
        {"prompt": "a b c", "max_tokens": 4, "kv_transfer_params": {"do_remote_decode": True}},
    )
    kv = json.loads(body)["kv_transfer_params"]
    status, body = post(
        f"http://{d1.address}/v1/completions",
        {"prompt": "a b c", "max_tokens": 4, "kv_transfer_params": kv},
    )
    assert status == 200  # served as vLLM would
    assert json.loads(body)["usage"]["completion_tokens"] == 4
    status, body = post(
        f"http://{d1.address}/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3},
    )
    assert status == 200
    answer = json.loads(body)
    assert answer["object"] == "chat.completion"
    assert answer["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    decodes = [r for r in servers.records.since(0) if r["kind"] == "decode"]
    assert [r["pairing_error"] for r in decodes] == [True, True]
    assert decodes[0]["prefill_revision"] == "r2"
    assert decodes[0]["decode_revision"] == "r1"
    assert "revision r1" in decodes[0]["error"]
    assert decodes[1]["prefill_pod"] is None
    assert servers.records.pairing_errors == 2
    assert [r["seq"] for r in servers.records.since(1)] == [2, 3]


def test_render_models_health_and_metrics_answer_as_vllm(
    pod_servers: tuple[PodServers, list[PodInfo]],
) -> None:
    servers, (p1, d1, _p2) = pod_servers
    status, body = post(
        f"http://{p1.address}/v1/completions/render", {"prompt": "one two three", "model": "m"}
    )
    rendered = json.loads(body)
    assert status == 200
    assert isinstance(rendered, list)
    assert rendered[0]["token_ids"] == [1, 2, 3]
    assert {"request_id", "sampling_params", "model"} <= set(rendered[0])
    with urllib.request.urlopen(f"http://{d1.address}/v1/models", timeout=5) as resp:
        assert json.loads(resp.read())["data"][0]["id"]
    with urllib.request.urlopen(f"http://{d1.address}/health", timeout=5) as resp:
        assert resp.status == 200
    post(f"http://{d1.address}/v1/completions", {"prompt": "x", "max_tokens": 5})
    with urllib.request.urlopen(f"http://{d1.address}/metrics", timeout=5) as resp:
        page = resp.read().decode()
    fam = families(page)
    gen = fam["vllm:generation_tokens_total"].samples[0]
    assert gen.value == 5
    assert "pod" not in gen.labels  # Prometheus adds the pod labels from discovery
    # the served page reports the KV capacity, as vLLM's does (100,000 = 6,250 x 16)
    assert 'vllm:cache_config_info{block_size="16",num_gpu_blocks="6250"} 1' in page
    # a pod that stops being Ready stops being served
    servers.sync([])
    with pytest.raises(OSError, match="refused"):
        urllib.request.urlopen(f"http://{d1.address}/health", timeout=2)


def test_every_ready_pod_is_served_with_its_synthetic_load() -> None:
    """With a scenario, a served pod's /metrics shows its share of the synthetic load; a
    pod gone from the listing is no longer served."""
    base = f"127.66.{secrets.randbelow(200) + 20}"
    port = free_port()
    listing = [
        PodInfo("serving", "p0", "chat", Role.PREFILL, "v1", True, ip=f"{base}.4", port=port),
        PodInfo("serving", "d0", "chat", Role.DECODE, "v1", True, ip=f"{base}.5", port=port),
    ]
    scenario = scenarios.scaled(scenarios.get("chat"), 20.0)
    load: Workload = lambda: (scenarios.generate(scenario), scenario)  # noqa: E731
    sim = EngineSim(FakePods(listing), load, EngineParams(), port=9999)
    try:
        sim.poll(100.0)
        sim.step(103.0)
        with urllib.request.urlopen(f"http://{base}.4:{port}/metrics", timeout=5) as resp:
            fam = families(resp.read().decode())
        assert fam["vllm:request_success_total"].samples[0].value > 0
        status = json.loads(sim.pages.status)
        assert status["pods"] == [f"serving/d0 {base}.5:{port}", f"serving/p0 {base}.4:{port}"]
        listing.pop()
        sim.poll(104.0)
        with pytest.raises(OSError, match="refused"):
            urllib.request.urlopen(f"http://{base}.5:{port}/metrics", timeout=2)
    finally:
        sim.close()


# ------------------------------------------------------------------ against the lab


def pool_deployment(name: str, role: str, replicas: int) -> dict[str, Any]:
    """A GPU Deployment whose pods carry the pdscaler labels of a PDDeployment's pool."""
    dep: dict[str, Any] = gpu_deployment(f"{name}-{role}", replicas, startup_delay="1s")
    labels = {"pdscaler.io/name": name, "pdscaler.io/role": role, "pdscaler.io/version": "v1"}
    dep["spec"]["template"]["metadata"]["labels"].update(labels)
    engine = dep["spec"]["template"]["spec"]["containers"][0]
    engine["ports"] = [{"name": "http", "containerPort": 8000}]
    return dep


@pytest.fixture
def engine_sim(lab: Lab, namespace: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`python -m pdlab engine-sim` on the test's namespace: chat at half rate."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdlab", "engine-sim", "--namespace", namespace,
         "--scenario", "chat", "--rate-scale", "0.5", "--port", str(port)],
        cwd=REPO,
    )  # fmt: skip
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(20)


def test_engine_sim_series_reach_prometheus_with_pod_labels_and_plausible_values(
    lab: Lab, kube: Kube, namespace: str, engine_sim: tuple[subprocess.Popen[bytes], int]
) -> None:
    """2 prefill + 2 decode pods labelled as pools of PDDeployment `sim`; chat at 0.5x
    (10.5 req/s, prompts ~1000, outputs ~200 tokens). The operator's own snapshot code
    (metricsql + prometheus.read_snapshot, 30 s window) reads back R ~ 10.5, L_p ~ 1000,
    L_d ~ 200, a TTFT and a TPOT, per-pod running requests of both decode pods, and the
    decode replicas' KV capacity (M for the memory term) from vllm:cache_config_info."""
    proc, port = engine_sim
    for role in ("prefill", "decode"):
        kube.apps.create_namespaced_deployment(
            namespace, cast(Any, pool_deployment("sim", role, 2))
        )
    sel = f'namespace="{namespace}"'

    def four_up() -> list[dict[str, Any]] | None:
        found = lab.query(f"up{{{sel}}} == 1")
        return found if len(found) == 4 else None

    up = wait_for(four_up, 90, "4 engine-sim pod targets up in Prometheus")
    roles = sorted(s["metric"]["pdscaler_io_role"] for s in up)
    assert roles == ["decode", "decode", "prefill", "prefill"]
    assert {s["metric"]["pdscaler_io_name"] for s in up} == {"sim"}
    assert all(s["metric"]["pod"].startswith("sim-") for s in up)

    doc = yaml.safe_load((REPO / "deploy" / "demo" / "demo.yaml").read_text())
    spec = PDDeployment.model_validate(doc).spec  # window 30s, percentile 0.95
    client = PrometheusClient(lab.prometheus_url)
    time.sleep(32)  # a full rate window of traffic

    def snapshot() -> MetricsSnapshot | None:
        snap = read_snapshot(client, spec, namespace, "sim", now=time.time())
        known = (snap.request_rate, snap.prompt_tokens, snap.output_tokens)
        return snap if None not in known else None

    snap = wait_for(snapshot, 30, "a snapshot with R, L_p and L_d")
    assert snap.request_rate is not None
    assert snap.prompt_tokens is not None
    assert snap.output_tokens is not None
    assert 10.5 * 0.6 <= snap.request_rate <= 10.5 * 1.4, snap
    assert 750 <= snap.prompt_tokens <= 1300, snap
    assert 120 <= snap.output_tokens <= 280, snap
    assert snap.prefill.latency_seconds is not None
    assert 0 < snap.prefill.latency_seconds < 5
    assert snap.decode.latency_seconds is not None
    assert 0 < snap.decode.latency_seconds < 0.2
    assert snap.prefill.queue_depth is not None
    assert snap.decode.queue_depth is not None
    assert len(snap.decode.running_by_pod) == 2
    # M from the decode pods' vllm:cache_config_info: 6,250 blocks of 16 tokens
    assert snap.decode.kv_capacity_tokens == EngineParams().decode_kv_tokens == 100_000
    assert snap.decode.tokens_per_second is not None
    assert snap.decode.tokens_per_second > 500

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as resp:
        status = json.loads(resp.read())["deployments"][0]
    assert (status["name"], status["phase"]) == ("sim", "chat")
    assert (len(status["pods"]["prefill"]), len(status["pods"]["decode"])) == (2, 2)

    # Scale decode to 1: Prometheus' discovery drops the gone pod's target.
    kube.apps.patch_namespaced_deployment_scale(
        "sim-decode", namespace, cast(Any, {"spec": {"replicas": 1}})
    )

    def targets() -> list[dict[str, Any]]:
        return [
            t
            for t in prometheus.active_targets(lab.prometheus_url)
            if t["labels"].get("namespace") == namespace
        ]

    wait_for(lambda: len(targets()) == 3, 30, "3 scrape targets after the decode scale-down")
    addresses = [t["labels"]["instance"] for t in targets()]
    proc.terminate()
    assert proc.wait(20) == 0
    for address in addresses:  # the simulator no longer serves the pods
        with pytest.raises(OSError, match="refused"):
            urllib.request.urlopen(f"http://{address}/metrics", timeout=2)


def test_a_deployment_without_pods_is_forgotten_and_restarts_its_scenario() -> None:
    """All pods gone for 10 s: the PDDeployment's engine is dropped, so a PDDeployment
    of the same name created later (a second demo run) plays its scenario from t=0."""
    listing = pods(1, 1)
    scenario = scenarios.scaled(scenarios.get("chat"), 20.0)
    workload: Workload = lambda: (scenarios.generate(scenario), scenario)  # noqa: E731
    sim = EngineSim(FakePods(listing), workload, EngineParams(), port=9998)
    sim.poll(0.0)
    sim.step(5.0)
    assert sim.deployments[("ns", "chat")].phase() == ("chat", 5.0)
    listing.clear()
    for t in (6.0, 10.0, 15.9):
        sim.poll(t)
        assert ("ns", "chat") in sim.deployments
    sim.poll(16.0)
    assert sim.deployments == {}
    listing.extend(pods(1, 1))
    sim.poll(20.0)
    sim.step(21.0)
    assert sim.deployments[("ns", "chat")].phase() == ("chat", 1.0)


def test_trace_replay_keeps_the_time_axis_and_scales_the_rate(tmp_path: Path) -> None:
    """An Azure-format trace of 4 requests over 3 s, skipped 1 s in and rate-scaled 2x:
    the 3 requests from t >= 1 s (the last one included), re-based to 0, each doubled
    (2x is exact), the time axis kept (span ~2 s)."""
    csv = tmp_path / "mini.csv"
    csv.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.0000000,100,10\n"
        "2023-11-16 18:15:47.0000000,200,20\n"
        "2023-11-16 18:15:48.5000000,300,30\n"
        "2023-11-16 18:15:49.0000000,400,40\n"
    )
    args = argparse.Namespace(
        trace=csv, scenario=None, rate_scale=2.0, trace_start=1.0, duration=None, seed=0
    )
    loaded = workload(args)
    assert loaded is not None
    trace, scenario = loaded
    assert len(trace) == 6
    assert trace.span == pytest.approx(2.0)
    assert float(trace.arrival.min()) == pytest.approx(0.0)
    assert float(trace.arrival.max()) <= 2.0 + 1e-3
    assert sorted(trace.prompt.tolist()) == [200, 200, 300, 300, 400, 400]
    assert scenario.phases[0].duration_s == pytest.approx(2.0)
    assert scenario.phases[0].rate == pytest.approx(3.0)  # 6 requests over 2 s
