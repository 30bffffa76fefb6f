"""D18, one writer per term (issue 30, item 4): two operator replicas (``--leader-elect``,
one Lease), each reaching the API server through its own proxy (``drills.apiproxy``),
which records every request the API server received from it, and injects:

1. a slow follower read while the leader's renewals fail: the follower's Lease GETs
   held 3.5 s before they are forwarded, the leader's renewals landing meanwhile; 3 s
   into the first held read the leader's Lease PUTs are dropped (until the follower
   holds the Lease), and the follower's reads are fast again once it is forwarded. A
   follower that dates what it read from before its read takes over >= 2 s early,
   1-2 s inside the leader's fence (renewDeadline 5.5 s after its last renewal);
2. a deleted Lease (the holder's Lease GETs 1.5 s late, so the other replica sees it
   missing first);
3. a leadership round trip: the holder's renewals dropped until the other takes the
   Lease, then the other's until the first takes it back.

Both replicas are release ``team-a`` (the chart's Lease name for it); a third operator,
release ``team-b`` watching another namespace, keeps its Lease in the same namespace:
two releases in one namespace hold two Leases.

Three PDDeployments are in a rollout all along (their new cells' pods are never Ready),
so the leader writes their status every tick (1 s): ~3 writes a second.

Invariant, from the API server's side (the proxies' records): every write other than
the Lease's that the API server received from a replica came while that replica's term
was the latest: no write from a replica was forwarded after another replica's
acquisition of the Lease (its create or take answered) and before its own next one.
Each such write is a sample. Timings 6/5.5/1 s (leaseDuration/renewDeadline/retryPeriod;
the default 15/10/2 leaves no room for a 4 s Lease read, the Lease requests' own
timeout, to matter): the drill ~60 s in ``make test``, the windows 2x under ``make drill``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from drills.apiproxy import ApiProxy, Call
from drills.faults import DrillOperator, full_windows
from drills.report import DrillRecord
from pdlab.cluster.lab import Lab
from pdscaler.types import Role
from support import chartkit
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import create_pdd, patch_spec, pdd_manifest, ready_count, serve_two_by_two

NAMES = ("term-0", "term-1", "term-2")  # three rollouts: ~3 leader writes a second
LEASE = "team-a-pdscaler-leader"  # lease_name("team-a"), checked in the drill
IDS = ("op-a", "op-b")
TIMINGS = ("6", "5.5", "1")  # leaseDuration, renewDeadline, retryPeriod
SLOW_READ = 3.5
NEVER_READY = "600s"


@dataclass
class Replica(DrillOperator):
    """A replica of a chart release: its Lease ``lease`` in ``lease_namespace`` (the
    watched namespace when empty)."""

    identity: str = ""
    lease: str = ""
    lease_namespace: str = ""

    def run_args(self) -> list[str]:
        argv = ["--metrics-port", str(self.port), "--log-format", "full", "--leader-elect"]
        argv += ["--lease-namespace", self.lease_namespace or self.namespace]
        argv += ["--lease-name", self.lease, "--identity", self.identity]
        argv += ["--lease-duration", TIMINGS[0], "--renew-deadline", TIMINGS[1]]
        return [*argv, "--retry-period", TIMINGS[2]]


def lease_name(release: str) -> str:
    """The operator's ``--lease-name`` as the chart renders it for ``release``."""
    text = chartkit.helm("template", release, str(chartkit.CHART), "-n", "ops")
    docs = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment"]
    argv = docs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    return str(next(a.split("=", 1)[1] for a in argv if a.startswith("--lease-name=")))


def holder(kube: Kube, namespace: str, name: str = LEASE) -> str:
    try:
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease(name, namespace)
    except client.ApiException:
        return ""
    return str(lease.spec.holder_identity or "") if lease.spec is not None else ""


def acquisitions(calls: list[Call]) -> list[tuple[float, str]]:
    """(answered, replica) of each Lease write the API server accepted that made its
    replica the holder after another, or created the Lease: the terms' starts."""
    accepted = sorted(
        (c.done, c.replica, c.method)
        for c in calls
        if c.lease and c.method in ("POST", "PUT") and 200 <= c.status < 300 and c.done
    )
    out: list[tuple[float, str]] = []
    for done, replica, method in accepted:
        if not out or out[-1][1] != replica or method == "POST":
            out.append((done, replica))
    return out


def first_read(calls: list[Call], since: float) -> float | None:
    """When the first Lease GET received at or after ``since`` arrived (None: none yet)."""
    return next((c.received for c in list(calls) if c.lease and c.received >= since), None)


def stale_writes(calls: list[Call]) -> list[tuple[float, str, str, str]]:
    """Writes (forwarded at, replica, method, path) the API server received from a
    replica after another's acquisition and before the replica's own next one."""
    terms = acquisitions(calls)
    out = []
    for c in calls:
        if not c.write or c.lease or c.at is None:
            continue
        latest = [r for t, r in terms if t < c.at]
        if latest and latest[-1] != c.replica:
            out.append((c.at, c.replica, c.method, c.path))
    return out


@pytest.mark.lab
@pytest.mark.timeout(300)
def test_drill_one_writer_per_term(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
    drill: DrillRecord,
) -> None:
    scale = 2.0 if full_windows() else 2.0 / 3  # make test: ~60 s
    drill.describe(
        "D18",
        fault=f"two replicas behind their own API proxies (Lease {'/'.join(TIMINGS)} s): the "
        f"follower's Lease reads {SLOW_READ:g} s late while the leader's renewals fail; "
        "the Lease deleted; a leadership round trip",
        invariant="no write from a replica reaches the API server after another's "
        "acquisition of the Lease and before its own next one; two releases in one "
        "namespace hold two Leases",
        shortened="" if full_windows() else "settle windows 2/3x (make drill: 2x)",
    )
    for name in NAMES:
        serve_two_by_two(exporter, namespace, name, 0.5)
    proxies = {i: ApiProxy(lab, i) for i in IDS}
    ops: dict[str, Replica] = {}
    recovered: dict[str, float] = {}
    assert lease_name("team-a") == LEASE
    # release team-b in the same namespace, watching another: its own Lease
    team_b = Replica("default", str(lab.kubeconfig), tmp_path / "op-c.log")
    team_b.identity, team_b.lease = "op-c", lease_name("team-b")
    team_b.lease_namespace = namespace
    try:
        for i, p in proxies.items():
            p.__enter__()
            ops[i] = Replica(namespace, str(p.kubeconfig(tmp_path)), tmp_path / f"{i}.log")
            ops[i].identity, ops[i].lease = i, LEASE
        team_b.start()
        for name in NAMES:
            create_pdd(kube, namespace, pdd_manifest(name, lab.prometheus_url, interval="1s"))
        for op in ops.values():
            op.start()
        wait_for(lambda: holder(kube, namespace) or None, 30, "a Lease holder")
        never = {"metadata": {"annotations": {"pdscaler.io/startup-delay": NEVER_READY}}}
        for name in NAMES:

            def up(name: str = name) -> bool:
                return ready_count(kube, namespace, name, Role.DECODE) >= 1

            wait_for(up, 60, f"{name} v1 up")
            rollout = {"engine": {"version": "v2"}, "prefill": {"template": never}}
            patch_spec(kube, namespace, name, {**rollout, "decode": {"template": never}})
        time.sleep(4.0 * scale)  # the rollout under way: a status write every tick

        def other(i: str) -> str:
            return IDS[1 - IDS.index(i)]

        def take_over(lead: str, slow_follower: bool) -> float:
            """The leader's renewals dropped (and, first time, the follower's reads
            slow for one round) until the follower holds the Lease; seconds it took."""
            follower = other(lead)
            t0 = time.monotonic()
            if slow_follower:  # the leader renews while the follower's read is held
                proxies[follower].faults.delay = lambda c: (
                    SLOW_READ if c.lease and c.method == "GET" else 0.0
                )
                held = wait_for(lambda: first_read(proxies[follower].calls, t0), 10, "a held read")
                time.sleep(max(0.0, held + SLOW_READ - 0.5 - time.monotonic()))
            proxies[lead].faults.drop = lambda c: c.lease and c.method == "PUT"
            if slow_follower:
                time.sleep(max(0.0, held + SLOW_READ + 0.1 - time.monotonic()))
                proxies[follower].faults.clear()
            wait_for(lambda: holder(kube, namespace) == follower, 30, f"{follower} leads")
            took = time.monotonic() - t0
            time.sleep(3.0 * scale)  # the old leader, its renewals failing, goes on
            proxies[lead].faults.clear()
            time.sleep(3.0 * scale)  # ... and renewals back: it follows
            return took

        lead = holder(kube, namespace)
        recovered["slow follower read: follower leads"] = take_over(lead, True)
        lead = other(lead)
        # 2. the Lease deleted; the holder sees it late
        proxies[lead].faults.delay = lambda c: 1.5 if c.lease and c.method == "GET" else 0.0
        t0 = time.monotonic()
        client.CoordinationV1Api(kube.api).delete_namespaced_lease(LEASE, namespace)
        wait_for(lambda: holder(kube, namespace) or None, 30, "the Lease again")
        recovered["Lease deleted: held again"] = time.monotonic() - t0
        time.sleep(6.0 * scale)
        proxies[lead].faults.clear()
        time.sleep(2.0 * scale)
        # 3. a round trip
        lead = holder(kube, namespace)
        recovered["round trip: the other leads"] = take_over(lead, False)
        recovered["round trip: back"] = take_over(other(lead), False)
        releases = (holder(kube, namespace), holder(kube, namespace, team_b.lease))
    finally:
        team_b.stop()
        for op in ops.values():
            op.stop()
        for p in proxies.values():
            p.__exit__()
    calls = sorted((c for p in proxies.values() for c in p.calls), key=lambda c: c.received)
    writes = [c for c in calls if c.write and not c.lease and c.at is not None]
    stale = stale_writes(calls)
    drill.sampled(len(writes), len(stale))
    for what, seconds in recovered.items():
        drill.recovered(what, seconds)
    terms = acquisitions(calls)
    print(f"D18: {len(writes)} writes, terms {[(round(t, 1), r) for t, r in terms]}")
    assert team_b.lease != LEASE
    assert releases[0] in IDS, releases
    assert releases[1] == "op-c", (releases, team_b.tail(2000))  # two releases, two Leases
    assert len(terms) >= 5, terms  # first, slow read, deleted, there and back
    for i in IDS:
        assert any(c.replica == i for c in writes), f"{i} never wrote: the drill checked nothing"
    assert stale == [], (stale[:10], terms, ops[IDS[0]].tail(2000), ops[IDS[1]].tail(2000))
