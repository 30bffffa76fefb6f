"""The lab's pure parts, without a running lab: settings, templates, process records.

These need no cluster (they do not use the `lab` fixture, so they are not marked `lab`):
durations, environment overrides, the rendered kwok stages and fake nodes, the node
readiness rule, the Prometheus config (Kubernetes discovery), kwok's loopback pod
addresses, and the PID discipline of `processes` (a record
whose start time does not match is never signalled).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pdlab.__main__ import main
from pdlab.cluster import kwok, processes, prometheus
from pdlab.cluster.config import DEFAULT_PORTS, LabConfig, go_duration_ms
from pdlab.cluster.kubeapi import node_ready
from pdlab.cluster.kwok import GPU_RESOURCE, STARTUP_DELAY_ANNOTATION, gpu_node, render_stages


@pytest.mark.parametrize(
    ("text", "ms"),
    [("2s", 2000), ("500ms", 500), ("1m30s", 90_000), ("1.5s", 1500), ("1h", 3_600_000)],
)
def test_go_duration_ms(text: str, ms: int) -> None:
    assert go_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "2", "two seconds", "-1s", "1d"])
def test_go_duration_rejects_non_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a Go duration"):
        go_duration_ms(text)


def test_config_env_overrides_dir_and_ports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for port_name in DEFAULT_PORTS:  # a CI run may itself be on overridden ports
        monkeypatch.delenv(f"PDLAB_PORT_{port_name.upper()}", raising=False)
    monkeypatch.setenv("PDLAB_DIR", str(tmp_path / "lab2"))
    monkeypatch.setenv("PDLAB_PORT_APISERVER", "36443")
    cfg = LabConfig.from_env(nodes=2)
    assert cfg.lab_dir == tmp_path / "lab2"
    assert cfg.apiserver_url == "https://127.0.0.1:36443"
    assert cfg.ports["prometheus"] == DEFAULT_PORTS["prometheus"]
    assert cfg.nodes == 2
    assert cfg.kubeconfig == tmp_path / "lab2" / "kubeconfig"
    assert LabConfig.from_json(json.loads(json.dumps(cfg.to_json()))) == cfg


def test_config_rejects_bad_delay(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Go duration"):
        LabConfig(lab_dir=tmp_path, startup_delay="soon")


def test_stages_render_default_delay_and_annotation_override() -> None:
    stages = {d["metadata"]["name"]: d for d in yaml.safe_load_all(render_stages("3s")) if d}
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-delete",
        "router-pod-delete",
        "pod-running",
        "pod-ready",
    }
    # a router pod stays Terminating 2 s (its grace period); other pods go at once
    assert stages["router-pod-delete"]["spec"]["delay"]["durationMilliseconds"] == 2000
    assert "delay" not in stages["pod-delete"]["spec"]
    delay = stages["pod-ready"]["spec"]["delay"]
    assert delay["durationMilliseconds"] == 3000
    assert STARTUP_DELAY_ANNOTATION in delay["durationFrom"]["expressionFrom"]
    # A jitter <= the delay would replace the delay: none may be set.
    assert "jitterDurationMilliseconds" not in delay
    assert "delay" not in stages["pod-running"]["spec"]


def test_gpu_node_shape() -> None:
    node = gpu_node(2, 4, "NVIDIA-A100-SXM4-80GB")
    meta, spec, status = node["metadata"], node["spec"], node["status"]
    assert meta["name"] == "gpu-node-2" == meta["labels"]["kubernetes.io/hostname"]
    assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert meta["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert status["allocatable"][GPU_RESOURCE] == status["capacity"][GPU_RESOURCE] == "4"
    assert {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"} in spec["taints"]


@pytest.mark.parametrize(
    ("ready", "taint", "expected"),
    [
        ("True", None, True),
        ("False", None, False),
        ("True", "node.kubernetes.io/not-ready", False),
        ("True", "nvidia.com/gpu", True),
    ],
)
def test_node_ready_needs_condition_and_no_lifecycle_taint(
    ready: str, taint: str | None, expected: bool
) -> None:
    node = {
        "spec": {"taints": [{"key": taint, "effect": "NoSchedule"}] if taint else []},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }
    assert node_ready(node) is expected


def test_prometheus_config_discovers_pods_through_the_lab_api_server(tmp_path: Path) -> None:
    """No file-based target list: one kubernetes_sd (role: pod) job against the lab's API
    server with its PKI, relabelled by the user-facing snippet."""
    path = prometheus.write_config(tmp_path, "1s", "https://127.0.0.1:26443", tmp_path / "pki")
    doc = yaml.safe_load(path.read_text())
    job = doc["scrape_configs"][0]
    assert doc["global"]["scrape_interval"] == "1s"
    assert "file_sd_configs" not in job
    sd = job["kubernetes_sd_configs"][0]
    assert (sd["role"], sd["api_server"]) == ("pod", "https://127.0.0.1:26443")
    assert sd["tls_config"]["ca_file"] == str(tmp_path / "pki" / "ca.crt")
    assert job["relabel_configs"] == prometheus.scrape_jobs("x", tmp_path)[0]["relabel_configs"]
    targets = {r.get("target_label") for r in job["relabel_configs"]}
    assert {"namespace", "pod", "pdscaler_io_name", "pdscaler_io_role"} <= targets
    assert {"pdscaler_io_revision", "pdscaler_io_version"} <= targets


def test_processes_start_and_stop_exactly_the_recorded_group(tmp_path: Path) -> None:
    st = processes.State(tmp_path / "state.json")
    rec = processes.start(st, "sleeper", ["sleep", "60"], tmp_path / "logs", tmp_path)
    assert processes.is_alive(rec)
    assert processes.State(tmp_path / "state.json").procs["sleeper"].pid == rec.pid
    assert processes.stop(st, "sleeper", grace_s=5) is True
    assert not processes.is_alive(rec)
    assert processes.group_members(rec.pid) == []
    assert "sleeper" not in processes.State(tmp_path / "state.json").procs


def test_processes_never_signal_a_pid_whose_start_time_differs(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "60"])
    try:
        ticks = processes.start_ticks(other.pid)
        assert ticks is not None
        st = processes.State(tmp_path / "state.json")
        # As if our component had had this PID once and the kernel reused it.
        st.procs["ghost"] = processes.ProcRecord("ghost", other.pid, ticks - 1, ["x"], "log")
        assert processes.stop(st, "ghost", grace_s=1) is False
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_cli_env_prints_exports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PDLAB_DIR", str(tmp_path))
    monkeypatch.setenv("PDLAB_PORT_PROMETHEUS", "39090")
    assert main(["env"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"export KUBECONFIG={tmp_path / 'kubeconfig'}",
        "export PDLAB_PROMETHEUS_URL=http://127.0.0.1:39090",
        f"export PDLAB_DIR={tmp_path}",
    ]


def test_cli_bad_arguments_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pdlab", "up", "--nodes", "many"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "invalid int value" in proc.stderr


def test_kwok_gives_pods_loopback_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pod IPs in 127.64.0.0/16 (or PDLAB_POD_CIDR), nodes at 127.0.0.1: the lab host can
    serve every pod IP; a range outside 127.0.0.0/8 is refused."""
    argv = kwok.kwok_argv(Path("/b/kwok"), Path("/k"), Path("/s"), 1)
    assert "--cidr=127.64.0.0/16" in argv
    assert "--node-ip=127.0.0.1" in argv
    monkeypatch.setenv("PDLAB_POD_CIDR", "127.65.0.0/16")
    assert LabConfig.from_env().pod_cidr == "127.65.0.0/16"
    with pytest.raises(ValueError, match=r"127\.0\.0\.0/8"):
        LabConfig(lab_dir=Path("/x"), pod_cidr="10.244.0.0/16")
