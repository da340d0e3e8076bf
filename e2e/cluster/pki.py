"""A throwaway certificate authority for the local control plane, made with the openssl command.

Everything is generated once per state directory and reused by later `up`s: a CA, the API server's
serving certificate (loopback and the in-cluster names), one client certificate per component, and
the service-account signing key pair.
"""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Client identities: file stem -> (CN, O). The subject is what RBAC sees.
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("tailguard-e2e-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    # kwok plays every kubelet (node status, leases, pod status and deletion), so it gets the
    # superuser group rather than one node identity.
    "kwok": ("kwok-controller", "system:masters"),
}

DAYS = 365


class PKIError(RuntimeError):
    """openssl failed; the message carries its output."""


@dataclass(frozen=True)
class PKI:
    """Paths of the generated material."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def client_cert(self, who: str) -> Path:
        return self.directory / f"{who}.crt"

    def client_key(self, who: str) -> Path:
        return self.directory / f"{who}.key"


def _openssl(openssl: Path, *args: str) -> None:
    out = subprocess.run([str(openssl), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise PKIError(f"openssl {' '.join(args)} failed:\n{out.stdout}{out.stderr}")


def _ec_key(openssl: Path, path: Path) -> None:
    _openssl(openssl, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def _sign(openssl: Path, pki: PKI, key: Path, cert: Path, subject: str, extensions: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        csr = Path(tmp) / "req.csr"
        ext = Path(tmp) / "ext.cnf"
        ext.write_text("\n".join(extensions) + "\n")
        _openssl(openssl, "req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr))
        _openssl(
            openssl,
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(pki.ca_cert),
            "-CAkey",
            str(pki.ca_key),
            "-set_serial",
            str(secrets.randbits(63)),
            "-days",
            str(DAYS),
            "-extfile",
            str(ext),
            "-out",
            str(cert),
        )


def ensure(directory: Path, openssl: Path, service_ip: str) -> PKI:
    """Generate whatever is missing under ``directory``; existing files are kept."""
    pki = PKI(directory)
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    if not pki.ca_cert.exists():
        _ec_key(openssl, pki.ca_key)
        _openssl(
            openssl,
            "req",
            "-x509",
            "-new",
            "-key",
            str(pki.ca_key),
            "-subj",
            "/CN=tailguard-e2e-ca",
            "-days",
            str(DAYS * 10),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out",
            str(pki.ca_cert),
        )
    if not pki.serving_cert.exists():
        ipaddress.ip_address(service_ip)  # fail early on a typo
        names = [
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
            "IP:127.0.0.1",
            f"IP:{service_ip}",
        ]
        _ec_key(openssl, pki.serving_key)
        _sign(
            openssl,
            pki,
            pki.serving_key,
            pki.serving_cert,
            "/CN=kube-apiserver",
            [
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "extendedKeyUsage=serverAuth",
                "subjectAltName=" + ",".join(names),
            ],
        )
    for who, (cn, org) in CLIENTS.items():
        if pki.client_cert(who).exists():
            continue
        _ec_key(openssl, pki.client_key(who))
        subject = (f"/O={org}" if org else "") + f"/CN={cn}"
        _sign(
            openssl,
            pki,
            pki.client_key(who),
            pki.client_cert(who),
            subject,
            [
                "basicConstraints=critical,CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "extendedKeyUsage=clientAuth",
            ],
        )
    if not pki.sa_key.exists():
        _openssl(
            openssl,
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            str(pki.sa_key),
        )
        pki.sa_key.chmod(0o600)
        _openssl(openssl, "pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub))
    return pki
