"""The deployed configuration, end to end without kind: the rendered kustomizations' containers run with
their exact args, env and mounts (tests/deployed.py) against a test API server that calls the webhook
through the installed webhook configurations (tests/admission_chain.py)."""

from __future__ import annotations

import base64
import datetime as dt
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from cryptography import x509

from tests import builders as b
from tests.apiserver import Reject, Store
from tests.deployed import Cluster, Sandbox, missing_tools, wait_for
from tests.lifecycle import JobController
from tests.schemas import validate
from webhook import certs, rotation

pytestmark = pytest.mark.skipif(missing_tools() is not None, reason=missing_tools() or "")

JOB_LABEL = "batch.kubernetes.io/job-name"


def namespace(store: Store, name: str, **labels: str) -> None:
    store.create(
        "v1",
        "namespaces",
        "",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
    )


def bare_pod(store: Store, ns: str, name: str) -> dict[str, Any]:
    """A pod of Job train as its Job controller makes it: owned by that Job, which exists (a pod claiming a
    workload that does not exist is refused as one claiming another's uid is)."""
    try:
        job = store.get("batch/v1", "jobs", ns, "train")
    except Reject:
        made = b.job("train", parallelism=2)
        made["metadata"]["namespace"] = ns
        try:
            job = store.create("batch/v1", "jobs", ns, made)
        except Reject as error:  # made meanwhile by another thread's pod
            if error.code != 409:
                raise
            job = store.get("batch/v1", "jobs", ns, "train")
    pod = b.pod(name or "worker", labels={JOB_LABEL: "train"}, namespace=ns, owner=("batch/v1", "Job", "train"))
    pod["metadata"]["ownerReferences"][0]["uid"] = job["metadata"]["uid"]
    if not name:
        del pod["metadata"]["name"]
        pod["metadata"]["generateName"] = "worker-"
    return store.create("v1", "pods", ns, pod)


@pytest.fixture
def volcano() -> Iterator[Cluster]:
    with Cluster("overlays/volcano") as cluster:
        yield cluster


def start_webhook(cluster: Cluster) -> Sandbox:
    sandbox = cluster.start("gangkeeper-webhook")
    cluster.wait_ready(sandbox)
    return sandbox


def test_a_job_in_a_labelled_namespace_is_stamped_and_gets_its_podgroup(volcano: Cluster) -> None:
    store = volcano.store
    start_webhook(volcano)
    controller = volcano.start("gangkeeper-controller")
    namespace(store, "team-a", **{"gangkeeper.io/enabled": "true"})
    job = store.create("batch/v1", "jobs", "team-a", b.job("train", parallelism=2))
    validate(job)
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job-train"
    assert JobController(store).sync("team-a", "train") == 2  # the Job controller's pods, through the chain
    pods = store.list("v1", "pods", "team-a")[0]
    for pod in pods:
        validate(pod)
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "job-train"
    # made by the webhook at the Job's validation, then owned by the Job (the controller adopts it)
    podgroup = wait_for(
        lambda: next(
            (
                g
                for g in store.list("scheduling.volcano.sh/v1beta1", "podgroups", "team-a")[0]
                if g["metadata"].get("ownerReferences")
            ),
            None,
        ),
        timeout=30,
        what=f"the PodGroup, owned; controller log:\n{controller.logs()}",
    )
    validate(podgroup)
    assert podgroup["metadata"]["name"] == "job-train" and podgroup["spec"]["minMember"] == 2
    owner = podgroup["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "train", job["metadata"]["uid"])
    # the controller's probes answer on the manifest's port, and say the loop is alive and synced
    port = controller.container.port("metrics")
    assert controller.get(port, "/healthz", tls=False) == 200 and controller.get(port, "/readyz", tls=False) == 200
    # a namespace without the label is not sent to the webhook at all
    namespace(store, "elsewhere")
    plain = store.create("batch/v1", "jobs", "elsewhere", b.job("train", parallelism=2))
    assert "schedulerName" not in plain["spec"]["template"]["spec"]


def test_the_namespace_backend_label_wins_in_every_worker_also_when_set_after_start(volcano: Cluster) -> None:
    store = volcano.store
    volcano.start("gangkeeper-controller")  # gating needs a controller: admission checks its Lease
    wait_for(lambda: store.list("coordination.k8s.io/v1", "leases", "gangkeeper-system")[0], what="the Lease")
    start_webhook(volcano)
    namespace(store, "team-b", **{"gangkeeper.io/enabled": "true"})
    first = bare_pod(store, "team-b", "before")
    assert first["spec"]["schedulerName"] == "volcano" and not first["spec"].get("schedulingGates")
    labelled = store.get("v1", "namespaces", "", "team-b")
    labelled["metadata"]["labels"]["gangkeeper.io/backend"] = "gate"
    store.update("v1", "namespaces", "", "team-b", labelled, None)
    time.sleep(1.0)  # each worker's namespace watch delivers the change
    # fresh connections each time, so the kernel spreads them over all the worker processes
    volcano.chain.pool_size = 0
    gated = [bare_pod(store, "team-b", f"after-{i}") for i in range(40)]
    for pod in gated:
        assert pod["spec"]["schedulingGates"] == [{"name": "gangkeeper.io/gang-gate"}], pod["metadata"]["name"]
        assert pod["spec"].get("schedulerName") in (None, "default-scheduler")


def test_a_named_backend_the_cluster_does_not_serve_is_refused_at_apply_time() -> None:
    with Cluster("overlays/native") as cluster:
        start_webhook(cluster)
        namespace(cluster.store, "team-a", **{"gangkeeper.io/enabled": "true"})
        with pytest.raises(Reject) as refused:
            cluster.store.create("batch/v1", "jobs", "team-a", b.job("train", parallelism=2))
        assert 'admission webhook "mutate.gangkeeper.io" denied the request' in refused.value.message
        assert "backend native needs scheduling.k8s.io" in refused.value.message


def test_a_restarted_webhook_serves_with_the_same_ca(volcano: Cluster) -> None:
    store = volcano.store
    first = start_webhook(volcano)
    bundle = volcano.ca_bundle()
    namespace(store, "team-a", **{"gangkeeper.io/enabled": "true"})
    bare_pod(store, "team-a", "one")
    assert volcano.stop(first) == 0  # SIGTERM: drains and exits cleanly
    with pytest.raises(Reject) as refused:  # failurePolicy Fail while nothing serves
        bare_pod(store, "team-a", "two")
    assert 'failed calling webhook "mutate.gangkeeper.io"' in refused.value.message
    start_webhook(volcano)
    assert volcano.ca_bundle() == bundle  # the CA lives in the Secret, not in the pod
    assert bare_pod(store, "team-a", "three")["spec"]["schedulerName"] == "volcano"
    secrets = store.list("v1", "secrets", "gangkeeper-system")[0]
    assert [s["metadata"]["name"] for s in secrets] == ["gangkeeper-webhook-certs"]


def short_lived_state(due_in_seconds: float) -> rotation.CertState:
    """Certificates whose serving certificate reaches its renewal point (a third of its life left) soon."""
    sans = certs.service_dns_names("gangkeeper-webhook", "gangkeeper-system")
    now = dt.datetime.now(dt.UTC)
    state = rotation.bootstrap(sans, now)
    life = dt.timedelta(days=1, minutes=5)  # make_serving: from `issued - 5 min` to `issued + 1 day`
    issued = now + life / 3 + dt.timedelta(seconds=due_in_seconds) - dt.timedelta(days=1)
    ca = x509.load_pem_x509_certificate(state.ca_crt)
    from cryptography.hazmat.primitives import serialization

    ca_key = serialization.load_pem_private_key(state.ca_key, None)
    key, cert = certs.make_serving(ca_key, ca, sans, issued, days=1)  # type: ignore[arg-type]
    return replace(
        state,
        tls_crt=cert.public_bytes(serialization.Encoding.PEM),
        tls_key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )


def served_serial(sandbox: Sandbox) -> int:
    pem = ssl.get_server_certificate((sandbox.pod_ip, sandbox.container.port("https")))
    return int(x509.load_pem_x509_certificate(pem.encode()).serial_number)


def test_a_certificate_rotation_while_pods_are_created_fails_no_call(volcano: Cluster) -> None:
    store = volcano.store
    state = short_lived_state(due_in_seconds=4)
    store.create(
        "v1",
        "secrets",
        "gangkeeper-system",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gangkeeper-webhook-certs", "namespace": "gangkeeper-system"},
            "data": {k: base64.b64encode(v).decode() for k, v in state.to_secret_data().items()},
        },
    )
    sandbox = start_webhook(volcano)
    before = served_serial(sandbox)
    namespace(store, "team-a", **{"gangkeeper.io/enabled": "true"})
    failures: list[str] = []
    created = [0]
    stop = threading.Event()

    def create_pods() -> None:
        while not stop.is_set():
            try:
                bare_pod(store, "team-a", "")
                created[0] += 1
            except Reject as error:
                failures.append(error.message)

    volcano.chain.pool_size = 0  # a new connection, so a new handshake, for every call
    creators = [threading.Thread(target=create_pods) for _ in range(4)]
    for creator in creators:
        creator.start()
    try:
        wait_for(lambda: served_serial(sandbox) != before, timeout=30, what="the renewed certificate served")
        time.sleep(1.0)
    finally:
        stop.set()
        for creator in creators:
            creator.join()
    assert failures == [] and created[0] > 50
    secret = store.get("v1", "secrets", "gangkeeper-system", "gangkeeper-webhook-certs")
    assert base64.b64decode(secret["data"]["tls.crt"]) != state.tls_crt  # renewed in the Secret too
    assert volcano.ca_bundle() == state.bundle  # same CA: nothing for the API server to re-trust


def test_auto_reads_discovery_with_the_pinned_client_and_picks_volcano() -> None:
    """The base install (backend auto) asks the API server what it serves: Volcano here."""
    with Cluster("base") as cluster:
        sandbox = start_webhook(cluster)
        namespace(cluster.store, "team-a", **{"gangkeeper.io/enabled": "true"})
        job = cluster.store.create("batch/v1", "jobs", "team-a", b.job("train", parallelism=2))
        assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano", sandbox.logs()[-2000:]
        assert any(path == "/apis" for _, path in cluster.store.requests)  # discovery really ran


def test_without_a_controller_admission_refuses_to_gate(volcano: Cluster) -> None:
    store = volcano.store
    start_webhook(volcano)
    namespace(store, "team-g", **{"gangkeeper.io/enabled": "true", "gangkeeper.io/backend": "gate"})
    # the webhook learns of the Lease by polling it: until its first answer it cannot know (under a
    # loaded machine that answer may come after the first pod), so the refusal is awaited, not assumed
    deadline, attempt, refused = time.monotonic() + 20, 0, None
    while refused is None and time.monotonic() < deadline:
        attempt += 1
        try:
            bare_pod(store, "team-g", f"lonely-{attempt}")
        except Reject as error:
            refused = error
        else:
            time.sleep(0.5)
    assert refused is not None and "no gangkeeper controller has run in this cluster" in refused.message
