"""The controller against a test API server that enforces the real API rules."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import (
    BLOCKED,
    CONTROL_PLANE,
    Clock,
    add_job,
    add_job_pods,
    default_scheduler,
    gang_status,
    node,
    pods,
)
from tests.recorder import ListRecorder
from webhook.controller.decide.pods import pinned_to
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api, ApiError


@pytest.fixture
def server(apiserver: TestApiServer) -> TestApiServer:
    return apiserver


def seed_cluster(server: TestApiServer) -> None:
    """Seed scenario 2: a kind cluster whose two big workers are tainted; worker3 has room for one 4-cpu pod."""
    store = server.store
    store.create("v1", "nodes", "", node("control-plane", taints=CONTROL_PLANE))
    store.create("v1", "nodes", "", node("worker1", cpu="8", taints=BLOCKED))
    store.create("v1", "nodes", "", node("worker2", cpu="8", taints=BLOCKED))
    store.create("v1", "nodes", "", node("worker3", cpu="4"))


def events(controller: Controller, reason: str) -> list[dict[str, Any]]:
    """The Events `controller` recorded with this reason (its recorder: a ListRecorder)."""
    assert isinstance(controller.recorder, ListRecorder)
    return controller.recorder.reasons(reason)


def test_seed_pinch_keeps_all_gated_then_releases_all_together(server: TestApiServer, api: Api) -> None:
    seed_cluster(server)
    job = add_job(server.store, parallelism=4, cpu="4")
    add_job_pods(server.store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())

    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "WaitingForCapacity"
    assert all(p["spec"].get("schedulingGates") for p in pods(server.store))
    assert default_scheduler(server.store) == 0  # nothing starts while gated
    waiting = events(controller, "WaitingForCapacity")
    # what the tenant's event says: counts, never another tenant's nodes, taints or free capacity
    assert waiting and "3 nodes: a taint its pods do not tolerate" in waiting[0]["message"]  # and the control plane
    assert "1 node: 1 of 4 pods fit (short of cpu)" in waiting[0]["message"]
    assert not any(word in waiting[0]["message"] for word in ("worker", "test=blocked", "cpu free"))

    for name in ("worker1", "worker2"):
        server.store.patch("v1", "nodes", "", name, {"spec": {"taints": None}})
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release" and len(decision.release) == 4
    released = pods(server.store)
    assert all(not p["spec"].get("schedulingGates") for p in released)
    assert all(pinned_to(p["spec"]) in {"worker1", "worker2", "worker3"} for p in released)
    assert all("nodeSelector" not in p["spec"] for p in released)
    assert default_scheduler(server.store) == 4  # the whole gang starts together
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    (released_event,) = events(controller, "GangReleased")  # on the Job alone: its pods get Scheduled
    assert released_event["involvedObject"]["kind"] == "Job", released_event
    assert not events(controller, "GangRunning")  # told by the release: one event per gang started


def test_control_without_gangkeeper_starts_one_of_four(server: TestApiServer) -> None:
    seed_cluster(server)
    job = add_job(server.store, parallelism=4, cpu="4")
    add_job_pods(server.store, job, backend="volcano")  # no gate: the default scheduler sees every pod
    for pod in pods(server.store):
        pod["spec"].pop("schedulerName", None)
    assert default_scheduler(server.store) == 1  # the partial start a gang prevents


def test_all_fit_releases_at_once(server: TestApiServer, api: Api) -> None:
    """Seed scenario 1: 1 leader + 3 workers of 100m fit: released in the first pass."""
    for i in range(3):
        server.store.create("v1", "nodes", "", node(f"worker{i}"))
    job = add_job(server.store, parallelism=4, cpu="100m")
    add_job_pods(server.store, job)
    assert Controller(api, clock=Clock()).reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 4


def test_waits_for_every_member(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="64"))
    job = add_job(server.store, parallelism=4, cpu="1")
    add_job_pods(server.store, job, count=3)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    decision = controller.reconcile_once()["team-a/job-train"]
    assert (decision.state, decision.message) == ("WaitingForMembers", "3 of 4 pods exist")
    add_job_pods(server.store, job, count=1)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"


def test_gang_larger_than_the_cluster_is_reported_at_once(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job = add_job(server.store, parallelism=4, cpu="16")
    add_job_pods(server.store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "NeverFits"
    too_large = events(controller, "GangTooLarge")
    assert too_large and "even if empty" in too_large[0]["message"]
    assert {e["involvedObject"]["kind"] for e in too_large} == {"Job", "Pod"}
    status = gang_status(server.store, "job-train")
    assert status["state"] == "NeverFits" and status["message"].startswith("the gang needs 4 pods")
    assert (status["present"], status["running"], status["gated"]) == (4, 0, 4)


def test_competing_gangs_never_share_promised_capacity(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="12"))
    for name in ("first", "second"):
        add_job_pods(server.store, add_job(server.store, name, parallelism=2, cpu="4"))
    decisions = Controller(api, recorder=ListRecorder(), clock=Clock()).reconcile_once()
    states = sorted(d.state for d in decisions.values())
    assert states == ["Release", "WaitingForCapacity"]
    assert default_scheduler(server.store) == 2


@pytest.mark.parametrize("dies_after", [0, 1, 2, 3])
def test_crash_at_any_step_of_a_release_is_finished_by_the_next_controller(
    server: TestApiServer, api: Api, dies_after: int
) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    server.store.create("v1", "nodes", "", node("worker2", cpu="8"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="4"))

    class Crash(BaseException):  # the process dying: not an error a gang's reconciliation catches
        pass

    sent = {"count": 0}
    lock = threading.Lock()
    dying = Api(api._client)
    original = dying.strategic_patched

    def dying_patch(path: str, patch: dict):  # type: ignore[no-untyped-def]
        with lock:  # the process dies before its PATCH number dies_after + 1: nothing after goes out
            if "/pods/" in path:
                if sent["count"] >= dies_after:
                    raise Crash()
                sent["count"] += 1
        return original(path, patch)

    dying.strategic_patched = dying_patch  # type: ignore[method-assign]
    first = Controller(dying, clock=Clock(), release_concurrency=1)
    with pytest.raises(Crash):
        first.reconcile_once()
    gated = [p for p in pods(server.store) if p["spec"].get("schedulingGates")]
    assert len(gated) == 4 - dies_after

    server.store.requests.clear()
    second = Controller(api, recorder=ListRecorder(), clock=Clock())
    assert second.reconcile_once()["team-a/job-train"].state == "Release"
    pod_patches = [path for method, path in server.store.requests if method == "PATCH" and "/pods/" in path]
    assert len(pod_patches) == 4 - dies_after  # only the pods still gated: nothing done twice
    assert default_scheduler(server.store) == 4
    by_node: dict[str, int] = {}
    for pod in pods(server.store):
        by_node[pod["spec"]["nodeName"]] = by_node.get(pod["spec"]["nodeName"], 0) + 1
    assert by_node == {"worker1": 2, "worker2": 2}  # capacity promised before the crash was honoured


def test_conflict_on_release_is_retried_next_pass(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="16"))
    add_job_pods(server.store, add_job(server.store, parallelism=2, cpu="1"))
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    stale = {"done": False}

    def touch_once(method: str, path: str):  # type: ignore[no-untyped-def]
        if method == "PATCH" and "/pods/" in path and not stale["done"]:
            stale["done"] = True
            name = path.split("/pods/")[1].split("?")[0]
            server.store.patch("v1", "pods", "team-a", name, {"metadata": {"labels": {"touched": "yes"}}})
        return None

    server.store.fail_next.append(touch_once)
    controller.reconcile_once()
    gated = [p for p in pods(server.store) if p["spec"].get("schedulingGates")]
    assert len(gated) == 1  # the 409 left that pod alone
    controller.reconcile_once()
    assert not [p for p in pods(server.store) if p["spec"].get("schedulingGates")]


def test_scale_down_mid_release(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    busy = b.pod("busy", spec=b.pod_spec(b.container("2", "1Gi")), namespace="other")
    server.store.create("v1", "pods", "other", busy)
    server.store.bind("other", "busy", "worker1")
    job = add_job(server.store, parallelism=4, cpu="2")
    names = add_job_pods(server.store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    assert controller.reconcile_once()["team-a/job-train"].state == "WaitingForCapacity"
    server.store.patch("batch/v1", "jobs", "team-a", "train", {"spec": {"parallelism": 3}})
    server.store.delete("v1", "pods", "team-a", names[-1])
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) == 3


def test_a_timed_out_job_is_suspended_then_resumed_after_its_backoff(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(
        server.store, add_job(server.store, parallelism=2, cpu="4", annotations={"gangkeeper.io/timeout-seconds": "60"})
    )
    from tests.lifecycle import JobController

    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    jobs = JobController(server.store)
    jobs.sync("team-a", "train")  # it sees the two pods as its active ones
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    # nothing binds them (a kubelet or scheduler problem): after the timeout the Job is suspended,
    # so the Job controller removes its pods without counting them as failures
    clock.advance(61)
    assert controller.reconcile_once()["team-a/job-train"].state == "TimedOut"
    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert job["spec"]["suspend"] is True
    books = gang_status(server.store, "job-train")
    assert books["attempts"] == 1 and books["suspendedAt"] and books["notBefore"]
    assert "gangkeeper.io/release-attempts" not in job["metadata"]["annotations"]  # no state on the workload
    assert events(controller, "GangRequeued")
    jobs.sync("team-a", "train")
    assert pods(server.store) == []
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["status"].get("failed", 0) == 0
    # after the backoff gangkeeper resumes it; the Job controller recreates them, admitted gated
    clock.advance(31)
    controller.reconcile_once()
    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert job["spec"]["suspend"] is False and "gangkeeper.io/suspended" not in job["metadata"]["annotations"]
    assert events(controller, "GangResumed")
    assert "suspendedAt" not in gang_status(server.store, "job-train")
    add_job_pods(server.store, job)  # what the Job controller makes, through the webhook's admission
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"


def test_the_backoff_base_is_the_operators(server: TestApiServer, api: Api) -> None:
    """--backoff-base-seconds (30 by default; the replay compresses it with the trace)."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    add_job_pods(
        server.store, add_job(server.store, parallelism=2, cpu="4", annotations={"gangkeeper.io/timeout-seconds": "60"})
    )
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, backoff_base_seconds=2.5)
    controller.reconcile_once()
    clock.advance(61)
    assert controller.reconcile_once()["team-a/job-train"].state == "TimedOut"
    assert "resumes after 2.5s" in events(controller, "GangRequeued")[0]["message"]
    clock.advance(1)
    controller.reconcile_once()
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True
    clock.advance(2)
    controller.reconcile_once()
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is False


def test_bare_pods_are_never_evicted(server: TestApiServer, api: Api) -> None:
    from webhook.admission.decide import admit
    from webhook.backends import make

    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    for i in range(2):
        pod = b.pod(
            f"mpi-{i}",
            labels={"gangkeeper.io/group-name": "mpi"},
            annotations={"gangkeeper.io/group-size": "2", "gangkeeper.io/timeout-seconds": "30"},
        )
        server.store.create("v1", "pods", "team-a", admit(pod, "CREATE", make("gate"), "team-a").mutated)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/pg-mpi"].state == "Release"
    clock.advance(31)
    assert controller.reconcile_once()["team-a/pg-mpi"].state == "TimedOut"
    assert len(pods(server.store)) == 2
    assert events(controller, "GangTimedOut")


def test_volcano_podgroup_created_updated_and_recreated(server: TestApiServer, api: Api) -> None:
    from tests.schemas import validate

    job = add_job(server.store, parallelism=4, cpu="1")
    add_job_pods(server.store, job, backend="volcano")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), resync_seconds=0)
    controller.reconcile_once()
    group = server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")
    validate(group)
    assert group["spec"] == {"minMember": 4, "minResources": {"cpu": "4", "memory": "4Gi"}}
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    server.store.patch("batch/v1", "jobs", "team-a", "train", {"spec": {"parallelism": 6}})
    controller.reconcile_once()
    group = server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")
    assert group["spec"]["minMember"] == 6
    server.store.delete("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")
    controller.reconcile_once()
    assert server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")


def test_a_quiet_cluster_costs_no_api_calls_between_resyncs(server: TestApiServer, api: Api) -> None:
    add_job_pods(server.store, add_job(server.store, parallelism=2, cpu="1"), backend="volcano")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), resync_seconds=1e9)
    controller.reconcile_once()
    server.store.requests.clear()
    for _ in range(3):
        controller.reconcile_once()
    assert [r for r in server.store.requests if "/pods" not in r[1] and "/nodes" not in r[1]] == []


def test_someone_elses_podgroup_is_never_taken_over(server: TestApiServer, api: Api) -> None:
    server.store.create(
        "scheduling.volcano.sh/v1beta1",
        "podgroups",
        "team-a",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "job-train"},
            "spec": {"minMember": 1},
        },
    )
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="1"), backend="volcano")
    Controller(api, recorder=ListRecorder(), clock=Clock()).reconcile_once()
    assert server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")["spec"] == {
        "minMember": 1
    }


@pytest.mark.parametrize("version", ["1.35", "1.36", "1.37"])
def test_someone_elses_native_workload_is_never_taken_over(server: TestApiServer, api: Api, version: str) -> None:
    from webhook.backends.native import GENERATIONS

    group_version = f"scheduling.k8s.io/{GENERATIONS[version].version}"
    key = "podGroups" if version == "1.35" else "podGroupTemplates"
    policy = "policy" if version == "1.35" else "schedulingPolicy"
    theirs = {
        "apiVersion": group_version,
        "kind": "Workload",
        "metadata": {"name": "job-train"},
        "spec": {key: [{"name": "gang", policy: {"gang": {"minCount": 1}}}]},
    }
    server.store.create(group_version, "workloads", "team-a", theirs)
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="1"), backend=f"native-{version}")
    Controller(api, recorder=ListRecorder(), clock=Clock(), native_version=version).reconcile_once()
    kept = server.store.get(group_version, "workloads", "team-a", "job-train")
    assert kept["spec"] == theirs["spec"] and "gangkeeper.io/group" not in kept["metadata"].get("labels", {})


def test_unmodelled_constraints_release_without_pins_and_warn(server: TestApiServer, api: Api) -> None:
    server.store.create("v1", "nodes", "", node("worker1", cpu="16"))
    job = add_job(server.store, parallelism=2, cpu="1")
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    job["spec"]["template"]["spec"]["affinity"] = anti
    add_job_pods(server.store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    decision = controller.reconcile_once()["team-a/job-train"]
    assert decision.state == "Release" and decision.unmodelled == ("podAntiAffinity",)
    assert all("nodeSelector" not in p["spec"] and not p["spec"].get("schedulingGates") for p in pods(server.store))
    warning = events(controller, "UnmodelledConstraints")
    assert warning and "podAntiAffinity" in warning[0]["message"]


def test_orphaned_group_of_bare_pods_is_deleted(server: TestApiServer, api: Api) -> None:
    from webhook.admission.decide import admit
    from webhook.backends import make

    for i in range(2):
        pod = b.pod(
            f"mpi-{i}", labels={"gangkeeper.io/group-name": "mpi"}, annotations={"gangkeeper.io/group-size": "2"}
        )
        server.store.create("v1", "pods", "team-a", admit(pod, "CREATE", make("volcano"), "team-a").mutated)
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), orphan_seconds=0)
    controller.reconcile_once()
    group = server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "pg-mpi")
    assert "ownerReferences" not in group["metadata"]  # nobody would garbage-collect it
    for i in range(2):
        server.store.delete("v1", "pods", "team-a", f"mpi-{i}")
    controller.reconcile_once()
    assert server.store.list("scheduling.volcano.sh/v1beta1", "podgroups", None)[0] == []


def test_watched_group_object_deleted_is_recreated_at_once(server: TestApiServer, api: Api) -> None:
    from webhook.informer import Informer
    from webhook.kube import Resource

    add_job_pods(server.store, add_job(server.store, parallelism=2, cpu="1"), backend="volcano")
    podgroups = Informer(api, Resource("scheduling.volcano.sh/v1beta1", "podgroups"), watch_seconds=1)
    controller = Controller(
        api, clock=Clock(), resync_seconds=1e9, informers={("scheduling.volcano.sh/v1beta1", "podgroups"): podgroups}
    )
    podgroups.relist()
    controller.reconcile_once()
    podgroups.watch_once()
    assert podgroups.get("team-a", "job-train") is not None
    controller.reconcile_once()  # the pass the creation event wakes: it notes the object's version
    server.store.requests.clear()
    server.store.delete("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")
    podgroups.watch_once()  # the watch sees the deletion: the gang changed, no resync needed
    controller.reconcile_once()
    assert server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")


def test_events_wait_while_a_release_is_in_flight(server: TestApiServer, api: Api) -> None:
    """A 1,000-pod release's PATCHes go first; the events recorded meanwhile are sent when it ends."""
    from webhook.controller.act.events import EventRecorder

    recorder = EventRecorder(api, "gangkeeper-test", clock=Clock())
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a", "uid": "u"}}
    with recorder.deferred():
        recorder.record(pod, "Normal", "GangReleased", "held back")
        time.sleep(0.3)  # time enough for a worker to have sent it, were it not held
        assert server.store.list("v1", "events", None)[0] == []
    recorder.flush()
    (sent,) = [e for e in server.store.list("v1", "events", None)[0] if e["reason"] == "GangReleased"]
    assert sent["involvedObject"]["name"] == "p" and sent["message"] == "held back"


def test_zone_less_times_a_tenant_writes_stop_no_gang(server: TestApiServer, api: Api) -> None:
    """A hand-written `released-at` without a zone on a pod (and `not-before` on a Job) once raised
    TypeError in every pass: no gate gang in the cluster was released again."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="64"))
    early = add_job(server.store, name="early", parallelism=1, cpu="1")
    [early_pod] = add_job_pods(server.store, early)
    forged = {"annotations": {"gangkeeper.io/released-at": "2020-01-01T00:00:00"}}
    server.store.patch("v1", "pods", "team-a", early_pod, {"metadata": forged, "spec": {"schedulingGates": None}})
    job = add_job(server.store, parallelism=4, cpu="1")
    add_job_pods(server.store, job)

    decisions = Controller(api, recorder=ListRecorder(), clock=Clock()).reconcile_once()

    assert decisions["team-a/job-train"].state == "Release"
    assert default_scheduler(server.store) >= 4


@pytest.mark.parametrize("text", ["2030-01-01T00:00:00", "2030-01-01", "not a time", ""])
def test_times_without_a_zone_are_unreadable(text: str) -> None:
    from webhook.controller.decide.pods import parse_time

    assert parse_time(text) is None


def test_times_with_a_zone_are_read() -> None:
    from webhook.controller.decide.pods import parse_time

    moment = parse_time("2030-01-01T00:00:00Z")
    assert moment is not None and moment.utcoffset() is not None and moment.year == 2030


def test_a_refused_podgroup_is_told_on_the_workload_once(server: TestApiServer, api: Api) -> None:
    """Volcano's admission refuses a PodGroup whose queue does not exist (volcano pkg/webhooks/admission/
    podgroups/validate): the pods would stay Pending with no word. Modelled here by the same refusal."""
    from tests.apiserver import Reject

    message = 'admission webhook "validatepodgroup.volcano.sh" denied the request: queue nosuch not found'

    def volcano_admission(operation, gv, plural, namespace, obj, old):  # type: ignore[no-untyped-def]
        if plural == "podgroups" and (obj.get("spec") or {}).get("queue") == "nosuch":
            raise Reject(400, "BadRequest", message)
        return obj

    server.store.admission = volcano_admission
    job = add_job(server.store, parallelism=2, cpu="1", annotations={"gangkeeper.io/queue": "nosuch"})
    add_job_pods(server.store, job, backend="volcano")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock())
    controller.reconcile_once()
    controller.reconcile_once()

    refused = events(controller, "GroupObjectRefused")
    assert len(refused) == 1 and refused[0]["type"] == "Warning"
    assert refused[0]["involvedObject"]["kind"] == "Job" and "queue nosuch not found" in refused[0]["message"]


def test_a_namespace_that_leaves_gets_its_gates_lifted(server: TestApiServer, api: Api) -> None:
    """Removing gangkeeper.io/enabled is the README's way to unblock a namespace: nothing then waits for
    a release that gangkeeper no longer owes it."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="4"))
    job = add_job(server.store, parallelism=2, cpu="4")  # never fits: waits gated
    add_job_pods(server.store, job)
    left: set[str] = set()
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), opted_out=lambda namespace: namespace in left)
    assert controller.reconcile_once()["team-a/job-train"].state == "NeverFits"
    assert all(p["spec"].get("schedulingGates") for p in pods(server.store))

    left.add("team-a")
    controller.reconcile_once()

    assert not any(p["spec"].get("schedulingGates") for p in pods(server.store))
    lifted = events(controller, "GateLifted")
    assert len(lifted) == 2 and "namespace team-a is no longer opted in" in lifted[0]["message"]


def test_a_timed_out_job_that_kueue_manages_is_never_suspended_by_gangkeeper(server: TestApiServer, api: Api) -> None:
    """Kueue admits a workload by lifting its suspend: gangkeeper suspending it on a timeout would be
    undone by Kueue or undo Kueue's admission. It is left to Kueue's waitForPodsReady."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job = add_job(server.store, parallelism=2, cpu="4", annotations={"gangkeeper.io/timeout-seconds": "60"})
    server.store.patch(
        "batch/v1", "jobs", "team-a", "train", {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "q"}}}
    )
    add_job_pods(server.store, job)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    clock.advance(61)
    decision = controller.reconcile_once()["team-a/job-train"]

    job = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert not job["spec"].get("suspend") and "gangkeeper.io/suspended" not in job["metadata"].get("annotations", {})
    assert len(pods(server.store)) == 2  # nothing evicted either
    assert "left to Kueue" in decision.message and events(controller, "GangLeftToKueue")


def timed_out_and_suspended(server: TestApiServer, api: Api) -> tuple[Controller, Clock]:
    """A Job gang released that never bound, past its timeout: suspended by gangkeeper, its backoff (30 s)
    running."""
    server.store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job = add_job(server.store, parallelism=2, cpu="4", annotations={"gangkeeper.io/timeout-seconds": "60"})
    add_job_pods(server.store, job)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    controller.reconcile_once()
    clock.advance(61)
    controller.reconcile_once()
    return controller, clock


def test_a_user_keeps_a_suspended_job_by_removing_gangkeepers_mark(server: TestApiServer, api: Api) -> None:
    controller, clock = timed_out_and_suspended(server, api)
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True
    server.store.patch(
        "batch/v1", "jobs", "team-a", "train", {"metadata": {"annotations": {"gangkeeper.io/suspended": None}}}
    )

    clock.advance(3600)  # long past any backoff
    controller.reconcile_once()

    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is True
    assert not events(controller, "GangResumed")


def test_a_volcano_podgroup_is_made_from_the_workload_before_any_pod(server: TestApiServer, api: Api) -> None:
    """Volcano's pod admission refuses a pod whose PodGroup does not exist yet (admit_pod.go checkPG, seen
    on the real webhook-manager): the PodGroup must come from the Job, before the Job controller's first pod."""
    from tests.schemas import validate

    created, controller, _ = volcano_job_watched(server, api, parallelism=3)
    controller.reconcile_once()
    group = server.store.get("scheduling.volcano.sh/v1beta1", "podgroups", "team-a", "job-train")
    validate(group)
    assert group["spec"]["minMember"] == 3
    assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]


def test_an_operators_own_volcano_group_is_not_made_ahead(server: TestApiServer, api: Api) -> None:
    from webhook.backends.volcano import volcano_groups_in

    own = {"spec": {"template": {"metadata": {"annotations": {"scheduling.k8s.io/group-name": "theirs"}}, "spec": {}}}}
    assert volcano_groups_in(own) == set()
    hostile = {"spec": {"template": {"metadata": "not a map", "spec": {}}, "deep": [[[[[[[[[[[[[[{}]]]]]]]]]]]]]]}}
    assert volcano_groups_in(hostile) == set()


def test_leaderworkerset_groups_get_podgroups_ahead_unless_lws_makes_its_own(server: TestApiServer, api: Api) -> None:
    """An LWS's pods get their Volcano group one by one, so its PodGroups come from the set; a group whose
    PodGroup LWS's own Volcano provider made (labelled with the set's name and group index) keeps LWS's
    alone: gangkeeper's, still empty, is deleted."""
    from tests.realcluster import workloads
    from webhook.admission.decide import admit
    from webhook.backends import make
    from webhook.informer import Informer
    from webhook.kube import Resource

    lws = workloads.leader_worker_set("lws", "team-a", 4, "1")
    lws["spec"]["replicas"] = 2
    stamped = admit(lws, "CREATE", make("volcano"), "team-a").mutated
    assert stamped is not None
    server.store.served["leaderworkerset.x-k8s.io/v1"] = {"leaderworkersets"}
    server.store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "team-a", stamped)
    sets = Informer(api, Resource("leaderworkerset.x-k8s.io/v1", "leaderworkersets"), watch_seconds=1)
    podgroups = Informer(api, Resource("scheduling.volcano.sh/v1beta1", "podgroups"), watch_seconds=1)
    informers = {
        ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"): sets,
        ("scheduling.volcano.sh/v1beta1", "podgroups"): podgroups,
    }
    sets.relist()
    podgroups.relist()
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), informers=informers)
    controller.reconcile_once()
    names = group_names(server)
    assert names == ["lws-lws-0", "lws-lws-1"]
    # LWS's own provider made group 1's PodGroup (as lws volcano_provider.go labels it)
    server.store.create(
        "scheduling.volcano.sh/v1beta1",
        "podgroups",
        "team-a",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": "lws-1-abc",
                "labels": {"leaderworkerset.sigs.k8s.io/name": "lws", "leaderworkerset.sigs.k8s.io/group-index": "1"},
            },
            "spec": {"minMember": 4},
        },
    )
    server.store.patch("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "team-a", "lws", {"status": {"replicas": 2}})
    podgroups.relist()
    sets.relist()
    controller.reconcile_once()
    names = group_names(server)
    assert names == ["lws-1-abc", "lws-lws-0"]


@pytest.mark.parametrize("configured", ["volcano-gpu", "volcano"])
def test_a_leaderworkerset_under_a_volcano_scheduler_of_another_name_gets_its_podgroups_ahead(
    server: TestApiServer, api: Api, configured: str
) -> None:
    """schedulerNames.volcano reaches the controller too: an LWS the webhook gave `volcano-gpu` is
    gangkeeper's Volcano gangs (before, the controller compared with `volcano` and made no PodGroup, so
    Volcano's pod admission refused every pod of the set)."""
    from tests.realcluster import workloads
    from webhook.admission.decide import admit
    from webhook.backends import make
    from webhook.informer import Informer
    from webhook.kube import Resource

    lws = workloads.leader_worker_set("lws", "team-a", 2, "1")
    stamped = admit(lws, "CREATE", make("volcano", scheduler_name=configured), "team-a").mutated
    assert stamped is not None
    server.store.served["leaderworkerset.x-k8s.io/v1"] = {"leaderworkersets"}
    server.store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", "team-a", stamped)
    sets = Informer(api, Resource("leaderworkerset.x-k8s.io/v1", "leaderworkersets"), watch_seconds=1)
    podgroups = Informer(api, Resource("scheduling.volcano.sh/v1beta1", "podgroups"), watch_seconds=1)
    sets.relist()
    podgroups.relist()
    informers = {
        ("leaderworkerset.x-k8s.io/v1", "leaderworkersets"): sets,
        ("scheduling.volcano.sh/v1beta1", "podgroups"): podgroups,
    }
    Controller(api, clock=Clock(), informers=informers, volcano_scheduler=configured).reconcile_once()
    assert group_names(server) == ["lws-lws-0"]


def group_names(server: TestApiServer) -> list[str]:
    return sorted(
        g["metadata"]["name"] for g in server.store.list("scheduling.volcano.sh/v1beta1", "podgroups", "team-a")[0]
    )


def test_an_operators_own_podgroup_for_its_workload_keeps_gangkeepers_away(server: TestApiServer, api: Api) -> None:
    """training-operator with --gang-scheduler-name=volcano makes a PodGroup controlled by the PyTorchJob
    and puts the pods in it: gangkeeper's PodGroup, made ahead from the stamped templates, goes while empty
    (an empty PodGroup let Inqueue would hold the queue's resources)."""
    created, controller, relist = volcano_job_watched(server, api, parallelism=2)
    controller.reconcile_once()
    assert group_names(server) == ["job-train"]
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": created["metadata"]["uid"],
        "controller": True,
    }
    server.store.create(
        "scheduling.volcano.sh/v1beta1",
        "podgroups",
        "team-a",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "ownerReferences": [owner]},
            "spec": {"minMember": 2},
        },
    )
    server.store.patch("batch/v1", "jobs", "team-a", "train", {"status": {"active": 2}})
    relist()
    controller.reconcile_once()
    assert group_names(server) == ["train"]


def volcano_job_watched(
    server: TestApiServer, api: Api, parallelism: int
) -> tuple[dict[str, Any], Controller, Callable[[], None]]:
    """A Job admitted under Volcano (its templates stamped), stored, and a controller watching Jobs and
    Volcano PodGroups: (the Job, the controller, a relist of both caches)."""
    from webhook.admission.decide import admit
    from webhook.backends import make
    from webhook.informer import Informer
    from webhook.kube import Resource

    job = b.job("train", parallelism=parallelism, spec=b.pod_spec(b.container("1", "1Gi")))
    job["metadata"]["namespace"] = "team-a"
    stamped = admit(job, "CREATE", make("volcano"), "team-a").mutated
    assert stamped is not None
    created = server.store.create("batch/v1", "jobs", "team-a", stamped)
    jobs = Informer(api, Resource("batch/v1", "jobs"), watch_seconds=1)
    podgroups = Informer(api, Resource("scheduling.volcano.sh/v1beta1", "podgroups"), watch_seconds=1)
    informers = {("batch/v1", "jobs"): jobs, ("scheduling.volcano.sh/v1beta1", "podgroups"): podgroups}

    def relist() -> None:
        jobs.relist()
        podgroups.relist()

    relist()
    return created, Controller(api, recorder=ListRecorder(), clock=Clock(), informers=informers), relist


def refused_by_the_scheduler(server: TestApiServer, namespace: str = "team-a") -> None:
    for pod in pods(server.store, namespace):
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
        server.store.patch("v1", "pods", namespace, pod["metadata"]["name"], {"status": status})


def woken_at(server: TestApiServer) -> str | None:
    from webhook.controller.act.wakeup import WAKE_ANNOTATION

    group = server.store.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "team-a", "job-train")
    return ((group.get("metadata") or {}).get("annotations") or {}).get(WAKE_ANNOTATION)


def test_a_coscheduling_gang_the_scheduler_gave_up_on_is_woken_once_it_fits(server: TestApiServer, api: Api) -> None:
    """Coscheduling retries the pods it rejected only on a PodGroup update (wakeup.py): the pinch holds
    (no touch), the taint goes, the model sees the four fit and the PodGroup is touched, then not again
    before WAKE_INTERVAL_SECONDS."""
    from tests.schemas import validate
    from webhook.controller.act.wakeup import CHECK_INTERVAL_SECONDS, WAKE_INTERVAL_SECONDS

    seed_cluster(server)  # room for one 4-cpu pod of four
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="4"), backend="coscheduling")
    refused_by_the_scheduler(server)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=0)
    controller.reconcile_once()
    assert woken_at(server) is None  # it does not fit: no retry is worth its cost
    for name in ("worker1", "worker2"):
        server.store.patch("v1", "nodes", "", name, {"spec": {"taints": []}})
    clock.advance(1)
    controller.reconcile_once()
    assert woken_at(server) is None  # the model is asked at most every CHECK_INTERVAL_SECONDS
    clock.advance(CHECK_INTERVAL_SECONDS)
    controller.reconcile_once()
    first = woken_at(server)
    assert first == clock.now.isoformat()
    validate(server.store.get("scheduling.x-k8s.io/v1alpha1", "podgroups", "team-a", "job-train"))
    clock.advance(WAKE_INTERVAL_SECONDS / 2)
    controller.reconcile_once()
    assert woken_at(server) == first
    assert not pods_woken(server)  # one PodGroup write per wake, no pod touched
    clock.advance(WAKE_INTERVAL_SECONDS)
    controller.reconcile_once()
    assert woken_at(server) == clock.now.isoformat()
    # woken twice in a row, still waiting whole though it fits: a pod lost from the scheduler's queue
    # comes back only on an update of its own (wakeup.py), so the pods are touched as well
    assert pods_woken(server) == {clock.now.isoformat()}
    assert len(pods(server.store)) == 4 and all(woken_pod(p) for p in pods(server.store))


def woken_pod(pod: dict[str, Any]) -> str | None:
    from webhook.controller.act.wakeup import WAKE_ANNOTATION

    return ((pod.get("metadata") or {}).get("annotations") or {}).get(WAKE_ANNOTATION)


def pods_woken(server: TestApiServer) -> set[str]:
    return {w for w in (woken_pod(p) for p in pods(server.store)) if w}


def test_a_coscheduling_gang_partly_bound_or_not_refused_is_left_to_the_scheduler(
    server: TestApiServer, api: Api
) -> None:
    seed_cluster(server)
    for name in ("worker1", "worker2"):
        server.store.patch("v1", "nodes", "", name, {"spec": {"taints": []}})
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="1"), backend="coscheduling")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), resync_seconds=0)
    controller.reconcile_once()
    assert woken_at(server) is None  # not refused yet: the scheduler is still trying
    refused_by_the_scheduler(server)
    first = pods(server.store)[0]["metadata"]["name"]
    server.store.bind("team-a", first, "worker3")
    controller.reconcile_once()
    assert woken_at(server) is None  # Permit counts the bound one; the others are retried on their own


def test_a_suspend_not_yet_seen_is_not_mistaken_for_the_user_taking_the_job_back(
    server: TestApiServer, api: Api
) -> None:
    """The books are written before the suspend; a read that does not show the suspend yet (a cache
    behind by a moment, as on the real tier) must not end gangkeeper's hold, or the Job stays suspended
    for ever. Only once the suspend had time to be seen does a missing mark mean the user's choice."""
    controller, clock = timed_out_and_suspended(server, api)
    suspended = server.store.get("batch/v1", "jobs", "team-a", "train")
    assert suspended["spec"]["suspend"] is True
    stale = {"spec": {"suspend": False}, "metadata": {"annotations": {"gangkeeper.io/suspended": None}}}
    server.store.patch("batch/v1", "jobs", "team-a", "train", stale)
    clock.advance(1)
    controller.reconcile_once()
    assert gang_status(server.store, "job-train").get("suspendedAt")  # still held
    mark = suspended["metadata"]["annotations"]["gangkeeper.io/suspended"]
    seen = {"spec": {"suspend": True}, "metadata": {"annotations": {"gangkeeper.io/suspended": mark}}}
    server.store.patch("batch/v1", "jobs", "team-a", "train", seen)
    clock.advance(31)
    controller.reconcile_once()
    assert server.store.get("batch/v1", "jobs", "team-a", "train")["spec"]["suspend"] is False
    assert events(controller, "GangResumed")


def test_an_upgraded_api_server_gets_the_gangs_group_objects_in_the_version_it_serves_now(
    server: TestApiServer, api: Api
) -> None:
    """A 1.36 control plane upgraded to 1.37 under the controller (v1alpha2 no longer served, v1beta1 and
    the composite API now): re-discovery moves the native mechanism to v1beta1, and a gang still running
    gets its Workload and PodGroup again in v1beta1; an outage of discovery changes nothing."""
    from webhook.controller.run.process import native_served

    store = server.store
    for old in [v for v in store.served if v.startswith("scheduling.k8s.io/")]:
        del store.served[old]
    store.served["scheduling.k8s.io/v1alpha2"] = {"workloads", "podgroups"}
    assert native_served(api) == ("1.36", False)
    add_job_pods(store, add_job(store, parallelism=2, cpu="1"), backend="native-1.36")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), native_version="1.36")
    controller.reconcile_once()
    assert store.get("scheduling.k8s.io/v1alpha2", "podgroups", "team-a", "job-train")
    assert not controller.serve_native("1.36", False)
    del store.served["scheduling.k8s.io/v1alpha2"]
    store.served["scheduling.k8s.io/v1beta1"] = {"workloads", "podgroups"}
    store.served["scheduling.k8s.io/v1alpha3"] = {"workloads", "podgroups", "compositepodgroups"}
    found = native_served(api)
    assert found == ("1.37", True)
    assert controller.serve_native(*found)
    controller.reconcile_once()
    group = store.get("scheduling.k8s.io/v1beta1", "podgroups", "team-a", "job-train")
    assert group["spec"]["workloadRef"] == {"workloadName": "job-train", "templateName": "gang"}
    assert store.get("scheduling.k8s.io/v1beta1", "workloads", "team-a", "job-train")


def test_native_discovery_that_fails_is_no_answer(api: Api) -> None:
    from webhook.controller.run.process import native_served

    class Down:
        def get(self, path: str) -> object:
            raise ApiError(503, "unavailable", "GET", path)

    assert native_served(Down()) is None  # type: ignore[arg-type]


def test_a_binding_gangs_counts_are_written_every_few_seconds_not_every_pass(server: TestApiServer, api: Api) -> None:
    """A status PATCH costs the API server the whole Gang (300 ms of its CPU with 1,000 release records):
    while the released pods bind, the counts alone are written at most every COUNTS_SECONDS, the state
    change at once, and the last counts in the pass the controller asked for when it held them back."""
    from webhook.controller.observe.books import COUNTS_SECONDS

    server.store.create("v1", "nodes", "", node("worker1", cpu="64"))
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="1"))
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock, resync_seconds=0)
    assert controller.reconcile_once()["team-a/job-train"].state == "Release"
    names = [p["metadata"]["name"] for p in pods(server.store)]

    def status_patches() -> int:
        return sum(1 for method, path in server.store.requests if method == "PATCH" and "/gangs/" in path)

    server.store.bind("team-a", names[0], "worker1")
    clock.advance(0.5)
    controller.reconcile_once()
    written = status_patches()
    assert gang_status(server.store, "job-train")["running"] == 1
    for name in names[1:3]:  # two more bind within the interval: their counts wait
        server.store.bind("team-a", name, "worker1")
        clock.advance(0.5)
        controller.reconcile_once()
    assert status_patches() == written
    assert gang_status(server.store, "job-train")["running"] == 1
    assert controller.next_wake is not None and controller.next_wake <= (clock.now.timestamp() + COUNTS_SECONDS)
    clock.advance(COUNTS_SECONDS)
    controller.reconcile_once()  # the pass it asked for: the counts held back are written
    assert gang_status(server.store, "job-train")["running"] == 3
    server.store.bind("team-a", names[3], "worker1")  # the gang runs: a state change is written at once
    clock.advance(0.5)
    assert controller.reconcile_once()["team-a/job-train"].state == "Running"
    status = gang_status(server.store, "job-train")
    assert (status["state"], status["running"]) == ("Running", 4)


def test_a_native_workload_as_the_api_server_stores_it_is_not_written_again(server: TestApiServer, api: Api) -> None:
    """kube-apiserver 1.37 serializes a v1beta1 PodGroupTemplate's `schedulingConstraints` even when
    null (k8s.io/api scheduling/v1beta1/types.go: no omitempty). The Workload gangkeeper wrote is then
    the same, not a difference to write again at every change of the gang's pods (bench/cluster.py saw
    277 PATCHes of one Workload for a 1,000-pod Job)."""
    group_version, key = "scheduling.k8s.io/v1beta1", ("team-a", "job-train")
    add_job_pods(server.store, add_job(server.store, parallelism=4, cpu="1"), backend="native-1.37")
    controller = Controller(api, recorder=ListRecorder(), clock=Clock(), native_version="1.37", resync_seconds=0)
    controller.reconcile_once()
    stored = server.store.get(group_version, "workloads", *key)
    for template in stored["spec"]["podGroupTemplates"]:
        template.setdefault("schedulingConstraints", None)  # as the real API server answers
    server.store.update(group_version, "workloads", *key, stored, None, admit=False)
    server.store.requests.clear()
    for _ in range(3):
        controller.reconcile_once()  # resync 0: the gang's objects are looked at again each pass
    assert [r for r in server.store.requests if r[0] == "PATCH" and "/workloads/" in r[1]] == []


def test_a_deleted_workloads_gated_pods_are_left_to_the_garbage_collector_then_ungated(
    server: TestApiServer, api: Api
) -> None:
    """`kubectl delete job` (background cascade): the Job is gone at once and the garbage collector deletes its
    pods within seconds. A gate lifted meanwhile lets one bind on its own (seen on the real tier: a member
    bound on the free node a second before its deletion); gates come off only pods still there after the grace."""
    clock = Clock()
    job = add_job(server.store, parallelism=4, cpu="64")  # more than the cluster: held behind the gate
    add_job_pods(server.store, job)
    controller = Controller(api, recorder=ListRecorder(), clock=clock, orphan_seconds=30, resync_seconds=0)
    controller.reconcile_once()
    server.store.delete("batch/v1", "jobs", "team-a", "train")
    controller.reconcile_once()
    clock.advance(29)
    controller.reconcile_once()
    assert all(p["spec"].get("schedulingGates") for p in pods(server.store))
    clock.advance(2)
    controller.reconcile_once()
    assert not any(p["spec"].get("schedulingGates") for p in pods(server.store))


def test_a_release_is_recorded_in_one_write_off_the_pass_thread(server: TestApiServer, api: Api) -> None:
    """The record (the Gang created, then its release records, state and books in one status write) is
    sent on the releaser's pool, not on the pass's thread: under a burst of arrivals its round trips were
    a quarter of the pass's time (bench/replay.py --gangkeeper-profiles). Nothing is written twice."""
    from webhook.controller import metrics

    zone = {"topology.kubernetes.io/zone": "rack-a"}
    server.store.create("v1", "nodes", "", node("worker1", cpu="16", labels=zone))
    annotations = {"gangkeeper.io/topology-preferred": "topology.kubernetes.io/zone"}
    add_job_pods(server.store, add_job(server.store, parallelism=2, cpu="2", annotations=annotations))
    threads: list[str] = []
    create = api.create

    def create_noting_the_thread(path: str, body: Any) -> Any:
        if "/gangs" in path:
            threads.append(threading.current_thread().name)
        return create(path, body)

    api.create = create_noting_the_thread  # type: ignore[method-assign]
    writes = {part: metrics.GANG_WRITES.labels(part)._value.get() for part in ("create", "status")}

    decision = Controller(api, recorder=ListRecorder(), clock=Clock()).reconcile_once()["team-a/job-train"]

    assert decision.state == "Release"
    gang = server.store.get("gangkeeper.io/v1alpha1", "gangs", "team-a", "job-train")
    assert gang["status"]["state"] == "Release" and gang["status"]["domain"] == "rack-a"
    assert sorted(gang["status"]["released"]) == sorted(p["metadata"]["name"] for p in pods(server.store))
    assert all(not p["spec"].get("schedulingGates") for p in pods(server.store))
    assert threads and all(name.startswith("release") for name in threads)
    assert {part: metrics.GANG_WRITES.labels(part)._value.get() - before for part, before in writes.items()} == {
        "create": 1,
        "status": 1,
    }


def test_a_gone_members_record_is_removed_and_a_steady_gang_writes_nothing(server: TestApiServer, api: Api) -> None:
    """The Gang's release records follow the members: a pod deleted loses its record and its replacement,
    released, gets its own; a pass over a gang where nothing changed writes nothing (the records of pods
    gone are worked out again only when the gang's members or the Gang's records change)."""
    from webhook.controller import metrics

    server.store.create("v1", "nodes", "", node("worker1", cpu="16"))
    job = add_job(server.store, parallelism=2, cpu="2")
    add_job_pods(server.store, job)
    clock = Clock()
    controller = Controller(api, recorder=ListRecorder(), clock=clock)
    controller.reconcile_once()
    default_scheduler(server.store)
    controller.reconcile_once()
    first = sorted(p["metadata"]["name"] for p in pods(server.store))
    assert sorted(gang_status(server.store, "job-train")["released"]) == first

    gone = first[0]
    server.store.delete("v1", "pods", "team-a", gone)
    clock.advance(1)
    controller.reconcile_once()
    assert sorted(gang_status(server.store, "job-train")["released"]) == first[1:]
    (replacement,) = add_job_pods(server.store, job, count=1)
    for _ in range(2):
        clock.advance(1)
        controller.reconcile_once()
        default_scheduler(server.store)
    assert sorted(gang_status(server.store, "job-train")["released"]) == sorted([first[1], replacement])

    clock.advance(1)
    controller.reconcile_once()
    writes = metrics.GANG_WRITES.labels("status")._value.get()
    clock.advance(1)
    controller.reconcile_once()
    assert metrics.GANG_WRITES.labels("status")._value.get() == writes
