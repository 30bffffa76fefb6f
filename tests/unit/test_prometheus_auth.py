"""The Prometheus connection's credentials (``metrics.prometheus.auth``, KEDA's bearer,
basic, TLS and custom headers, every value from a Secret): how they are assembled from
the Secrets' data, what a query sends, how the spec refuses incomplete settings, how a
refusal reads (a reason per failure, never a value), and how the Runtime reads, caches
and prunes the Secrets through ``kube.read_secret``.

The TLS cases run a real https server on 127.0.0.1 with a throwaway CA, server and
client certificate (``pdlab.cluster.pki``, the ``openssl`` command line).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pydantic
import pytest

import pdscaler.runtime
from pdlab.cluster.pki import ensure_pki
from pdscaler.kube import KubeError
from pdscaler.prometheus import (
    Credentials,
    MetricsUnavailableError,
    PrometheusClient,
    SecretCache,
    SecretUnreadableError,
    credentials_from,
)
from pdscaler.reconcile import reconcile_once
from pdscaler.runtime import Runtime
from pdscaler.spec import (
    MSG_AUTH_BASIC_PAIR,
    MSG_AUTH_CERT_PAIR,
    MSG_AUTH_HEADER_RESERVED,
    MSG_AUTH_HEADER_UNIQUE,
    MSG_AUTH_ONE_SCHEME,
    MSG_AUTH_TLS_HTTPS,
    PrometheusSpec,
)
from pdscaler.types import ConditionReason, MetricsErrorReason
from support.builders import pdd_object
from support.fakekube import FakeKube
from support.httpkit import QuietHandler, serving

PASSWORD = "s3cret-pa55word"
TOKEN = "t0ken-abcdef"
OK = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


def prom(url: str = "http://prometheus.monitoring:9090", **auth: Any) -> PrometheusSpec:
    return PrometheusSpec.model_validate({"url": url, "auth": auth} if auth else {"url": url})


BASIC: dict[str, Any] = {
    "username": {"name": "prom-creds", "key": "username"},
    "password": {"name": "prom-creds", "key": "password"},
    "customHeaders": [{"header": "X-Scope-OrgID", "name": "prom-tenant", "key": "org"}],
}
SECRETS = {
    "prom-creds": {"username": b"pdscaler\n", "password": PASSWORD.encode() + b"\n"},
    "prom-tenant": {"org": b"tenant-a"},
}


# ----------------------------------------------------------------- assembly (pure)


def test_basic_auth_and_a_custom_header_from_two_secrets() -> None:
    """The trailing newline of an ``echo``-made Secret is dropped; Basic is
    base64("pdscaler:s3cret-pa55word")."""
    creds = credentials_from(prom(**BASIC), SECRETS, "serving")
    assert creds.request_headers() == {
        "X-Scope-OrgID": "tenant-a",
        "Authorization": "Basic " + base64.b64encode(f"pdscaler:{PASSWORD}".encode()).decode(),
    }


def test_bearer_token() -> None:
    spec = prom(bearerToken={"name": "prom-creds", "key": "token"})
    creds = credentials_from(spec, {"prom-creds": {"token": TOKEN.encode()}}, "serving")
    assert creds.request_headers() == {"Authorization": f"Bearer {TOKEN}"}


def test_no_auth_sends_nothing() -> None:
    creds = credentials_from(prom(), {}, "serving")
    assert creds.request_headers() == {}
    assert creds == Credentials()


def test_repr_and_fingerprint_never_show_a_value() -> None:
    creds = credentials_from(prom(**BASIC), SECRETS, "serving")
    assert repr(creds) == "Credentials(basic, headers X-Scope-OrgID)"
    assert str(creds) == repr(creds)
    assert PASSWORD not in creds.fingerprint()
    other = dict(SECRETS, **{"prom-creds": {"username": b"pdscaler", "password": b"new"}})
    assert credentials_from(prom(**BASIC), other, "serving").fingerprint() != creds.fingerprint()


@pytest.mark.parametrize(
    ("secrets", "reason", "message"),
    [
        (
            {"prom-tenant": SECRETS["prom-tenant"]},
            MetricsErrorReason.SECRET_NOT_FOUND,
            "metrics.prometheus.auth.username: Secret serving/prom-creds not found",
        ),
        (
            {"prom-creds": None, "prom-tenant": SECRETS["prom-tenant"]},
            MetricsErrorReason.SECRET_NOT_FOUND,
            "metrics.prometheus.auth.username: Secret serving/prom-creds not found",
        ),
        (
            {**SECRETS, "prom-creds": {"username": b"u", "pasword": PASSWORD.encode()}},
            MetricsErrorReason.SECRET_KEY_NOT_FOUND,
            "metrics.prometheus.auth.password: Secret serving/prom-creds has no key 'password'",
        ),
        (
            {**SECRETS, "prom-creds": {"username": b"u", "password": b" \n"}},
            MetricsErrorReason.INVALID_SECRET,
            "metrics.prometheus.auth.password (prom-creds/password): empty",
        ),
        (
            {**SECRETS, "prom-tenant": {"org": b"a\r\nX-Injected: 1"}},
            MetricsErrorReason.INVALID_SECRET,
            "header X-Scope-OrgID: holds a line break or control character",
        ),
        (
            {**SECRETS, "prom-creds": {"username": b"u", "password": b"\xff\xfe"}},
            MetricsErrorReason.INVALID_SECRET,
            "metrics.prometheus.auth.password (prom-creds/password): not UTF-8 text",
        ),
    ],
)
def test_a_missing_secret_key_or_unusable_value_is_named_not_shown(
    secrets: dict[str, Any], reason: str, message: str
) -> None:
    with pytest.raises(MetricsUnavailableError) as info:
        credentials_from(prom(**BASIC), secrets, "serving")
    assert (info.value.reason, info.value.message) == (reason, message)
    assert PASSWORD not in str(info.value)


def test_pem_values_must_be_pem() -> None:
    spec = prom("https://p:9090", ca={"name": "prom-tls", "key": "ca.crt"})
    with pytest.raises(MetricsUnavailableError) as info:
        credentials_from(spec, {"prom-tls": {"ca.crt": b"not a certificate"}}, "serving")
    assert info.value.reason == MetricsErrorReason.INVALID_SECRET
    assert info.value.message == "metrics.prometheus.auth.ca (prom-tls/ca.crt): not PEM"
    bogus = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    creds = credentials_from(spec, {"prom-tls": {"ca.crt": bogus}}, "serving")
    with pytest.raises(MetricsUnavailableError) as info:
        PrometheusClient("https://p:9090", credentials=creds)
    assert info.value.reason == MetricsErrorReason.INVALID_SECRET
    assert info.value.condition_reason is ConditionReason.INVALID_SECRET


# ----------------------------------------------------------------- the spec's rules


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"auth": {"username": {"name": "a", "key": "u"}}}, MSG_AUTH_BASIC_PAIR),
        ({"auth": {"key": {"name": "a", "key": "k"}}}, MSG_AUTH_CERT_PAIR),
        (
            {
                "auth": {
                    "bearerToken": {"name": "a", "key": "t"},
                    "username": {"name": "a", "key": "u"},
                    "password": {"name": "a", "key": "p"},
                }
            },
            MSG_AUTH_ONE_SCHEME,
        ),
        ({"auth": {"ca": {"name": "a", "key": "ca.crt"}}}, MSG_AUTH_TLS_HTTPS),
        (
            {"auth": {"customHeaders": [{"header": "authorization", "name": "a", "key": "h"}]}},
            MSG_AUTH_HEADER_RESERVED,
        ),
        (
            {
                "auth": {
                    "customHeaders": [
                        {"header": "X-Scope-OrgID", "name": "a", "key": "h"},
                        {"header": "x-scope-orgid", "name": "b", "key": "h"},
                    ]
                }
            },
            MSG_AUTH_HEADER_UNIQUE,
        ),
    ],
)
def test_incomplete_or_conflicting_auth_is_refused(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=message.replace("(", r"\(")[:40]):
        PrometheusSpec.model_validate({"url": "http://p:9090", **doc})


def test_no_inline_values() -> None:
    """A value written in the spec is refused: every field takes ``{name, key}``."""
    with pytest.raises(pydantic.ValidationError):
        PrometheusSpec.model_validate({"url": "http://p", "auth": {"bearerToken": "abc"}})
    with pytest.raises(pydantic.ValidationError):
        PrometheusSpec.model_validate(
            {"url": "http://p", "auth": {"customHeaders": [{"header": "X", "value": "v"}]}}
        )


# ------------------------------------------------------------- what a query sends


class Recorder(QuietHandler):
    """Answers 200 when the request carries ``want`` headers, else 401."""

    seen: ClassVar[list[dict[str, str]]] = []
    want: ClassVar[dict[str, str]] = {}

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        got = dict(self.headers.items())
        type(self).seen.append(got)
        ok = all(got.get(k) == v for k, v in type(self).want.items())
        self.reply(200 if ok else 401, OK if ok else b"denied: " + PASSWORD.encode(), "text/plain")


@pytest.fixture
def recorder() -> Iterator[str]:
    Recorder.seen = []
    creds = credentials_from(prom(**BASIC), SECRETS, "serving")
    Recorder.want = creds.request_headers()
    with serving(Recorder) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def test_the_headers_reach_the_server(recorder: str) -> None:
    creds = credentials_from(prom(**BASIC), SECRETS, "serving")
    PrometheusClient(recorder, credentials=creds).query("up")
    sent = Recorder.seen[-1]
    assert sent["X-Scope-OrgID"] == "tenant-a"
    assert sent["Authorization"].startswith("Basic ")
    assert sent["Content-Type"] == "application/x-www-form-urlencoded"


@pytest.mark.parametrize("wrong", ["no credentials", "a wrong password"])
def test_401_is_prometheus_unauthorized_without_the_body(recorder: str, wrong: str) -> None:
    creds = None
    if wrong == "a wrong password":
        bad = {**SECRETS, "prom-creds": {"username": b"pdscaler", "password": b"wrong"}}
        creds = credentials_from(prom(**BASIC), bad, "serving")
    with pytest.raises(MetricsUnavailableError) as info:
        PrometheusClient(recorder, credentials=creds).query("up")
    err = info.value
    assert err.reason == MetricsErrorReason.UNAUTHORIZED
    assert err.condition_reason is ConditionReason.PROMETHEUS_UNAUTHORIZED
    expected = (
        "the server wants credentials (metrics.prometheus.auth)"
        if creds is None
        else "the credentials of metrics.prometheus.auth were refused"
    )
    assert err.message == f"{recorder}: HTTP 401: Unauthorized: {expected}"
    assert PASSWORD not in str(err)


# ---------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""
    path = tmp_path_factory.mktemp("pki")
    ensure_pki(path)
    return path


@pytest.fixture
def mtls(pki: Path) -> Iterator[str]:
    """An https server on 127.0.0.1 that requires a client certificate from the CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    Recorder.seen, Recorder.want = [], {}
    with serving(Recorder) as server:
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        yield f"https://127.0.0.1:{server.server_address[1]}"


def tls_secrets(pki: Path, **extra: bytes) -> dict[str, Any]:
    return {
        "prom-tls": {
            "ca.crt": (pki / "ca.crt").read_bytes(),
            "tls.crt": (pki / "admin.crt").read_bytes(),
            "tls.key": (pki / "admin.key").read_bytes(),
            **extra,
        }
    }


TLS = {
    "ca": {"name": "prom-tls", "key": "ca.crt"},
    "cert": {"name": "prom-tls", "key": "tls.crt"},
    "key": {"name": "prom-tls", "key": "tls.key"},
}


def test_client_certificate_and_ca(mtls: str, pki: Path) -> None:
    creds = credentials_from(prom(mtls, **TLS), tls_secrets(pki), "serving")
    assert repr(creds) == "Credentials(ca, client certificate)"
    assert PrometheusClient(mtls, credentials=creds).query("up")["status"] == "success"


def test_without_the_ca_the_server_is_not_trusted(mtls: str, pki: Path) -> None:
    """The system CAs do not know the throwaway CA: verification is on by default."""
    only_cert = {k: v for k, v in TLS.items() if k != "ca"}
    creds = credentials_from(prom(mtls, **only_cert), tls_secrets(pki), "serving")
    with pytest.raises(MetricsUnavailableError) as info:
        PrometheusClient(mtls, credentials=creds).query("up")
    assert info.value.reason == MetricsErrorReason.UNREACHABLE
    assert "TLS failed" in info.value.message


def test_insecure_skip_verify_trusts_any_server(mtls: str, pki: Path) -> None:
    only_cert = {k: v for k, v in TLS.items() if k != "ca"}
    spec = PrometheusSpec.model_validate(
        {"url": mtls, "insecureSkipVerify": True, "auth": only_cert}
    )
    creds = credentials_from(spec, tls_secrets(pki), "serving")
    assert PrometheusClient(mtls, credentials=creds).query("up")["status"] == "success"


def test_without_a_client_certificate_the_server_refuses(mtls: str, pki: Path) -> None:
    creds = credentials_from(prom(mtls, ca=TLS["ca"]), tls_secrets(pki), "serving")
    with pytest.raises(MetricsUnavailableError) as info:
        PrometheusClient(mtls, credentials=creds).query("up")
    assert info.value.reason == MetricsErrorReason.UNREACHABLE


def test_a_key_that_does_not_match_the_certificate_is_invalid(pki: Path) -> None:
    secrets = tls_secrets(pki, **{"tls.key": (pki / "sa.key").read_bytes()})
    creds = credentials_from(prom("https://p:1", **TLS), secrets, "serving")
    with pytest.raises(MetricsUnavailableError) as info:
        PrometheusClient("https://p:1", credentials=creds)
    assert info.value.reason == MetricsErrorReason.INVALID_SECRET
    assert "BEGIN" not in info.value.message


# --------------------------------------------------------------- the Secret cache


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_cache_reads_each_secret_once_per_ttl_and_prunes() -> None:
    reads: list[str] = []
    lock = threading.Lock()

    def read(ns: str, name: str) -> dict[str, bytes] | None:
        with lock:
            reads.append(name)
        return {"k": name.encode()} if name != "gone" else None

    clock = Clock()
    cache = SecretCache(read, ttl=60.0, clock=clock)
    a, b = ("ns", "a"), ("ns", "b")
    cache.read("ns", ["s1", "s2"], user=a)
    cache.read("ns", ["s1"], user=b)
    cache.read("ns", ["s1", "s2"], user=a)
    assert reads == ["s1", "s2"]  # one read each within the TTL, shared by a and b
    assert cache.read("ns", ["gone"], user=("ns", "c")) == {"gone": None}
    cache.read("ns", ["gone"], user=("ns", "c"))
    assert reads.count("gone") == 2  # a missing Secret is read again each time
    clock.t = 61.0
    cache.read("ns", ["s1"], user=b)
    assert reads.count("s1") == 2
    cache.refresh("ns", ["s1"])
    cache.read("ns", ["s1"], user=b)
    assert reads.count("s1") == 3
    assert len(cache) == 2
    cache.forget(a)  # s2 was a's only
    assert len(cache) == 1
    cache.forget(b)
    assert len(cache) == 0


def test_a_forbidden_read_is_secret_forbidden() -> None:
    def read(ns: str, name: str) -> dict[str, bytes] | None:
        raise SecretUnreadableError(403, "Forbidden")

    with pytest.raises(MetricsUnavailableError) as info:
        SecretCache(read).read("serving", ["prom-creds"], user=("serving", "chat"))
    assert info.value.reason == MetricsErrorReason.SECRET_FORBIDDEN
    assert info.value.condition_reason is ConditionReason.SECRET_FORBIDDEN
    assert "Secret serving/prom-creds" in info.value.message


# --------------------------------------------------- the operator, end to end (unit)

NS, NAME = "serving", "chat"
PDD_PATH = f"/apis/pdscaler.io/v1alpha1/namespaces/{NS}/pddeployments/{NAME}"


def put_secret(kube: FakeKube, name: str, data: dict[str, bytes]) -> None:
    kube.put(
        f"/api/v1/namespaces/{NS}/secrets/{name}",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": NS},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        },
    )


def condition(kube: FakeKube) -> dict[str, Any]:
    status = kube.store[PDD_PATH].get("status") or {}
    found = [c for c in status.get("conditions", []) if c["type"] == "MetricsAvailable"]
    assert found, status
    return dict(found[0])


def everything_written(kube: FakeKube) -> str:
    """The status and every Event the operator wrote, as text."""
    events = kube.objects(f"/api/v1/namespaces/{NS}/events")
    return json.dumps([kube.store[PDD_PATH].get("status"), events])


@pytest.fixture
def runtime(recorder: str) -> tuple[Runtime, FakeKube]:
    kube = FakeKube()
    kube.put(PDD_PATH, pdd_object(NS, NAME, recorder, BASIC))
    rt = Runtime(kube=kube, prometheus_allowed=(recorder,))
    return rt, kube


def test_the_operator_queries_with_the_secrets_credentials(
    runtime: tuple[Runtime, FakeKube],
) -> None:
    """With both Secrets present every query carries them; Prometheus answers (empty
    answers here: MetricsIncomplete, not an auth reason)."""
    rt, kube = runtime
    put_secret(kube, "prom-creds", SECRETS["prom-creds"])
    put_secret(kube, "prom-tenant", SECRETS["prom-tenant"])
    reconcile_once(rt, NS, NAME)
    assert Recorder.seen
    assert all(s.get("X-Scope-OrgID") == "tenant-a" for s in Recorder.seen)
    assert condition(kube)["reason"] == ConditionReason.METRICS_INCOMPLETE
    secret_gets = [r for r in kube.requests if "/secrets/" in r[1]]
    assert {m for m, _, _ in secret_gets} == {"GET"}
    reconcile_once(rt, NS, NAME)  # cached: no new Secret read within the TTL
    assert len([r for r in kube.requests if "/secrets/" in r[1]]) == len(secret_gets)


def test_a_missing_secret_holds_with_secret_not_found(runtime: tuple[Runtime, FakeKube]) -> None:
    rt, kube = runtime
    put_secret(kube, "prom-creds", SECRETS["prom-creds"])
    reconcile_once(rt, NS, NAME)
    c = condition(kube)
    assert (c["status"], c["reason"]) == ("False", ConditionReason.SECRET_NOT_FOUND)
    assert "Secret serving/prom-tenant not found" in c["message"]
    assert "no scale-down" in c["message"]
    assert Recorder.seen == []  # nothing sent without the complete credentials
    assert PASSWORD not in everything_written(kube)


def test_a_wrong_password_holds_with_prometheus_unauthorized_then_recovers(
    runtime: tuple[Runtime, FakeKube],
) -> None:
    """401 -> PrometheusUnauthorized; the Secret is read again on the next tick, so a
    corrected password is used at once (no TTL wait)."""
    rt, kube = runtime
    put_secret(kube, "prom-creds", {"username": b"pdscaler", "password": b"wrong"})
    put_secret(kube, "prom-tenant", SECRETS["prom-tenant"])
    reconcile_once(rt, NS, NAME)
    c = condition(kube)
    assert (c["status"], c["reason"]) == ("False", ConditionReason.PROMETHEUS_UNAUTHORIZED)
    assert "wrong" not in c["message"]
    assert PASSWORD not in everything_written(kube)
    put_secret(kube, "prom-creds", SECRETS["prom-creds"])
    reconcile_once(rt, NS, NAME)
    assert condition(kube)["reason"] == ConditionReason.METRICS_INCOMPLETE


def test_a_forgotten_pddeployment_drops_its_secrets_and_client(
    runtime: tuple[Runtime, FakeKube],
) -> None:
    rt, kube = runtime
    put_secret(kube, "prom-creds", SECRETS["prom-creds"])
    put_secret(kube, "prom-tenant", SECRETS["prom-tenant"])
    reconcile_once(rt, NS, NAME)
    assert len(rt.secrets()) == 2
    del kube.store[PDD_PATH]
    reconcile_once(rt, NS, NAME)  # not found: forgotten
    assert len(rt.secrets()) == 0
    assert rt._auth_clients == {}


def test_a_url_outside_the_allow_list_reads_no_secret(recorder: str) -> None:
    kube = FakeKube()
    kube.put(PDD_PATH, pdd_object(NS, NAME, "http://elsewhere:9090", BASIC))
    rt = Runtime(kube=kube, prometheus_allowed=(recorder,))
    reconcile_once(rt, NS, NAME)
    assert condition(kube)["reason"] == ConditionReason.PROMETHEUS_NOT_ALLOWED
    assert not [r for r in kube.requests if "/secrets/" in r[1]]


def test_the_reader_maps_api_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    read = pdscaler.runtime._secret_reader(kube)
    assert read(NS, "absent") is None
    put_secret(kube, "s", {"k": b"v"})
    assert read(NS, "s") == {"k": b"v"}

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise KubeError(403, "Forbidden", "secrets is forbidden")

    monkeypatch.setattr(kube, "_request", refuse)
    with pytest.raises(SecretUnreadableError) as info:
        read(NS, "s")
    assert (info.value.status, info.value.reason) == (403, "Forbidden")
