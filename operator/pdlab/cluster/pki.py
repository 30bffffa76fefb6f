"""The lab's PKI and kubeconfigs, made with the `openssl` command line.

Owns: ECDSA P-256 keys, a CA, the API server's serving certificate (SANs localhost, 127.0.0.1,
kubernetes.default..., 10.96.0.1), client certificates (admin in O=system:masters,
system:kube-controller-manager, system:kube-scheduler), the service-account key pair, and
kubeconfig files with embedded certificates. Files are created once and reused: a second
`ensure_pki` on the same directory runs no openssl at all. Must not start the lab.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import yaml

SERVER_SANS = (
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
    "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
)

# name -> (subject, extended key usage)
CLIENTS: dict[str, tuple[str, str]] = {
    "admin": ("/O=system:masters/CN=pdlab-admin", "clientAuth"),
    "controller-manager": ("/CN=system:kube-controller-manager", "clientAuth"),
    "scheduler": ("/CN=system:kube-scheduler", "clientAuth"),
    "kwok": ("/O=system:masters/CN=pdlab-kwok", "clientAuth"),
}


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


def _genkey(pki: Path, name: str) -> None:
    """An ECDSA P-256 key (PKCS#8): ~100x faster to make than RSA 2048 on a busy machine,
    and accepted everywhere the lab uses keys (TLS, client certs, ES256 SA tokens)."""
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", name, cwd=pki
    )


def _sign(pki: Path, name: str, subject: str, ext: str) -> None:
    """Key + CSR + certificate signed by the lab CA, valid ten years."""
    if (pki / f"{name}.crt").exists():
        return
    _genkey(pki, f"{name}.key")
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=pki)
    (pki / f"{name}.ext").write_text(ext)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", f"{name}.ext",
        "-out", f"{name}.crt",
        cwd=pki,
    )  # fmt: skip


def ensure_pki(pki: Path) -> None:
    """Create every key and certificate under `pki` that is missing."""
    pki.mkdir(parents=True, exist_ok=True)
    if not (pki / "ca.crt").exists():
        _genkey(pki, "ca.key")
        _openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=pdlab-ca", "-days", "3650",
            "-sha256", "-out", "ca.crt",
            cwd=pki,
        )  # fmt: skip
    if not (pki / "sa.key").exists():
        _genkey(pki, "sa.key")
        _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    _sign(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={SERVER_SANS}\n",
    )
    for name, (subject, eku) in CLIENTS.items():
        _sign(
            pki,
            name,
            subject,
            f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage={eku}\n",
        )


def ensure_server_cert(pki: Path, name: str, subject: str, sans: str) -> None:
    """A serving certificate signed by the lab CA (made once): e.g. the LWS controller's
    webhook server, ``ensure_server_cert(pki, "lws-webhook", "/CN=lws-webhook",
    "IP:127.0.0.1")``: the API server, trusting ca.crt, calls it at https://127.0.0.1:..."""
    _sign(
        pki,
        name,
        subject,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
    )


def ensure_client_cert(pki: Path, name: str, subject: str) -> None:
    """A client certificate signed by the lab CA (made once), for a component that is not
    in CLIENTS, e.g. ``ensure_client_cert(pki, "lws", "/O=system:masters/CN=pdlab-lws")``."""
    _sign(
        pki,
        name,
        subject,
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n",
    )


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(path: Path, server: str, pki: Path, client: str) -> None:
    """A kubeconfig for `client` (a name in CLIENTS) with certificates embedded."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "pdlab",
                "cluster": {"server": server, "certificate-authority-data": _b64(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": client,
                "user": {
                    "client-certificate-data": _b64(pki / f"{client}.crt"),
                    "client-key-data": _b64(pki / f"{client}.key"),
                },
            }
        ],
        "contexts": [{"name": "pdlab", "context": {"cluster": "pdlab", "user": client}}],
        "current-context": "pdlab",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
