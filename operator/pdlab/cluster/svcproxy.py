"""A kube-proxy stand-in for the lab: a Service reachable on a local port.

Owns: listening on ``127.0.0.1:<port>`` and forwarding each TCP connection to one Ready
endpoint of a Service (namespace/name), taken round robin (as kube-proxy's userspace
mode did), refreshing the endpoints every second. Must not: change anything in the
cluster, or listen anywhere but loopback.

Where the endpoints come from: the Service's EndpointSlices when they list any; else
the Service's selector resolved against its namespace's Ready pods, the target port by
name or number, as the EndpointSlice controller would. The lab needs the second way:
its pod IPs are loopback addresses (kwok, 127.64.0.0/16), and the API server refuses
loopback addresses in EndpointSlices and Endpoints ("may not be in the loopback
range"), so the controller-manager cannot write them. A pod counts once its readiness
probe (``httpGet``) answers, as the kubelet would decide: kwok marks pods Ready on a
timer, and a router that knows no worker yet answers 503 on ``/readiness``.

A Service ``chat`` (port 8000 named ``http``) whose EndpointSlices list the Ready
router pods 127.64.0.9 and 127.64.0.12 (port 8000):

    with SvcProxy(kubeconfig, "serving", "chat", 28000) as proxy:
        # http://127.0.0.1:28000/v1/completions -> 127.64.0.9:8000, then 127.64.0.12:8000
        proxy.endpoints()                     # ["127.64.0.9:8000", "127.64.0.12:8000"]

    python -m pdlab proxy --namespace serving --service chat --port 28000
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config

from pdlab.cluster.kubeclient import is_serving

#: The label every EndpointSlice of a Service carries.
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def http_probe(pod: Any) -> bool | None:
    """One run of the pod's readiness probe, as the kubelet runs it: the first container's
    ``readinessProbe.httpGet`` answered with 2xx/3xx within its timeoutSeconds (None: the
    pod has no such probe). kwok makes a pod Ready on a timer, not by probing; this
    stand-in probes before sending traffic."""
    for c in pod.spec.containers or []:
        get = c.readiness_probe.http_get if c.readiness_probe else None
        if get is None:
            continue
        timeout = float(c.readiness_probe.timeout_seconds or 1)
        port = get.port
        if not (isinstance(port, int) or str(port).isdigit()):
            port = next((cp.container_port for cp in c.ports or [] if cp.name == port), None)
        url = f"http://{pod.status.pod_ip}:{port}{get.path or '/'}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return bool(200 <= resp.status < 400)
        except (OSError, ValueError):
            return False
    return None


class ProbeState:
    """The kubelet's memory of readiness probes: a pod is ready after ``successThreshold``
    passing runs and unready after ``failureThreshold`` failing ones in a row (both from
    the probe, defaults 1 and 3), not on one slow answer."""

    def __init__(self, run: Callable[[Any], bool | None] = http_probe) -> None:
        self.run = run
        self.state: dict[str, tuple[bool, int, int]] = {}  # uid -> (ready, passes, fails)

    def __call__(self, pod: Any) -> bool:
        result = self.run(pod)
        if result is None:
            return True
        probe = next(c.readiness_probe for c in pod.spec.containers if c.readiness_probe)
        need_ok, need_fail = probe.success_threshold or 1, probe.failure_threshold or 3
        ready, passes, fails = self.state.get(pod.metadata.uid, (False, 0, 0))
        passes, fails = (passes + 1, 0) if result else (0, fails + 1)
        if result and passes >= need_ok:
            ready = True
        elif not result and fails >= need_fail:
            ready = False
        self.state[pod.metadata.uid] = (ready, passes, fails)
        return ready


def selected_endpoints(
    service: Any,
    pods: list[Any],
    port: str | int | None = None,
    probe: Callable[[Any], bool] | None = None,
) -> list[str]:
    """``podIP:targetPort`` of the Ready pods a Service selects (kubernetes-client
    V1Service and V1Pods) whose ``probe`` passes; ``port``: the Service port's name or
    number (None: first)."""
    selector = service.spec.selector or {}
    sports = [
        p for p in service.spec.ports or [] if port is None or port in (p.name, p.port, str(p.port))
    ][:1]
    if not selector or not sports:
        return []
    target = sports[0].target_port if sports[0].target_port is not None else sports[0].port
    out: list[str] = []
    for pod in pods:
        labels = pod.metadata.labels or {}
        if any(labels.get(k) != v for k, v in selector.items()) or not is_serving(pod):
            continue
        if not pod.status.pod_ip or (probe is not None and not probe(pod)):
            continue
        number: int | None = None
        if isinstance(target, int) or str(target).isdigit():
            number = int(target)
        else:
            for c in pod.spec.containers or []:
                for cp in c.ports or []:
                    if cp.name == target:
                        number = int(cp.container_port)
        if number is not None:
            out.append(f"{pod.status.pod_ip}:{number}")
    return sorted(set(out))


def ready_endpoints(slices: list[Any], port: str | int | None = None) -> list[str]:
    """``host:port`` of every ready endpoint in kubernetes-client V1EndpointSlices.

    ``port``: the Service port's name (or number) to pick; None: the first port.
    Endpoints whose ``conditions.ready`` is False are left out (None counts as ready,
    as kube-proxy reads it).
    """
    out: list[str] = []
    for sl in slices:
        ports = sl.ports or []
        chosen = [p for p in ports if port is None or p.name == port or str(p.port) == str(port)][
            :1
        ]
        if not chosen or chosen[0].port is None:
            continue
        for ep in sl.endpoints or []:
            cond = ep.conditions
            if cond is not None and cond.ready is False:
                continue
            if cond is not None and cond.terminating:
                continue
            out.extend(f"{addr}:{chosen[0].port}" for addr in ep.addresses or [])
    return sorted(set(out))


def service_endpoints(
    core: Any,
    discovery: Any,
    namespace: str,
    service: str,
    port: str | int | None = None,
    probe: Callable[[Any], bool] | None = None,
) -> list[str]:
    """The ready ``podIP:targetPort`` endpoints of Service ``namespace/service`` now, as
    kube-proxy would send to them: from its EndpointSlices (``ready_endpoints``) when
    they list any, else its selector resolved against the namespace's pods
    (``selected_endpoints``, loopback pod IPs: module docstring). ``core``/``discovery``:
    kubernetes-client CoreV1Api and DiscoveryV1Api."""
    slices = discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"{SERVICE_NAME_LABEL}={service}", _request_timeout=5
    ).items
    found = ready_endpoints(slices, port)
    if found:
        return found
    svc = core.read_namespaced_service(service, namespace, _request_timeout=5)
    wanted = (svc.spec.selector if svc.spec else None) or {}
    if not wanted:
        return []
    selector = ",".join(f"{k}={v}" for k, v in wanted.items())
    pods = core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=5).items
    return selected_endpoints(svc, pods, port, probe)


class SvcProxy:
    """Forward ``127.0.0.1:port`` to the Ready endpoints of one Service (docstring)."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        service: str,
        port: int,
        *,
        service_port: str | int | None = None,
        refresh_s: float = 1.0,
        say: Callable[[str], None] | None = None,
    ) -> None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self._api = client.DiscoveryV1Api(api_client)
        self._core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.service = service
        self.port = port
        self.service_port = service_port
        self.refresh_s = refresh_s
        self.say: Callable[[str], None] = say or (lambda _line: None)
        self._endpoints: list[str] = []
        self._cycle: Any = iter(())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._threads: list[threading.Thread] = []
        self.connections = 0
        self._probes = ProbeState()

    # ----- endpoints
    def refresh(self) -> list[str]:
        """Read the Service's EndpointSlices now; the ready endpoints."""
        found = service_endpoints(
            self._core, self._api, self.namespace, self.service, self.service_port, self._probes
        )
        with self._lock:
            if found != self._endpoints:
                self.say(f"{self.namespace}/{self.service} endpoints: {found or 'none'}")
                self._endpoints = found
                self._cycle = itertools.cycle(found)
        return found

    def endpoints(self) -> list[str]:
        """The ready endpoints as last read."""
        with self._lock:
            return list(self._endpoints)

    def _pick(self) -> str | None:
        with self._lock:
            return next(self._cycle, None) if self._endpoints else None

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception as err:  # the API server may be restarting
                self.say(f"endpoint poll failed: {err!r}")
            self._stop.wait(self.refresh_s)

    # ----- forwarding
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        # kube-proxy sends only to endpoints that pass their readiness probe; a lab pod is
        # Ready by kwok's clock, maybe before its process listens: an endpoint that refuses
        # the connection is skipped (as a failing probe would have removed it).
        upstream = None
        for _ in range(max(1, len(self.endpoints()))):
            target = self._pick()
            if target is None:
                break
            host, _, port = target.rpartition(":")
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection(host, int(port))
                break
        if upstream is None:
            writer.close()  # no endpoint answers: refused, as a Service without endpoints
            return
        up_reader, up_writer = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                if dst.can_write_eof():
                    dst.write_eof()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        for w in (writer, up_writer):
            with contextlib.suppress(OSError):
                w.close()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    # ----- life cycle
    def start(self, wait_endpoints_s: float = 0.0) -> SvcProxy:
        """Listen and start the endpoint poll; optionally wait for a ready endpoint."""
        self._stop.clear()
        with contextlib.suppress(Exception):
            self.refresh()
        loop_thread = threading.Thread(target=self._loop.run_forever, name="svcproxy", daemon=True)
        loop_thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        poll = threading.Thread(target=self._poll, name="svcproxy-poll", daemon=True)
        poll.start()
        self._threads = [loop_thread, poll]
        deadline = time.monotonic() + wait_endpoints_s
        while wait_endpoints_s and not self.endpoints() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self

    def stop(self) -> None:
        """Close the listener and stop polling."""
        self._stop.set()

        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        for t in self._threads:
            t.join(timeout=5)

    def __enter__(self) -> SvcProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(namespace: str, service: str, port: int, service_port: str | None) -> int:
    """`python -m pdlab proxy`: run until SIGTERM/SIGINT; 0 on a clean stop."""
    from pdlab.cluster.lab import Lab

    lab = Lab()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    proxy = SvcProxy(
        lab.kubeconfig,
        namespace,
        service,
        port,
        service_port=service_port,
        say=lambda line: print(f"svcproxy {time.strftime('%H:%M:%S')} {line}", flush=True),
    )
    proxy.start()
    proxy.say(f"http://127.0.0.1:{port} -> service {namespace}/{service}")
    try:
        done.wait()
    finally:
        proxy.stop()
    return 0
