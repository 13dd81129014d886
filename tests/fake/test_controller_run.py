"""The controller process's plumbing: probes that see a stuck loop, CRDs installed late, lease traffic."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Iterator

import pytest

from tests.apiserver import TestApiServer
from tests.cluster import add_job, node
from tests.conftest import free_port
from webhook.controller import metrics
from webhook.controller.run import garbage
from webhook.controller.run.process import STUCK_SECONDS, Probes, run, watch_new
from webhook.controller.run.reconciler import Controller
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


@pytest.fixture
def collector() -> Iterator[garbage.Collector]:
    """A Collector of its own, taken off again: the test session's collector stays as it was."""
    clock = [0.0]
    made = garbage.Collector(clock=lambda: clock[0])
    made.clock_at = clock  # type: ignore[attr-defined]
    # another collector an earlier test started (garbage.start) would time the same collections too
    others = [c for c in gc.callbacks if isinstance(c, garbage.Collector)]
    for other in others:
        gc.callbacks.remove(other)
    gc.callbacks.append(made)
    try:
        yield made
    finally:
        gc.callbacks.remove(made)
        gc.callbacks.extend(others)
        gc.unfreeze()


def test_every_garbage_collection_is_timed_and_a_long_one_is_logged(
    collector: garbage.Collector, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    full = metrics.GC_PAUSES.labels("2")
    before = sum(s.value for s in full.collect()[0].samples if s.name.endswith("_count"))
    monkeypatch.setattr(garbage, "LOGGED_PAUSE_SECONDS", 0.0)
    with caplog.at_level(logging.INFO, logger="gangkeeper.controller"):
        gc.collect()
    after = sum(s.value for s in full.collect()[0].samples if s.name.endswith("_count"))
    assert after == before + 1
    logged = [r for r in caplog.records if r.getMessage() == "garbage collection paused the controller"]
    assert logged and logged[-1].generation == 2 and logged[-1].seconds >= 0  # type: ignore[attr-defined]


class Cyclic:
    def __init__(self) -> None:
        self.me = self


def test_what_a_full_collection_kept_is_frozen_between_passes_and_walked_again_within_the_hour(
    collector: garbage.Collector,
) -> None:
    collector.between_passes()
    assert gc.get_freeze_count() == 0  # no full collection yet: nothing frozen
    cache = [{"pod": index, "labels": [index]} for index in range(1000)]
    kept = Cyclic()
    gc.collect()
    collector.between_passes()
    frozen = gc.get_freeze_count()
    assert frozen >= len(cache)  # the survivors, the cache among them, are out of the next walks
    gc.collect()
    # a full collection leaves them frozen (the count only falls by what refcounting frees meanwhile,
    # such as another thread's temporaries)
    assert len(cache) <= gc.get_freeze_count() <= frozen
    probe = weakref.ref(kept)
    del kept  # a cycle that became garbage while frozen: no collection frees it ...
    gc.collect()
    assert probe() is not None
    collector.clock_at[0] += garbage.AUDIT_SECONDS  # type: ignore[attr-defined]
    collector.between_passes()  # ... until the hourly walk over everything
    assert probe() is None
    assert gc.get_freeze_count() > 0  # and what is still alive is frozen again
    assert cache[999]["pod"] == 999


def test_a_full_collection_runs_between_passes_when_due_never_by_the_allocator(collector: garbage.Collector) -> None:
    full = metrics.GC_PAUSES.labels("2")

    def full_collections() -> float:
        return sum(s.value for s in full.collect()[0].samples if s.name.endswith("_count"))

    before = full_collections()
    collector.between_passes()
    assert full_collections() == before  # not due yet
    made = [[index] for index in range(1000)]  # survivors of the next full collection
    collector.clock_at[0] += garbage.FULL_EVERY_SECONDS  # type: ignore[attr-defined]
    collector.between_passes()
    assert full_collections() == before + 1
    assert gc.get_freeze_count() >= len(made)  # and what it kept is frozen at once


def test_the_controller_process_freezes_what_it_imported_once_and_leaves_full_collections_to_its_loop() -> None:
    code = (
        "import gc; from webhook.controller.run import garbage; "
        "a = garbage.start(); n = gc.get_freeze_count(); b = garbage.start(); "
        "print(n > 1000, a is b, sum(isinstance(c, garbage.Collector) for c in gc.callbacks), "
        "gc.get_threshold() == garbage.THRESHOLDS)"
    )
    answer = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert answer.stdout.split() == ["True", "True", "1", "True"]
