"""deploy/examples/chat.yaml served in the lab: the PDDeployment scaled to the lab, the
operator ticking, the engine simulator, the pod runner for the routers and the front
Service's proxy; and one streamed completion through the front. With role flips
(``flip_chat``, tests/lab/test_role_flip.py and drill D20): the pods serving each role
and when decode's recommendation became 1."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster.lab import Lab
from pdlab.cluster.svcproxy import SvcProxy
from pdscaler import naming
from pdscaler.observe import is_ready, labels, terminating
from support.background import Background
from support.labkit import Kube, request_path, wait_for
from support.opkit import condition, create_pdd, get_pdd, operator_runtime, pod_dicts, ticking

REPO = Path(__file__).resolve().parents[2]
NAME = "chat"
WORDS = "the quick brown fox jumps over the lazy dog " * 20  # 180 prompt words
FLIP_WINDOW_S = 5.0
#: Clients streaming completions through the front at once (``Clients``).
CLIENTS = 2


def scaled_chat(namespace: str, prometheus_url: str, example: str = "chat.yaml") -> dict[str, Any]:
    """deploy/examples/chat.yaml (or another example of ``deploy/examples/``, e.g.
    ``sglang.yaml``) for the lab: small pools, fast start-up, short windows; the
    example's metric preset is kept."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "deploy/examples" / example).read_text())
    preset = ((doc["spec"].get("metrics") or {}).get("preset")) or "vllm"
    doc["metadata"] = {"name": NAME, "namespace": namespace}
    spec = doc["spec"]
    for role, low in (("prefill", 3), ("decode", 1)):
        pool = spec[role]
        pool["replicas"] = {"min": low, "max": 4}
        tpl = pool["template"]
        tpl.setdefault("metadata", {})["annotations"] = {"pdscaler.io/startup-delay": "6s"}
        tpl["spec"]["terminationGracePeriodSeconds"] = 5
        for c in tpl["spec"]["containers"]:
            c["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    spec["router"].update(
        {
            "prefillPerRouter": 1,
            "replicas": {"min": 1, "max": 4},
            "template": {"metadata": {"annotations": {"pdscaler.io/startup-delay": "3s"}}},
        }
    )
    spec["startupSeconds"] = 3
    spec["metrics"] = {"prometheus": {"url": prometheus_url}, "preset": preset, "window": "20s"}
    spec["scaling"].update({"interval": "1s", "maxGPUs": 12, "scaleDownStabilization": "5m"})
    spec["rollout"] = {"maxSurgeGPUs": 1, "progressDeadline": "3m"}
    return doc


def flip_chat(namespace: str, prometheus_url: str) -> dict[str, Any]:
    """``scaled_chat`` with role flips on (reconfiguration 0 s, a 5 s flip window),
    prefill 1-4 and decode 4-6 replicas."""
    doc = scaled_chat(namespace, prometheus_url)
    spec = doc["spec"]
    spec["prefill"]["replicas"] = {"min": 1, "max": 4}
    spec["decode"]["replicas"] = {"min": 4, "max": 6}
    flips = {"enabled": True, "reconfigureSeconds": 0, "window": f"{FLIP_WINDOW_S:g}s"}
    spec["scaling"]["roleFlips"] = flips
    return doc


def decode_recommended_one_since(kube: Kube, namespace: str) -> float | None:
    """When decode's recommendation became 1 (the newest change point of the policy's
    memory in the status, [t, prefill, decode]); None while it is not 1."""
    memory = (get_pdd(kube, namespace, NAME).get("status") or {}).get("memory") or {}
    points = memory.get("recommendations") or []
    return float(points[-1][0]) if points and points[-1][2] == 1 else None


def metrics_ok(kube: Kube, namespace: str) -> bool:
    """``MetricsAvailable`` True (no data gap: a pool with a gap gives no replica to a
    flip); else LookupError with its message (``wait_for`` reports it)."""
    got = condition(get_pdd(kube, namespace, NAME), "MetricsAvailable") or {}
    if got.get("status") != "True":
        raise LookupError(f"MetricsAvailable {got.get('status')}: {got.get('message')}")
    return True


def armed(kube: Kube, namespace: str) -> None:
    """Until a flip can take decode's surplus: its recommendation 1 for the whole flip
    window (from the operator's record in the status) and the metrics without a gap
    (pods Prometheus has not scraped yet, or a latency unknown under load, make the
    policy start prefill cold instead)."""
    since = wait_for(lambda: decode_recommended_one_since(kube, namespace), 60, "decode -> 1")
    time.sleep(max(0.0, since + 1 + FLIP_WINDOW_S - time.time()))
    wait_for(lambda: metrics_ok(kube, namespace), 60, "metrics without a gap")


def decode_flipped_or_why(kube: Kube, namespace: str) -> dict[str, Any]:
    """A live pod the decode Deployment made that serves prefill; else LookupError with
    the operator's last decision (its message, model and inputs), which ``wait_for``
    reports when it times out: why no replica changed role."""
    for pod in live_pods(kube, namespace):
        lab = labels(pod)
        if lab.get(naming.LABEL_POOL) == "decode" and lab[naming.LABEL_ROLE] == "prefill":
            return pod
    last = (get_pdd(kube, namespace, NAME).get("status") or {}).get("lastDecision") or {}
    raise LookupError(
        f"no decode pod serves prefill; last decision {last.get('action')}: "
        f"{last.get('message')}; model {last.get('model')}; inputs {last.get('inputs')}; "
        + decisions(kube, namespace)
    )


@dataclass
class Clients(Background):
    """``CLIENTS`` (2) threads each sending one streamed completion after another through
    the front: (time, ok) per request in ``sent``."""

    front: int
    sent: list[tuple[float, bool]] = field(default_factory=list)

    def _run(self) -> None:
        def loop() -> None:
            while not self._stop.is_set():
                ok = completion(self.front) is not None
                self.sent.append((time.time(), ok))
                if not ok:
                    self._stop.wait(0.2)  # a failure is counted once, not in a busy loop

        workers = [threading.Thread(target=loop, daemon=True) for _ in range(CLIENTS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    def failed(self) -> list[float]:
        return [t for t, ok in self.sent if not ok]


def decisions(kube: Kube, namespace: str) -> str:
    """The operator's decision Events of the namespace, oldest first, one per line (what
    a test waiting on a decision reports when it did not come)."""
    events = kube.core.list_namespaced_event(namespace).items
    said = [
        f"{e.reason}: {e.message}"
        for e in sorted(events, key=lambda e: str(e.last_timestamp or e.event_time or ""))
        if (e.reason or "").startswith(("Scaled", "Hold", "Flipped"))
    ]
    return "decision events: " + (" | ".join(said) or "none")


def live_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    return [p for p in pod_dicts(kube, namespace, NAME) if not terminating(p)]


def ready_by_role(kube: Kube, namespace: str) -> dict[str, int]:
    """Ready pods not being deleted, by the role they serve (``pdscaler.io/role``)."""
    out: dict[str, int] = {}
    for pod in live_pods(kube, namespace):
        if is_ready(pod):
            role = labels(pod)[naming.LABEL_ROLE]
            out[role] = out.get(role, 0) + 1
    return out


@contextlib.contextmanager
def serving(
    lab: Lab,
    kube: Kube,
    namespace: str,
    sim_args: Sequence[str] = (),
    doc: dict[str, Any] | None = None,
) -> Iterator[tuple[int, int, SvcProxy]]:
    """The PDDeployment (``doc``, default ``scaled_chat``) applied and the operator
    ticking; the engine simulator (with the pod runner for router pods; ``sim_args``
    added) and the front Service's proxy; (front port, sim port, proxy)."""
    create_pdd(kube, namespace, doc or scaled_chat(namespace, lab.prometheus_url))
    rt = operator_runtime(lab)
    with (
        request_path(lab, namespace, NAME, sim_args) as (front, control, proxy),
        ticking(rt, namespace, NAME, period=1.0),
    ):
        yield front, control, proxy


def completion(front: int, max_tokens: int = 8) -> str | None:
    body = {"model": "simulated/llama-3.1-8b", "prompt": WORDS, "max_tokens": max_tokens,
            "stream": True}  # fmt: skip
    req = urllib.request.Request(
        f"http://127.0.0.1:{front}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            text = resp.read().decode()
            return text if resp.status == 200 and "[DONE]" in text else None
    except OSError:
        return None


def records(control: int, since: int = 0) -> list[dict[str, Any]]:
    """The engine simulator's request records after ``since`` (its control port)."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{control}/requests?since={since}", timeout=5
    ) as resp:
        return list(json.loads(resp.read())["records"])
