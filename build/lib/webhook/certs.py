"""Development and in-cluster certificates, made with `cryptography`: a CA and a serving certificate."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_FILE, CERT_FILE, KEY_FILE = "ca.crt", "tls.crt", "tls.key"
SERVICE_NAME = "gangkeeper-webhook"


def service_dns_names(service: str = SERVICE_NAME, namespace: str = "gangkeeper-system") -> list[str]:
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def default_sans() -> list[str]:
    return ["localhost", "127.0.0.1", *service_dns_names()]


@dataclass(frozen=True)
class Bundle:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gangkeeper"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(entries: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for entry in entries:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(entry)))
        except ValueError:
            names.append(x509.DNSName(entry))
    return x509.SubjectAlternativeName(names)


def make_ca(now: dt.datetime, days: int = 3650) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gangkeeper-ca"))
        .issuer_name(_name("gangkeeper-ca"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_serving(
    ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, sans: list[str], now: dt.datetime, days: int = 365
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(sans[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(_san(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def generate(sans: list[str] | None = None, now: dt.datetime | None = None) -> Bundle:
    now = now or dt.datetime.now(dt.UTC)
    ca_key, ca_cert = make_ca(now)
    key, cert = make_serving(ca_key, ca_cert, sans or default_sans(), now)
    pem = serialization.Encoding.PEM
    return Bundle(
        ca_pem=ca_cert.public_bytes(pem),
        cert_pem=cert.public_bytes(pem),
        key_pem=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def write(bundle: Bundle, directory: Path) -> None:
    """Write ca.crt, tls.crt and tls.key (mode 0600); each file is replaced atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, data, mode in (
        (CA_FILE, bundle.ca_pem, 0o644),
        (KEY_FILE, bundle.key_pem, 0o600),
        (CERT_FILE, bundle.cert_pem, 0o644),
    ):
        tmp = directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, directory / name)


def ensure(directory: Path, sans: list[str] | None = None) -> bool:
    """Generate development certificates unless a serving certificate is already there; True if made."""
    if (directory / CERT_FILE).exists() and (directory / KEY_FILE).exists():
        return False
    write(generate(sans), directory)
    return True
