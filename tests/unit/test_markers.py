"""Pods another controller already put in a gang are left untouched, with the reason stated."""

from __future__ import annotations

import json

import pytest

from tests import builders as b
from tests.schemas import validate
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.decide import admit
from webhook.admission.handler import Handler
from webhook.backends import Native, Volcano

JOB_POD = {"batch.kubernetes.io/job-name": "train"}


@pytest.mark.parametrize(
    ("pod", "reason"),
    [
        (
            b.pod(labels=JOB_POD, annotations={"scheduling.k8s.io/group-name": "pg-1"}),
            "already in a gang (annotation scheduling.k8s.io/group-name=pg-1)",
        ),
        (
            b.pod(labels={**JOB_POD, "scheduling.x-k8s.io/pod-group": "pg-2"}),
            "already in a gang (label scheduling.x-k8s.io/pod-group=pg-2)",
        ),
        (
            b.pod(labels=JOB_POD, spec=b.pod_spec(workloadRef={"name": "w", "podGroup": "g"})),
            "already in a gang (spec.workloadRef=w)",
        ),
        (
            b.pod(labels=JOB_POD, spec=b.pod_spec(schedulingGroup={"podGroupName": "g"})),
            "already in a gang (spec.schedulingGroup=g)",
        ),
        (b.pod(labels={**JOB_POD, "pod-group-name": "kai-pg"}), "already in a gang (KAI pod-group-name=kai-pg)"),
    ],
    ids=["volcano", "coscheduling", "native-1.35", "native-1.36", "kai"],
)
def test_pod_already_in_a_gang_is_untouched(pod: dict, reason: str) -> None:
    outcome = admit(pod, "CREATE", Volcano())
    assert outcome.allowed and outcome.reason == reason
    assert outcome.patch == [] and outcome.mutated is None


@pytest.mark.parametrize(
    ("workload", "reason"),
    [
        (
            {
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "SparkApplication",
                "metadata": {"name": "s"},
                "spec": {"batchScheduler": "volcano", "driver": {}, "executor": {"instances": 2}},
            },
            "the Spark operator makes this gang itself (batchScheduler volcano)",
        ),
        (
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "metadata": {"name": "r", "labels": {"ray.io/scheduler-name": "volcano"}},
                "spec": {"headGroupSpec": {"template": b.template()}},
            },
            "KubeRay makes this gang itself (label ray.io/scheduler-name)",
        ),
        (
            # the old-style Spark sample of Volcano (example/kubecon-2019-china/spark-sample): the user's
            # own PodGroup named on the executors, no batchScheduler
            {
                "apiVersion": "sparkoperator.k8s.io/v1beta2",
                "kind": "SparkApplication",
                "metadata": {"name": "pi"},
                "spec": {
                    "driver": {"schedulerName": "volcano", "cores": 1},
                    "executor": {
                        "schedulerName": "volcano",
                        "instances": 4,
                        "annotations": {"scheduling.k8s.io/group-name": "pi-group"},
                    },
                },
            },
            "spec.executor is already in a gang (annotation scheduling.k8s.io/group-name=pi-group)",
        ),
    ],
    ids=["spark-batch-scheduler", "kuberay-batch-scheduler", "spark-own-podgroup"],
)
def test_workload_whose_operator_makes_the_gang_is_untouched(workload: dict, reason: str) -> None:
    outcome = admit(workload, "CREATE", Volcano())
    assert outcome.allowed and outcome.reason == reason and not outcome.patch


def handle(review: dict) -> dict:
    status, document = Handler(build_resolver(WebhookSettings(backend="volcano"))).handle(
        "mutate", json.dumps(review).encode()
    )
    assert status == 200
    response: dict = document["response"]
    return response


def _stamped_lws_worker() -> dict:
    """A worker pod of LeaderWorkerSet x, group 0, after gangkeeper's first pass stamped it."""
    labels = {"leaderworkerset.sigs.k8s.io/name": "x", "leaderworkerset.sigs.k8s.io/group-index": "0"}
    labels["leaderworkerset.sigs.k8s.io/worker-index"] = "1"
    annotations = {"leaderworkerset.sigs.k8s.io/size": "4"}
    pod = b.pod(
        name="x-0-1", labels=labels, annotations=annotations, owner=("apps/v1", "StatefulSet", "x-0")
    )  # the worker StatefulSet makes it
    stamped = b.patched(pod, handle(b.review(pod)))
    assert stamped["metadata"]["labels"].get("gangkeeper.io/group"), "gangkeeper stamps an LWS worker"
    return stamped


def test_operator_group_name_after_our_stamp_wins() -> None:
    """LWS with `gangSchedulingManagement.schedulerProvider: volcano` names its own PodGroup on a pod
    whose template gangkeeper stamped (lws pkg/schedulerprovider/volcano_provider.go): on reinvocation the
    pod stays in LWS's group and loses gangkeeper's stamp, so no group is split over two PodGroups."""
    pod = _stamped_lws_worker()
    pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "x-0-5d8f9c"

    response = handle(b.review(pod))
    result = b.patched(pod, response)

    assert response["allowed"]
    assert result["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "x-0-5d8f9c"
    assert "gangkeeper.io/group" not in result["metadata"].get("labels", {})
    assert "gangkeeper.io/workload" not in result["metadata"]["annotations"]
    assert all(g["name"] != "gangkeeper.io/gang-gate" for g in result["spec"].get("schedulingGates", []))
    validate(result)


def test_our_own_group_name_on_reinvocation_changes_nothing() -> None:
    once = _stamped_lws_worker()
    meta = once["metadata"]
    assert meta["annotations"]["scheduling.k8s.io/group-name"] == meta["labels"]["gangkeeper.io/group"]

    again = handle(b.review(once))

    assert again["allowed"] and b.patched(once, again) == once
    validate(once)


def test_a_job_with_its_own_scheduling_policy_is_left_to_the_job_controller() -> None:
    """1.37 WorkloadWithJob: a stamped template (schedulingGroup) would make the Job controller ignore
    the user's `spec.scheduling` (k8s pkg/controller/job/job_scheduling_manager.go)."""
    job = b.job(parallelism=4, completions=4, completionMode="Indexed")
    job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    outcome = admit(job, "CREATE", Native("1.37"))
    assert outcome.allowed and outcome.reason.startswith("the Job controller makes this gang itself")
    assert outcome.patch == [] and outcome.group_objects == []


def test_more_native_pod_groups_than_a_workload_holds_are_refused() -> None:
    """A JobSet started InOrder is a gang per replicatedJob, each a pod group of one Workload, which
    holds at most 8 (k8s.io/api scheduling WorkloadMaxPodGroupTemplates)."""
    container = {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
    replicated = [
        {
            "name": f"step{i}",
            "replicas": 1,
            "template": {
                "spec": {"parallelism": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}
            },
        }
        for i in range(9)
    ]
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pipeline", "namespace": "team-a"},
        "spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": replicated},
    }
    validate(jobset)
    for version, key in (("1.35", "podGroups"), ("1.36", "podGroupTemplates"), ("1.37", "podGroupTemplates")):
        outcome = admit(jobset, "CREATE", Native(version))
        assert not outcome.allowed and outcome.code == 422
        assert f"Workload.spec.{key} holds at most 8" in outcome.message, outcome.message
    eight = {**jobset, "spec": {**jobset["spec"], "replicatedJobs": replicated[:8]}}
    assert admit(eight, "CREATE", Native("1.35")).allowed


@pytest.mark.parametrize(
    ("completions", "min_member", "version", "allowed"),
    [
        (3, None, "1.35", False),
        (3, None, "1.36", False),
        (3, None, "1.37", True),  # v1beta1: the controller lowers minCount for the last wave
        (4, None, "1.36", True),  # waves of 2 and 2
        (3, "1", "1.36", True),  # a gang no larger than the last wave
    ],
)
def test_a_job_whose_last_wave_is_smaller_than_an_immutable_native_gang_is_refused(
    completions: int, min_member: str | None, version: str, allowed: bool
) -> None:
    job = b.job(
        parallelism=2,
        completions=completions,
        annotations={"gangkeeper.io/min-member": min_member} if min_member else None,
    )
    outcome = admit(job, "CREATE", Native(version))
    assert outcome.allowed is allowed, outcome.message
    if not allowed:
        assert outcome.code == 422
        assert "spec.completions: its last wave is 1 pods, fewer than the gang's 2" in outcome.message
        assert "gangkeeper.io/min-member to 1" in outcome.message
