"""The lab's kubelet for router pods (and, for ``helm test``, the chart's pods): run a
pod's container as a local process.

Which pods, and which executables they may run, is a ``Workload``: ``ROUTERS`` (the
default, below) or ``PDSCALER_CHART`` (the chart's operator pod and its ``helm test``
pod, ``pdscaler`` only: the image's entrypoint; ``--metrics-address`` bound to the pod
IP). A container that exits under ``restartPolicy: Never`` ends its pod: the runner
writes the phase, Succeeded on exit 0, else Failed.

Owns: for every Running pod labelled ``pdscaler.io/role=router`` (in the namespaces it is
given, on the lab's API server), starting the pod's router container ``command`` +
``args`` as a process on the lab host, with ``--host`` set to the pod IP, the container's
literal ``env`` plus ``KUBECONFIG`` (a kubeconfig holding a token of the pod's own
ServiceAccount, from the TokenRequest API, as the kubelet mounts one), its output in
``<lab>/logs/pods/<namespace>_<pod>.log``; stopping it (by the PID it started) when the
pod is deleted, after a grace period (``DRAIN_S``). As a kubelet, it runs the container
from Running on: the router's readiness probe, not kwok's Ready timer, says when it can
take traffic (``svcproxy`` probes it). Must not: run any executable outside
``ALLOWED`` (a tenant's pod spec must not run arbitrary binaries on the lab host), bind
anything but the pod IP, or stop a process it did not start.

Why ``--host`` is rewritten: in a pod, ``--host 0.0.0.0`` binds the pod's own network
namespace, i.e. the pod IP. On the lab host every pod shares one network namespace, so
the runner binds the pod IP itself (kwok gives pods loopback IPs, 127.64.0.0/16).
Why a ServiceAccount token: a router with ``--service-discovery`` lists and watches pods
through the API server with its pod's ServiceAccount. The runner asks the API server for
a token of exactly that ServiceAccount (``pods/<sa>/token``, one hour) and writes a
kubeconfig with it: the router has the rights its Role grants, no more (a Role missing a
verb shows up as a router that discovers nothing).

The pod's ``command``/``args`` (Kubernetes semantics: ``command`` replaces the image's
entrypoint; the lab has no images, so a pod must give ``command``):

    command: [vllm-router]
    args: [--vllm-pd-disaggregation, --service-discovery, --prefill-selector,
           pdscaler.io/name=chat, ..., --host, 0.0.0.0, --port, "8000"]

runs ``<venv>/bin/vllm-router --vllm-pd-disaggregation ... --host 127.64.0.9 --port 8000``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from pdscaler.naming import LABEL_ROLE

ROUTER_ROLE = "router"
#: Executables a router pod may run (looked up in the virtualenv, then on PATH).
ALLOWED = ("vllm-router", "sglang-router", "smg")
#: ``python -m <module>`` launchers a router pod may run (with the lab's Python).
ALLOWED_MODULES = ("sglang_router.launch_router",)
PYTHONS = ("python", "python3")
STOP_GRACE_S = 5.0
#: How long a router whose pod left keeps running (its in-flight requests finish).
DRAIN_S = 10.0


class NotAllowedError(ValueError):
    """The pod's command is not a router on the allow-list."""


def resolve(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The argv to run for a container's ``command`` + ``args``; raises NotAllowedError.

    ``["vllm-router"]`` -> ``[<venv>/bin/vllm-router, *args]``;
    ``["python", "-m", "sglang_router.launch_router"]`` -> ``[sys.executable, "-m", ...]``.
    Paths are reduced to their name (``/usr/local/bin/vllm-router`` -> ``vllm-router``).
    """
    full = [*command, *args]
    if not full:
        raise NotAllowedError("the pod gives no command (the lab has no images)")
    exe = Path(full[0]).name
    if exe in PYTHONS:
        if len(full) >= 3 and full[1] == "-m" and full[2] in ALLOWED_MODULES:
            return [sys.executable, *full[1:]]
        raise NotAllowedError(f"python may only run -m {' | '.join(ALLOWED_MODULES)}: {full[:3]}")
    if exe not in ALLOWED:
        raise NotAllowedError(f"{exe!r} is not an allowed router ({', '.join(ALLOWED)})")
    venv_bin = Path(sys.executable).parent
    found = venv_bin / exe if (venv_bin / exe).exists() else shutil.which(exe)
    if not found:
        raise NotAllowedError(f"{exe} is not installed (pip install vllm-router)")
    return [str(found), *full[1:]]


#: The entrypoint of the operator's image (Dockerfile ``ENTRYPOINT ["pdscaler"]``).
PDSCALER_ENTRYPOINT = ("pdscaler",)


def resolve_pdscaler(command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The argv of a container of the chart's pods (the operator, its ``helm test``),
    run from the operator's image: its entrypoint ``pdscaler`` (this checkout's, in the
    virtualenv) when ``command`` is empty, as the image would; only ``pdscaler`` may be
    run. ``[], ["healthcheck", URL]`` -> ``[<venv>/bin/pdscaler, "healthcheck", URL]``."""
    full = [*(command or PDSCALER_ENTRYPOINT), *args]
    if Path(full[0]).name != PDSCALER_ENTRYPOINT[0]:
        raise NotAllowedError(f"{full[0]!r} is not the operator image's pdscaler")
    found = Path(sys.executable).parent / PDSCALER_ENTRYPOINT[0]
    if not found.exists():
        raise NotAllowedError(f"{found} is not installed (pip install -e .)")
    return [str(found), *full[1:]]


@dataclass(frozen=True)
class Workload:
    """Which pods a runner runs and how: the pods matching ``selector``, their argv from
    ``resolve`` (the allow-list), each bind-address flag of ``host_flags`` set to the pod
    IP, and ``--host <ip>`` added when ``add_host`` and the argv gives none."""

    selector: str
    resolve: Callable[[Sequence[str], Sequence[str]], list[str]]
    host_flags: tuple[str, ...]
    add_host: bool


ROUTERS = Workload(f"{LABEL_ROLE}={ROUTER_ROLE}", resolve, ("--host", "--prometheus-host"), True)
#: The chart's pods: the operator (binding its metrics at the pod IP) and its helm test.
PDSCALER_CHART = Workload("app.kubernetes.io/name=pdscaler", resolve_pdscaler,
                          ("--metrics-address",), False)  # fmt: skip
HOST_FLAGS = ROUTERS.host_flags


def with_host(
    argv: Sequence[str], ip: str, flags: Sequence[str] = HOST_FLAGS, add: bool = True
) -> list[str]:
    """Every bind address of ``flags`` (``--host X``, ``--host=X``, and the metrics
    server's ``--prometheus-host``) replaced by the pod IP; ``--host <ip>`` added if
    missing (``add``). In a pod, 0.0.0.0 is the pod's own address; on the lab host it
    would be everyone's."""
    out: list[str] = []
    found = False
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in flags and "=" in arg:
            out.append(f"{flag}={ip}")
        elif arg in flags and i + 1 < len(argv):
            out += [arg, ip]
            skip = True
        else:
            out.append(arg)
            continue
        found = found or flag == "--host"
    return out if found or not add else [*out, "--host", ip]


def container_of(pod: Any) -> Any:
    """The router container: the one named ``router``, else the first."""
    containers = pod.spec.containers or []
    named = [c for c in containers if c.name == ROUTER_ROLE]
    return (named or containers)[0]


#: The downward-API fields the lab resolves in ``env[].valueFrom.fieldRef``.
FIELD_REFS: dict[str, Callable[[Any], str | None]] = {
    "metadata.name": lambda pod: pod.metadata.name,
    "metadata.namespace": lambda pod: pod.metadata.namespace,
    "status.podIP": lambda pod: pod.status.pod_ip,
    "spec.serviceAccountName": lambda pod: pod.spec.service_account_name,
}


def container_env(container: Any, pod: Any) -> dict[str, str]:
    """The container's ``env``: literal values, and ``valueFrom.fieldRef`` of the
    fields in ``FIELD_REFS`` (``POD_NAME`` from ``metadata.name``), as the kubelet fills
    them; other ``valueFrom`` sources (Secrets, ConfigMaps) are not resolved in the lab."""
    out: dict[str, str] = {}
    for e in container.env or []:
        ref = e.value_from.field_ref if e.value_from is not None else None
        value = e.value if ref is None else FIELD_REFS.get(ref.field_path, lambda _p: None)(pod)
        if value is not None:
            out[e.name] = str(value)
    return out


@dataclass
class Running:
    """One router process the runner started."""

    key: tuple[str, str]
    uid: str
    ip: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log: Path


class PodRunner:
    """Run the router pods of some namespaces (module docstring)."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        namespaces: Sequence[str] | None = None,
        *,
        workload: Workload = ROUTERS,
        env: Mapping[str, str] | None = None,
        poll_s: float = 1.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._api = client.CoreV1Api(api_client)
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.namespaces = list(namespaces) if namespaces else None
        self.workload = workload
        self.env = dict(env or {})
        self.poll_s = poll_s
        self.say: Callable[[str], None] = say or (lambda _line: None)
        self.running: dict[tuple[str, str], Running] = {}
        self.draining: list[Running] = []
        self.refused: dict[tuple[str, str], str] = {}
        #: uid -> exit code of the pods whose container ended for good (restartPolicy
        #: Never, or OnFailure with exit 0): their phase is Succeeded or Failed
        self.finished: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _pods(self) -> list[Any]:
        selector = self.workload.selector
        if self.namespaces is None:
            return list(
                self._api.list_pod_for_all_namespaces(
                    label_selector=selector, _request_timeout=10
                ).items
            )
        out: list[Any] = []
        for ns in self.namespaces:
            out += self._api.list_namespaced_pod(
                ns, label_selector=selector, _request_timeout=10
            ).items
        return out

    def sync(self) -> None:
        """One poll: start the new Running router pods, stop those deleted."""
        pods = self._pods()
        with self._lock:
            wanted: dict[tuple[str, str], Any] = {}
            for pod in pods:
                # as a kubelet: the container runs from Running on (its readiness probe,
                # not kwok's timer, says when it takes traffic) until the pod is deleted
                running = pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
                if running and pod.status.pod_ip:
                    wanted[(pod.metadata.namespace, pod.metadata.name)] = pod
            for key, run in list(self.running.items()):
                pod = wanted.get(key)
                if run.proc.poll() is not None:
                    self._stop_one(run, "exited")
                    if pod is not None and pod.metadata.uid == run.uid:
                        self._exited(pod, run.proc.returncode)
                elif pod is None or pod.metadata.uid != run.uid:
                    # as the kubelet: SIGTERM only after the pod left its Service's endpoints
                    # and the requests it holds had time to finish (a grace period)
                    self.running.pop(key, None)
                    self.draining.append(run)
                    timer = threading.Timer(DRAIN_S, self._stop_one, (run, "deleted"))
                    timer.daemon = True
                    timer.start()
            for key, pod in wanted.items():
                done = pod.metadata.uid in self.finished
                if key not in self.running and key not in self.refused and not done:
                    self._start_one(key, pod)
            for key in [k for k in self.refused if k not in wanted]:
                del self.refused[key]

    def _start_one(self, key: tuple[str, str], pod: Any) -> None:
        container = container_of(pod)
        try:
            argv = self.workload.resolve(container.command or [], container.args or [])
        except NotAllowedError as err:
            self.refused[key] = str(err)
            self.say(f"pod {key[0]}/{key[1]}: not run: {err}")
            return
        work = self.workload
        argv = with_host(argv, pod.status.pod_ip, work.host_flags, work.add_host)
        env = {**os.environ, **self.env, **container_env(container, pod)}
        if pod.spec.automount_service_account_token is not False:
            try:
                env["KUBECONFIG"] = str(self._identity(pod, key))
            except Exception as err:  # the ServiceAccount may not exist yet: retry next poll
                self.say(f"pod {key[0]}/{key[1]}: no token for its ServiceAccount yet: {err}")
                return
        else:  # as the kubelet: no token mounted, so no identity at all
            env.pop("KUBECONFIG", None)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{key[0]}_{key[1]}.log"
        with log.open("ab") as fh:
            fh.write(f"--- {time.strftime('%F %T')} {' '.join(argv)}\n".encode())
            fh.flush()
            proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.running[key] = Running(key, pod.metadata.uid, pod.status.pod_ip, argv, proc, log)
        self.say(f"pod {key[0]}/{key[1]}: started {Path(argv[0]).name} (pid {proc.pid}) at "
                 f"{pod.status.pod_ip}; log {log}")  # fmt: skip

    def _exited(self, pod: Any, code: int) -> None:
        """As the kubelet, once a container exits: restarted (next poll) under
        restartPolicy Always, or OnFailure with a failure; else the pod is done, its
        phase Succeeded (exit 0) or Failed, written to its status (``helm test`` waits
        for that phase)."""
        policy = pod.spec.restart_policy or "Always"
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            return
        self.finished[pod.metadata.uid] = code
        name = container_of(pod).name
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        state = {"terminated": {"exitCode": code, "finishedAt": now,
                                "reason": "Completed" if code == 0 else "Error"}}  # fmt: skip
        phase = "Succeeded" if code == 0 else "Failed"
        body = {"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            "containerStatuses": [{"name": name, "image": container_of(pod).image,
                                   "imageID": "", "ready": False, "restartCount": 0,
                                   "state": state}],
        }}  # fmt: skip
        namespace, pod_name = pod.metadata.namespace, pod.metadata.name
        try:
            self._api.patch_namespaced_pod_status(pod_name, namespace, body, _request_timeout=10)
        except client.ApiException as err:  # deleted meanwhile: nothing to report
            self.say(f"pod {namespace}/{pod_name}: status not written: {err.reason}")
            return
        self.say(f"pod {namespace}/{pod_name}: {phase} (exit code {code})")

    def _identity(self, pod: Any, key: tuple[str, str]) -> Path:
        """A kubeconfig for the pod's ServiceAccount (a fresh one-hour token)."""
        account = pod.spec.service_account_name or "default"
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
        )
        answer = self._api.create_namespaced_service_account_token(
            account, key[0], request, _request_timeout=10
        )
        if answer.status is None or not answer.status.token:
            raise RuntimeError(f"no token in the TokenRequest answer for {account}")
        token = str(answer.status.token)
        admin = yaml.safe_load(self.kubeconfig.read_text())
        cluster = admin["clusters"][0]
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": account,
                    "context": {"cluster": cluster["name"], "user": account, "namespace": key[0]},
                }
            ],
            "current-context": account,
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"{key[0]}_{key[1]}.kubeconfig"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(doc))
        return path

    def _stop_one(self, run: Running, why: str) -> None:
        if self.running.get(run.key) is run:
            self.running.pop(run.key, None)
        if run in self.draining:
            self.draining.remove(run)
        proc = run.proc
        if proc.poll() is None:
            # its own session: the group id is the PID we started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(STOP_GRACE_S)
        self.say(f"pod {run.key[0]}/{run.key[1]}: stopped pid {proc.pid} ({why})")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as err:  # the API server may be restarting
                self.say(f"router pod poll failed: {err!r}")
            self._stop.wait(self.poll_s)

    def start(self) -> PodRunner:
        """Poll in a background thread until ``stop``."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="podrunner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling and every process started."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for run in [*self.running.values(), *self.draining]:
                self._stop_one(run, "runner stopping")

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(namespaces: Sequence[str] | None) -> int:
    """`python -m pdlab pod-runner`: run until SIGTERM/SIGINT; 0 on a clean stop."""
    from pdlab.cluster.lab import Lab

    lab = Lab()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    runner = PodRunner(
        lab.kubeconfig,
        lab.dir / "logs" / "pods",
        namespaces,
        say=lambda line: print(f"pod-runner {time.strftime('%H:%M:%S')} {line}", flush=True),
    )
    runner.start()
    try:
        done.wait()
    finally:
        runner.stop()
    return 0
