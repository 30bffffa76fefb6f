"""`Lab`: bring the whole lab up, check it, take it down; the API tests and tools use.

Owns: the order of start-up (etcd -> kube-apiserver -> controller-manager, scheduler,
kwok, Prometheus -> fake nodes), the readiness waits with timeouts that name the
component and its log, idempotence (`ensure_up` on a healthy lab returns at once and only
restarts what died), a lock so two processes never start the same lab twice, a registry
of live users so a test session does not stop a lab another session still uses, and a
pin (`pdlab up` sets it) so a test session never stops a lab a person started.
Must not kill anything it did not record (processes.py enforces it).

Layout of the lab directory (default ~/.cache/pdscaler/lab-run, env PDLAB_DIR):
    state.json  kubeconfig  pki/  etcd/  logs/<component>.log  kwok/stages.yaml
    scheduler.yaml  controller-manager.kubeconfig ...  prometheus/{prometheus.yml,data}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from pdlab.cluster import kwok, pki, processes, prometheus
from pdlab.cluster.config import BUILD_SCRIPT, LabConfig, bin_dir
from pdlab.cluster.kubeapi import KubeAPI, node_ready

COMPONENTS = ("etcd", "apiserver", "controller_manager", "scheduler", "kwok", "prometheus")
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class LabError(RuntimeError):
    """The lab could not be brought up; the message names the component and its log."""


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _http_ok(url: str, insecure: bool = False) -> bool:
    ctx = ssl._create_unverified_context() if insecure else None
    try:
        with urllib.request.urlopen(url, timeout=2.0, context=ctx) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class Lab:
    """One lab instance, identified by its directory."""

    def __init__(self, config: LabConfig | None = None) -> None:
        if config is None:
            base = LabConfig.from_env()
            st = processes.State(base.lab_dir / "state.json")
            config = LabConfig.from_json(st.config) if st.config else base
        self.config = config
        self.dir = config.lab_dir
        self.bin = bin_dir()
        self._progress: Callable[[str], None] = lambda _what: None

    # ----- paths and URLs -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (system:masters)."""
        return self.config.kubeconfig

    @property
    def prometheus_url(self) -> str:
        """e.g. http://127.0.0.1:29090"""
        return self.config.prometheus_url

    @property
    def apiserver_url(self) -> str:
        """e.g. https://127.0.0.1:26443"""
        return self.config.apiserver_url

    @property
    def pki_dir(self) -> Path:
        """CA, serving and client certificates, service-account keys."""
        return self.dir / "pki"

    @property
    def prom_dir(self) -> Path:
        """Prometheus config and TSDB."""
        return self.dir / "prometheus"

    def log(self, component: str) -> Path:
        """The log file of a component, e.g. <lab>/logs/apiserver.log."""
        return self.dir / "logs" / f"{component}.log"

    def env(self) -> str:
        """Shell lines for `eval "$(python -m pdlab env)"`."""
        return (
            f"export KUBECONFIG={self.kubeconfig}\n"
            f"export PDLAB_PROMETHEUS_URL={self.prometheus_url}\n"
            f"export PDLAB_DIR={self.dir}\n"
        )

    def _state(self) -> processes.State:
        return processes.State(self.dir / "state.json")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / ".lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # ----- health -----------------------------------------------------------------------
    def _api(self) -> KubeAPI:
        return KubeAPI(self.apiserver_url, self.pki_dir)

    def nodes_ready(self) -> list[str]:
        """Names of the lab's fake nodes that are Ready and free of not-ready taints."""
        status, listing = self._api().request(
            "GET", f"/api/v1/nodes?labelSelector={kwok.NODE_SELECTOR_LABEL}"
        )
        if status != 200:
            return []
        return [n["metadata"]["name"] for n in listing["items"] if node_ready(n)]

    def health(self) -> dict[str, bool]:
        """Per component: running (recorded PID alive) and answering its health probe."""
        st = self._state()
        p = self.config.ports
        probes: dict[str, Callable[[], bool]] = {
            "etcd": lambda: _http_ok(f"http://127.0.0.1:{p['etcd']}/health"),
            "apiserver": lambda: (self.pki_dir / "admin.crt").exists() and self._api().ready(),
            "controller_manager": lambda: _http_ok(
                f"https://127.0.0.1:{p['controller_manager']}/healthz", insecure=True
            ),
            "scheduler": lambda: _http_ok(
                f"https://127.0.0.1:{p['scheduler']}/healthz", insecure=True
            ),
            "kwok": lambda: _http_ok(f"http://127.0.0.1:{p['kwok']}/healthz"),
            "prometheus": lambda: prometheus.ready(self.prometheus_url),
        }
        return {c: st.alive(c) and probes[c]() for c in COMPONENTS}

    def stale_components(self) -> list[str]:
        """Running components whose recorded command line differs from today's.

        After an update of pdlab (new flags), `pdlab down && pdlab up` applies it; `up`
        alone never restarts a healthy component under the lab's other users.
        """
        st = self._state()
        return [c for c in COMPONENTS if st.alive(c) and st.procs[c].argv != self._argv(c)]

    def running_components(self) -> list[str]:
        """Components whose recorded process still runs (healthy or not)."""
        st = self._state()
        return [c for c in COMPONENTS if st.alive(c)]

    def is_up(self) -> bool:
        """Every component healthy and all configured fake nodes Ready."""
        if not all(self.health().values()):
            return False
        try:
            return len(self.nodes_ready()) >= self.config.nodes + 1
        except OSError:
            return False

    def status(self) -> dict[str, Any]:
        """What `pdlab status` prints: per component pid, health, log; nodes; URLs."""
        st = self._state()
        health = self.health()
        comps = {}
        for c in COMPONENTS:
            rec = st.procs.get(c)
            comps[c] = {
                "pid": rec.pid if rec and processes.is_alive(rec) else None,
                "healthy": health[c],
                "log": str(self.log(c)),
            }
        nodes: list[str] = []
        if health["apiserver"]:
            with contextlib.suppress(OSError):
                nodes = self.nodes_ready()
        return {
            "lab_dir": str(self.dir),
            "kubeconfig": str(self.kubeconfig),
            "prometheus_url": self.prometheus_url,
            "components": comps,
            "nodes_ready": nodes,
        }

    # ----- start-up ---------------------------------------------------------------------
    def _wait(self, component: str, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        st = self._state()
        while time.monotonic() < deadline:
            if check():
                self._progress(f"{component} ready")
                return
            rec = st.procs.get(component)
            if rec is not None and not processes.is_alive(rec):
                raise LabError(
                    f"pdlab: {component} exited while waiting for {what}; "
                    f"log {self.log(component)}:\n{_tail(self.log(component))}"
                )
            time.sleep(0.2)
        raise LabError(
            f"pdlab: timed out after {timeout:.0f}s waiting for {component} ({what}); "
            f"log {self.log(component)}:\n{_tail(self.log(component))}"
        )

    def missing_binaries(self) -> list[str]:
        """Control-plane binaries not yet built into the cache, e.g. ["kube-apiserver"]."""
        return [b for b in BINARIES if not (self.bin / b).exists()]

    def _ensure_binaries(self) -> None:
        if not self.missing_binaries():
            return
        print(f"pdlab: binaries missing in {self.bin}; building them (cold 14-26 min on 2 cores)")
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)])
        if proc.returncode != 0:
            raise LabError(f"pdlab: {BUILD_SCRIPT} failed (exit {proc.returncode})")

    def _write_files(self) -> None:
        cfg, d = self.config, self.dir
        pki.ensure_pki(self.pki_dir)
        pki.write_kubeconfig(self.kubeconfig, self.apiserver_url, self.pki_dir, "admin")
        for client in ("controller-manager", "scheduler", "kwok"):
            pki.write_kubeconfig(
                d / f"{client}.kubeconfig", self.apiserver_url, self.pki_dir, client
            )
        sched = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(d / "scheduler.kubeconfig")},
            "leaderElection": {"leaderElect": False},
        }
        (d / "scheduler.yaml").write_text(yaml.safe_dump(sched))
        (d / "kwok").mkdir(exist_ok=True)
        (d / "kwok" / "stages.yaml").write_text(kwok.render_stages(cfg.startup_delay))

    def _argv(self, component: str) -> list[str]:
        d, p, b, k = self.dir, self.config.ports, self.bin, self.pki_dir
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd_peer']}"
        if component == "etcd":
            return [
                str(b / "etcd"), "--name=pdlab", f"--data-dir={d / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=pdlab={peer_url}", "--unsafe-no-fsync",
                "--auto-compaction-retention=1", "--log-level=warn",
            ]  # fmt: skip
        if component == "apiserver":
            return [
                str(b / "kube-apiserver"), f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}", f"--cert-dir={k}",
                f"--tls-cert-file={k / 'apiserver.crt'}",
                f"--tls-private-key-file={k / 'apiserver.key'}",
                f"--client-ca-file={k / 'ca.crt'}",
                # Request-header auth (as kubeadm sets it) completes the
                # extension-apiserver-authentication ConfigMap the controller-manager and
                # scheduler read; no front-proxy-client certificate is ever issued.
                f"--requestheader-client-ca-file={k / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={k / 'sa.pub'}",
                f"--service-account-signing-key-file={k / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=Node,RBAC", "--allow-privileged=true",
                "--endpoint-reconciler-type=none", "--profiling=false",
            ]  # fmt: skip
        if component == "controller_manager":
            kc = d / "controller-manager.kubeconfig"
            return [
                str(b / "kube-controller-manager"), f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", f"--secure-port={p['controller_manager']}",
                "--use-service-account-credentials",
                f"--service-account-private-key-file={k / 'sa.key'}",
                f"--root-ca-file={k / 'ca.crt'}",
                f"--cluster-signing-cert-file={k / 'ca.crt'}",
                f"--cluster-signing-key-file={k / 'ca.key'}",
                "--leader-elect=false", "--profiling=false", "--node-monitor-period=1s",
                # kwok renews the fake nodes' Leases through the API server: a drill that
                # stops the API server must not turn into a node failure (the default
                # 50 s grace lapses ~13 s after a 25 s outage, with kwok's backoff)
                "--node-monitor-grace-period=3m",
            ]  # fmt: skip
        if component == "scheduler":
            kc = d / "scheduler.kubeconfig"
            return [
                str(b / "kube-scheduler"), f"--config={d / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
                "--bind-address=127.0.0.1", f"--secure-port={p['scheduler']}",
            ]  # fmt: skip
        if component == "kwok":
            return kwok.kwok_argv(
                b / "kwok",
                d / "kwok.kubeconfig",
                d / "kwok" / "stages.yaml",
                p["kwok"],
                self.config.pod_cidr,
            )
        if component == "prometheus":
            return prometheus.argv(prometheus.binary(), self.prom_dir, p["prometheus"])
        raise ValueError(component)

    def _start(self, st: processes.State, component: str) -> bool:
        """Start `component` unless its recorded process still runs; True if started."""
        if st.alive(component):
            return False
        st.procs.pop(component, None)
        processes.start(st, component, self._argv(component), self.dir / "logs", self.dir)
        return True

    def _reconcile_config(self, st: processes.State) -> None:
        """Refuse a port change on a running lab; restart kwok if the default delay changed."""
        old = LabConfig.from_json(st.config) if st.config else None
        running = any(st.alive(c) for c in COMPONENTS)
        if old is not None and running and old.ports != self.config.ports:
            raise LabError(
                f"pdlab: the lab in {self.dir} runs on ports {old.ports}; "
                "run `python -m pdlab down` before changing ports"
            )
        if old is not None and old.startup_delay != self.config.startup_delay:
            processes.stop(st, "kwok")
        st.config = self.config.to_json()
        st.save()

    def ensure_up(
        self, timeout: float = 120.0, progress: Callable[[str], None] | None = None
    ) -> float:
        """Bring the lab up (or repair it) and wait until healthy; seconds it took.

        A healthy lab with the same config returns in well under a second. `progress`
        gets one line per step ("apiserver ready (+6.1s)"); `pdlab up` prints them.
        """
        t0 = time.monotonic()
        say = progress or (lambda _line: None)
        self._progress = lambda what: say(f"{what} (+{time.monotonic() - t0:.1f}s)")
        with self._locked():
            st = self._state()
            if st.config == self.config.to_json() and self.is_up():
                return time.monotonic() - t0
            if not any(st.alive(c) for c in COMPONENTS):
                # Nothing runs (e.g. the machine restarted): a pin from before is stale.
                (self.dir / "pinned").unlink(missing_ok=True)
            self._ensure_binaries()
            self._reconcile_config(st)
            self._write_files()
            prometheus.write_config(
                self.prom_dir, self.config.scrape_interval, self.apiserver_url, self.pki_dir
            )
            self._progress("PKI, kubeconfigs and configs in place")
            p = self.config.ports
            # Prometheus first: it is independent and its start overlaps etcd's.
            prom_started = self._start(st, "prometheus")
            if not prom_started:
                with contextlib.suppress(OSError):
                    prometheus.reload(self.prometheus_url)
            self._start(st, "etcd")
            self._wait(
                "etcd", lambda: _http_ok(f"http://127.0.0.1:{p['etcd']}/health"), "/health", 30
            )
            self._start(st, "apiserver")
            api = self._api()
            self._wait("apiserver", api.ready, "/readyz", min(timeout, 90))
            for c in ("controller_manager", "scheduler", "kwok"):
                self._start(st, c)
            kwok.register_nodes(api, self.config)
            left = max(10.0, timeout - (time.monotonic() - t0))
            self._wait(
                "kwok",
                lambda: len(self.nodes_ready()) >= self.config.nodes + 1,
                f"{self.config.nodes} fake nodes Ready without not-ready taints "
                f"(needs kwok and controller-manager; see also {self.log('controller_manager')})",
                left,
            )
            self._wait(
                "scheduler",
                lambda: _http_ok(f"https://127.0.0.1:{p['scheduler']}/healthz", insecure=True),
                "/healthz",
                30,
            )
            kwok.warm_ip_pool(api)
            self._wait("prometheus", lambda: prometheus.ready(self.prometheus_url), "/-/ready", 60)
        return time.monotonic() - t0

    def restart(self, component: str, timeout: float = 60.0) -> bool:
        """Start one component again with its recorded arguments if its process is gone
        (a drill killed it) and wait until its health probe answers; True if started.
        The rest of the lab is left as it is (``ensure_up`` repairs everything)."""
        with self._locked():
            st = self._state()
            started = self._start(st, component)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health().get(component):
                return started
            time.sleep(0.2)
        raise LabError(
            f"pdlab: {component} not healthy {timeout:.0f}s after its restart; "
            f"log {self.log(component)}:\n{_tail(self.log(component))}"
        )

    # ----- shutdown ---------------------------------------------------------------------
    def down(self, purge: bool = False) -> list[str]:
        """Stop exactly the recorded processes (all at once); names of those stopped.

        `purge` also deletes the lab's data (etcd, Prometheus TSDB, PKI, logs).
        """
        with self._locked():
            st = self._state()
            # Everything but etcd at once, then etcd: the API server's shutdown hangs on
            # an etcd that is going away, and etcd waits for its clients to leave.
            first = [c for c in st.procs if c != "etcd"]  # incl. anything else recorded
            stopped = processes.stop_many(st, first)
            stopped += processes.stop_many(st, ["etcd"])
            st.path.unlink(missing_ok=True)
            (self.dir / "pinned").unlink(missing_ok=True)
            if purge:
                for sub in ("etcd", "prometheus", "pki", "logs", "kwok"):
                    shutil.rmtree(self.dir / sub, ignore_errors=True)
        return stopped

    def recorded_pids(self) -> dict[str, int]:
        """component -> PID of the processes currently recorded (alive or not)."""
        return {n: r.pid for n, r in self._state().procs.items()}

    # ----- Prometheus helpers -----------------------------------------------------------
    def query(self, promql: str) -> list[dict[str, Any]]:
        """PromQL instant query against the lab's Prometheus."""
        return prometheus.query(self.prometheus_url, promql)

    def stop_prometheus(self) -> bool:
        """Stop the lab's Prometheus (the rest keeps running); True if it was running."""
        with self._locked():
            return processes.stop(self._state(), "prometheus")

    def start_prometheus(self, timeout: float = 60.0) -> None:
        """Start the lab's Prometheus again (no-op if running) and wait for /-/ready."""
        with self._locked():
            st = self._state()
            prometheus.write_config(
                self.prom_dir, self.config.scrape_interval, self.apiserver_url, self.pki_dir
            )
            self._start(st, "prometheus")
            self._wait(
                "prometheus", lambda: prometheus.ready(self.prometheus_url), "/-/ready", timeout
            )

    # ----- users (so one test session does not stop a lab another one uses) ------------
    def pin(self) -> None:
        """Mark the lab as wanted by a person (`pdlab up`): test sessions never stop it.

        Only `pdlab down` (or `Lab.down`) stops a pinned lab; it also removes the pin.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "pinned").write_text(time.strftime("%F %T\n"))

    def pinned(self) -> bool:
        """True if `pdlab up` was run on this lab since its last `down`."""
        return (self.dir / "pinned").exists()

    def _users_dir(self) -> Path:
        return self.dir / "users"

    def register_user(self) -> Path:
        """Record this process as a user of the lab until `unregister_user`."""
        ticks = processes.start_ticks(os.getpid())
        path = self._users_dir() / f"{os.getpid()}-{ticks}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pid": os.getpid(), "ticks": ticks}))
        return path

    def unregister_user(self) -> None:
        """Remove this process' user record."""
        ticks = processes.start_ticks(os.getpid())
        (self._users_dir() / f"{os.getpid()}-{ticks}").unlink(missing_ok=True)

    def other_users(self) -> list[int]:
        """PIDs of other live processes registered as users (stale records are removed)."""
        out: list[int] = []
        if not self._users_dir().exists():
            return out
        for path in self._users_dir().iterdir():
            pid_s, _, ticks_s = path.name.partition("-")
            pid = int(pid_s)
            alive = str(processes.start_ticks(pid)) == ticks_s
            if not alive:
                path.unlink(missing_ok=True)
            elif pid != os.getpid():
                out.append(pid)
        return out
