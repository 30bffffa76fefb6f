"""`python -m pdlab up|status|down` on a second, private lab (own PDLAB_DIR and ports), so
the shared lab other tests use keeps running: a warm `up` is ready in under a minute, a
second `up` is a no-op, `down` leaves none of the lab's processes, and a start that
cannot finish names the component and its log file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pdlab.cluster import processes
from pdlab.cluster.config import DEFAULT_PORTS
from pdlab.cluster.lab import Lab
from support.labkit import free_port

WARM_UP_LIMIT_S = 60.0


def _private_lab_env(lab_dir: Path) -> dict[str, str]:
    """Environment for a lab in `lab_dir` on free loopback ports."""
    env = dict(os.environ)
    env["PDLAB_DIR"] = str(lab_dir)
    for name in DEFAULT_PORTS:
        env[f"PDLAB_PORT_{name.upper()}"] = str(free_port())
    return env


def _pdlab(
    env: dict[str, str], *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pdlab", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _assert_gone(pids: dict[str, int], ticks: dict[str, int]) -> None:
    """No recorded process (same PID and start time) nor member of its group is left."""
    for name, pid in pids.items():
        assert processes.start_ticks(pid) != ticks[name], f"{name} (pid {pid}) still runs"
        assert processes.group_members(pid) == [], f"{name}'s process group is not empty"


def test_warm_up_under_a_minute_idempotent_and_down_leaves_nothing(
    lab: Lab, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    env = _private_lab_env(tmp_path / "lab")
    t0 = time.monotonic()
    up = _pdlab(env, "up", "--nodes", "2")
    took = time.monotonic() - t0
    try:
        assert up.returncode == 0, up.stderr
        record_property("pdlab_up_warm_seconds", round(took, 1))
        print(f"pdlab up (warm binaries, fresh lab dir): {took:.1f}s; {up.stdout.splitlines()[0]}")
        assert took < WARM_UP_LIMIT_S
        assert f"export KUBECONFIG={tmp_path / 'lab' / 'kubeconfig'}" in up.stdout

        status = _pdlab(env, "status")
        assert status.returncode == 0, status.stdout
        doc = json.loads(status.stdout)
        assert all(c["healthy"] for c in doc["components"].values()), doc
        assert doc["nodes_ready"] == ["cpu-node-0", "gpu-node-0", "gpu-node-1"]
        pids = {name: c["pid"] for name, c in doc["components"].items()}
        ticks = {name: processes.start_ticks(pid) for name, pid in pids.items()}

        again = _pdlab(env, "up", "--nodes", "2")
        assert again.returncode == 0, again.stderr
        assert float(re.findall(r"up in ([\d.]+)s", again.stdout)[0]) < 5.0
        assert {
            n: c["pid"] for n, c in json.loads(_pdlab(env, "status").stdout)["components"].items()
        } == pids
    finally:
        down = _pdlab(env, "down")
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    _assert_gone(pids, {n: t for n, t in ticks.items() if t is not None})
    assert _pdlab(env, "status").returncode == 3
    # The shared lab was not touched.
    assert lab.is_up()


def test_start_that_cannot_finish_names_component_and_log(lab: Lab, tmp_path: Path) -> None:
    env = _private_lab_env(tmp_path / "lab")
    state_file = tmp_path / "lab" / "state.json"
    try:
        # One second is far too short for the API server to become ready.
        up = _pdlab(env, "up", "--timeout", "1")
        recorded = json.loads(state_file.read_text())["processes"]
    finally:
        down = _pdlab(env, "down")
    assert up.returncode == 1
    log = tmp_path / "lab" / "logs" / "apiserver.log"
    assert "timed out after 1s waiting for apiserver (/readyz)" in up.stderr
    assert f"log {log}" in up.stderr
    assert {"etcd", "apiserver", "prometheus"} <= set(recorded)
    assert down.returncode == 0, down.stderr
    _assert_gone(
        {n: r["pid"] for n, r in recorded.items()},
        {n: r["start_ticks"] for n, r in recorded.items()},
    )
    assert not state_file.exists()
    assert lab.is_up()
