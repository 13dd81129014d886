"""`gangkeeper serve` over real HTTPS, with real AdmissionReview JSON from tests/reviews/."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests import builders as b
from tests.conftest import Server
from tests.schemas import validate

REVIEWS = Path(__file__).parents[1] / "reviews"


def load(name: str) -> dict[str, Any]:
    return json.loads((REVIEWS / f"{name}.json").read_text())


def admit(server: Server, name: str, endpoint: str = "/mutate") -> tuple[dict[str, Any], dict[str, Any]]:
    review = load(name)
    answer = server.post(endpoint, (REVIEWS / f"{name}.json").read_bytes())
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    document = answer.json()
    assert document["apiVersion"] == "admission.k8s.io/v1" and document["kind"] == "AdmissionReview"
    assert document["response"]["uid"] == review["request"]["uid"]
    return review, document["response"]


def test_generated_certificates_chain_to_the_ca_and_name_localhost(server: Server) -> None:
    cert = x509.load_pem_x509_certificate((server.cert_dir / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "gangkeeper-webhook.gangkeeper-system.svc"} <= set(sans.get_values_for_type(x509.DNSName))
    assert stat.S_IMODE((server.cert_dir / "tls.key").stat().st_mode) == 0o600
    context = ssl.create_default_context(cafile=server.ca)
    host, port = server.url.removeprefix("https://").split(":")
    with (
        socket.create_connection((host, int(port))) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion:DeprecationWarning")
def test_tls_below_1_2_is_refused(server: Server) -> None:
    context = ssl.create_default_context(cafile=server.ca)
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    host, port = server.url.removeprefix("https://").split(":")
    with socket.create_connection((host, int(port))) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="localhost")


def test_job_create_is_stamped_for_volcano(server: Server) -> None:
    review, response = admit(server, "job-create")
    job = b.patched(review["request"]["object"], response)
    validate(job, "1.37")
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job-train"
    assert template["metadata"]["labels"]["gangkeeper.io/group"] == "job-train"
    assert response["allowed"] is True and "status" not in response


def test_pod_of_a_job_response_is_byte_exact(server: Server) -> None:
    answer = server.post("/mutate", (REVIEWS / "pod-of-job-create.json").read_bytes())
    expected = (REVIEWS / "pod-of-job-create.response.json").read_bytes().strip()
    assert answer.content == expected
    review = load("pod-of-job-create")
    pod = b.patched(review["request"]["object"], answer.json()["response"])
    for version in ("1.35", "1.36", "1.37"):
        validate(pod, version)
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job-train"


def test_lws_pod_joins_its_replica_group(server: Server) -> None:
    review, response = admit(server, "pod-of-lws-create")
    pod = b.patched(review["request"]["object"], response)
    validate(pod)
    assert pod["metadata"]["labels"]["gangkeeper.io/group"] == "lws-gang-test-0"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "lws-gang-test-0"


def test_lws_workload_gets_volcano_templates(server: Server) -> None:
    review, response = admit(server, "lws-gang-test-create")
    lws = b.patched(review["request"]["object"], response)
    validate(lws)
    assert lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["schedulerName"] == "volcano"


def test_bare_pod_group(server: Server) -> None:
    review, response = admit(server, "bare-pod-group-create")
    pod = b.patched(review["request"]["object"], response)
    validate(pod)
    assert pod["metadata"]["labels"]["gangkeeper.io/group"] == "pg-mpi"


def test_invalid_min_member_is_denied_with_the_field_and_fix(server: Server) -> None:
    for endpoint in ("/mutate", "/validate"):
        _, response = admit(server, "job-min-member-invalid", endpoint)
        assert response["allowed"] is False and "patch" not in response
        assert response["status"] == {
            "code": 422,
            "message": (
                'Job "train" is invalid: metadata.annotations[gangkeeper.io/min-member]: Invalid value: "10": '
                "must be between 1 and 4, the Job's parallelism"
            ),
        }


def test_foreign_scheduler_is_allowed_unchanged_with_a_warning(server: Server) -> None:
    _, response = admit(server, "pod-foreign-scheduler")
    assert response["allowed"] is True and "patch" not in response
    assert len(response["warnings"]) == 1 and "my-scheduler" in response["warnings"][0]
    assert all(len(w) <= 120 and "\n" not in w for w in response["warnings"])


@pytest.mark.parametrize("name", ["pod-already-in-gang", "job-kube-system", "pod-delete"])
def test_left_alone_without_patch(server: Server, name: str) -> None:
    _, response = admit(server, name)
    assert response == {"uid": load(name)["request"]["uid"], "allowed": True}


def test_dry_run_gets_the_same_answer(server: Server) -> None:
    _, wet = admit(server, "job-create")
    _, dry = admit(server, "job-create-dry-run")
    assert dry["patch"] == wet["patch"]


def test_update_never_changes_the_object(server: Server) -> None:
    _, response = admit(server, "job-update")
    assert response["allowed"] is True and "patch" not in response


def test_validate_endpoint_never_patches(server: Server) -> None:
    _, response = admit(server, "job-create", "/validate")
    assert response == {"uid": load("job-create")["request"]["uid"], "allowed": True}


def test_output_mutated_again_gives_no_patch(server: Server) -> None:
    for name in ("job-create", "pod-of-job-create", "pod-of-lws-create", "lws-gang-test-create"):
        review, response = admit(server, name)
        review["request"]["object"] = b.patched(review["request"]["object"], response)
        again = server.post("/mutate", json.dumps(review).encode()).json()["response"]
        assert "patch" not in again, name


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"{not json", 400, "not JSON"),
        (
            b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"x": NaN}}',
            400,
            "NaN is not a JSON value",
        ),
        (b"", 400, "empty request body"),
        (b"[]", 400, "not a JSON object"),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}
            ).encode(),
            400,
            "expected apiVersion admission.k8s.io/v1",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), 400, "no request"),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"operation": "CREATE", "object": {}},
                }
            ).encode(),
            400,
            "no uid",
        ),
        (
            json.dumps(
                {
                    "apiVersion": "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "request": {"uid": "u", "operation": "CREATE", "object": "x"},
                }
            ).encode(),
            400,
            "must be a JSON object",
        ),
        (b"x" * (3 * 1024 * 1024 + 1), 413, "exceeds"),
    ],
    ids=["not-json", "nan", "empty", "array", "v1beta1", "no-request", "no-uid", "object-not-object", "too-large"],
)
def test_bad_requests_get_an_http_error_with_a_reason(server: Server, body: bytes, status: int, reason: str) -> None:
    answer = server.post("/mutate", body)
    assert answer.status_code == status
    assert reason in answer.json()["error"]
    assert server.get("/healthz").status_code == 200


def test_wrong_content_type_and_method(server: Server) -> None:
    assert server.post("/mutate", b"{}", content_type="text/plain").status_code == 400
    assert server.post("/validate", b"{}", content_type="text/plain; charset=utf-8").status_code == 400
    with_charset = server.post("/mutate", b"{}", content_type="application/json; charset=utf-8")
    assert with_charset.status_code == 400 and "apiVersion" in with_charset.json()["error"]  # read as JSON
    assert server.get("/mutate").status_code == 405
    assert server.get("/nothing").status_code == 404


def test_health_readiness_and_metrics(server: Server) -> None:
    assert server.get("/healthz").json() == {"status": "ok"}
    assert server.get("/readyz").status_code == 200
    admit(server, "job-create")
    metrics = server.get("/metrics").text
    assert (
        'gangkeeper_admission_requests_total{endpoint="mutate",kind="Job",operation="CREATE",outcome="mutated"}'
        in metrics
    )
    assert "gangkeeper_admission_duration_seconds_bucket" in metrics


def test_patch_is_base64_json_patch(server: Server) -> None:
    _, response = admit(server, "job-create")
    ops = json.loads(base64.b64decode(response["patch"]))
    assert response["patchType"] == "JSONPatch" and all(op["op"] in {"add", "replace"} for op in ops)
