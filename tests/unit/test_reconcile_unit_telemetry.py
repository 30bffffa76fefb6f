"""The operator's own metrics and HTTP endpoint (telemetry.py) and the ``explain``
rendering of a published decision (cli/explain.py), without a cluster."""

from __future__ import annotations

import dataclasses
import math
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdscaler import status
from pdscaler.cli.explain import render
from pdscaler.spec import PDDeploymentSpec
from pdscaler.telemetry import MetricsServer, Telemetry, direction
from pdscaler.types import (
    Action,
    Decision,
    Flip,
    ModelOutputs,
    PoolObservation,
    Role,
)
from support.builders import snapshot

SNAP = snapshot(ttft=0.85, tpot=0.062, decode_queue=12.0)
DECISION = Decision(
    prefill=20,
    decode=6,
    action=Action.SCALED_DECODE,
    message="Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s",
    pool=Role.DECODE,
    model=ModelOutputs(n_prefill=19.05, n_decode=17.86, ratio=1.07, drain_seconds=38.0),
)


def test_direction() -> None:
    assert (direction(4, 6), direction(6, 4), direction(4, 4)) == ("up", "down", "none")


def samples(tel: Telemetry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(tel.exposition().decode()):
        for sm in family.samples:
            out[(sm.name, frozenset(sm.labels.items()))] = sm.value
    return out


def value(tel: Telemetry, name: str, **labels: str) -> float | None:
    key = frozenset({"namespace": "serving", "name": "chat", **labels}.items())
    return samples(tel).get((name, key))


def test_record_tick_exports_decisions_replicas_inputs_and_duration() -> None:
    tel = Telemetry()
    before = {Role.PREFILL: 20, Role.DECODE: 4}
    ready = {Role.PREFILL: PoolObservation(20, 20), Role.DECODE: PoolObservation(4, 3)}
    tel.record_tick("serving", "chat", DECISION, before, ready, SNAP, 0.012)
    up = {"pool": "decode", "direction": "up", "reason": "ScaledDecode"}
    assert value(tel, "pdscaler_decisions_total", **up) == 1.0
    assert not any(
        n == "pdscaler_decisions_total" and ("pool", "prefill") in k for n, k in samples(tel)
    )  # prefill did not move
    assert value(tel, "pdscaler_desired_replicas", pool="decode") == 6.0
    assert value(tel, "pdscaler_ready_replicas", pool="decode") == 3.0
    assert value(tel, "pdscaler_observed_queue_requests", pool="decode") == 12.0
    assert value(tel, "pdscaler_observed_tpot_seconds") == 0.062
    assert value(tel, "pdscaler_model_drain_seconds") == 38.0
    assert value(tel, "pdscaler_model_replicas", pool="prefill") == 19.05
    unknown = value(tel, "pdscaler_model_forecast_requests_per_second")
    assert unknown is not None
    assert math.isnan(unknown)  # unknown is NaN, never 0
    assert value(tel, "pdscaler_reconcile_duration_seconds_count") == 1.0
    tel.forget("serving", "chat")
    assert value(tel, "pdscaler_desired_replicas", pool="decode") is None


def test_a_flip_counts_its_replicas_by_direction_and_goes_with_its_pddeployment() -> None:
    tel = Telemetry()
    before = {Role.PREFILL: 20, Role.DECODE: 4}
    ready = {Role.PREFILL: PoolObservation(20, 20), Role.DECODE: PoolObservation(4, 4)}
    flipping = dataclasses.replace(DECISION, flip=Flip(Role.PREFILL, 2, 1.5, 90.0))
    tel.record_tick("serving", "chat", flipping, before, ready, SNAP, 0.01)
    tel.record_tick("serving", "chat", DECISION, before, ready, SNAP, 0.01)
    key = {"source": "prefill", "target": "decode"}
    assert value(tel, "pdscaler_role_flips_total", **key) == 2.0
    tel.forget("serving", "chat")
    assert value(tel, "pdscaler_role_flips_total", **key) is None


def test_metrics_server_serves_metrics_and_liveness() -> None:
    tel = Telemetry()
    tel.record_write("apply", "Deployment")
    healthy = [True]
    server = MetricsServer(tel, 0, host="127.0.0.1", healthy=lambda: healthy[0]).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        assert 'pdscaler_api_writes_total{kind="Deployment",verb="apply"} 1.0' in body
        healthy[0] = False
        with pytest.raises(urllib.error.HTTPError, match="503"):
            urllib.request.urlopen(f"{base}/healthz", timeout=5)
    finally:
        server.stop()


def test_explain_renders_the_published_decision() -> None:
    spec = PDDeploymentSpec.model_validate(
        {
            "engine": {"image": "img", "version": "v0.11.0"},
            "prefill": {"tokensPerSecond": 3000, "replicas": {"max": 32}},
            "decode": {"tokensPerSecond": 800, "replicas": {"max": 32}},
        }
    )
    st = status.build_status(
        status.StatusInput(
            now=1735725615.0,
            generation=1,
            spec=spec,
            decision=DECISION,
            metrics=SNAP,
            prefill=PoolObservation(20, 20),
            decode=PoolObservation(6, 4),
            active_version="v0.11.0",
            target_version="v0.11.0",
            progress=status.ProgressFacts(),
        )
    )
    pdd = {
        "metadata": {"name": "chat", "namespace": "serving"},
        "spec": {"scaling": {"mode": "Auto"}},
        "status": st.to_k8s(),
    }
    text = render(pdd)
    assert text.splitlines()[0] == "chat (serving)  version v0.11.0  mode Auto"
    assert "ScaledDecode (decode) at 2025-01-01T10:00:15Z" in text
    assert "Scaled decode 4->6: TPOT p95 62ms > 50ms SLO; drain 38s <= 60s" in text
    assert "R 20 req/s, L_p 2,000, L_d 500 tokens; queues P 0, D 12" in text
    assert "N_P 19.05, N_D 17.86, ratio 1.07, drain 38.0s" in text
    assert "decode 4/6 ready/desired" in text
    assert "MetricsAvailable=True (MetricsOK)" in text
    # what R counted this tick (the condition's message; SNAP is completions)
    assert "MetricsAvailable: load shape known; R = completed requests/s" in text


def test_explain_before_the_first_tick() -> None:
    text = render({"metadata": {"name": "x", "namespace": "y"}, "spec": {}})
    assert "none yet (the operator has not ticked)" in text
