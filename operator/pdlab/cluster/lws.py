"""The LeaderWorkerSet controller in the lab: the real ``sigs.k8s.io/lws`` manager (built
from the Go module's source by build-lws.sh), its CRD, and its admission webhooks.

Owns: ``ensure_lws`` (idempotent; safe for several test sessions at once, under
``<lab>/lws/.lock``): the CRD from the module's config/crd/bases/ applied and Established;
the topology labels a group may be placed by on every fake GPU node (``TOPOLOGY``); a
client certificate (system:masters) and a webhook serving certificate (SAN 127.0.0.1) from
the lab's PKI; the manager run as a recorded lab process ``lws`` (so ``pdlab down`` stops
it, by PID), with a configuration file that turns off its own certificate rotation and
leader election; and the Mutating/ValidatingWebhookConfigurations pointing the API server
at ``https://127.0.0.1:<port>`` with the lab CA as caBundle. Must not be started by
``pdlab up`` (only the tests and tools that need LWS start it) and must not change the
lab's ports (the manager's ports are picked free and kept in ``<lab>/lws/ports.json``).

Why the webhooks are served and not turned off (the manager allows ENABLE_WEBHOOKS=false):
LWS's pod webhook gives a group's leader its group index and group key labels and its
workers their worker index; without it the pod controller cannot make a group's workers.
The webhook configurations are upstream's (config/webhook/) with the pods' objectSelector
of its Helm chart (only pods labelled ``leaderworkerset.sigs.k8s.io/name`` go through it):
a stopped manager fails LWS objects and LWS pods, never the lab's other pods.

    info = ensure_lws(lab)          # ~2 s warm; starts the manager if it is not running
    info.healthz                   # http://127.0.0.1:<port>/healthz
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster import pki, processes
from pdlab.cluster.config import PACKAGE_DIR, cache_dir, read_versions
from pdlab.cluster.kubeapi import KubeAPI
from pdlab.cluster.lab import Lab, LabError

NAME = "lws"  # the lab process' name in state.json
CRD_FILE = "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
CRD_NAME = "leaderworkersets.leaderworkerset.x-k8s.io"
BUILD_SCRIPT = PACKAGE_DIR / "build-lws.sh"
LWS_API = "/apis/leaderworkerset.x-k8s.io/v1"
#: Labels LWS uses on a group's pods (sigs.k8s.io/lws api/leaderworkerset/v1).
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
#: Topology labels on the fake GPU nodes: one zone, and a rack of two nodes each (an
#: NVLink or network domain a group can be kept in with LWS's exclusive-topology or
#: subgroup annotations): gpu-node-0,1 -> rack-0; gpu-node-2,3 -> rack-1.
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "pdlab.pdscaler.io/rack"
NODES_PER_RACK = 2


def version() -> str:
    """The pinned LWS version, e.g. "0.7.0" (versions.env)."""
    return read_versions()["LWS_VERSION"]


def tools_dir() -> Path:
    """Where build-lws.sh puts the manager and the CRD, e.g.
    ~/.cache/pdscaler/tools/lws-0.7.0."""
    return cache_dir() / "tools" / f"lws-{version()}"


def binary() -> Path:
    """The manager built from source: tools_dir()/lws-controller-manager."""
    return tools_dir() / "lws-controller-manager"


def topology_labels(node_index: int) -> dict[str, str]:
    """The topology labels of fake GPU node ``node_index``: 3 -> zone pdlab-a, rack-1."""
    return {ZONE_LABEL: "pdlab-a", RACK_LABEL: f"rack-{node_index // NODES_PER_RACK}"}


def manager_config(webhook_port: int, probe_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's --config: webhooks on 127.0.0.1:<webhook_port> with the lab's
    certificate in ``cert_dir`` (tls.crt/tls.key), its own cert rotation (which writes a
    Secret for an in-cluster Service) and leader election off (one manager per lab),
    metrics off, health probes on 127.0.0.1:<probe_port>."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
    }


def _hook(name: str, path: str, port: int, ca: str, resource: str, ops: list[str]) -> Any:
    group = "" if resource == "pods" else "leaderworkerset.x-k8s.io"
    hook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "timeoutSeconds": 10,
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": ["v1"],
                "operations": ops,
                "resources": [resource],
            }
        ],
    }
    if resource == "pods":
        hook["objectSelector"] = {
            "matchExpressions": [{"key": SET_NAME_LABEL, "operator": "Exists"}]
        }
    return hook


def webhook_configs(port: int, ca_bundle: str) -> list[dict[str, Any]]:
    """Upstream's Mutating and ValidatingWebhookConfiguration (config/webhook/manifests.yaml,
    the pods' objectSelector from its chart), each webhook at https://127.0.0.1:<port><path>
    with ``ca_bundle`` (base64 PEM, the lab CA)."""
    lws, pods = "leaderworkersets", "pods"
    mutating = [
        _hook(
            "mleaderworkerset.kb.io",
            "/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            port,
            ca_bundle,
            lws,
            ["CREATE", "UPDATE"],
        ),
        _hook("mpod.kb.io", "/mutate--v1-pod", port, ca_bundle, pods, ["CREATE"]),
    ]
    validating = [
        _hook(
            "vleaderworkerset.kb.io",
            "/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
            port,
            ca_bundle,
            lws,
            ["CREATE", "UPDATE"],
        ),
        _hook("vpod.kb.io", "/validate--v1-pod", port, ca_bundle, pods, ["CREATE", "UPDATE"]),
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "pdlab-lws-mutating"},
            "webhooks": mutating,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "pdlab-lws-validating"},
            "webhooks": validating,
        },
    ]


@dataclass(frozen=True)
class LwsInfo:
    """The running manager: its PID, ports and log."""

    pid: int
    webhook_port: int
    probe_port: int
    log: Path

    @property
    def healthz(self) -> str:
        """e.g. http://127.0.0.1:41234/healthz"""
        return f"http://127.0.0.1:{self.probe_port}/healthz"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _put(api: KubeAPI, path: str, body: dict[str, Any]) -> None:
    """Create ``body`` under the collection ``path``, or replace it at its current
    resourceVersion (retried on a conflict)."""
    name = body["metadata"]["name"]
    for _ in range(5):
        status, resp = api.request("POST", path, body)
        if status in (200, 201):
            return
        if status != 409:
            raise LabError(f"pdlab lws: creating {path}/{name}: {status} {resp}")
        status, cur = api.request("GET", f"{path}/{name}")
        if status != 200:
            continue
        body = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]},
        }
        status, resp = api.request("PUT", f"{path}/{name}", body)
        if status == 200:
            return
    raise LabError(f"pdlab lws: could not write {path}/{name}: {status} {resp}")


def apply_crd(api: KubeAPI, timeout: float = 30.0) -> None:
    """The LWS CRD from the module, applied and Established."""
    body = yaml.safe_load((tools_dir() / CRD_FILE).read_text())
    _put(api, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, crd = api.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
        )
        conds = (crd.get("status") or {}).get("conditions") or [] if status == 200 else []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conds):
            return
        time.sleep(0.2)
    raise LabError(f"pdlab lws: CRD {CRD_NAME} not Established after {timeout:.0f}s")


def label_nodes(api: KubeAPI) -> list[str]:
    """Put ``topology_labels`` on every fake GPU node (merge patch); the nodes labelled."""
    status, listing = api.request("GET", "/api/v1/nodes?labelSelector=pdlab.pdscaler.io/node=gpu")
    if status != 200:
        raise LabError(f"pdlab lws: listing nodes: {status} {listing}")
    done = []
    for node in listing["items"]:
        name = node["metadata"]["name"]
        index = int(name.rsplit("-", 1)[1])
        want = topology_labels(index)
        have = node["metadata"].get("labels") or {}
        if any(have.get(k) != v for k, v in want.items()):
            status, resp = api.request(
                "PATCH",
                f"/api/v1/nodes/{name}",
                {"metadata": {"labels": want}},
                content_type="application/merge-patch+json",
            )
            if status != 200:
                raise LabError(f"pdlab lws: labelling {name}: {status} {resp}")
        done.append(name)
    return done


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _tls_ok(port: int, cafile: Path) -> bool:
    """The webhook server answers TLS on 127.0.0.1:<port> with a certificate the lab CA
    signed for 127.0.0.1 (what the API server checks)."""
    ctx = ssl.create_default_context(cafile=str(cafile))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2.0) as sock,
            ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
        ):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_binary() -> Path:
    """The manager, built by build-lws.sh if missing (cold ~3-5 min on 2 cores)."""
    if not (binary().exists() and (tools_dir() / CRD_FILE).exists()):
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)])
        if proc.returncode != 0:
            raise LabError(f"pdlab lws: {BUILD_SCRIPT} failed (exit {proc.returncode})")
    return binary()


def ensure_lws(lab: Lab, timeout: float = 60.0) -> LwsInfo:
    """CRD, node topology labels, the manager running and healthy, its webhooks
    registered and answering; the running manager. A running healthy manager is kept
    (its webhook configurations are rewritten, which is a no-op when unchanged)."""
    api = KubeAPI(lab.apiserver_url, lab.pki_dir)
    work = lab.dir / "lws"
    with _locked(work / ".lock"):
        ensure_binary()
        apply_crd(api)
        label_nodes(api)
        pki.ensure_client_cert(lab.pki_dir, "lws", "/O=system:masters/CN=pdlab-lws")
        pki.ensure_server_cert(lab.pki_dir, "lws-webhook", "/CN=pdlab-lws-webhook", "IP:127.0.0.1")
        kubeconfig = work / "kubeconfig"
        pki.write_kubeconfig(kubeconfig, lab.apiserver_url, lab.pki_dir, "lws")
        certs = work / "certs"
        certs.mkdir(parents=True, exist_ok=True)
        for src, dst in (("lws-webhook.crt", "tls.crt"), ("lws-webhook.key", "tls.key")):
            (certs / dst).write_bytes((lab.pki_dir / src).read_bytes())
        with lab._locked():  # the lab's state file: one writer at a time
            info = _ensure_running(lab, work, kubeconfig, certs)
        ca = base64.b64encode((lab.pki_dir / "ca.crt").read_bytes()).decode()
        for cfg in webhook_configs(info.webhook_port, ca):
            plural = cfg["kind"].lower() + "s"
            _put(api, f"/apis/admissionregistration.k8s.io/v1/{plural}", cfg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _http_ok(info.healthz) and _tls_ok(info.webhook_port, lab.pki_dir / "ca.crt"):
                return info
            if not processes.State(lab.dir / "state.json").alive(NAME):
                break
            time.sleep(0.2)
        raise LabError(
            f"pdlab lws: the LWS manager is not healthy (webhooks on {info.webhook_port}); "
            f"log {info.log}"
        )


def _ensure_running(lab: Lab, work: Path, kubeconfig: Path, certs: Path) -> LwsInfo:
    """The manager's record if it runs and answers its health probe, else a new start
    (a recorded one that does not answer is stopped first, by PID)."""
    st = processes.State(lab.dir / "state.json")
    ports_file = work / "ports.json"
    running = st.alive(NAME) and ports_file.exists()
    if running:
        ports = json.loads(ports_file.read_text())
        running = _http_ok(f"http://127.0.0.1:{ports['probe']}/healthz")
    if not running:
        if st.alive(NAME):
            processes.stop(st, NAME)
        st.procs.pop(NAME, None)
        ports = {"webhook": _free_port(), "probe": _free_port()}
        ports_file.write_text(json.dumps(ports))
        conf = work / "config.yaml"
        conf.write_text(yaml.safe_dump(manager_config(ports["webhook"], ports["probe"], certs)))
        argv = [
            str(binary()),
            f"--config={conf}",
            f"--kubeconfig={kubeconfig}",
            "--zap-log-level=info",
        ]
        processes.start(st, NAME, argv, lab.dir / "logs", lab.dir)
    return LwsInfo(
        pid=st.procs[NAME].pid,
        webhook_port=ports["webhook"],
        probe_port=ports["probe"],
        log=lab.log(NAME),
    )
