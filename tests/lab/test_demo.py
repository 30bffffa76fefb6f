"""`python -m pdlab demo`, shortened to a 135 s scenario, against the lab: the operator
moves the pools the way the request mix asks, and the demo leaves nothing behind.

The scenario (pdlab.scenarios, demo scaled to 135 s): warm-up 13.5 s, chat 33.75 s
(P:D ~1:1 by the ratio model), long documents 47.25 s (prompts 4x longer, outputs 4x
shorter: the ratio model asks for ~11 prefill per decode replica), a burst 27 s, a
cool-down 13.5 s; the operator's window/interval/stabilization quickened to
14 s/2 s/14 s. Judged on the second half of each phase (summary.json,
pdlab.demo_report). Runs against the lab (one beside the simulator benchmark) gave
P:D 1.44-1.84 in chat and 3.7-5.6 in long documents (prefill share 0.59-0.64 and
0.79-0.85). Before the policy set aside a TTFT breach that new prefill replicas had
already drained, and held its proportional step for two ticks after new replicas came
up (a 2 s tick is shorter than a scrape plus Prometheus' lag), chat overshot to P:D 2-3
after the warm-up ramp (prefill share 0.75 in one CI run, against 0.81 in long
documents: this test failed on it).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

from pdlab.lab import Lab
from pdlab.prometheus import active_targets
from pdscaler.spec import GROUP, PLURAL, VERSION
from support.labkit import Kube, free_port, not_found, wait_for

REPO = Path(__file__).resolve().parents[2]
SCENARIO_S = 135
DEMO_TIMEOUT_S = 420


def cmdline(pid: int) -> str:
    """The command line of a live process ("" when it is gone or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat[stat.rindex(")") + 2] in "ZX":
            return ""
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_shortened_demo_moves_the_ratio_with_the_mix_and_cleans_up(
    lab: Lab, kube: Kube, crd: str, tmp_path: Path
) -> None:
    namespace = f"t-demo-{secrets.token_hex(3)}"
    out = tmp_path / "demo-results"
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-m", "pdlab", "demo", "--duration", str(SCENARIO_S), "--no-live",
         "--out", str(out), "--namespace", namespace, "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S,
    )  # fmt: skip
    logs = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in out.glob("*.log")
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}\n{logs}"

    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    phases = {p["name"]: p for p in summary["phases"]}
    chat, docs, burst = phases["chat"], phases["long-docs"], phases["burst"]
    # Long documents: the prefill pool's share of the replicas goes up, the P:D ratio
    # grows by half at least (the ratio model asks for ~11:1 against ~1:1; how far it
    # gets depends on how much the pools overshot after the warm-up), and the decode
    # pool does not grow (it is not the bottleneck; it shrinks only a third per
    # stabilization window, so in a shortened run it may barely move); the chat burst
    # brings the decode pool back.
    assert docs["prefill_share"] > chat["prefill_share"] + 0.1, phases
    assert docs["ratio"] > 1.5 * chat["ratio"], phases
    assert docs["decode_mean"] <= 1.1 * chat["decode_mean"], phases
    assert burst["decode_mean"] > docs["decode_mean"], phases
    assert chat["prefill_mean"] >= 2, phases  # the chat load needed more than the minimum
    assert summary["decisions"], "no decision was shown"
    assert (out / "demo.png").stat().st_size > 20_000
    assert len((out / "timeline.csv").read_text().splitlines()) > SCENARIO_S

    # Nothing left running: the operator and the engine simulator are gone, the
    # PDDeployment is deleted, its scrape targets unregistered, its pods going.
    for name, pid in summary["processes"].items():
        line = cmdline(pid)  # "" when gone; a reused PID runs something else
        assert "pdlab" not in line, f"{name} (pid {pid}) still runs: {line}"
        assert "pdscaler" not in line, f"{name} (pid {pid}) still runs: {line}"
    assert not_found(
        lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "demo")
    )
    wait_for(
        lambda: not_found(lambda: kube.core.read_namespace(namespace)),
        120,
        f"namespace {namespace} deleted",
        interval=1.0,
    )
    wait_for(  # Prometheus' discovery dropped the demo's pods
        lambda: (
            not [
                t
                for t in active_targets(lab.prometheus_url)
                if t["labels"].get("namespace") == namespace
            ]
        ),
        30,
        f"no scrape target left in {namespace}",
    )
