"""The controller is driven by a work queue keyed by gang and by deadlines, not by a fixed poll: each
gang is due when it changed or when its own next deadline comes, a failing gang backs off alone with a
growing delay, and the loop sleeps until the earliest deadline."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, node, pods
from webhook import contract
from webhook.controller.decide.deadlines import MIN_REQUEUE_SECONDS, earliest
from webhook.controller.run.process import run
from webhook.controller.run.reconciler import Controller
from webhook.controller.run.workqueue import GangQueue, staggered
from webhook.kube import Api, client_from

NS = "team-a"


@pytest.mark.parametrize(
    ("asks", "now", "due", "next_at"),
    [
        ([("a", 5.0), ("a", 3.0)], 4.0, {"a"}, None),  # the earliest ask wins
        ([("a", 3.0), ("a", 5.0)], 4.0, {"a"}, None),  # a later ask does not postpone it
        ([("a", 5.0), ("b", 1.0)], 2.0, {"b"}, 5.0),
        ([("a", 5.0)], 5.0, {"a"}, None),  # due at exactly its moment
        ([], 9.0, set(), None),
    ],
)
def test_gang_queue_takes_what_is_due_at_the_earliest_asked(
    asks: list[tuple[str, float]], now: float, due: set[str], next_at: float | None
) -> None:
    queue = GangQueue()
    for key, at in asks:
        queue.add_at(key, at)
    assert queue.take_due(now) == due
    assert queue.next_at() == next_at


def test_gang_queue_backoff_grows_per_gang_and_forget_resets_it() -> None:
    queue = GangQueue(base_seconds=2.0, max_seconds=10.0)
    assert [queue.failed("a", 0.0) for _ in range(5)] == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert queue.backing_off("a", 9.0) and not queue.backing_off("b", 9.0)
    assert queue.failed("b", 0.0) == 2.0  # b's backoff is its own
    queue.forget("a")
    assert queue.failed("a", 0.0) == 2.0  # afresh: the first step again
    queue.keep_only({"b"})
    assert not queue.backing_off("a", 0.0) and queue.take_due(100.0) == {"b"}


def test_a_past_deadline_is_looked_at_again_shortly_not_in_a_busy_loop() -> None:
    assert earliest([None, 50.0, 20.0], now=10.0) == 20.0
    assert earliest([5.0, 30.0], now=10.0) == 10.0 + MIN_REQUEUE_SECONDS
    assert earliest([None], now=10.0) is None


def test_a_released_gang_that_never_binds_wakes_the_pass_at_its_timeout(store: Store, api: Api) -> None:
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(
        store, add_job(store, "stuck", parallelism=2, cpu="1", annotations={contract.TIMEOUT_ANNOTATION: "60"})
    )
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=3600, orphan_seconds=3600)
    assert controller.reconcile_once()["team-a/job-stuck"].state == "Release"
    released_at = clock().timestamp()
    assert controller.next_wake == pytest.approx(released_at + 60, abs=0.01)  # its timeout, not a poll
    clock.advance(30)
    assert controller.reconcile_once()["team-a/job-stuck"].state == "Releasing"
    clock.advance(31)  # past the deadline the last pass named
    assert controller.reconcile_once()["team-a/job-stuck"].state == "TimedOut"


def test_a_quiet_gate_gang_needs_no_pass_until_its_resync(store: Store, api: Api) -> None:
    store.create("v1", "nodes", "", node("worker1", cpu="1"))
    add_job_pods(store, add_job(store, "waits", parallelism=2, cpu="1"))  # never fits: nothing to time out
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=120, orphan_seconds=600)
    assert controller.reconcile_once()["team-a/job-waits"].state == "NeverFits"
    # its resync, staggered per gang (at most a quarter earlier) so gangs read together are not due together
    resync = staggered("team-a/job-waits", 120)
    assert 90 <= resync <= 120
    assert controller.next_wake == pytest.approx(clock().timestamp() + resync, abs=0.01)


def test_the_loop_sleeps_until_a_deadline_and_no_poll_is_needed(apiserver: TestApiServer) -> None:
    """With the longest sleep an hour, a released pod that never binds is still timed out on time: the
    run loop wakes at the gang's deadline, not on a poll."""
    store = apiserver.store
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(store, add_job(store, "stuck", parallelism=2, cpu="1", annotations={contract.TIMEOUT_ANNOTATION: "2"}))
    stop = threading.Event()
    loop = threading.Thread(
        target=run,
        args=(client_from(server=apiserver.url), "gangkeeper-system"),
        kwargs={"interval": 3600.0, "metrics_port": 0, "stop": stop},
        daemon=True,
    )
    loop.start()
    try:
        deadline = time.monotonic() + 30
        released = False
        while time.monotonic() < deadline:
            gates = [p["spec"].get("schedulingGates") for p in pods(store)]
            released = released or all(not g for g in gates)
            events = [e for e in store.list("v1", "events", NS)[0] if e.get("reason") == "GangRequeued"]
            if released and events:
                break
            time.sleep(0.2)
        assert released and events, "the released gang was not timed out at its deadline"
    finally:
        stop.set()
        loop.join(timeout=15)


def test_resync_due_gangs_reread_their_workload_with_no_event(store: Store, api: Api) -> None:
    job = add_job(store, "grows", parallelism=2, cpu="1")
    add_job_pods(store, job, backend="volcano")
    clock = Clock()
    controller = Controller(api, clock=clock, resync_seconds=30)
    controller.reconcile_once()
    store.patch("batch/v1", "jobs", NS, "grows", {"spec": {"parallelism": 3}})  # no informer: no event
    controller.reconcile_once()
    group = store.get("scheduling.volcano.sh/v1beta1", "podgroups", NS, "job-grows")
    assert group["spec"]["minMember"] == 2  # not due yet
    clock.advance(dt.timedelta(seconds=31).total_seconds())
    controller.reconcile_once()
    assert store.get("scheduling.volcano.sh/v1beta1", "podgroups", NS, "job-grows")["spec"]["minMember"] == 3
