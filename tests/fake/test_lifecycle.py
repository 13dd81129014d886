"""Gangs followed over time through the upstream controllers that create their objects
(tests/lifecycle.py simulates them, each citing its source), admitted as the webhook admits them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests import builders as b
from tests.apiserver import Store, TestApiServer
from tests.cluster import Clock, default_scheduler, gang_status, node
from tests.lifecycle import (
    JobController,
    JobSetController,
    MPIJobController,
    StatefulSetController,
    finish,
    install_admission,
    kubelet,
)
from tests.schemas import EXAMPLES, validate
from webhook.controller.run.reconciler import Controller
from webhook.kube import Api

NS = "team-a"
GATE = [{"name": "gangkeeper.io/gang-gate"}]


def example(path: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((EXAMPLES / path).read_text())
    document["metadata"]["namespace"] = NS
    return document


def pods(store: Store) -> list[dict[str, Any]]:
    return store.list("v1", "pods", NS)[0]


def group_of(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("gangkeeper.io/group")


def test_jobset_child_jobs_are_not_grouped_again_and_all_pods_form_one_gang(store: Store) -> None:
    install_admission(store, "volcano")
    jobset = store.create("jobset.x-k8s.io/v1alpha2", "jobsets", NS, example("jobset/paralleljobs.yaml"))
    validate(jobset)
    children = JobSetController(store).sync(NS, "paralleljobs")
    for name in children:
        child = store.get("batch/v1", "jobs", NS, name)
        validate(child)
        template = child["spec"]["template"]["metadata"]
        assert template["labels"]["gangkeeper.io/group"] == "jobset-paralleljobs", name  # the JobSet's, kept
        assert template["annotations"]["gangkeeper.io/workload"] == "JobSet/paralleljobs"
        JobController(store).sync(NS, name)
    created = pods(store)
    assert len(created) == 5  # 4 workers + 1 driver: one gang, all or nothing across replicatedJobs
    assert {group_of(p) for p in created} == {"jobset-paralleljobs"}
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in created} == {"jobset-paralleljobs"}


def test_mpijob_v2_launcher_job_joins_the_mpijob_gang(store: Store) -> None:
    install_admission(store, "volcano")
    mpijob = example("kubeflow/mpijob-tensorflow-mnist.yaml")
    mpijob["apiVersion"] = "kubeflow.org/v2beta1"  # as mpi-operator v2 serves it
    store.create("kubeflow.org/v2beta1", "mpijobs", NS, mpijob)
    MPIJobController(store).sync(NS, "tensorflow-mnist")
    launcher = store.get("batch/v1", "jobs", NS, "tensorflow-mnist-launcher")
    assert launcher["spec"]["template"]["metadata"]["labels"]["gangkeeper.io/group"] == "mpijob-tensorflow-mnist"
    JobController(store).sync(NS, "tensorflow-mnist-launcher")
    created = pods(store)
    workers = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert len(created) == workers + 1
    assert {group_of(p) for p in created} == {"mpijob-tensorflow-mnist"}  # the launcher is not one short


def test_a_leaderworkerset_statefulset_is_not_a_gang_of_its_own(store: Store) -> None:
    install_admission(store, "gate")
    lws = store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", NS, b.lws("serve"))
    leader_set = b.statefulset("serve", replicas=2)
    leader_set["metadata"]["ownerReferences"] = [
        {"apiVersion": lws["apiVersion"], "kind": "LeaderWorkerSet", "name": "serve", "uid": lws["metadata"]["uid"]}
        | {"controller": True}
    ]
    stored = store.create("apps/v1", "statefulsets", NS, leader_set)
    assert "gangkeeper.io/group" not in (stored["spec"]["template"]["metadata"].get("labels") or {})


def run_gate(
    store: Store,
    api: Api,
    clock: Clock,
    job_controllers: list[tuple[Any, str]],
    rounds: int,
    gangs: Controller | None = None,
) -> None:
    """Controllers, the gang controller, the scheduler and the kubelet, in turn, `rounds` times."""
    gangs = gangs or Controller(api, clock=clock)
    for _ in range(rounds):
        for controller, name in job_controllers:
            controller.sync(NS, name)
        gangs.reconcile_once()
        default_scheduler(store)
        kubelet(store, NS)
        clock.advance(1)


def test_an_orderedready_statefulset_gets_no_gang_and_starts_pod_by_pod(store: Store, api: Api) -> None:
    warnings = install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1"))
    sts = store.create("apps/v1", "statefulsets", NS, b.statefulset("db", replicas=3, policy=None))
    assert any("podManagementPolicy OrderedReady" in w and "Parallel" in w for w in warnings)
    assert "gangkeeper.io/group" not in (sts["spec"]["template"]["metadata"].get("labels") or {})
    run_gate(store, api, Clock(), [(StatefulSetController(store), "db")], rounds=4)
    started = pods(store)
    assert sorted(p["metadata"]["name"] for p in started) == ["db-0", "db-1", "db-2"]
    assert all(p["status"]["phase"] == "Running" and not p["spec"].get("schedulingGates") for p in started)


def test_a_parallel_statefulset_is_one_gang_released_whole(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1"))
    sts = store.create("apps/v1", "statefulsets", NS, b.statefulset("db", replicas=3))
    assert not sts["spec"]["template"]["spec"].get("schedulingGates")  # the gate goes on pods only
    StatefulSetController(store).sync(NS, "db")
    assert all(p["spec"]["schedulingGates"] == GATE and group_of(p) == "sts-db" for p in pods(store))
    run_gate(store, api, Clock(), [(StatefulSetController(store), "db")], rounds=2)
    assert all(p["status"]["phase"] == "Running" for p in pods(store))


def test_a_job_with_more_completions_than_parallelism_runs_its_last_wave(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="16"))
    job = store.create("batch/v1", "jobs", NS, b.job("train", parallelism=2))
    job["spec"]["completions"] = 5
    store.update("batch/v1", "jobs", NS, "train", job, None, admit=False)
    jobs, gangs, clock = JobController(store), Controller(api, clock=Clock()), Clock()
    for _ in range(8):  # waves of 2, 2 and 1
        jobs.sync(NS, "train")
        gangs.reconcile_once()
        default_scheduler(store)
        kubelet(store, NS)
        finish(store, NS, [p["metadata"]["name"] for p in pods(store) if p["status"].get("phase") == "Running"])
        clock.advance(1)
    jobs.sync(NS, "train")
    assert store.get("batch/v1", "jobs", NS, "train")["status"]["succeeded"] == 5
    assert len(pods(store)) == 5 and all(p["status"]["phase"] == "Succeeded" for p in pods(store))


def test_a_pod_template_already_in_a_gang_keeps_its_gang(store: Store) -> None:
    install_admission(store, "volcano")
    job = b.job("train", parallelism=2)
    job["spec"]["template"].setdefault("metadata", {})["annotations"] = {"scheduling.k8s.io/group-name": "team-group"}
    stored = store.create("batch/v1", "jobs", NS, job)
    template = stored["spec"]["template"]
    assert template["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "team-group"}
    assert "schedulerName" not in template["spec"]
    JobController(store).sync(NS, "train")
    for pod in pods(store):
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "team-group"
        assert group_of(pod) is None


def test_kuberays_own_gang_opt_in_wins(store: Store) -> None:
    install_admission(store, "volcano")
    cluster = example("ray/raycluster-sample.yaml")
    cluster["metadata"].setdefault("labels", {})["ray.io/gang-scheduling-enabled"] = "true"
    before = copy.deepcopy(cluster)
    stored = store.create("ray.io/v1", "rayclusters", NS, cluster)
    for key in ("spec",):
        assert stored[key] == before[key]


def hog(store: Store, node_name: str, cpu: str) -> None:
    """A pod of someone else's, bound to `node_name` (it takes capacity a released pod was promised)."""
    pod = b.pod(f"hog-{node_name}", spec=b.pod_spec(b.container(cpu, "1Gi")), namespace="other")
    pod["spec"]["nodeName"] = node_name
    store.create("v1", "pods", "other", pod)


def gang_pods(store: Store) -> list[dict[str, Any]]:
    return [p for p in pods(store) if group_of(p)]


def test_a_late_newcomer_never_evicts_the_running_members(store: Store, api: Api) -> None:
    """A Job whose podFailurePolicy ignores evictions (DisruptionTarget), scaled up after it ran whole: only
    its late newcomer goes back at its timeout, the members that ran are no loss. (A member lost is:
    test_recovery.py; without such a rule the gang is requeued whole: test_convergence.py.)"""
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job = b.job("train", parallelism=3, spec=b.pod_spec(b.container("2", "1Gi")))
    job["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    store.create("batch/v1", "jobs", NS, job)
    jobs, clock = JobController(store), Clock()
    gangs = Controller(api, clock=clock)
    jobs.sync(NS, "train")
    gangs.reconcile_once()
    default_scheduler(store)
    kubelet(store, NS)
    assert gangs.reconcile_once()["team-a/job-train"].state == "Running"
    running = sorted(p["metadata"]["name"] for p in gang_pods(store))
    clock.advance(3600)  # the gang has run for an hour, far past its 300 s timeout
    scaled = store.get("batch/v1", "jobs", NS, "train")
    scaled["spec"]["parallelism"] = 4
    store.update("batch/v1", "jobs", NS, "train", scaled, None, admit=False)
    jobs.sync(NS, "train")  # a newcomer, admitted gated
    assert gangs.reconcile_once()["team-a/job-train"].state == "Release"  # the newcomer fits: released
    hog(store, "worker1", "2")  # someone else's pod takes what the newcomer was promised
    default_scheduler(store)
    clock.advance(301)
    decision = gangs.reconcile_once()["team-a/job-train"]
    assert decision.state == "TimedOut" and not decision.whole_gang and len(decision.evict) == 1, decision
    still = {p["metadata"]["name"]: p for p in gang_pods(store)}
    for name in running:  # the running members are untouched
        assert still[name]["status"]["phase"] == "Running" and still[name]["spec"]["nodeName"] == "worker1"
    assert store.get("batch/v1", "jobs", NS, "train")["spec"].get("suspend") is not True


def test_a_timed_out_job_gang_is_suspended_and_resumed_never_failed(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    job = b.job("train", parallelism=3, spec=b.pod_spec(b.container("2", "1Gi")))
    job["spec"]["backoffLimit"] = 0  # one counted failure fails the Job
    store.create("batch/v1", "jobs", NS, job)
    jobs, clock = JobController(store), Clock()
    gangs = Controller(api, clock=clock)
    jobs.sync(NS, "train")
    assert gangs.reconcile_once()["team-a/job-train"].state == "Release"
    hog(store, "worker1", "4")  # a pinned member can no longer bind
    default_scheduler(store)
    clock.advance(301)
    decision = gangs.reconcile_once()["team-a/job-train"]
    assert decision.state == "TimedOut" and decision.whole_gang
    jobs.sync(NS, "train")  # the suspended Job's pods go, not counted as failures
    status = store.get("batch/v1", "jobs", NS, "train")["status"]
    assert gang_pods(store) == [] and status.get("failed", 0) == 0 and "conditions" not in status
    store.delete("v1", "pods", "other", "hog-worker1")
    clock.advance(31)  # the backoff for a first attempt is 30 s
    run_gate(store, api, clock, [(jobs, "train")], rounds=3, gangs=gangs)
    assert len(gang_pods(store)) == 3 and all(p["status"]["phase"] == "Running" for p in gang_pods(store))
    books = gang_status(store, "job-train", NS)
    assert books["state"] == "Running" and "attempts" not in books  # a gang that runs gets its budget back


def test_requeues_stop_at_the_attempt_budget_with_a_visible_status(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    store.create("batch/v1", "jobs", NS, b.job("train", parallelism=3, spec=b.pod_spec(b.container("2", "1Gi"))))
    jobs, clock = JobController(store), Clock()
    gangs = Controller(api, clock=clock, max_attempts=1)
    for _ in range(2):  # released, robbed, timed out; twice
        jobs.sync(NS, "train")
        gangs.reconcile_once()
        hog(store, "worker1", "4")
        default_scheduler(store)
        clock.advance(301)
        gangs.reconcile_once()
        jobs.sync(NS, "train")
        store.delete("v1", "pods", "other", "hog-worker1")
        clock.advance(31)
        gangs.reconcile_once()  # resumes after the first; nothing to resume after the second
    job = store.get("batch/v1", "jobs", NS, "train")
    assert job["spec"]["suspend"] is True  # stays suspended: the user decides
    assert gang_status(store, "job-train", NS)["state"] == "GaveUp"


def test_a_timed_out_bare_pod_group_says_so_once(store: Store, api: Api, apiserver: TestApiServer) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    for index in range(2):
        pod = b.pod(
            f"mpi-{index}",
            labels={"gangkeeper.io/group-name": "mpi"},
            annotations={"gangkeeper.io/group-size": "2", "gangkeeper.io/timeout-seconds": "30"},
            spec=b.pod_spec(b.container("2", "1Gi")),
        )
        store.create("v1", "pods", NS, pod)
    clock = Clock()
    gangs = Controller(api, clock=clock)
    assert gangs.reconcile_once()["team-a/pg-mpi"].state == "Release"
    for _ in range(5):
        clock.advance(31)
        assert gangs.reconcile_once()["team-a/pg-mpi"].state == "TimedOut"
    gangs.recorder.flush()
    events = [e for e in store.list("v1", "events", None)[0] if e["reason"] == "GangTimedOut"]
    assert len(events) == 1


def test_a_gate_on_a_pod_of_no_gang_is_lifted(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    stray = b.pod("stray", namespace=NS)
    stray["spec"]["schedulingGates"] = GATE  # left by a template of an older install, say
    store.create("v1", "pods", NS, stray)
    Controller(api, clock=Clock()).reconcile_once()
    assert not store.get("v1", "pods", NS, "stray")["spec"].get("schedulingGates")


def test_the_gates_of_an_orphaned_gang_are_lifted(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("batch/v1", "jobs", NS, b.job("train", parallelism=3))
    JobController(store).sync(NS, "train")
    assert all(p["spec"]["schedulingGates"] == GATE for p in gang_pods(store))
    store.delete("batch/v1", "jobs", NS, "train")  # orphaned (say, deleted with --cascade=orphan)
    # the garbage collector's orphan finalizer takes the Job off its pods' ownerReferences: they are
    # no one's members now (a pod still naming the deleted Job is the collector's to delete, and waits:
    # tests/fake/test_controller.py test_a_deleted_workloads_gated_pods_are_left_to_the_garbage_collector_...)
    for pod in gang_pods(store):
        pod["metadata"].pop("ownerReferences")
        store.update("v1", "pods", NS, pod["metadata"]["name"], pod, None, admit=False)
    Controller(api, clock=Clock()).reconcile_once()
    assert gang_pods(store) and all(not p["spec"].get("schedulingGates") for p in gang_pods(store))


def spark_pi() -> dict[str, Any]:
    """A driver of 1 core and two executors of 2 cores each."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": NS},
        "spec": {
            "type": "Scala",
            "mode": "cluster",
            "driver": {"cores": 1, "memory": "512m"},
            "executor": {"cores": 2, "memory": "1024m", "instances": 2},
        },
    }


def start_spark_pi(store: Store, api: Api, first_node: dict[str, Any]) -> tuple[Any, Clock, Controller]:
    """spark_pi() submitted on a cluster of `first_node`, under the gate: its driver pod exists."""
    from tests.lifecycle import SparkOperator

    install_admission(store, "gate")
    store.create("v1", "nodes", "", first_node)
    store.create("sparkoperator.k8s.io/v1beta2", "sparkapplications", NS, spark_pi())
    spark, clock = SparkOperator(store), Clock()
    spark.sync(NS, "pi")
    return spark, clock, Controller(api, clock=clock)


def test_a_spark_driver_starts_only_where_its_executors_will_fit_then_they_join(store: Store, api: Api) -> None:
    spark, clock, gangs = start_spark_pi(store, api, node("small", cpu="2", memory="4Gi"))
    decision = gangs.reconcile_once()["team-a/spark-pi"]
    assert decision.state == "WaitingForCapacity"  # the driver alone fits; with its executors it does not
    store.create("v1", "nodes", "", node("big", cpu="8", memory="16Gi"))
    run_gate(store, api, clock, [(spark, "pi")], rounds=4, gangs=gangs)
    started = {p["metadata"]["name"]: p for p in pods(store)}
    assert sorted(started) == ["pi-driver", "pi-exec-1", "pi-exec-2"]
    assert all(p["status"]["phase"] == "Running" for p in started.values())


def test_a_released_drivers_executors_keep_their_capacity_until_they_come(store: Store, api: Api) -> None:
    """Between the driver's release and its executors' creation, another gang must not take their room."""
    spark, clock, gangs = start_spark_pi(store, api, node("only", cpu="6", memory="16Gi"))
    assert gangs.reconcile_once()["team-a/spark-pi"].state == "Release"  # 1 + 2 x 2 cpu fit in 6
    default_scheduler(store)
    kubelet(store, NS)
    # before the driver asks for executors, a Job gang of 2 x 1 cpu arrives: 5 cpu of 6 are spoken for
    store.create("batch/v1", "jobs", NS, b.job("other", parallelism=2, spec=b.pod_spec(b.container("1", "1Gi"))))
    JobController(store).sync(NS, "other")
    assert gangs.reconcile_once()["team-a/job-other"].state == "WaitingForCapacity"
    spark.sync(NS, "pi")  # the driver runs and creates its executors
    run_gate(store, api, clock, [(spark, "pi")], rounds=2, gangs=gangs)
    mine = [p for p in pods(store) if p["metadata"]["name"].startswith("pi-")]
    assert len(mine) == 3 and all(p["status"]["phase"] == "Running" for p in mine)


def test_a_rolling_update_of_a_gang_statefulset_replaces_pods_one_by_one(store: Store, api: Api) -> None:
    from tests.lifecycle import StatefulSetRollout

    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    store.create("apps/v1", "statefulsets", NS, b.statefulset("db", replicas=3))
    rollout, clock = StatefulSetRollout(store), Clock()
    gangs = Controller(api, clock=clock)
    run_gate(store, api, clock, [(rollout, "db")], rounds=2, gangs=gangs)
    assert len(pods(store)) == 3
    sts = store.get("apps/v1", "statefulsets", NS, "db")
    sts["spec"]["template"]["metadata"]["labels"]["version"] = "2"  # kubectl apply of a new image, say
    store.update("apps/v1", "statefulsets", NS, "db", sts, None, admit=False)
    for _ in range(12):
        run_gate(store, api, clock, [(rollout, "db")], rounds=1, gangs=gangs)
        clock.advance(60)
    updated = pods(store)
    assert len(updated) == 3 and all(p["metadata"]["labels"].get("version") == "2" for p in updated)
    assert all(p["status"]["phase"] == "Running" and not p["spec"].get("schedulingGates") for p in updated)


def test_a_rolling_deployment_gang_replaces_its_pods_without_a_deadlock(store: Store, api: Api) -> None:
    from tests.lifecycle import DeploymentController

    warnings = install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": NS, "annotations": {"gangkeeper.io/gang": "true"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "api"}},
            "template": b.template(labels={"app": "api"}),
        },
    }
    store.create("apps/v1", "deployments", NS, deployment)
    assert any("rolling update" in w for w in warnings)
    deployments, clock = DeploymentController(store), Clock()
    gangs = Controller(api, clock=clock)
    run_gate(store, api, clock, [(deployments, "api")] * 3, rounds=2, gangs=gangs)
    assert len(pods(store)) == 3 and all(p["status"]["phase"] == "Running" for p in pods(store))
    changed = store.get("apps/v1", "deployments", NS, "api")
    changed["spec"]["template"]["metadata"]["labels"]["version"] = "2"
    store.update("apps/v1", "deployments", NS, "api", changed, None, admit=False)
    run_gate(store, api, clock, [(deployments, "api")], rounds=12, gangs=gangs)
    live = pods(store)
    assert len(live) == 3 and all(p["metadata"]["labels"].get("version") == "2" for p in live)
    assert all(p["status"]["phase"] == "Running" for p in live)


def test_a_leaderworkerset_group_is_one_gang_released_whole(store: Store, api: Api) -> None:
    from tests.lifecycle import LeaderWorkerSetController

    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    lws = b.lws("serve", size=4, replicas=2, scheduler=None)
    lws["metadata"]["namespace"] = NS
    store.create("leaderworkerset.x-k8s.io/v1", "leaderworkersets", NS, lws)
    controller, clock = LeaderWorkerSetController(store), Clock()
    controller.sync(NS, "serve")
    assert {group_of(p) for p in pods(store)} == {"lws-serve-0", "lws-serve-1"}  # a gang per replica group
    assert all(p["spec"]["schedulingGates"] == GATE for p in pods(store))
    run_gate(store, api, clock, [(controller, "serve")], rounds=2)
    assert len(pods(store)) == 8 and all(p["status"]["phase"] == "Running" for p in pods(store))


@pytest.mark.parametrize("order", ["InOrder", "dependsOn"])
def test_jobset_stages_are_gangs_released_in_the_order_the_jobset_creates_them(
    store: Store, api: Api, order: str
) -> None:
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="16"))
    jobset = example("jobset/paralleljobs.yaml")  # workers (4), then driver (1)
    if order == "InOrder":
        jobset["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    else:
        jobset["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "workers", "status": "Ready"}]
    store.create("jobset.x-k8s.io/v1alpha2", "jobsets", NS, jobset)
    jobsets, jobs, clock = JobSetController(store), JobController(store), Clock()
    gangs = Controller(api, clock=clock)
    for _ in range(4):
        for name in jobsets.sync(NS, "paralleljobs"):
            jobs.sync(NS, name)
        for child in store.list("batch/v1", "jobs", NS)[0]:
            jobs.sync(NS, child["metadata"]["name"])
        gangs.reconcile_once()
        default_scheduler(store)
        kubelet(store, NS)
        clock.advance(1)
    started = pods(store)
    assert len(started) == 5 and all(p["status"]["phase"] == "Running" for p in started)
    assert len({group_of(p) for p in started}) == 2  # one gang per stage


def test_a_trainjob_runtime_with_its_own_pod_group_policy_gets_no_second_group(store: Store) -> None:
    """Kubeflow Trainer with podGroupPolicy marks the JobSet's pod templates for its own PodGroup."""
    install_admission(store, "volcano")
    jobset = example("jobset/paralleljobs.yaml")
    jobset["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "llm",
            "uid": "u",
            "controller": True,
        }
    ]
    for rjob in jobset["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["metadata"] = {"labels": {"scheduling.x-k8s.io/pod-group": "llm"}}
    stored = store.create("jobset.x-k8s.io/v1alpha2", "jobsets", NS, jobset)
    for rjob in stored["spec"]["replicatedJobs"]:
        assert rjob["template"]["spec"]["template"]["metadata"] == {"labels": {"scheduling.x-k8s.io/pod-group": "llm"}}


def test_a_timed_out_trainjob_gang_suspends_the_trainjob_not_its_jobset(store: Store, api: Api) -> None:
    """Kubeflow Trainer keeps the JobSet's suspend in step with its TrainJob's: the TrainJob is suspended."""
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    trainjob = store.create(
        "trainer.kubeflow.org/v1alpha1",
        "trainjobs",
        NS,
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": NS},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        },
    )
    jobset = example("jobset/paralleljobs.yaml")
    jobset["metadata"]["name"] = "llm"
    jobset["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "llm",
            "uid": trainjob["metadata"]["uid"],
            "controller": True,
        }
    ]
    for rjob in jobset["spec"]["replicatedJobs"]:
        rjob["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    store.create("jobset.x-k8s.io/v1alpha2", "jobsets", NS, jobset)
    jobs, clock = JobController(store), Clock()
    for name in JobSetController(store).sync(NS, "llm"):
        jobs.sync(NS, name)
    gangs = Controller(api, clock=clock)
    assert gangs.reconcile_once()["team-a/jobset-llm"].state == "Release"
    hog(store, "worker1", "4")
    default_scheduler(store)
    clock.advance(301)
    assert gangs.reconcile_once()["team-a/jobset-llm"].whole_gang
    assert store.get("trainer.kubeflow.org/v1alpha1", "trainjobs", NS, "llm")["spec"]["suspend"] is True
    assert "suspend" not in store.get("jobset.x-k8s.io/v1alpha2", "jobsets", NS, "llm")["spec"]


def test_gated_pods_of_a_gang_moved_to_another_backend_are_let_go(store: Store, api: Api) -> None:
    install_admission(store, "gate")
    store.create("batch/v1", "jobs", NS, b.job("train", parallelism=3))
    JobController(store).sync(NS, "train")  # three pods, gated
    one = gang_pods(store)[0]["metadata"]["name"]
    store.delete("v1", "pods", NS, one)
    install_admission(store, "volcano")  # the namespace is relabelled gangkeeper.io/backend=volcano
    JobController(store).sync(NS, "train")  # the replacement goes to Volcano
    Controller(api, clock=Clock()).reconcile_once()
    assert not any(p["spec"].get("schedulingGates") for p in gang_pods(store))


def test_a_pod_being_deleted_still_holds_its_node_until_it_is_gone(store: Store, api: Api) -> None:
    """kube-scheduler counts a terminating pod on its node until it is deleted; so does placement."""
    from webhook.controller.decide.pods import PodView

    leaving = b.pod("leaving", spec=b.pod_spec(b.container("6", "1Gi")), namespace="other")
    leaving["spec"]["nodeName"] = "worker1"
    leaving["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    view = PodView.from_api(leaving)
    assert view.terminal and view.holds_node == "worker1"
    install_admission(store, "gate")
    store.create("v1", "nodes", "", node("worker1", cpu="8"))
    store.create("v1", "pods", "other", leaving)
    store.create("batch/v1", "jobs", NS, b.job("train", parallelism=2, spec=b.pod_spec(b.container("2", "1Gi"))))
    JobController(store).sync(NS, "train")
    assert Controller(api, clock=Clock()).reconcile_once()["team-a/job-train"].state == "WaitingForCapacity"
