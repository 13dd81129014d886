"""The controller process's plumbing: probes that see a stuck loop, CRDs installed late, lease traffic."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from tests.apiserver import TestApiServer
from tests.cluster import add_job, node
from tests.conftest import free_port
from webhook.controller.reconciler import Controller
from webhook.controller.run import STUCK_SECONDS, Probes, run, watch_new
from webhook.kube import Api, client_from


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_healthz_fails_when_the_loop_is_stuck_and_readyz_until_caches_sync() -> None:
    synced = threading.Event()
    probes = Probes(synced.is_set)
    port = free_port()
    server = probes.serve(port)
    try:
        base = f"http://127.0.0.1:{port}"
        assert status(base + "/healthz") == 200 and status(base + "/readyz") == 503
        synced.set()
        assert status(base + "/readyz") == 200
        probes.last_loop = time.monotonic() - STUCK_SECONDS - 1  # no pass has come round for too long
        assert status(base + "/healthz") == 500
        assert status(base + "/metrics") == 200
    finally:
        server.shutdown()


def test_a_crd_installed_after_start_is_watched_without_a_restart(apiserver: TestApiServer) -> None:
    api = Api(client_from(server=apiserver.url))
    controller = Controller(api)
    changed = threading.Event()
    first = watch_new(api, controller, changed)
    watched = {(i.resource.group_version, i.resource.plural) for i in first}
    assert ("batch/v1", "jobs") in watched and ("jobset.x-k8s.io/v1alpha2", "jobsets") not in watched
    apiserver.store.served["jobset.x-k8s.io/v1alpha2"] = {"jobsets"}  # JobSet installed now
    apiserver.store.served["kubeflow.org/v2beta1"] = {"mpijobs"}  # and mpi-operator v2
    later = watch_new(api, controller, changed)
    assert {(i.resource.group_version, i.resource.plural) for i in later} == {
        ("jobset.x-k8s.io/v1alpha2", "jobsets"),
        ("kubeflow.org/v2beta1", "mpijobs"),
    }
    assert controller.workloads.workload_resource("MPIJob").group_version == "kubeflow.org/v2beta1"  # type: ignore[union-attr]
    assert watch_new(api, controller, changed) == []  # nothing twice
    for informer in [*first, *later]:
        informer.stop()


def test_the_lease_is_renewed_on_its_period_not_on_every_pass(apiserver: TestApiServer) -> None:
    store = apiserver.store
    store.create("v1", "nodes", "", node("worker1"))
    stop = threading.Event()
    controller = threading.Thread(
        target=run,
        args=(client_from(server=apiserver.url), "gangkeeper-system"),
        kwargs={"interval": 0.05, "metrics_port": 0, "stop": stop},
        daemon=True,
    )
    controller.start()
    try:
        time.sleep(1.0)
        before = len([p for _, p in store.requests if "/leases" in p])
        started = time.monotonic()
        for index in range(60):  # pod churn wakes a pass at every change
            add_job(store, f"churn-{index}", parallelism=1, cpu="1")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        lease_calls = len([p for _, p in store.requests if "/leases" in p]) - before
        running = controller.is_alive()
    finally:
        stop.set()
        controller.join(timeout=10)
    # one GET and one PATCH every 2 s, whatever the pass rate
    assert 2 <= lease_calls <= 2 * (elapsed / 2.0 + 1), (lease_calls, elapsed)
    assert running and not controller.is_alive()  # it ran throughout, and stopped when told
