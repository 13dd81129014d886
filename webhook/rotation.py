"""Certificates without an operator: a CA and serving certificate kept in a Secret, the CA bundle
kept in both webhook configurations, and rotation that never breaks a call in flight.

The Secret holds `ca.crt` (the current signing CA), `ca.key`, `tls.crt`, `tls.key`, and `ca-bundle.crt`
(every CA a client may still need). Rotation is a sequence of safe steps, one per pass:

1. the serving certificate is renewed when a third of its life remains, signed by the current CA;
2. a new CA is made when a third of the CA's life remains; it goes into the bundle first and only
   signs once the bundle with both CAs has been in the webhook configurations for a full pass;
3. a CA leaves the bundle only after it expired.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhook import certs

SERVING_DAYS, CA_DAYS = 90, 3650


@dataclass(frozen=True)
class CertState:
    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes
    bundle: bytes  # PEM of every CA clients must trust
    pending_ca_crt: bytes = b""  # next CA: in the bundle, not yet signing
    pending_ca_key: bytes = b""

    def to_secret_data(self) -> dict[str, bytes]:
        data = {
            "ca.crt": self.ca_crt,
            "ca.key": self.ca_key,
            "tls.crt": self.tls_crt,
            "tls.key": self.tls_key,
            "ca-bundle.crt": self.bundle,
        }
        if self.pending_ca_crt:
            data["next-ca.crt"], data["next-ca.key"] = self.pending_ca_crt, self.pending_ca_key
        return data

    @staticmethod
    def from_secret_data(data: dict[str, bytes]) -> CertState:
        return CertState(
            data["ca.crt"],
            data["ca.key"],
            data["tls.crt"],
            data["tls.key"],
            data.get("ca-bundle.crt", data["ca.crt"]),
            data.get("next-ca.crt", b""),
            data.get("next-ca.key", b""),
        )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _remaining_fraction(cert: x509.Certificate, now: dt.datetime) -> float:
    life = (cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds()
    return (cert.not_valid_after_utc - now).total_seconds() / life


def _issue(ca_crt: bytes, ca_key: bytes, sans: list[str], now: dt.datetime, days: int) -> tuple[bytes, bytes]:
    ca = x509.load_pem_x509_certificate(ca_crt)
    key = serialization.load_pem_private_key(ca_key, None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    serving_key, serving = certs.make_serving(key, ca, sans, now, days)
    return _pem_cert(serving), _pem_key(serving_key)


def bootstrap(sans: list[str], now: dt.datetime, ca_days: int = CA_DAYS, serving_days: int = SERVING_DAYS) -> CertState:
    ca_key, ca = certs.make_ca(now, ca_days)
    ca_crt, ca_pem_key = _pem_cert(ca), _pem_key(ca_key)
    tls_crt, tls_key = _issue(ca_crt, ca_pem_key, sans, now, serving_days)
    return CertState(ca_crt, ca_pem_key, tls_crt, tls_key, ca_crt)


def bundle_certs(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle) if bundle.strip() else []


def seconds_until_due(state: CertState, now: dt.datetime) -> float:
    """Until the next rotation step is due: the serving certificate's or the CA's renewal point (a
    third of its life left). Upkeep wakes then, not only on its period, so a short-lived certificate
    is never served past its renewal point."""
    due = []
    for pem in (state.tls_crt, state.ca_crt):
        cert = x509.load_pem_x509_certificate(pem)
        life = cert.not_valid_after_utc - cert.not_valid_before_utc
        due.append((cert.not_valid_after_utc - life / 3 - now).total_seconds())
    return min(due)


def step(
    state: CertState,
    sans: list[str],
    now: dt.datetime,
    bundle_published: Callable[[bytes], bool],
    ca_days: int = CA_DAYS,
    serving_days: int = SERVING_DAYS,
) -> CertState:
    """The next safe state. `bundle_published(bundle)` tells whether both webhook configurations
    already carry exactly that bundle (so a CA in it may start signing)."""
    ca = x509.load_pem_x509_certificate(state.ca_crt)
    # 3. expired CAs leave the bundle
    kept = [c for c in bundle_certs(state.bundle) if c.not_valid_after_utc > now]
    bundle = b"".join(_pem_cert(c) for c in kept) or state.ca_crt
    state = replace(state, bundle=bundle)
    # 2. a new CA: first only trusted, then signing
    if state.pending_ca_crt:
        if bundle_published(state.bundle):
            tls_crt, tls_key = _issue(state.pending_ca_crt, state.pending_ca_key, sans, now, serving_days)
            return replace(
                state,
                ca_crt=state.pending_ca_crt,
                ca_key=state.pending_ca_key,
                tls_crt=tls_crt,
                tls_key=tls_key,
                pending_ca_crt=b"",
                pending_ca_key=b"",
            )
        return state
    if _remaining_fraction(ca, now) < 1 / 3:
        new_key, new_ca = certs.make_ca(now, ca_days)
        return replace(
            state,
            pending_ca_crt=_pem_cert(new_ca),
            pending_ca_key=_pem_key(new_key),
            bundle=state.bundle + _pem_cert(new_ca),
        )
    # 1. the serving certificate
    serving = x509.load_pem_x509_certificate(state.tls_crt)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    current_sans = {str(v) for v in names.get_values_for_type(x509.DNSName)} | {
        str(v) for v in names.get_values_for_type(x509.IPAddress)
    }
    if _remaining_fraction(serving, now) < 1 / 3 or current_sans != set(sans):
        tls_crt, tls_key = _issue(state.ca_crt, state.ca_key, sans, now, serving_days)
        return replace(state, tls_crt=tls_crt, tls_key=tls_key)
    return state
