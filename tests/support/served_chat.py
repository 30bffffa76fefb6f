"""deploy/examples/chat.yaml served in the lab: the PDDeployment scaled to the lab, the
operator ticking, the engine simulator, the pod runner for the routers and the front
Service's proxy; and one streamed completion through the front."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster.lab import Lab
from pdlab.cluster.svcproxy import SvcProxy
from support.labkit import Kube, request_path
from support.opkit import create_pdd, operator_runtime, ticking

REPO = Path(__file__).resolve().parents[2]
NAME = "chat"
WORDS = "the quick brown fox jumps over the lazy dog " * 20  # 180 prompt words


def scaled_chat(namespace: str, prometheus_url: str) -> dict[str, Any]:
    """deploy/examples/chat.yaml for the lab: small pools, fast start-up, short windows."""
    doc: dict[str, Any] = yaml.safe_load((REPO / "deploy/examples/chat.yaml").read_text())
    doc["metadata"] = {"name": NAME, "namespace": namespace}
    spec = doc["spec"]
    for role, low in (("prefill", 3), ("decode", 1)):
        pool = spec[role]
        pool["replicas"] = {"min": low, "max": 4}
        tpl = pool["template"]
        tpl["metadata"]["annotations"] = {"pdscaler.io/startup-delay": "6s"}
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
    spec["metrics"] = {"prometheus": {"url": prometheus_url}, "preset": "vllm", "window": "20s"}
    spec["scaling"].update({"interval": "1s", "maxGPUs": 12, "scaleDownStabilization": "5m"})
    spec["rollout"] = {"maxSurgeGPUs": 1, "progressDeadline": "3m"}
    return doc


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
