"""The operator's metric names follow Prometheus' conventions (telemetry.py): one unit
per metric name, the unit in the name; counters are counters named ``_total``;
``pdscaler_build_info`` is 1 with the version, commit and Python; the process,
platform and garbage-collector collectors are exported."""

from __future__ import annotations

import platform
import re
from importlib import metadata

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pdscaler import telemetry
from pdscaler.spec import PDDeploymentSpec, PDDeploymentStatus
from pdscaler.telemetry import Telemetry
from pdscaler.types import Action, Decision, ModelOutputs, PoolObservation, Role
from support.builders import snapshot

#: The unit suffixes a pdscaler gauge may end in (Prometheus' base units, plus counts).
UNITS = ("_seconds", "_tokens", "_per_second", "_replicas", "_requests", "_ratio", "_info")
#: State and count gauges with no unit: 0/1 states, a step count, GPU counts.
UNITLESS = {
    "pdscaler_condition",
    "pdscaler_condition_reason",
    "pdscaler_rollout_phase",
    "pdscaler_rollout_step",
    "pdscaler_leader",
    "pdscaler_gpu_budget",
    "pdscaler_gpus_per_replica",
}
SPEC = {
    "engine": {"image": "i", "version": "v1"},
    "prefill": {"tokensPerSecond": 3000},
    "decode": {"tokensPerSecond": 800},
}
DECISION = Decision(
    prefill=20,
    decode=6,
    action=Action.SCALED_DECODE,
    message="m",
    pool=Role.DECODE,
    model=ModelOutputs(n_prefill=19.05, n_decode=17.86, ratio=1.07, drain_seconds=38.0),
)
READY = {Role.PREFILL: PoolObservation(20, 20), Role.DECODE: PoolObservation(4, 3)}
BEFORE = {Role.PREFILL: 20, Role.DECODE: 4}


def everything() -> Telemetry:
    """A Telemetry with a series in every family."""
    tel = Telemetry()
    snap = snapshot(ttft=0.85, tpot=0.062, decode_queue=12.0)
    tel.record_tick("serving", "chat", DECISION, BEFORE, READY, snap, 0.01)
    spec = PDDeploymentSpec.model_validate(SPEC)
    tel.record_targets("serving", "chat", spec, PDDeploymentStatus())
    tel.record_status("serving", "chat", [("Ready", "True")], None)
    tel.errors.labels("serving", "chat").inc()
    tel.flips.labels("serving", "chat", "decode", "prefill").inc()
    tel.record_write("apply", "Deployment")
    tel.track_writes_sent(lambda: 7)
    tel.track_requests(lambda: {("get", "pods"): 3}, lambda: (4, 1))
    return tel


def families(tel: Telemetry) -> dict[str, str]:
    """pdscaler family name -> its type, from the exposition."""
    text = tel.exposition().decode()
    return {f.name: f.type for f in text_string_to_metric_families(text) if f.name.startswith("pd")}


def test_every_gauge_has_one_unit_in_its_name() -> None:
    """The old ``pdscaler_model_input{input}`` mixed req/s, tokens, requests and seconds
    in one family: no gauge may be neither unit-suffixed nor a known unitless state."""
    gauges = [
        n
        for n, t in families(everything()).items()
        if t in ("gauge", "info") and not n.endswith("_created")  # a counter's start time
    ]
    assert "pdscaler_observed_requests_per_second" in gauges
    odd = [n for n in gauges if not n.endswith(UNITS) and n not in UNITLESS]
    assert not odd, odd
    assert not [n for n in gauges if n.startswith(("pdscaler_model_input", "pdscaler_model_out"))]


def test_every_value_of_a_family_has_the_same_labels_but_no_kind_label() -> None:
    """No family tells its quantities apart by a label (``input``, ``output``)."""
    text = everything().exposition().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert not {"input", "output"} & set(sample.labels), (family.name, sample.labels)


def test_counters_are_counters_named_total() -> None:
    tel = everything()
    kinds = families(tel)
    for name in (
        "pdscaler_writes_sent",
        "pdscaler_decisions",
        "pdscaler_role_flips",
        "pdscaler_api_writes",
        "pdscaler_reconcile_errors",
        "pdscaler_kube_requests",
        "pdscaler_prometheus_requests",
    ):
        assert kinds[name] == "counter", name
    text = tel.exposition().decode()
    assert re.search(r"^# TYPE pdscaler_writes_sent(_total)? counter$", text, re.M)
    assert "\npdscaler_writes_sent_total 7.0\n" in text


def test_the_tick_numbers_land_in_their_own_families() -> None:
    def value(name: str, **labels: str) -> float:
        want = {"namespace": "serving", "name": "chat", **labels}
        text = tel.exposition().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and s.labels == want:
                    return float(s.value)
        raise AssertionError(f"no {name}{want}")

    tel = everything()
    assert value("pdscaler_observed_queue_requests", pool="decode") == 12.0
    assert value("pdscaler_observed_ttft_seconds") == 0.85
    assert value("pdscaler_model_replicas", pool="decode") == 17.86
    assert value("pdscaler_model_pd_ratio") == 1.07
    # a tick Prometheus did not answer keeps the last measured values (not NaN, not 0)
    tel.record_tick("serving", "chat", DECISION, BEFORE, READY, None, 0.01)
    assert value("pdscaler_observed_ttft_seconds") == 0.85
    tel.forget("serving", "chat")
    left = [n for n in families(tel) if n.startswith(("pdscaler_observed", "pdscaler_model"))]
    text = tel.exposition().decode()
    assert not [line for line in text.splitlines() if 'name="chat"' in line], left


def test_build_info_is_one_with_version_commit_and_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PDSCALER_COMMIT", "abc123def456")
    telemetry.build_labels.cache_clear()
    try:
        text = Telemetry().exposition().decode()
    finally:
        telemetry.build_labels.cache_clear()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "pdscaler_build_info"]
    (sample,) = family.samples
    assert sample.value == 1.0
    assert sample.labels["commit"] == "abc123def456"
    assert sample.labels["python"] == platform.python_version()
    assert sample.labels["version"] == metadata.version("pdscaler")


def test_without_the_variable_the_commit_is_the_checkouts_head(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run from this clone: the git HEAD (12 hex digits), never empty."""
    monkeypatch.delenv("PDSCALER_COMMIT", raising=False)
    telemetry.build_labels.cache_clear()
    try:
        _, commit, _ = telemetry.build_labels()
    finally:
        telemetry.build_labels.cache_clear()
    assert len(commit) == 12
    int(commit, 16)


def test_process_and_platform_metrics_are_exported() -> None:
    text = Telemetry().exposition().decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"process_cpu_seconds", "process_resident_memory_bytes", "python_info"} <= names
    assert "python_gc_collections" in names
