"""Which gangs a pass takes a turn for: a running gang is skipped while nothing of its own changed (its
pods, its workload, its deadlines), and looked at again the pass after any of them does; a waiting gang
is looked at every pass, so capacity freed anywhere reaches it at once."""

from __future__ import annotations

from dataclasses import replace

from tests.apiserver import TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, node, pods
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api


def started(apiserver: TestApiServer, api: Api, clock: Clock) -> Controller:
    """Job run (2 pods) released and bound, Job wait (2 pods of 7 CPUs) waiting for room."""
    store = apiserver.store
    for name in ("n1", "n2"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    add_job_pods(store, add_job(store, "run", parallelism=2, cpu="2"))
    controller = Controller(api, clock=clock, resync_seconds=3600)
    assert controller.reconcile_once()["team-a/job-run"].state == "Release"
    assert default_scheduler(store) == 2
    assert controller.reconcile_once()["team-a/job-run"].state == "Running"
    add_job_pods(store, add_job(store, "wait", parallelism=2, cpu="7"))
    assert controller.reconcile_once()["team-a/job-wait"].state == "WaitingForCapacity"
    return controller


def test_a_running_gang_nothing_changed_for_is_skipped_and_still_reported(apiserver: TestApiServer, api: Api) -> None:
    clock = Clock()
    controller = started(apiserver, api, clock)
    clock.advance(1)
    decisions = controller.reconcile_once()
    assert controller.visited == 1  # the waiting gang alone
    assert decisions["team-a/job-run"].state == "Running" and decisions["team-a/job-wait"].state == "WaitingForCapacity"


def test_a_running_gang_is_looked_at_again_when_its_pods_change(apiserver: TestApiServer, api: Api) -> None:
    """One of its pods deleted: the gang runs short, which only its own turn can see."""
    clock = Clock()
    controller = started(apiserver, api, clock)
    victim = next(p for p in pods(apiserver.store) if p["metadata"]["name"].startswith("run-"))
    apiserver.store.delete("v1", "pods", "team-a", victim["metadata"]["name"])
    clock.advance(1)
    decisions = controller.reconcile_once()
    assert controller.visited == 2
    assert decisions["team-a/job-run"].state != "Running", decisions["team-a/job-run"]


def test_a_running_gang_is_looked_at_again_when_its_resync_falls_due(apiserver: TestApiServer, api: Api) -> None:
    """The periodic re-read is the safety net for a change no watch reported (here: no informers)."""
    clock = Clock()
    controller = started(apiserver, api, clock)
    controller.reconcile_once()
    assert controller.visited == 1
    clock.advance(3601)
    controller.reconcile_once()
    assert controller.visited == 2


def test_every_gang_has_a_turn_when_told_to(apiserver: TestApiServer, api: Api) -> None:
    clock = Clock()
    controller = started(apiserver, api, clock)
    controller.settings = replace(controller.settings, visit_settled=True)
    clock.advance(1)
    controller.reconcile_once()
    assert controller.visited == 2


def test_a_finished_gang_nothing_changed_for_is_skipped(apiserver: TestApiServer, api: Api) -> None:
    """A Job whose pods all Succeeded keeps them (and so its gang) until it is deleted: hundreds of such
    gangs in a day's trace (bench/replay.py) were each decided again on every pass."""
    clock = Clock()
    controller = started(apiserver, api, clock)
    for pod in pods(apiserver.store):
        if pod["metadata"]["name"].startswith("run-"):
            apiserver.store.patch("v1", "pods", "team-a", pod["metadata"]["name"], {"status": {"phase": "Succeeded"}})
    clock.advance(1)
    finished = controller.reconcile_once()["team-a/job-run"]
    assert (finished.state, finished.message) == ("Finished", "all 2 pods finished")
    assert controller.visited == 2  # its pods changed: looked at once
    clock.advance(1)
    decisions = controller.reconcile_once()
    assert controller.visited == 1  # the waiting gang alone
    assert decisions["team-a/job-run"] == finished
