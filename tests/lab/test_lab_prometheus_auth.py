"""The operator reads a Prometheus that demands credentials: basic authentication over
TLS with a client certificate, all from Secrets named in ``metrics.prometheus.auth``
(KEDA's Prometheus scaler authentication), against a REAL second Prometheus.

The test starts its own Prometheus (``support.promkit``: the lab's binary, on a free
loopback port, its scrape configuration the lab's: it discovers and scrapes the
exporter's engine pods)
with a ``--web.config.file`` that requires basic authentication (bcrypt hash) and a
client certificate signed by a throwaway CA (``pdlab.cluster.pki``: a server certificate for
127.0.0.1 and a client certificate), and stops it afterwards. The operator runs
in-process (``opkit.ticking``) with the secure URL as its only allowed one.

What it proves, in order (the Secret cache's 60 s TTL shortened to 1 s so a rotated
Secret is seen within the test):

1. with the right Secrets the operator's queries authenticate: MetricsAvailable=True
   from the exporter's series (3 req/s, 2000/500 tokens: N_P = 6000/2100 = 2.86 and
   N_D = 1500/560 = 2.68, so both pools grow to 3, above their minimum of 1);
2. a wrong password: MetricsAvailable=False, reason PrometheusUnauthorized, the pools
   keep their 3 replicas for 3 ticks (an operator that lowered pools on missing metrics
   would take them to 1);
3. a Secret deleted: MetricsAvailable=False, reason SecretNotFound, naming it; the
   pools keep their replicas for 3 more ticks;
4. no credential appears in the status or the namespace's Events.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from pdlab.cluster.lab import Lab
from pdlab.cluster.pki import ensure_pki
from pdscaler.prometheus import Credentials, MetricsUnavailableError, PrometheusClient
from pdscaler.runtime import Runtime
from pdscaler.types import ConditionReason, Role
from support.exporter import EngineExporter
from support.labkit import Kube, wait_for
from support.opkit import (
    create_pdd,
    get_pdd,
    operator_runtime,
    pdd_manifest,
    replicas,
    serve_two_by_two,
    ticking,
    wait_both_pools,
    wait_condition,
    wait_stable,
)
from support.promkit import own_prometheus

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt  # bcrypt ($2b$) through libxcrypt: Prometheus' web config wants bcrypt

NAME = "chat"
USER = "pdscaler"
RATE = 3.0  # req/s: both pools at 3 (module docstring, step 1)
ABOVE_MIN = 3


@contextlib.contextmanager
def secure_prometheus(lab: Lab, workdir: Path, password: str) -> Iterator[str]:
    """A second Prometheus requiring basic auth (``USER``/``password``) and a client
    certificate from ``workdir/pki``'s CA; yields its https URL, stops it on exit."""
    pki = workdir / "pki"
    ensure_pki(pki)
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2**10))
    web = {
        "tls_server_config": {
            "cert_file": str(pki / "apiserver.crt"),
            "key_file": str(pki / "apiserver.key"),
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": str(pki / "ca.crt"),
        },
        "basic_auth_users": {USER: hashed},
    }
    creds = tls_credentials(pki, password)

    def answers(url: str) -> bool:
        try:
            status: str = PrometheusClient(url, credentials=creds).query("up")["status"]
            return status == "success"
        except MetricsUnavailableError:
            return False

    with own_prometheus(lab, workdir, web_config=web, ready=answers) as url:
        yield url


def tls_credentials(pki: Path, password: str) -> Credentials:
    return Credentials(
        username=USER,
        password=password,
        ca=(pki / "ca.crt").read_bytes(),
        cert=(pki / "admin.crt").read_bytes(),
        key=(pki / "admin.key").read_bytes(),
    )


def put_secret(kube: Kube, namespace: str, name: str, data: dict[str, bytes]) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }
    try:
        kube.core.create_namespaced_secret(namespace, cast(Any, body))
    except ApiException as err:
        if err.status != 409:
            raise
        kube.core.replace_namespaced_secret(name, namespace, cast(Any, body))


AUTH: dict[str, Any] = {
    "username": {"name": "prom-creds", "key": "username"},
    "password": {"name": "prom-creds", "key": "password"},
    "ca": {"name": "prom-tls", "key": "ca.crt"},
    "cert": {"name": "prom-tls", "key": "tls.crt"},
    "key": {"name": "prom-tls", "key": "tls.key"},
    "customHeaders": [{"header": "X-Scope-OrgID", "name": "prom-tenant", "key": "org"}],
}


def ticks(rt: Runtime, n: int) -> None:
    """Until the operator has ticked ``n`` more times (1 s apart; 60 s at most)."""
    start = rt.ticks
    wait_for(lambda: rt.ticks >= start + n or None, 60, f"{n} operator ticks")


def written_text(kube: Kube, namespace: str) -> str:
    """The PDDeployment's status and every Event of the namespace, as text."""
    status = get_pdd(kube, namespace, NAME).get("status")
    events = kube.core.list_namespaced_event(namespace).items
    return json.dumps(status) + "\n".join(f"{e.reason} {e.message}" for e in events)


@pytest.mark.timeout(300)
def test_the_operator_authenticates_and_names_each_failure(
    lab: Lab,
    kube: Kube,
    crd: str,
    namespace: str,
    exporter: EngineExporter,
    tmp_path: Path,
) -> None:
    password = "pw-" + secrets.token_hex(8)
    with secure_prometheus(lab, tmp_path, password) as url:
        pki = tmp_path / "pki"
        put_secret(
            kube,
            namespace,
            "prom-creds",
            {"username": USER.encode(), "password": password.encode()},
        )
        put_secret(
            kube,
            namespace,
            "prom-tls",
            {
                "ca.crt": (pki / "ca.crt").read_bytes(),
                "tls.crt": (pki / "admin.crt").read_bytes(),
                "tls.key": (pki / "admin.key").read_bytes(),
            },
        )
        put_secret(kube, namespace, "prom-tenant", {"org": b"tenant-a"})
        serve_two_by_two(exporter, namespace, NAME, RATE)
        manifest = pdd_manifest(NAME, url)
        manifest["spec"]["metrics"]["prometheus"]["auth"] = AUTH
        create_pdd(kube, namespace, manifest)

        rt = operator_runtime(lab)
        rt.prometheus_allowed = (url,)
        rt.secrets().ttl = 1.0  # shortened from 60 s: a rotated Secret is seen at once
        with ticking(rt, namespace, NAME, period=1.0):
            # 1. the right credentials: the engine series read through the secure server
            ok = wait_condition(kube, namespace, NAME, "MetricsAvailable", "True", 90)
            assert ok["reason"] == ConditionReason.METRICS_OK
            report = rt.last[(namespace, NAME)]
            assert report.metrics is not None
            # the exporter's series, read through the secure server (its first scrapes:
            # the rate is still rising towards 1 req/s)
            assert report.metrics.request_rate is not None
            assert report.metrics.request_rate > 0
            # above their minimum of 1, so holding them is a decision, not a floor
            wait_both_pools(kube, namespace, NAME, ABOVE_MIN, 120, f"{ABOVE_MIN} + {ABOVE_MIN}")
            assert min(wait_stable(kube, namespace, NAME)) >= ABOVE_MIN
            before = {r: replicas(kube, namespace, NAME, r) for r in Role}

            # 2. a wrong password
            put_secret(
                kube, namespace, "prom-creds", {"username": USER.encode(), "password": b"wrong"}
            )
            bad = wait_condition(
                kube,
                namespace,
                NAME,
                "MetricsAvailable",
                "False",
                30,
                reason=ConditionReason.PROMETHEUS_UNAUTHORIZED,
            )
            assert "HTTP 401" in bad["message"]
            assert "no scale-down" in bad["message"]
            ticks(rt, 3)  # on the refused credentials
            assert {r: replicas(kube, namespace, NAME, r) for r in Role} == before

            # 3. a Secret deleted
            kube.core.delete_namespaced_secret("prom-tenant", namespace)
            gone = wait_condition(
                kube,
                namespace,
                NAME,
                "MetricsAvailable",
                "False",
                30,
                reason=ConditionReason.SECRET_NOT_FOUND,
            )
            assert f"Secret {namespace}/prom-tenant not found" in gone["message"]
            ticks(rt, 3)  # without the Secret
            assert {r: replicas(kube, namespace, NAME, r) for r in Role} == before

        # 4. no credential in what the operator wrote
        text = written_text(kube, namespace)
        for value in (password, "tenant-a", (pki / "admin.key").read_text().splitlines()[1]):
            assert value not in text
        rt.forget(namespace, NAME)
        assert len(rt.secrets()) == 0
