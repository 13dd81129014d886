"""The queue policies in the controller: who goes when a large gang waits at the head."""

from __future__ import annotations

import pytest

from tests import builders as b
from tests.apiserver import Store
from tests.cluster import Clock, gang_status, node
from tests.lifecycle import JobController, install_admission, kubelet
from tests.scheduler import schedule
from tests.schemas import validate
from webhook.controller.decide.queue import Policy
from webhook.controller.run.explain import explain
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

NS = "team-a"


def add_job(store: Store, name: str, pods: int, cpu: str, arrived: int, expected: int | None = None) -> None:
    annotations = {"gangkeeper.io/expected-seconds": str(expected)} if expected else None
    store.create(
        "batch/v1",
        "jobs",
        NS,
        b.job(name, parallelism=pods, spec=b.pod_spec(b.container(cpu, "1Gi")), annotations=annotations),
    )
    JobController(store).sync(NS, name)
    with store.lock:  # the arrival order the test is about (the store stamps whole seconds)
        for key, obj in store.objects.items():
            if key[1] == "pods" and obj["metadata"].get("labels", {}).get("gangkeeper.io/group") == f"job-{name}":
                obj["metadata"]["creationTimestamp"] = f"2026-11-21T11:00:{arrived:02d}Z"


def two_nodes_taken(store: Store, api: Api, clock: Clock) -> None:
    """Two 8-cpu nodes, each 6 cpus taken by a gang expected to run 600 s more."""
    install_admission(store, "gate")
    for name in ("worker1", "worker2"):
        store.create("v1", "nodes", "", node(name, cpu="8"))
    add_job(store, "run", 2, "6", arrived=0, expected=600)
    assert Controller(api, clock=clock).reconcile_once()["team-a/job-run"].state == "Release"
    schedule(store)
    kubelet(store, NS)


def running_cluster(store: Store, api: Api, clock: Clock) -> None:
    """two_nodes_taken, and three gangs waiting behind: a head needing both nodes whole, a short one and
    one of unknown length."""
    two_nodes_taken(store, api, clock)
    add_job(store, "big", 2, "8", arrived=1)  # the head: needs both nodes whole
    add_job(store, "short", 1, "2", arrived=2, expected=300)  # done before the head could start
    add_job(store, "long", 1, "2", arrived=3)  # runs for an unknown time


@pytest.mark.parametrize(
    ("policy", "short", "long"),
    [
        (Policy.FIFO, "Queued", "Queued"),
        (Policy.FIRST_FIT, "Release", "Release"),
        (Policy.BACKFILL, "Release", "WaitingForCapacity"),
    ],
)
def test_what_goes_past_a_large_gang_at_the_head(store: Store, api: Api, policy: Policy, short: str, long: str) -> None:
    clock = Clock()
    running_cluster(store, api, clock)
    clock.advance(5)
    decisions = Controller(api, clock=clock, queue_policy=policy).reconcile_once()
    big = decisions["team-a/job-big"]
    assert big.state == "WaitingForCapacity" and big.position == 1
    assert decisions["team-a/job-short"].state == short
    assert decisions["team-a/job-long"].state == long
    for pod in store.list("v1", "pods", NS)[0]:
        validate(pod)


def test_backfill_reserves_for_the_head_and_explain_shows_it(store: Store, api: Api) -> None:
    clock = Clock()
    running_cluster(store, api, clock)
    clock.advance(5)
    gangs = Controller(api, clock=clock, queue_policy=Policy.BACKFILL)
    decisions = gangs.reconcile_once()
    big = decisions["team-a/job-big"]
    # released at 12:00:00 and expected to run 600 s: both nodes free up at 12:10
    assert big.reservation == "2 nodes (worker1, worker2) reserved from 2026-11-21T12:10:00.000000Z"
    long = decisions["team-a/job-long"]
    assert "it may only use what does not delay that gang's reservation" in long.message
    text = explain(api, NS, "job-long", clock=clock)
    assert "queue: position 2 of 2 waiting (policy backfill; priority 0, then arrival)" in text
    assert "reservation: 2 nodes (worker1, worker2) reserved from 2026-11-21T12:10:00.000000Z" in explain(
        api, NS, "job-big", clock=clock
    )
    gangs.recorder.flush()
    assert gang_status(store, "job-long", NS)["state"] == "WaitingForCapacity"


def test_a_higher_priority_gang_takes_the_head_of_the_queue(store: Store, api: Api) -> None:
    clock = Clock()
    running_cluster(store, api, clock)
    spec = b.pod_spec(b.container("8", "1Gi"), priority=100, priorityClassName="high")
    store.create("batch/v1", "jobs", NS, b.job("urgent", parallelism=2, spec=spec))
    JobController(store).sync(NS, "urgent")
    clock.advance(5)
    decisions = Controller(api, clock=clock, queue_policy=Policy.BACKFILL).reconcile_once()
    assert decisions["team-a/job-urgent"].position == 1 and decisions["team-a/job-urgent"].reservation
    assert decisions["team-a/job-big"].position == 2
    urgent_from = decisions["team-a/job-urgent"].reservation.rsplit(" ", 1)[1]
    assert decisions["team-a/job-big"].reservation.rsplit(" ", 1)[1] >= urgent_from  # planned after it


def test_a_head_that_cannot_start_stops_blocking_the_queue_after_its_bound(store: Store, api: Api) -> None:
    """Kueue's BestEffortFIFO, bounded: the head holds the gang of unknown length back for 60 s, then
    yields for as long (that gang starts on what the head would have reserved), then holds again."""
    clock = Clock()
    running_cluster(store, api, clock)
    clock.advance(5)
    gangs = Controller(api, clock=clock, queue_policy=Policy.BACKFILL, head_of_line_seconds=60)
    decisions = gangs.reconcile_once()
    assert decisions["team-a/job-long"].state == "WaitingForCapacity"
    clock.advance(30)
    assert gangs.reconcile_once()["team-a/job-long"].state == "WaitingForCapacity"  # within the bound
    clock.advance(31)
    decisions = gangs.reconcile_once()
    assert decisions["team-a/job-long"].state == "Release"
    big = decisions["team-a/job-big"]
    assert big.state == "WaitingForCapacity" and not big.reservation
    assert "holds no gang back until 2026-11-21T12:02:05" in big.message, big.message
    clock.advance(60)  # its turn to hold again: a reservation, and nothing more past it
    assert gangs.reconcile_once()["team-a/job-big"].reservation


def test_a_gang_running_past_its_expected_seconds_is_no_longer_believed_to_end(store: Store, api: Api) -> None:
    """`run` said 600 s; at 700 s it still runs. The head's reservation is no longer planned on its end
    (which already passed): it is unknown, and nothing is backfilled on that promise."""
    clock = Clock()
    running_cluster(store, api, clock)
    clock.advance(700)
    decisions = Controller(api, clock=clock, queue_policy=Policy.BACKFILL).reconcile_once()
    assert "length unknown" in decisions["team-a/job-big"].reservation, decisions["team-a/job-big"].reservation
    assert decisions["team-a/job-short"].state == "WaitingForCapacity"


def test_a_message_never_names_another_tenants_gang(store: Store, api: Api) -> None:
    """Behind a head in another namespace, a gang's state says so without naming it."""
    clock = Clock()
    running_cluster(store, api, clock)
    other = b.job("theirs", parallelism=1, spec=b.pod_spec(b.container("2", "1Gi")))
    other["metadata"]["namespace"] = "team-b"
    store.create("batch/v1", "jobs", "team-b", other)
    JobController(store).sync("team-b", "theirs")
    clock.advance(5)
    decisions = Controller(api, clock=clock, queue_policy=Policy.FIFO).reconcile_once()
    theirs = decisions["team-b/job-theirs"]
    assert theirs.state == "Queued" and "a gang of another namespace" in theirs.message
    assert "job-big" not in theirs.message and "team-a" not in theirs.message
    assert "behind gang job-big" in decisions["team-a/job-short"].message


def test_a_backfilled_gang_that_overruns_its_claim_is_requeued_and_never_believed_again(store: Store, api: Api) -> None:
    """`short` said 300 s and was backfilled ahead of `big` on that claim. At 300 s plus the grace it
    still runs while `big` waits on its reservation: `short` is requeued whole (its Job suspended, no
    failure counted), not `big` delayed; from then on its claim is not believed, so it is not backfilled
    again ahead of the head."""
    from webhook.controller.decide.recovery import CLAIM_GRACE_SECONDS

    clock = Clock()
    running_cluster(store, api, clock)
    clock.advance(5)
    gangs = Controller(api, clock=clock, queue_policy=Policy.BACKFILL)
    assert gangs.reconcile_once()["team-a/job-short"].state == "Release"
    schedule(store)
    kubelet(store, NS)
    clock.advance(1)
    assert gangs.reconcile_once()["team-a/job-short"].state == "Running"
    gangs.recorder.flush()
    assert gang_status(store, "job-short", NS)["claimUntil"] == "2026-11-21T12:05:05.000000Z"
    clock.advance(300 + CLAIM_GRACE_SECONDS - 5)
    assert gangs.reconcile_once()["team-a/job-short"].state == "Running"  # within the grace
    clock.advance(10)
    decision = gangs.reconcile_once()["team-a/job-short"]
    assert decision.state == "TimedOut" and "past its gangkeeper.io/expected-seconds claim" in decision.message
    assert "backfilled ahead of gang job-big" in decision.message
    job = store.get("batch/v1", "jobs", NS, "short")
    assert job["spec"]["suspend"] is True
    gangs.recorder.flush()
    status = gang_status(store, "job-short", NS)
    assert status["claimBroken"] is True and "claimUntil" not in status
    assert gang_status(store, "job-big", NS)["state"] == "WaitingForCapacity"
    # resumed after its backoff, even a claim of 10 s (which would end long before the head's
    # reservation) is no longer believed: it waits behind the head like `long`
    job = store.get("batch/v1", "jobs", NS, "short")
    job["metadata"]["annotations"]["gangkeeper.io/expected-seconds"] = "10"
    store.update("batch/v1", "jobs", NS, "short", job, None, admit=False)
    jobs = JobController(store)
    for _ in range(4):
        clock.advance(31)
        jobs.sync(NS, "short")
        decisions = gangs.reconcile_once()
        jobs.sync(NS, "short")
    decisions = gangs.reconcile_once()
    assert decisions["team-a/job-short"].state == "WaitingForCapacity", decisions["team-a/job-short"].message
    assert "may only use what does not delay" in decisions["team-a/job-short"].message


def test_one_namespaces_giants_hold_another_namespaces_gang_back_for_one_bound_not_one_each(
    store: Store, api: Api
) -> None:
    """The fairness rule: the head-of-line bound is the namespace's. Two giants of team-a, each of which
    could take the head in turn, hold team-b's small gang back for one bound (60 s) in all, then every
    gang of team-a yields; with a clock per gang the second giant took over the head when the first
    yielded, and the small gang waited a bound per giant."""
    clock = Clock()
    two_nodes_taken(store, api, clock)
    add_job(store, "giant1", 2, "8", arrived=1)
    add_job(store, "giant2", 2, "8", arrived=2)
    theirs = b.job("small", parallelism=1, spec=b.pod_spec(b.container("1", "1Gi")))
    theirs["metadata"]["namespace"] = "team-b"
    store.create("batch/v1", "jobs", "team-b", theirs)
    JobController(store).sync("team-b", "small")
    clock.advance(5)
    gangs = Controller(api, clock=clock, queue_policy=Policy.FIFO, head_of_line_seconds=60)
    assert gangs.reconcile_once()["team-b/job-small"].state == "Queued"
    clock.advance(30)
    assert gangs.reconcile_once()["team-b/job-small"].state == "Queued"  # within the bound
    clock.advance(31)
    decisions = gangs.reconcile_once()
    assert decisions["team-b/job-small"].state == "Release", decisions["team-b/job-small"].message
    assert "holds no gang back until" in decisions["team-a/job-giant2"].message


def test_a_waiting_gangs_new_place_in_the_queue_is_written_every_few_seconds_not_on_every_release(
    store: Store, api: Api
) -> None:
    """Every release moves each gang behind it one place up: with dozens waiting that was a Gang status
    PATCH per waiting gang per release (a Philly replay's gate controller, py-spy). A place alone is
    written as the counts are, at most every COUNTS_SECONDS; a change of state at once."""
    from webhook.controller.observe.books import COUNTS_SECONDS

    clock = Clock()
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job(store, "run", 1, "8", arrived=0)
    controller = Controller(api, clock=clock)
    assert controller.reconcile_once()["team-a/job-run"].state == "Release"
    schedule(store)
    kubelet(store, NS)
    for arrived, name in enumerate(("first", "second", "third"), start=1):
        add_job(store, name, 1, "8", arrived=arrived)
    clock.advance(1)
    controller.reconcile_once()
    assert [gang_status(store, f"job-{n}", NS).get("queuePosition") for n in ("first", "second", "third")] == [1, 2, 3]

    def patched(gang: str) -> int:
        return sum(1 for method, path in store.requests if method == "PATCH" and path.endswith(f"/gangs/{gang}/status"))

    before = patched("job-third")
    running = next(
        p for p in store.list("v1", "pods", NS)[0] if p["metadata"]["labels"]["gangkeeper.io/group"] == "job-run"
    )
    store.delete("v1", "pods", NS, running["metadata"]["name"])  # the running gang ends: the first goes
    clock.advance(1)
    assert controller.reconcile_once()["team-a/job-first"].state == "Release"
    assert gang_status(store, "job-first", NS)["state"] == "Release"  # a state: at once
    assert patched("job-third") == before and gang_status(store, "job-third", NS)["queuePosition"] == 3
    clock.advance(COUNTS_SECONDS)
    controller.reconcile_once()
    assert [gang_status(store, f"job-{n}", NS).get("queuePosition") for n in ("second", "third")] == [1, 2]
