"""A gang that ran whole and lost a member (preempted, its node gone, OOM-killed) is never left partly
running: a replacement that fits is released, and a gang still short after its recovery timeout is
requeued whole (state.recover), on the controller against the test API server and as a pure rule."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests import builders as b
from tests.apiserver import Reject, TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, default_scheduler, gang_status, node, pods
from tests.fake.test_controller import events, timed_out_and_suspended
from tests.recorder import ListRecorder
from webhook.admission.decide import admit
from webhook.admission.under_review import json_copy
from webhook.backends import make
from webhook.controller.act.gangobject import GangObjects
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.recovery import recover
from webhook.controller.decide.shapes import Shape
from webhook.controller.decide.situation import Decision, GangSpec, GangState, History
from webhook.controller.observe.books import desired_object
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

RECOVERY = {"gangkeeper.io/recovery-timeout-seconds": "60"}


@pytest.fixture
def server(apiserver: TestApiServer) -> TestApiServer:
    return apiserver


def running_gang(server: TestApiServer, api: Api, clock: Clock) -> Controller:
    """A 4-pod Job gang of 2 CPUs each, running whole on one 8-CPU node."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2", annotations=RECOVERY))
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 4
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    assert gang_status(server.store, "job-train")["ranWith"] == 4
    return controller


def preempt_one(server: TestApiServer, backend: str = "gate") -> None:
    """A higher-priority pod of another tenant takes one member's place; the Job makes a replacement."""
    victim = pods(server.store)[0]["metadata"]["name"]
    server.store.delete("v1", "pods", "team-a", victim)
    server.store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vip"}})
    preemptor = b.pod("urgent", spec=b.pod_spec(b.container("2", "1Gi")), namespace="vip")
    server.store.create("v1", "pods", "vip", preemptor)
    server.store.bind("vip", "urgent", "worker1")
    add_job_pods(server.store, server.store.get("batch/v1", "jobs", "team-a", "train"), count=1, backend=backend)


def test_a_gang_short_of_a_member_past_its_recovery_timeout_is_requeued_whole(server: TestApiServer, api: Api) -> None:
    clock = Clock()
    controller = running_gang(server, api, clock)
    preempt_one(server)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "WaitingForCapacity"
    assert "lost a member: 3 of 4 running, requeued whole in 60s" in decision.message
    status = gang_status(server.store, "job-train")
    assert status["shortSince"] and "requeued whole in 60s" in status["message"]
    clock.advance(30)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "WaitingForCapacity" and "requeued whole in 30s" in decision.message
    assert controller.next_wake is not None and controller.next_wake <= clock.now.timestamp() + 30.01
    clock.advance(31)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "TimedOut", decision.message
    assert "lost a member: 3 of 4 running for 61s (recovery timeout 60s)" in decision.message
    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert job["spec"]["suspend"] is True  # requeued whole by suspension: the Job counts no failure
    status = gang_status(server.store, "job-train")
    assert status["attempts"] == 1 and status["notBefore"] and "ranWith" not in status and "shortSince" not in status
    assert events(controller, "GangRequeued")


def test_a_member_lost_before_any_pass_saw_the_gang_run_whole_still_starts_the_clock(
    server: TestApiServer, api: Api
) -> None:
    """The gang is released whole and binds, and a member is preempted before the controller's next pass
    (a busy controller; the watch folds the bind and the deletion into one): no pass ever saw it whole,
    but its release records do. It is short, and requeued whole at its recovery timeout, never left
    running 3 of 4."""
    clock = Clock()
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2", annotations=RECOVERY))
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 4
    preempt_one(server)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert "lost a member: 3 of 4 running, requeued whole in 60s" in decision.message, decision.message
    assert gang_status(server.store, "job-train")["ranWith"] == 4
    clock.advance(30)
    decision = controller.reconcile_once()["team-a/job-train"]  # its records of the lost pod are gone now
    assert "requeued whole in 30s" in decision.message, decision.message
    clock.advance(31)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "TimedOut" and decision.whole_gang, decision.message
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True


def test_a_replacement_that_fits_in_time_is_released_and_the_clock_stops(server: TestApiServer, api: Api) -> None:
    clock = Clock()
    controller = running_gang(server, api, clock)
    preempt_one(server)
    assert controller.reconcile_once()["team-a/job-train"].state == "WaitingForCapacity"
    clock.advance(40)
    server.store.delete("v1", "pods", "vip", "urgent")  # the preemptor ends: room for the replacement
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 1
    clock.advance(40)  # past the recovery timeout since the loss, but whole again
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    status = gang_status(server.store, "job-train")
    assert "shortSince" not in status and status["ranWith"] == 4
    assert not server.store.get("batch/v1", "jobs", "team-a", "train")["spec"].get("suspend")


def test_a_bare_pod_gang_that_lost_a_member_is_told_not_evicted(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    for i in range(2):
        pod = b.pod(
            f"mpi-{i}",
            labels={"gangkeeper.io/group-name": "mpi"},
            annotations={"gangkeeper.io/group-size": "2", **RECOVERY},
        )
        server.store.create("v1", "pods", "team-a", admit(pod, "CREATE", make("gate"), "team-a").mutated)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/pg-mpi"].state == "Release"
    default_scheduler(server.store)
    assert controller.reconcile_once()["team-a/pg-mpi"].state == "Running"
    server.store.delete("v1", "pods", "team-a", "mpi-1")
    decision = controller.reconcile_once()["team-a/pg-mpi"]
    assert "lost a member: 1 of 2 running, requeued whole in 60s" in decision.message
    clock.advance(61)
    decision = controller.reconcile_once()["team-a/pg-mpi"]
    assert decision.state == "TimedOut" and "lost a member: 1 of 2 running" in decision.message
    assert [p["metadata"]["name"] for p in pods(server.store)] == ["mpi-0"]  # nobody would recreate it
    assert events(controller, "GangTimedOut")
    assert gang_status(server.store, "pg-mpi")["state"] == "TimedOut"


# --- the rule itself ------------------------------------------------------------------------------
NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


def view(name: str, bound: bool = True, gated: bool = False, phase: str = "Running") -> PodView:
    return PodView(
        namespace="team-a",
        name=name,
        uid=name,
        group="job-train",
        gated=gated,
        node_name="worker1" if bound else None,
        pinned_node=None,
        released_at=None,
        created_at=NOW,
        terminal=phase in ("Succeeded", "Failed"),
        finished=phase in ("Succeeded", "Failed"),
        shape=Shape(requests=(("cpu", 1000),)),
        owner=None,
        resource_version="1",
        succeeded=phase == "Succeeded",
    )


def waiting() -> Decision:
    return Decision(GangState.WAITING_FOR_CAPACITY, "0 of 1 pods fit on free capacity")


LOST = [view("a"), view("b"), view("c"), view("d", bound=False, gated=True)]
SPEC = GangSpec(min_member=4, recovery_seconds=60)


@pytest.mark.parametrize(
    ("case", "pods_", "spec", "history", "state", "requeued"),
    [
        ("never ran whole: the first start's rules alone", LOST, SPEC, History(0, None), "WaitingForCapacity", False),
        ("lost one, clock just started", LOST, SPEC, History(4, None), "WaitingForCapacity", False),
        (
            "lost one, within the timeout",
            LOST,
            SPEC,
            History(4, NOW - dt.timedelta(seconds=59)),
            "WaitingForCapacity",
            False,
        ),
        ("lost one, past the timeout", LOST, SPEC, History(4, NOW - dt.timedelta(seconds=61)), "TimedOut", True),
        (
            "a scale-up's newcomer waits: the members that ran are all running",
            [*LOST[:3], view("d", bound=False, gated=True)],
            GangSpec(min_member=4, recovery_seconds=60),
            History(3, NOW - dt.timedelta(seconds=600)),
            "WaitingForCapacity",
            False,
        ),
        (
            "a Job's next wave once members succeeded",
            [view("a", phase="Succeeded"), view("e", bound=False, gated=True)],
            GangSpec(min_member=1, recovery_seconds=60),
            History(4, NOW - dt.timedelta(seconds=600)),
            "WaitingForCapacity",
            False,
        ),
    ],
)
def test_recover(case: str, pods_: list[PodView], spec: GangSpec, history: History, state: str, requeued: bool) -> None:
    decision = recover(waiting(), pods_, spec, history, NOW)
    assert decision.state == state, case
    assert decision.whole_gang is requeued, case
    if requeued:
        assert sorted(decision.evict) == sorted(p.name for p in pods_ if not p.terminal)


def test_a_workloads_own_whole_restart_is_said_while_the_gang_is_short_and_gangkeeper_waits_for_it() -> None:
    """Issue 78 item 7b: a LeaderWorkerSet recreates a group whole by itself (restartPolicy
    RecreateGroupOnPodRestart, its default). gangkeeper says so while the gang is short and requeues it
    only past the same recovery timeout, if that policy left it short."""
    policy = "its LeaderWorkerSet recreates the group whole (spec.leaderWorkerTemplate.restartPolicy X)"
    spec = dataclasses.replace(SPEC, restarts_whole=policy)
    short = recover(waiting(), LOST, spec, History(4, NOW - dt.timedelta(seconds=10)), NOW)
    assert short.state == "WaitingForCapacity" and short.short, short.message
    assert f"({policy}; gangkeeper requeues it only if it stays short), requeued whole in 50s" in short.message
    late = recover(waiting(), LOST, spec, History(4, NOW - dt.timedelta(seconds=61)), NOW)
    assert late.state == "TimedOut" and late.whole_gang and policy in late.message


def test_a_release_of_the_replacement_is_never_overruled_within_the_timeout() -> None:
    release = Decision(GangState.RELEASE, "releasing 1 pods on 1 nodes", release={"d": "worker1"})
    decision = recover(release, LOST, SPEC, History(4, NOW - dt.timedelta(seconds=10)), NOW)
    assert decision.state == "Release" and decision.short and decision.message == "releasing 1 pods on 1 nodes"


def test_a_late_replacement_past_the_recovery_timeout_requeues_the_whole_gang() -> None:
    late = Decision(GangState.TIMED_OUT, "1 newly released pods not scheduled", evict=["d"])
    decision = recover(late, LOST, SPEC, History(4, NOW - dt.timedelta(seconds=61)), NOW)
    assert decision.state == "TimedOut" and decision.whole_gang and len(decision.evict) == 4


def test_a_release_patch_that_failed_while_its_node_was_taken_requeues_the_whole_gang(
    server: TestApiServer, api: Api
) -> None:
    """One release PATCH answered 500 and another pod took that node meanwhile: 3 of 4 run, 1 stays
    gated. After the gang's timeout it is requeued whole, never left partly running."""
    from tests.apiserver import Reject

    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(
        server.store,
        add_job(server.store, parallelism=4, cpu="2", annotations={"gangkeeper.io/timeout-seconds": "30"}),
    )
    failed: list[str] = []

    def refuse_one_release(method: str, path: str) -> Reject | None:
        if method == "PATCH" and "/pods/" in path and not failed:
            failed.append(path)
            return Reject(500, "InternalError", "etcd timeout")
        return None

    server.store.fail_next.append(refuse_one_release)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert failed
    thief = b.pod("thief", spec=b.pod_spec(b.container("2", "1Gi")), namespace="team-a")
    server.store.create("v1", "pods", "team-a", thief)
    server.store.bind("team-a", "thief", "worker1")
    assert default_scheduler(server.store) == 3
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "WaitingForCapacity", decision.message
    clock.advance(31)
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "TimedOut" and decision.whole_gang, decision.message
    assert "still gated after 30s" in decision.message
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True


def test_the_real_tiers_watch_sees_a_gang_partly_bound() -> None:
    from tests.realcluster.partial import ANY_MECHANISM_LIMIT_SECONDS, LIMIT_SECONDS, partly_bound

    def pod(name: str, node: str | None, gated: bool, group: str = "job-a", phase: str = "Pending") -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "ns", "labels": {"gangkeeper.io/group": group}},
            "spec": {"nodeName": node, "schedulingGates": [{"name": "gangkeeper.io/gang-gate"}] if gated else []},
            "status": {"phase": phase},
        }

    assert partly_bound([pod("a", "n1", False), pod("b", None, True)]) == {"ns/job-a": LIMIT_SECONDS}
    assert partly_bound([pod("a", "n1", False), pod("b", "n2", False)]) == {}
    assert partly_bound([pod("a", None, True), pod("b", None, True)]) == {}
    assert partly_bound([pod("a", "n1", False, phase="Succeeded"), pod("b", None, True)]) == {}
    assert partly_bound([pod("a", "n1", False, group="x"), pod("b", None, True)]) == {}
    # any mechanism's gang: bound and pending, none gated, for longer than its start timeout lets it
    assert partly_bound([pod("a", "n1", False), pod("b", None, False)]) == {"ns/job-a": ANY_MECHANISM_LIMIT_SECONDS}


class _CacheBehind:
    """A watch cache that has not delivered the latest write yet: it serves the copy it was given."""

    def __init__(self, copy: dict[str, Any]) -> None:
        self.copy = copy
        self.synced = threading.Event()
        self.synced.set()

    def get(self, namespace: str | None, name: str) -> dict[str, Any]:
        return self.copy

    def items(self) -> list[dict[str, Any]]:
        return [self.copy]


def test_a_gang_copy_behind_the_api_server_never_writes_over_newer_books(server: TestApiServer, api: Api) -> None:
    """A pass that writes from a copy behind the API server (its own write forgotten after a later one
    failed, the watch not there yet) must not put back what it read: that erased a suspended Job's books,
    and the Job stayed suspended for ever. The write is made over the version read, so it gets a 409 and
    the next pass, reading the newer copy, writes."""
    informer: dict[str, Any] = {}
    gangs = GangObjects(api, lambda: informer.get("cache"), lambda: True)
    wanted = desired_object("team-a", "job-train", "gate", 2, None)
    old = gangs.write(wanted, {"state": "Running"})
    assert old is not None
    books = {"status": {"attempts": 1, "suspendedAt": "2026-11-26T10:00:00Z", "notBefore": "2026-11-26T10:00:30Z"}}
    server.store.patch("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train", books)
    informer["cache"] = _CacheBehind(old)
    gangs.store.wrote("team-a/job-train", None)  # what a failed write makes this replica do: read the cache again
    assert gangs.write(wanted, {"state": "Pending", "attempts": None, "suspendedAt": None}) is None
    assert gang_status(server.store, "job-train")["suspendedAt"] == "2026-11-26T10:00:00Z"
    informer["cache"] = _CacheBehind(server.store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train"))
    written = gangs.write(wanted, {"state": "Pending"})
    assert written is not None and written["status"]["suspendedAt"] == "2026-11-26T10:00:00Z"
    assert gang_status(server.store, "job-train")["state"] == "Pending"


def test_a_resume_is_let_go_only_when_the_api_server_says_the_user_took_the_workload_back(
    server: TestApiServer, api: Api
) -> None:
    """Past the settling time a watch cache that still shows the Job unsuspended is not believed: the
    API server is asked, and a Job it shows suspended with gangkeeper's mark is resumed, not left."""
    controller, clock = timed_out_and_suspended(server, api)
    suspended = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert suspended["spec"]["suspend"] is True
    behind = {**suspended, "spec": {**suspended["spec"], "suspend": False}}
    read = controller.requeuer.workloads.read
    controller.requeuer.workloads.read = lambda resource, namespace, name: behind  # type: ignore[method-assign]
    clock.advance(31)
    controller.reconcile_once()
    controller.requeuer.workloads.read = read  # type: ignore[method-assign]
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is False
    assert events(controller, "GangResumed")
    assert "suspendedAt" not in gang_status(server.store, "job-train")


def test_a_resume_refused_is_tried_again_within_seconds(server: TestApiServer, api: Api) -> None:
    controller, clock = timed_out_and_suspended(server, api)
    clock.advance(31)
    refused = {"count": 0}

    def refuse_the_resume(method: str, path: str) -> Reject | None:
        if method == "PATCH" and path.endswith("/jobs/train"):
            refused["count"] += 1
            return Reject(500, "InternalError", "the webhook timed out")
        return None

    server.store.fail_next.append(refuse_the_resume)
    look_again = controller.requeuer.resume_due(clock())
    assert refused["count"] == 1
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True
    assert look_again is not None and look_again <= clock().timestamp() + 5  # not the next sweep's 30 s
    clock.advance(5)
    controller.reconcile_once()
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is False


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "native-1.36"])
def test_a_gang_another_mechanism_placed_is_requeued_whole_when_short_past_its_recovery_timeout(
    server: TestApiServer, api: Api, backend: str
) -> None:
    """Issue 78: Volcano, coscheduling and native start a gang whole but never requeue one that lost a
    member; gangkeeper supervises them with the gate's own rule: the Gang says it is short and when it is
    requeued, then the Job is suspended (not failed), with the gate's events and books."""
    clock = Clock()
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2", annotations=RECOVERY), backend=backend)
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=0)
    assert default_scheduler(server.store) == 4  # the mechanism placed it whole
    controller.reconcile_once()
    status = gang_status(server.store, "job-train")
    assert status["state"] == "Running" and status["ranWith"] == 4, status
    preempt_one(server, backend)
    controller.reconcile_once()
    status = gang_status(server.store, "job-train")
    assert status.get("shortSince") and "lost a member: 3 of 4 running, requeued whole in 60s" in status["message"], (
        status
    )
    assert f"scheduled by the {backend.partition('-')[0]} gang scheduler" in status["message"], status
    clock.advance(30)
    controller.reconcile_once()
    assert not server.store.get("batch/v1", "jobs", "team-a", "train")["spec"].get("suspend")
    clock.advance(31)
    controller.reconcile_once()
    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert job["spec"]["suspend"] is True  # requeued whole by suspension: the Job counts no failure
    status = gang_status(server.store, "job-train")
    assert status["attempts"] == 1 and status["notBefore"] and "ranWith" not in status, status
    assert any("placed by the" in e["message"] for e in events(controller, "GangRequeued"))
    controller.reconcile_once()  # its pods on their way out: not requeued twice
    assert gang_status(server.store, "job-train")["attempts"] == 1


def partly_held(mechanism: str, resource: str = "cpu") -> float:
    labels = {"mechanism": mechanism, "resource": resource}
    return REGISTRY.get_sample_value("gangkeeper_partly_running_requests", labels) or 0.0


def partly_held_seconds(mechanism: str, resource: str = "cpu") -> float:
    labels = {"mechanism": mechanism, "resource": resource}
    return REGISTRY.get_sample_value("gangkeeper_partly_running_resource_seconds_total", labels) or 0.0


@pytest.mark.parametrize("backend", ["volcano", "native-1.36"])
def test_a_gang_another_mechanism_started_partly_is_requeued_whole_past_its_timeout(
    server: TestApiServer, api: Api, backend: str
) -> None:
    """Issue 78: a mechanism that binds part of a gang (volcano-sh/volcano#6010) and never the rest: the
    Gang says it started partly and when it is requeued; past its timeout the Job is suspended."""
    clock = Clock()
    server.store.create("v1", "nodes", "", node("worker1", cpu="4"))
    timeout = {"gangkeeper.io/timeout-seconds": "60"}
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2", annotations=timeout), backend=backend)
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=0)
    assert default_scheduler(server.store) == 2  # bound pod by pod: two of four, the others pending
    mechanism = backend.partition("-")[0]
    held_before = partly_held_seconds(mechanism)
    controller.reconcile_once()
    status = gang_status(server.store, "job-train")
    assert "started partly: 2 of 4 running, requeued whole in 60s" in status["message"], status
    assert partly_held(mechanism) == 4000  # two members of 2 CPUs bound, the gang short of its four
    clock.advance(61)
    controller.reconcile_once()
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True
    assert partly_held_seconds(mechanism) - held_before == pytest.approx(4000 * 61)  # CPU-millicore-seconds
    assert any("started partly" in e["message"] for e in events(controller, "GangRequeued"))


@pytest.mark.parametrize("backend", ["gate", "volcano", "coscheduling", "native-1.36"])
@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_a_recovery_timeout_that_is_not_a_positive_whole_number_is_refused_on_every_backend(
    backend: str, value: str
) -> None:
    """Supervision uses the same annotation on every mechanism, so it is refused at apply on every one,
    naming the field (issue 78)."""
    name, _, version = backend.partition("-")
    job = b.job(
        "train",
        parallelism=2,
        spec=b.pod_spec(b.container("1", "1Gi")),
        annotations={"gangkeeper.io/recovery-timeout-seconds": value},
    )
    outcome = admit(job, "CREATE", make(name, kubernetes_version=version or "1.37"), "team-a")
    assert not outcome.allowed and outcome.code == 422
    assert "metadata.annotations[gangkeeper.io/recovery-timeout-seconds]" in outcome.message, outcome.message


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "native-1.36"])
def test_a_gang_another_mechanism_holds_back_says_what_gangkeepers_model_makes_of_it(
    server: TestApiServer, api: Api, backend: str
) -> None:
    """Issue 78, one verdict per gang: a gang its mechanism has not started is told, beside what the
    mechanism did, whether it fits now, how much of it the cluster holds and why not the rest (counted
    by kind, naming no node), or that it never fits."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="4"))
    server.store.create("v1", "nodes", "", node("worker2", cpu="4"))
    server.store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vip"}})
    server.store.create("v1", "pods", "vip", b.pod("other", spec=b.pod_spec(b.container("4", "1Gi")), namespace="vip"))
    server.store.bind("vip", "other", "worker2")
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2"), backend=backend)
    big = add_job(server.store, name="huge", parallelism=2, cpu="16")
    add_job_pods(server.store, big, backend=backend)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=3600)
    controller.reconcile_once()
    message = gang_status(server.store, "job-train")["message"]
    assert "0 of 4 members scheduled" in message, message
    assert (
        "gangkeeper's model: waiting for capacity, room for 2 of 4 "
        "(1 node: 0 of 4 pods fit (short of cpu); 1 node: 2 of 4 pods fit (short of cpu))"
    ) in message, message
    huge = gang_status(server.store, "job-huge")["message"]
    assert "gangkeeper's model: never fits this cluster" in huge, huge
    # room comes back elsewhere, nothing of the gang changes: its verdict follows the cluster, once the
    # model may look again (MODEL_REFRESH_SECONDS), and the pass says when that is
    server.store.delete("v1", "pods", "vip", "other")
    controller.reconcile_once()
    assert "gangkeeper's model: waiting for capacity" in gang_status(server.store, "job-train")["message"]
    assert controller.next_wake is not None and controller.next_wake <= clock.now.timestamp() + 5.0
    clock.advance(5)
    controller.reconcile_once()
    message = gang_status(server.store, "job-train")["message"]
    assert "gangkeeper's model: fits now" in message, message


def test_the_models_verdicts_refreshed_in_one_pass_are_capped(
    server: TestApiServer, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 78's refresh costs a placement per gang: at most MODEL_REFRESHES_PER_PASS gangs a pass,
    the rest in the passes after (the pass wakes for them), until every verdict follows the cluster."""
    from webhook.controller.run import supervised

    monkeypatch.setattr(supervised, "MODEL_REFRESHES_PER_PASS", 2)
    server.store.create("v1", "nodes", "", node("worker1", cpu="4"))
    server.store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vip"}})
    server.store.create("v1", "pods", "vip", b.pod("other", spec=b.pod_spec(b.container("4", "1Gi")), namespace="vip"))
    server.store.bind("vip", "other", "worker1")
    names = [f"g{i}" for i in range(5)]
    for name in names:
        add_job_pods(server.store, add_job(server.store, name=name, parallelism=2, cpu="1"), backend="volcano")
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=3600)
    controller.reconcile_once()
    server.store.delete("v1", "pods", "vip", "other")
    clock.advance(5)

    def fitting() -> int:
        return sum("model: fits now" in gang_status(server.store, f"job-{n}")["message"] for n in names)

    seen = []
    for _ in range(3):
        controller.reconcile_once()
        seen.append(fitting())
        assert controller.next_wake is not None
        clock.advance(1)
    assert seen == [2, 4, 5], seen


def test_explain_gives_a_gang_another_mechanism_places_the_models_verdict_node_by_node(
    server: TestApiServer, api: Api
) -> None:
    """Issue 78: `gangkeeper explain` for any backend: the members, the verdict its Gang carries, and for
    the operator, node by node, where its pods fit and what blocks the rest."""
    from webhook.controller.run.explain import explain

    server.store.create("v1", "nodes", "", node("worker1", cpu="4"))
    server.store.create("v1", "nodes", "", node("worker2", cpu="4"))
    server.store.create("v1", "namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vip"}})
    server.store.create("v1", "pods", "vip", b.pod("other", spec=b.pod_spec(b.container("4", "1Gi")), namespace="vip"))
    server.store.bind("vip", "other", "worker2")
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2"), backend="volcano")
    assert explain(api, "team-a", "job-train").splitlines() == [
        "gang team-a/job-train",
        "  members: 4 present of minMember 4, 0 bound by the volcano gang scheduler",
        "  gangkeeper's model: waiting for capacity, room for 2 of 4 "
        "(1 node: 0 of 4 pods fit (short of cpu); 1 node: 2 of 4 pods fit (short of cpu))",
        "  best placement found: worker1: 2",
        "  what blocks the rest:",
        "    worker2: 0 of 4 pods fit (needs 2 cpu each, 0 cpu free)",
        "    worker1: 2 of 4 pods fit (needs 2 cpu each, 4 cpu free)",
    ]


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "native-1.36"])
def test_a_tenants_copy_of_a_member_pod_never_has_a_workload_requeued(
    server: TestApiServer, api: Api, backend: str
) -> None:
    """Issue 97: a principal that may only create pods copies a member pod of a waiting gang (its
    ownerReference kept, `spec.nodeName` set). The webhook writes who made it (a tenant), so supervision
    takes it for no member that started: past the gang's timeout the Job, which that principal could not
    touch, is not suspended. The Job controller's own pods are marked as a controller's."""
    clock = Clock()
    server.store.create("v1", "nodes", "", node("worker1", cpu="1"))  # room for none of the gang
    timeout = {"gangkeeper.io/timeout-seconds": "60"}
    job = add_job(server.store, parallelism=4, cpu="2", annotations=timeout)
    name, _, version = backend.partition("-")
    mechanism = make(name, kubernetes_version=version or "1.37")
    members = []
    for _ in range(4):  # as the Job controller makes them: kube-controller-manager's account
        pod = b.pod("", labels={"batch.kubernetes.io/job-name": "train"}, spec=dict(job["spec"]["template"]["spec"]))
        pod["metadata"]["generateName"] = "train-"
        pod["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train",
                "uid": job["metadata"]["uid"],
                "controller": True,
            }
        ]
        made = admit(pod, "CREATE", mechanism, "team-a", user="system:serviceaccount:kube-system:job-controller")
        assert made.mutated is not None and made.mutated["metadata"]["annotations"]["gangkeeper.io/made-by"] == (
            "controller"
        )
        members.append(server.store.create("v1", "pods", "team-a", made.mutated))
    forged = json_copy(members[0])  # `kubectl get -o yaml`, renamed, bound by hand
    for server_set in ("uid", "resourceVersion", "creationTimestamp", "generateName"):
        forged["metadata"].pop(server_set, None)
    forged["metadata"]["name"] = "train-copy"
    forged["spec"]["nodeName"] = "worker1"
    copied = admit(forged, "CREATE", mechanism, "team-a", user="system:serviceaccount:team-a:ci-bot")
    assert copied.mutated is not None and copied.mutated["metadata"]["annotations"]["gangkeeper.io/made-by"] == (
        "tenant"
    )
    server.store.create("v1", "pods", "team-a", copied.mutated)
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=0)
    controller.reconcile_once()
    clock.advance(61)
    controller.reconcile_once()
    assert not server.store.get("batch/v1", "jobs", "team-a", "train")["spec"].get("suspend")
    assert "started partly" not in gang_status(server.store, "job-train").get("message", "")
    assert not events(controller, "GangRequeued")
    # and who made it cannot be rewritten afterwards: the tenant's copy stays a tenant's
    relabelled = json_copy(copied.mutated)
    relabelled["metadata"]["annotations"].pop("gangkeeper.io/made-by")
    refused = admit(relabelled, "UPDATE", mechanism, "team-a", old=copied.mutated, user="alice")
    assert not refused.allowed and refused.code == 422 and "gangkeeper.io/made-by" in refused.message


def minimum_available(server: TestApiServer) -> tuple[str, str, str]:
    status = gang_status(server.store, "job-train")
    found = next(c for c in status["conditions"] if c["type"] == "MinimumAvailable")
    return found["status"], found["reason"], found["message"]


def test_the_gang_says_when_it_falls_below_its_minimum_and_when_it_is_back(server: TestApiServer, api: Api) -> None:
    """Issue 99's health both ways: the Gang's MinimumAvailable condition, False NotStarted before it ran,
    True once its 4 run, False BelowMinimum when one is preempted, True again once its replacement runs."""
    clock = Clock()
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="2", annotations=RECOVERY))
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    controller.reconcile_once()
    assert minimum_available(server) == ("False", "NotStarted", "0 of its minimum 4 running")
    default_scheduler(server.store)
    controller.reconcile_once()
    assert minimum_available(server) == ("True", "MinimumRunning", "4 of its minimum 4 running")
    preempt_one(server)
    controller.reconcile_once()
    assert minimum_available(server) == ("False", "BelowMinimum", "3 of its minimum 4 running")
    server.store.delete("v1", "pods", "vip", "urgent")  # the room is back: the replacement is released
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 1
    controller.reconcile_once()
    assert minimum_available(server)[:2] == ("True", "MinimumRunning")


def test_a_job_whose_parallelism_is_lowered_is_not_short_and_never_requeued(server: TestApiServer, api: Api) -> None:
    """A shrink by the owner is not a loss (issue 99 item 3): the Job's parallelism lowered from 4 to 2 while
    it runs, the Job controller deletes 2 pods; past the recovery timeout the gang runs on with the 2 left,
    the Job not suspended, their uids unchanged."""
    clock = Clock()
    controller = running_gang(server, api, clock)
    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    job["spec"]["parallelism"] = 2
    server.store.update("batch/v1", "jobs", "team-a", "train", job, job["metadata"]["resourceVersion"])
    members = sorted(p["metadata"]["name"] for p in pods(server.store))
    for name in members[2:]:
        server.store.delete("v1", "pods", "team-a", name)
    kept = {p["metadata"]["uid"] for p in pods(server.store)}
    for _ in range(3):
        decision = controller.reconcile_once()["team-a/job-train"]
        assert decision.state == "Running", decision.message
        assert "lost a member" not in decision.message
        clock.advance(61)
    assert not server.store.get("batch/v1", "jobs", "team-a", "train")["spec"].get("suspend")
    assert {p["metadata"]["uid"] for p in pods(server.store)} == kept
    assert not events(controller, "GangRequeued")
