"""Certificates: generation and SANs over a real TLS handshake, rotation without a failed call, CA bundle patch."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import threading
import time
from pathlib import Path

import pytest
import requests
from cryptography import x509

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.conftest import start_server, stop_server
from webhook import certs
from webhook.certsync import CertSync
from webhook.kube import Api, client_from
from webhook.rotation import CertState, bootstrap, bundle_certs, step

SANS = ["localhost", "127.0.0.1"]
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def serving(state: CertState) -> x509.Certificate:
    return x509.load_pem_x509_certificate(state.tls_crt)


def test_serving_certificate_is_renewed_with_a_third_of_its_life_left() -> None:
    state = bootstrap(SANS, T0)
    assert step(state, SANS, T0 + dt.timedelta(days=50), lambda _: True) == state
    renewed = step(state, SANS, T0 + dt.timedelta(days=61), lambda _: True)
    assert renewed.tls_crt != state.tls_crt and renewed.ca_crt == state.ca_crt
    assert serving(renewed).not_valid_after_utc > serving(state).not_valid_after_utc


def test_new_ca_is_trusted_before_it_signs_and_old_ca_leaves_only_after_expiry() -> None:
    state = bootstrap(SANS, T0, ca_days=30)
    later = T0 + dt.timedelta(days=21)
    trusted = step(state, SANS, later, lambda _: False)
    assert trusted.pending_ca_crt and len(bundle_certs(trusted.bundle)) == 2
    assert trusted.ca_crt == state.ca_crt and trusted.tls_crt == state.tls_crt  # not signing yet
    assert step(trusted, SANS, later, lambda _: False) == trusted  # waits until the bundle is published
    signing = step(trusted, SANS, later, lambda bundle: bundle == trusted.bundle)
    assert signing.ca_crt == trusted.pending_ca_crt and not signing.pending_ca_crt
    assert serving(signing).issuer == x509.load_pem_x509_certificate(signing.ca_crt).subject
    assert len(bundle_certs(signing.bundle)) == 2
    expired = step(signing, SANS, T0 + dt.timedelta(days=31), lambda _: True)
    assert bundle_certs(expired.bundle) == [x509.load_pem_x509_certificate(signing.ca_crt)]


def test_sans_change_reissues_the_serving_certificate() -> None:
    state = bootstrap(SANS, T0)
    reissued = step(state, [*SANS, "gangkeeper-webhook.gangkeeper-system.svc"], T0, lambda _: True)
    names = serving(reissued).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "gangkeeper-webhook.gangkeeper-system.svc" in names.get_values_for_type(x509.DNSName)


def webhook_configuration(kind: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "gangkeeper"},
        "webhooks": [
            {
                "name": f"{kind.lower()}.gangkeeper.io",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "clientConfig": {"service": {"name": "gangkeeper-webhook", "namespace": "gangkeeper-system"}},
            }
        ],
    }


def test_secret_and_ca_bundle_patch_against_the_api_server(tmp_path: Path) -> None:
    with TestApiServer() as server:
        store = server.store
        store.create(
            "admissionregistration.k8s.io/v1",
            "mutatingwebhookconfigurations",
            "",
            webhook_configuration("MutatingWebhookConfiguration"),
        )
        store.create(
            "admissionregistration.k8s.io/v1",
            "validatingwebhookconfigurations",
            "",
            webhook_configuration("ValidatingWebhookConfiguration"),
        )
        sync = CertSync(
            Api(client_from(server=server.url)),
            "gangkeeper-system",
            "gangkeeper-webhook-certs",
            tmp_path,
            certs.service_dns_names(),
        )
        state = sync.sync_once()
        secret = store.get("v1", "secrets", "gangkeeper-system", "gangkeeper-webhook-certs")
        assert base64.b64decode(secret["data"]["tls.crt"]) == state.tls_crt
        for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            config = store.get("admissionregistration.k8s.io/v1", plural, "", "gangkeeper")
            hook = config["webhooks"][0]
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == state.bundle
            assert hook["clientConfig"]["service"]["name"] == "gangkeeper-webhook"  # the rest is untouched
        assert (tmp_path / "tls.crt").read_bytes() == state.tls_crt
        # a second replica, or the next pass, changes nothing
        requests_before = len([r for r in store.requests if r[0] != "GET"])
        assert sync.sync_once() == state
        assert len([r for r in store.requests if r[0] != "GET"]) == requests_before


def test_rotation_while_a_client_keeps_calling(tmp_path: Path) -> None:
    """CA rotation in its three steps under live traffic: every call succeeds."""
    cert_dir = tmp_path / "certs"
    now = dt.datetime.now(dt.UTC)
    state = bootstrap(SANS, now - dt.timedelta(days=2, hours=12), ca_days=3)  # a sixth of the CA's life left
    bundle_file = tmp_path / "bundle.crt"

    def publish(current: CertState) -> None:
        certs.write(certs.Bundle(current.bundle, current.tls_crt, current.tls_key), cert_dir)
        staged = bundle_file.with_suffix(".tmp")  # what the API server trusts after the caBundle patch,
        staged.write_bytes(current.bundle)  # swapped in whole, as a patch is
        staged.replace(bundle_file)

    publish(state)
    server = start_server(tmp_path, "--backend", "volcano", "--cert-reload-seconds", "0.1")
    failures: list[str] = []
    calls = {"n": 0}
    stop = threading.Event()
    body = json.dumps(b.review(b.pod(labels={"batch.kubernetes.io/job-name": "train"}))).encode()

    def client() -> None:
        while not stop.is_set():
            try:  # a fresh connection and the current bundle each time: every call is a new handshake
                answer = requests.post(
                    server.url + "/mutate",
                    data=body,
                    verify=str(bundle_file),
                    timeout=5,
                    headers={"Content-Type": "application/json", "Connection": "close"},
                )
                if answer.status_code != 200:
                    failures.append(str(answer.status_code))
            except (requests.RequestException, ssl.SSLError) as error:
                failures.append(repr(error))
            calls["n"] += 1

    def calls_go_on(more: int) -> None:
        # calls made under each step, however slow the machine: a count, not a sleep
        until, deadline = calls["n"] + more, time.monotonic() + 60
        while calls["n"] < until and time.monotonic() < deadline:
            time.sleep(0.05)

    thread = threading.Thread(target=client)
    thread.start()
    try:
        for published in (lambda _: False, lambda bundle: True):  # new CA trusted, then signing
            calls_go_on(8)
            state = step(state, SANS, now, published)
            publish(state)
        assert len(bundle_certs(state.bundle)) == 2 and not state.pending_ca_crt
        time.sleep(0.5)  # five reload periods (--cert-reload-seconds 0.1)
        calls_go_on(8)
        served = ssl.get_server_certificate(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        assert served.encode().strip() == state.tls_crt.strip()  # reloaded without a restart
    finally:
        stop.set()
        thread.join()
        stop_server(server)
    assert calls["n"] > 20 and failures == [], failures[:2]


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1"])
def test_generated_certificate_verifies_in_a_real_handshake(tmp_path: Path, name: str) -> None:
    certs.write(certs.generate(), tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)

        thread = threading.Thread(target=accept)
        thread.start()
        with socket.create_connection(("127.0.0.1", port)) as raw, client.wrap_socket(raw, server_hostname=name) as tls:
            assert tls.getpeercert() is not None
            tls.send(b"x")
        thread.join()
