"""The control plane's certificates: one CA, the API server's serving certificate, client certificates
and the service-account signing key, made with `cryptography` as kubeadm lays them out."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs import _san, make_ca

API_SERVER_NAMES = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    organization: str | None,
    usage: x509.ObjectIdentifier,
    sans: list[str],
    now: dt.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(_san(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def create(directory: Path, api_addresses: list[str]) -> Pki:
    """CA, `apiserver` serving certificate, `admin` client (system:masters) and the `sa` key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM
    ca_key, ca_cert = make_ca(now)
    pki = Pki(directory)
    pki.ca.write_bytes(ca_cert.public_bytes(pem))
    issued = {
        "apiserver": _issue(
            ca_key,
            ca_cert,
            "kube-apiserver",
            None,
            ExtendedKeyUsageOID.SERVER_AUTH,
            ["localhost", *api_addresses, *API_SERVER_NAMES],
            now,
        ),
        "admin": _issue(
            ca_key, ca_cert, "kubernetes-admin", "system:masters", ExtendedKeyUsageOID.CLIENT_AUTH, [], now
        ),
    }
    for name, (key, cert) in issued.items():
        pki.cert(name).write_bytes(cert.public_bytes(pem))
        pki.key(name).write_bytes(_pem_key(key))
        pki.key(name).chmod(0o600)
    signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki.key("sa").write_bytes(_pem_key(signing))
    (directory / "sa.pub").write_bytes(
        signing.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def serving(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """A CA of its own and a serving certificate for these DNS names: (ca.crt, tls.crt, tls.key), as a
    webhook's Secret carries them."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    pem = serialization.Encoding.PEM
    ca_key, ca_cert = make_ca(now)
    key, cert = _issue(ca_key, ca_cert, names[0], None, ExtendedKeyUsageOID.SERVER_AUTH, names, now)
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    paths[0].write_bytes(ca_cert.public_bytes(pem))
    paths[1].write_bytes(cert.public_bytes(pem))
    paths[2].write_bytes(_pem_key(key))
    paths[2].chmod(0o600)
    return paths
