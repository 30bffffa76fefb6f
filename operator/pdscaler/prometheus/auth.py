"""The connection's credentials (``metrics.prometheus.auth``: KEDA's bearer, basic, TLS
and custom headers).

Owns: ``credentials_from`` (assembles them from the Secret values ``kube.read_secret``
read), ``SecretCache`` (keeps those values a while, re-reads after a refusal),
``Credentials`` (what is sent: ``Authorization``, custom headers, CA, client
certificate) and ``tls_context``. A missing Secret, key or an unusable value is
``SecretNotFound``, ``SecretKeyNotFound``, ``InvalidSecret``; a Secret the operator may
not get ``SecretForbidden``. Must not: let a value reach a message, a ``repr`` or a log.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pdscaler.prometheus.errors import MetricsUnavailableError
from pdscaler.spec import PrometheusSpec
from pdscaler.types import MetricsErrorReason


@dataclass(frozen=True, repr=False)
class Credentials:
    """What a client sends to authenticate, assembled from Secret values
    (``credentials_from``). Its ``repr`` names what is set, never a value:
    ``Credentials(basic, ca, client certificate, headers X-Scope-OrgID)``."""

    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None
    ca: bytes | None = None  # PEM bundle verifying the server
    cert: bytes | None = None  # PEM client certificate ...
    key: bytes | None = None  # ... and its private key
    headers: tuple[tuple[str, str], ...] = ()
    insecure_skip_verify: bool = False

    def __repr__(self) -> str:
        parts = [
            label
            for label, on in (
                ("bearer", self.bearer_token is not None),
                ("basic", self.username is not None),
                ("ca", self.ca is not None),
                ("client certificate", self.cert is not None),
                ("insecureSkipVerify", self.insecure_skip_verify),
            )
            if on
        ]
        if self.headers:
            parts.append("headers " + ", ".join(name for name, _ in self.headers))
        return f"Credentials({', '.join(parts)})"

    __str__ = __repr__

    def fingerprint(self) -> str:
        """A digest of every value (to key clients by; never shown)."""
        digest = hashlib.sha256()
        for part in (
            self.bearer_token,
            self.username,
            self.password,
            self.ca,
            self.cert,
            self.key,
            repr(self.headers) if self.headers else None,
            "insecure" if self.insecure_skip_verify else None,
        ):
            raw = part.encode() if isinstance(part, str) else part
            digest.update(b"\x00" if raw is None else b"\x01" + len(raw).to_bytes(8, "big") + raw)
        return digest.hexdigest()

    def request_headers(self) -> dict[str, str]:
        """The headers sent with every query: ``Authorization`` (Bearer or Basic) and
        the custom ones.

        >>> Credentials(username="u", password="p", headers=(("X-Scope-OrgID", "t1"),)
        ...             ).request_headers()
        {'X-Scope-OrgID': 't1', 'Authorization': 'Basic dTpw'}
        """
        out = dict(self.headers)
        if self.bearer_token is not None:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return out


#: Secret name -> its data (None: the Secret does not exist).
SecretData = Mapping[str, Mapping[str, bytes] | None]


def _text_value(value: bytes, where: str) -> str:
    """A token, user name, password or header value: UTF-8, surrounding whitespace
    removed (a Secret made with ``echo`` ends in a newline), not empty, no control
    characters (a header cannot carry them)."""
    try:
        text = value.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET, f"{where}: not UTF-8 text"
        ) from None
    if not text:
        raise MetricsUnavailableError(MetricsErrorReason.INVALID_SECRET, f"{where}: empty")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET, f"{where}: holds a line break or control character"
        )
    return text


def credentials_from(prom: PrometheusSpec, secrets: SecretData, namespace: str) -> Credentials:
    """The credentials ``prom.auth`` names, from the Secrets' data already read. Pure.

    Raises ``MetricsUnavailableError``: ``SecretNotFound`` (``secrets[name]`` is None),
    ``SecretKeyNotFound`` or ``InvalidSecret``, each naming the field, the Secret and the
    key, never a value: ``metrics.prometheus.auth.password: Secret serving/prom-creds
    has no key "pasword"``."""
    auth = prom.auth
    if auth is None:
        return Credentials(insecure_skip_verify=prom.insecure_skip_verify)

    def value(field_name: str, secret: str, key: str) -> bytes:
        where = f"metrics.prometheus.auth.{field_name}"
        data = secrets.get(secret)
        if data is None:
            raise MetricsUnavailableError(
                MetricsErrorReason.SECRET_NOT_FOUND,
                f"{where}: Secret {namespace}/{secret} not found",
            )
        if key not in data:
            raise MetricsUnavailableError(
                MetricsErrorReason.SECRET_KEY_NOT_FOUND,
                f"{where}: Secret {namespace}/{secret} has no key {key!r}",
            )
        return data[key]

    def text(field_name: str, ref: Any) -> str | None:
        if ref is None:
            return None
        raw = value(field_name, ref.name, ref.key)
        return _text_value(raw, f"metrics.prometheus.auth.{field_name} ({ref.name}/{ref.key})")

    def pem(field_name: str, ref: Any) -> bytes | None:
        if ref is None:
            return None
        raw = value(field_name, ref.name, ref.key)
        if b"-----BEGIN " not in raw:
            raise MetricsUnavailableError(
                MetricsErrorReason.INVALID_SECRET,
                f"metrics.prometheus.auth.{field_name} ({ref.name}/{ref.key}): not PEM",
            )
        return raw

    headers = tuple(
        (h.header, _text_value(value("customHeaders", h.name, h.key), f"header {h.header}"))
        for h in auth.custom_headers
    )
    return Credentials(
        bearer_token=text("bearerToken", auth.bearer_token),
        username=text("username", auth.username),
        password=text("password", auth.password),
        ca=pem("ca", auth.ca),
        cert=pem("cert", auth.cert),
        key=pem("key", auth.key),
        headers=headers,
        insecure_skip_verify=prom.insecure_skip_verify,
    )


@contextlib.contextmanager
def _pem_paths(cert: bytes, key: bytes) -> Iterator[tuple[str, str]]:
    """Paths ``ssl.load_cert_chain`` can read the client certificate and key from (it
    takes files only): anonymous in-memory files on Linux (``memfd``, nothing written
    to disk, readable only by this process), else private temporary files removed at
    once."""
    fds: list[int] = []
    if hasattr(os, "memfd_create"):
        try:
            for label, data in (("cert", cert), ("key", key)):
                fd = os.memfd_create(f"pdscaler-{label}", os.MFD_CLOEXEC)
                fds.append(fd)
                os.write(fd, data)
            yield f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}"
            return
        finally:
            for fd in fds:
                os.close(fd)
    with tempfile.TemporaryDirectory(prefix="pdscaler-tls-") as tmp:  # pragma: no cover
        paths = []
        for label, data in (("cert", cert), ("key", key)):
            path = os.path.join(tmp, label)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as out:
                out.write(data)
            paths.append(path)
        yield paths[0], paths[1]


def tls_context(creds: Credentials | None) -> ssl.SSLContext:
    """The TLS context of an https client: the system CAs, or ``creds.ca`` only; the
    client certificate if given; verification off only with ``insecure_skip_verify``.
    Raises ``MetricsUnavailableError`` (``InvalidSecret``) for unusable PEM."""
    if creds is None:
        return ssl.create_default_context()
    try:
        if creds.ca is not None:
            ctx = ssl.create_default_context(cadata=creds.ca.decode("ascii", errors="replace"))
        else:
            ctx = ssl.create_default_context()
    except (ssl.SSLError, ValueError):
        raise MetricsUnavailableError(
            MetricsErrorReason.INVALID_SECRET,
            "metrics.prometheus.auth.ca: no usable PEM certificate",
        ) from None
    if creds.cert is not None and creds.key is not None:
        try:
            with _pem_paths(creds.cert, creds.key) as (cert_path, key_path):
                ctx.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError, ValueError):
            raise MetricsUnavailableError(
                MetricsErrorReason.INVALID_SECRET,
                "metrics.prometheus.auth.cert/key: not a usable PEM certificate and key pair",
            ) from None
    if creds.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


#: How long a Secret read is used before it is read again.
DEFAULT_SECRET_TTL_SECONDS = 60.0


class SecretUnreadableError(Exception):
    """The API server refused a Secret read (not a 404): ``status``, ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}")
        self.status = status
        self.reason = reason


@dataclass
class _Cached:
    data: Mapping[str, bytes]
    read_at: float


@dataclass
class SecretCache:
    """The Secrets PDDeployments name, read through ``read`` (``kube.read_secret``,
    raising ``SecretUnreadableError`` for a refusal) and kept ``ttl`` seconds: each is
    read at most once per ``ttl`` however many PDDeployments and ticks use it, read
    again at once after Prometheus refused its credentials (``refresh``: a rotated
    password is picked up on the next tick), and dropped when no PDDeployment names it
    any more (``use``/``forget``). A missing Secret is not cached (read each tick until
    it appears). Thread-safe. Holds the values in memory only; never logs them.

    >>> cache = SecretCache(lambda ns, name: {"token": b"t0k3n"})
    >>> dict(cache.read("serving", ["prom-creds"], user=("serving", "chat")))
    {'prom-creds': {'token': b't0k3n'}}
    """

    read_secret: Callable[[str, str], Mapping[str, bytes] | None]
    ttl: float = DEFAULT_SECRET_TTL_SECONDS
    clock: Callable[[], float] = time.monotonic
    _cache: dict[tuple[str, str], _Cached] = field(default_factory=dict)
    _users: dict[tuple[str, str], frozenset[tuple[str, str]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    reads: int = 0  # API reads so far (tests)

    def read(
        self, namespace: str, names: Sequence[str], *, user: tuple[str, str]
    ) -> dict[str, Mapping[str, bytes] | None]:
        """The data of each Secret ``names`` in ``namespace`` (None: not found), as used
        by PDDeployment ``user``. Raises ``MetricsUnavailableError``
        (``SecretForbidden``, or ``PrometheusUnreachable`` for another API failure)."""
        keys = frozenset((namespace, n) for n in names)
        with self._lock:
            self._users[user] = keys
            self._prune()
        out: dict[str, Mapping[str, bytes] | None] = {}
        for name in names:
            out[name] = self._one(namespace, name)
        return out

    def _one(self, namespace: str, name: str) -> Mapping[str, bytes] | None:
        now = self.clock()
        with self._lock:
            hit = self._cache.get((namespace, name))
            if hit is not None and now - hit.read_at < self.ttl:
                return hit.data
        try:
            self.reads += 1
            data = self.read_secret(namespace, name)
        except SecretUnreadableError as err:
            if err.status == 403:
                raise MetricsUnavailableError(
                    MetricsErrorReason.SECRET_FORBIDDEN,
                    f"the operator may not get Secret {namespace}/{name} (403 {err.reason});"
                    " grant it get on secrets in this namespace (the chart's RBAC)",
                ) from None
            raise MetricsUnavailableError(
                MetricsErrorReason.UNREACHABLE, f"Secret {namespace}/{name} not read: {err}"
            ) from None
        with self._lock:
            if data is None:
                self._cache.pop((namespace, name), None)
            elif (namespace, name) in set().union(*self._users.values()):
                self._cache[(namespace, name)] = _Cached(data, now)
        return data

    def refresh(self, namespace: str, names: Sequence[str]) -> None:
        """Read these Secrets again on their next use (their credentials were refused)."""
        with self._lock:
            for name in names:
                self._cache.pop((namespace, name), None)

    def forget(self, user: tuple[str, str]) -> None:
        """PDDeployment ``user`` is gone: drop the Secrets no one else names."""
        with self._lock:
            self._users.pop(user, None)
            self._prune()

    def _prune(self) -> None:
        used: set[tuple[str, str]] = set().union(*self._users.values())
        for key in [k for k in self._cache if k not in used]:
            del self._cache[key]

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)
