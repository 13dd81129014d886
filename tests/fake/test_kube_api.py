"""The controller's requests go through the kubernetes client's own pool and credentials, whatever
the client was configured with: a refreshed token (projected service-account tokens are re-read by
the client's refresh hook; kube/config/incluster_config.py), TLS with a client certificate (kind's
kubeconfig), or a proxy in front of the API server."""

from __future__ import annotations

import datetime as dt
import itertools
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from tests import builders as b
from tests.apiserver import TestApiServer
from webhook import certs, kube
from webhook.informer import Informer
from webhook.kube import PODS, Api, ApiError


def configured(host: str, **settings: Any) -> Api:
    configuration = client.Configuration()
    configuration.host = host
    for name, value in settings.items():
        setattr(configuration, name, value)
    return Api(client.ApiClient(configuration))


def test_requests_carry_the_token_the_client_refreshes_asked_for_again_every_few_seconds(
    apiserver: TestApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = (f"token-{n}" for n in itertools.count(1))

    def refresh(configuration: client.Configuration) -> None:
        configuration.api_key["authorization"] = next(tokens)

    monkeypatch.setattr(kube, "AUTH_REFRESH_SECONDS", 0.5)
    api = configured(
        apiserver.url,
        api_key={"authorization": "token-0"},
        api_key_prefix={"authorization": "Bearer"},
        refresh_api_key_hook=refresh,
    )
    api.create(PODS.path("team-a"), b.pod("p"))
    api.merge_patch(PODS.path("team-a", "p"), {"metadata": {"labels": {"a": "b"}}})
    time.sleep(0.6)
    api.list(PODS.path("team-a"), labelSelector="a=b,!c")
    assert apiserver.store.credentials == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]


def test_requests_go_through_the_proxy_the_client_is_configured_with(apiserver: TestApiServer) -> None:
    # the cluster's name does not resolve: only the proxy (the test server, which serves absolute-form
    # request targets as kube-apiserver behind a forward proxy would see them) can answer
    api = configured("http://kubernetes.cluster.invalid", proxy=apiserver.url)
    api.create(PODS.path("team-a"), b.pod("p", labels={"app": "x"}))
    assert [p["metadata"]["name"] for p in api.list(PODS.path("team-a"), labelSelector="app=x,!c")["items"]] == ["p"]
    assert apiserver.store.requests[-1][1].startswith("http://kubernetes.cluster.invalid/api/v1/")
    watched = Informer(api, PODS)
    watched.start()
    try:
        assert watched.synced.wait(10)
        assert [p["metadata"]["name"] for p in watched.items()] == ["p"]
    finally:
        watched.stop()


def test_a_refused_connection_is_an_api_error_not_a_crash() -> None:
    api = configured("http://127.0.0.1:9", retries=0)
    with pytest.raises(ApiError) as failed:
        api.merge_patch(PODS.path("team-a", "p"), {"metadata": {"labels": {"a": "b"}}})
    assert failed.value.status == 0 and "PATCH /api/v1/namespaces/team-a/pods/p" in str(failed.value)


def client_certificate(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate, user: str) -> bytes:
    """A certificate for TLS client authentication, as kind writes into its kubeconfig."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return cert.public_bytes(pem) + key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def test_a_server_that_demands_a_client_certificate_gets_the_one_the_client_has(tmp_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_key, ca_cert = certs.make_ca(now)
    server_key, server_cert = certs.make_serving(ca_key, ca_cert, ["127.0.0.1"], now)
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.crt").write_bytes(ca_cert.public_bytes(pem))
    (tmp_path / "server.pem").write_bytes(
        server_cert.public_bytes(pem)
        + server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (tmp_path / "client.pem").write_bytes(client_certificate(ca_key, ca_cert, "kubernetes-admin"))
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(tmp_path / "server.pem")
    tls.load_verify_locations(tmp_path / "ca.crt")
    tls.verify_mode = ssl.CERT_REQUIRED
    with TestApiServer(tls=tls) as server:
        api = configured(
            server.url,
            ssl_ca_cert=str(tmp_path / "ca.crt"),
            cert_file=str(tmp_path / "client.pem"),
            key_file=str(tmp_path / "client.pem"),
        )
        api.create(PODS.path("team-a"), b.pod("p"))
        api.merge_patch(PODS.path("team-a", "p"), {"metadata": {"labels": {"a": "b"}}})
        assert server.store.get("v1", "pods", "team-a", "p")["metadata"]["labels"]["a"] == "b"
        anonymous = configured(server.url, ssl_ca_cert=str(tmp_path / "ca.crt"), retries=0)
        with pytest.raises(ApiError) as refused:
            anonymous.list(PODS.path("team-a"))
        assert refused.value.status == 0


def test_a_server_url_with_a_path_keeps_it_on_every_request(apiserver: TestApiServer) -> None:
    # clusters behind Rancher or an API gateway: https://gateway/k8s/clusters/c-1 is the API server's root
    for api, root in (
        (configured(f"{apiserver.url}/k8s/clusters/c-1/"), "/k8s/clusters/c-1"),
        (configured("http://x.invalid/k8s", proxy=apiserver.url), "/k8s"),
    ):
        with pytest.raises(ApiError) as answered:  # the test server serves no prefix: its 404 names the path
            api.list(PODS.path("team-a"))
        assert answered.value.status == 404
        assert f"no route {root}/api/v1/namespaces/team-a/pods" in answered.value.body


def test_a_read_only_api_reads_the_cluster_and_writes_nothing(apiserver: TestApiServer, api: Api) -> None:
    api.create(PODS.path("team-a"), b.pod("p"))
    writes = len(apiserver.store.requests)
    read_only = Api(api.client, read_only=True)  # what `gangkeeper explain` runs the controller's pass through
    read_only.merge_patch(PODS.path("team-a", "p"), {"metadata": {"labels": {"a": "b"}}})
    read_only.delete(PODS.path("team-a", "p"))
    assert [p["metadata"]["name"] for p in read_only.list(PODS.path("team-a"))["items"]] == ["p"]
    assert [method for method, _ in apiserver.store.requests[writes:]] == ["GET"]
    assert "labels" not in apiserver.store.get("v1", "pods", "team-a", "p")["metadata"]
