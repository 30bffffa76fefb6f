"""What the demo reads and writes in the cluster, and what it reads from the engine
simulator: Ready pods per role, the demo PDDeployment (its manifest loaded, pointed at the
lab's Prometheus and its clocks quickened for a shortened run; read, applied), its
Events as they appear (``EventLog``), and the simulator's ``/status``. Must not: start or
stop anything (``pdlab.demo.run`` does) or touch other namespaces.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

from pdlab.cluster.kubeclient import (
    Kube,
    if_found,
    pod_ready,
)
from pdscaler.naming import LABEL_NAME, LABEL_ROLE
from pdscaler.spec import GROUP, PLURAL, VERSION, PDDeployment, parse_duration


def ready_pods(kube: Kube, namespace: str, name: str) -> dict[str, int]:
    """Ready, not terminating pods per role: {"prefill": 4, "decode": 4}."""
    pods: list[Any] = kube.core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_NAME}={name},{LABEL_ROLE}", _request_timeout=10
    ).items
    out = {"prefill": 0, "decode": 0}
    for pod in pods:
        role = (pod.metadata.labels or {}).get(LABEL_ROLE)
        if pod_ready(pod) and pod.metadata.deletion_timestamp is None and role in out:
            out[role] += 1
    return out


def read_pdd(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The PDDeployment as the API's JSON; None if there is none."""
    obj = if_found(
        lambda: kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    )
    return cast(dict[str, Any] | None, obj)


def apply_pdd(kube: Kube, manifest: dict[str, Any]) -> None:
    ns, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    current = read_pdd(kube, ns, name)
    if current is None:
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)
        return
    manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, manifest)


def quicken(doc: dict[str, Any], factor: float) -> None:
    """Shorten the operator's clocks for a shortened scenario (``factor`` < 1): the rate
    window and the scale-down stabilization to ``factor`` x theirs (at least 10 s, five
    2 s scrapes), the interval likewise (at least 2 s). The demo's 30 s / 5 s / 30 s at
    factor 0.4 (a 120 s run) become 12 s / 2 s / 12 s. The pods' start-up is kept."""
    if factor >= 1.0:
        return
    spec = doc["spec"]
    metrics, scaling = spec.setdefault("metrics", {}), spec.setdefault("scaling", {})
    for where, key, floor in (
        (metrics, "window", 10.0),
        (scaling, "interval", 2.0),
        (scaling, "scaleDownStabilization", 10.0),
    ):
        seconds = parse_duration(str(where.get(key, "30s")))
        where[key] = f"{max(floor, round(seconds * factor)):.0f}s"


def load_manifest(
    path: Path, namespace: str, prometheus_url: str, factor: float = 1.0
) -> dict[str, Any]:
    """The demo PDDeployment, validated, in ``namespace``, reading the lab's Prometheus,
    its clocks quickened by ``factor`` (see ``quicken``)."""
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    doc["metadata"]["namespace"] = namespace
    doc["spec"].setdefault("metrics", {}).setdefault("prometheus", {})["url"] = prometheus_url
    quicken(doc, factor)
    PDDeployment.model_validate(doc)
    return doc


@dataclass
class EventLog:
    """Decisions as they appear: the PDDeployment's Events (reason: message), or its
    ``status.lastDecision`` when the operator has emitted no Event yet."""

    seen: set[tuple[str, int]] = field(default_factory=set)
    last_decision: str | None = None
    entries: list[tuple[float, str, str]] = field(default_factory=list)  # wall, hh:mm:ss, text

    def poll(self, kube: Kube, namespace: str, name: str, pdd: dict[str, Any] | None) -> None:
        events: list[Any] = kube.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}", _request_timeout=10
        ).items
        events.sort(key=_event_time)
        for ev in events:
            if ev.involved_object.kind != "PDDeployment":
                continue
            key = (str(ev.metadata.uid), int(ev.count or 1))
            if key not in self.seen:
                self.seen.add(key)
                self._add(f"{ev.reason}: {ev.message}")
        decision = ((pdd or {}).get("status") or {}).get("lastDecision") or {}
        text = decision.get("message") or decision.get("reason")
        stamp = f"{decision.get('time')}|{text}"
        if text and stamp != self.last_decision:
            self.last_decision = stamp
            if not self.seen:  # no Events at all: fall back on the status
                self._add(f"{decision.get('action', '')}: {text}")

    def _add(self, text: str) -> None:
        now = time.time()
        self.entries.append((now, time.strftime("%H:%M:%S", time.localtime(now)), text))


def _event_time(ev: Any) -> float:
    stamp = ev.last_timestamp or ev.event_time or ev.metadata.creation_timestamp
    return float(stamp.timestamp()) if stamp is not None else 0.0


def engine_doc(port: int) -> dict[str, Any] | None:
    """The engine simulator's whole /status (None if unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2.0) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
    except (OSError, ValueError):
        return None
    return doc


def engine_status(port: int) -> dict[str, Any] | None:
    """The engine simulator's /status for the demo's PDDeployment (None if unreachable)."""
    doc = engine_doc(port)
    if doc is None:
        return None
    deps = doc.get("deployments") or []
    return deps[0] if deps else {}
