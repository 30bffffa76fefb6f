"""D16, liveness under brown-outs (issue 30, item 2): a fleet of PDDeployments against a
Prometheus that answers every query 2 s late, then the API server stopped (SIGSTOP),
then ticks that truly stop.

Invariants, ``/healthz`` sampled every second all along:

* while ticks progress (the fleet due at once, queued behind the 8 tick threads, and
  the ticks after it) and while the API server is stopped (the Lease cannot be renewed:
  the fence closes, the elector's rounds run into their timeouts), ``/healthz`` never
  fails: 0 failing samples, so never for the kubelet's failureThreshold x
  periodSeconds (read from the chart: 3 x 20 s);
* the ticks progressed: at least half the fleet's worth of ticks finished in the
  brown-out (86 in 50 s here: 8 tick threads, every query 2 s late);
* when ticks truly stop (``drills.frozen_ticks``: after SIGUSR1 every tick that starts
  blocks forever, the tick threads fill, nothing starts or finishes), ``/healthz``
  fails within the liveness limit (3 x 15 s) plus 20 s, and keeps failing;
* the API client's retries are exported (``pdscaler_kube_retries_total``).

Before the fix, the fleet's queued ticks counted as running from their submission
(503 at 45 s in the model of tests/unit/test_liveness.py) and a Lease round stuck in
a 30 s read made it 503 after 30 s.

The operator runs with ``--leader-elect`` (the chart's default). ``FLEET`` = 100
PDDeployments in Recommend mode (no pods), as the fleet drill runs them. ``make drill``
runs the issue's scale: a 15 s interval, the operator's own liveness limit (3 x 15 s =
45 s) and request timeouts, the chart's kubelet budget (60 s), the brown-out alone
120 s, the API server stopped 90 s. ``make test`` runs it at half that time scale
(``SCALE``, ``drills.frozen_ticks``): a 7.5 s interval, the limit's floor 7.5 s (limit
22.5 s), each API request's timeouts and retry budget halved (at most 7.5 + 10 s, inside
the limit as 15 + 20 s is inside 45 s), the kubelet budget taken as 30 s; the brown-out
50 s and the API server stopped 20 s (past the 10 s renew deadline: the fence closes).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from drills.faults import (
    FROZEN_TICKS_MODULE,
    DrillOperator,
    SlowProxy,
    full_windows,
    paused,
)
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.spec import GROUP, PLURAL, VERSION
from support.background import Sampling
from support.labkit import Kube, wait_for
from support.opkit import pdd_manifest

FLEET = 100
QUERY_DELAY = 2.0
INTERVAL = 15.0
LIMIT = 45.0  # liveness.Health: 3 x max(15 s interval, 15 s floor)
#: make test's time scale (make drill: 1.0)
SCALE = 0.5
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pdscaler" / "templates" / "deployment.yaml"
COUNTS = re.compile(
    r"^pdscaler_reconcile_(?:duration_seconds_count|errors_total)\{[^}]*\} ([0-9.e+]+)$", re.M
)


def kubelet_budget() -> float:
    """failureThreshold x periodSeconds of the chart's livenessProbe: how long /healthz
    may fail before the kubelet restarts the operator."""
    text = CHART.read_text()
    probe = text[text.index("livenessProbe:") :]
    probe = probe[: probe.index("readinessProbe:")]
    period = re.search(r"periodSeconds: (\d+)", probe)
    threshold = re.search(r"failureThreshold: (\d+)", probe)
    assert period, probe
    assert threshold, probe
    return float(period.group(1)) * float(threshold.group(1))


@dataclass
class FreezableOperator(DrillOperator):
    """``DrillOperator`` run as ``python -m drills.frozen_ticks`` (SIGUSR1 freezes its
    ticks), with the tree's own packages first on its path."""

    prometheus_proxy: str = ""
    time_scale: float = 1.0

    def extra_env(self) -> dict[str, str]:
        path = os.pathsep.join([str(ROOT / "operator"), str(ROOT / "tests")])
        return {
            **super().extra_env(),
            "PYTHONPATH": path,
            "PDSCALER_PROMETHEUS_URL": self.prometheus_proxy,
            "PDSCALER_DRILL_TIME_SCALE": f"{self.time_scale:g}",
        }

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": self.kubeconfig, **self.extra_env()}
        argv = [sys.executable, "-m", FROZEN_TICKS_MODULE, "run", "--namespace", self.namespace]
        argv += self.run_args()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.started_at = time.time()

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGUSR1)

    def tick_count(self) -> float:
        """Ticks finished so far (successful and failed), every PDDeployment together."""
        code, text = self._get("/metrics")
        if code != 200:
            raise LookupError("/metrics did not answer")
        return sum(float(v) for v in COUNTS.findall(text))


@dataclass
class HealthSampler(Sampling):
    """``/healthz`` every ``period`` s: rows of (monotonic time, answered 200). A
    /healthz that does not answer at all counts as failing (the kubelet's view)."""

    op: FreezableOperator
    period: float = field(default=1.0, kw_only=True)
    rows: list[tuple[float, bool]] = field(default_factory=list)

    def sample(self) -> None:
        self.rows.append((time.monotonic(), self.op.healthy()))

    def failing(self, since: float, until: float) -> list[float]:
        return [t for t, ok in self.rows if since <= t < until and not ok]

    def longest_failing(self, since: float, until: float) -> float:
        longest, start = 0.0, None
        for t, ok in self.rows:
            if not since <= t < until:
                continue
            if ok:
                start = None
            else:
                start = t if start is None else start
                longest = max(longest, t - start + self.period)
        return longest


def _create(kube: Kube, namespace: str, names: list[str], url: str, interval: float) -> None:
    for name in names:
        body = pdd_manifest(name, url, mode="Recommend", interval=f"{interval:g}s")
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


@pytest.mark.lab
@pytest.mark.timeout(600)
def test_drill_liveness_under_brownouts(
    lab: Lab, kube: Kube, crd: str, namespace: str, tmp_path: Path, drill: DrillRecord
) -> None:
    full = full_windows()
    scale = 1.0 if full else SCALE
    brownout, outage = (120.0, 90.0) if full else (50.0, 20.0)
    limit = LIMIT * scale
    budget = kubelet_budget() * scale
    drill.describe(
        "D16",
        fault=f"{FLEET} PDDeployments, Prometheus {QUERY_DELAY:g} s per query for "
        f"{brownout:g} s, then the API server SIGSTOPped {outage:g} s, then every tick frozen",
        invariant=f"/healthz never fails while ticks progress or the API server is stopped "
        f"(the kubelet restarts after {budget:g} s); fails within {limit:g} + 20 s of the "
        "ticks truly stopping",
        shortened=""
        if full
        else f"time scale {scale:g}: interval {INTERVAL * scale:g} s, liveness limit {limit:g} s, "
        f"kubelet budget {budget:g} s; brown-out {brownout:g} s, API server stopped "
        f"{outage:g} s (make drill: 15 s, 45 s, 60 s; 120 s, 90 s)",
    )
    names = [f"b{i:03d}" for i in range(FLEET)]
    _create(kube, namespace, names, lab.prometheus_url, INTERVAL * scale)
    with SlowProxy(lab.prometheus_url, QUERY_DELAY) as prom:
        op = FreezableOperator(
            namespace,
            str(lab.kubeconfig),
            tmp_path / "operator.log",
            leader_elect=True,
            prometheus_proxy=prom.url,
            time_scale=scale,
        )
        op.start()
        try:
            wait_for(lambda: op._get("/healthz")[0] or None, 60, "/healthz answering")
            with HealthSampler(op) as health:
                t0 = time.monotonic()
                wait_for(lambda: op.tick_count() >= 1 or None, 60, "a first tick")
                ticks0 = op.tick_count()
                time.sleep(max(0.0, brownout - (time.monotonic() - t0)))
                ticks_brownout = op.tick_count() - ticks0
                t_stop = time.monotonic()
                with paused(lab, "apiserver"):
                    time.sleep(outage)
                t_back = time.monotonic()
                wait_for(
                    lambda: op.tick_count() > ticks0 + ticks_brownout or None,
                    90,
                    "ticks again after the API server",
                )
                t_resumed = time.monotonic()
                retries = op._get("/metrics")[1]
                op.freeze()
                t_freeze = time.monotonic()
                wait_for(
                    lambda: health.failing(t_freeze, float("inf")) or None,
                    limit + 30.0,
                    "/healthz failing after the ticks froze",
                    interval=1.0,
                )
                t_dead = health.failing(t_freeze, float("inf"))[0]
                time.sleep(3.0)  # it keeps failing
                health.still_sampling()
            health.check(at_least=int(brownout + outage) // 2, max_failed=0)
        finally:
            op.stop()
    log = op.tail()
    before = health.failing(t0, t_freeze)
    drill.sampled(len([r for r in health.rows if r[0] < t_freeze]), len(before))
    drill.recovered("first tick after the API server returned", t_resumed - t_back)
    drill.recovered("/healthz failing after the ticks froze", t_dead - t_freeze)
    print(
        f"D16: {ticks_brownout:g} ticks in the {brownout:g} s brown-out, {prom.requests} "
        f"queries relayed; API server stopped {t_back - t_stop:.0f} s, ticks again "
        f"{t_resumed - t_back:.1f} s after; failing {t_dead - t_freeze:.1f} s after the freeze"
    )
    assert before == [], (before[:5], health.longest_failing(t0, t_freeze), log)
    assert health.longest_failing(t0, t_freeze) < budget
    assert ticks_brownout >= FLEET // 2, (ticks_brownout, log)
    assert t_dead - t_freeze <= limit + 20.0, log
    after = [ok for t, ok in health.rows if t >= t_dead]
    assert after, health.rows[-5:]
    assert not any(after), after  # keeps failing
    assert "# TYPE pdscaler_kube_retries_total counter" in retries
