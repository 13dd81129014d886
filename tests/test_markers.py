"""Pods another controller already put in a gang are left untouched, with the reason stated."""

from __future__ import annotations

import pytest

from tests import builders as b
from webhook.admission.decide import admit
from webhook.backends import Volcano

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
            "already in a gang (spec.workloadRef)",
        ),
        (
            b.pod(labels=JOB_POD, spec=b.pod_spec(schedulingGroup={"podGroupName": "g"})),
            "already in a gang (spec.schedulingGroup)",
        ),
        (b.pod(labels={**JOB_POD, "pod-group-name": "kai-pg"}), "already in a gang (KAI pod-group-name)"),
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
    ],
    ids=["spark-batch-scheduler", "kuberay-batch-scheduler"],
)
def test_workload_whose_operator_makes_the_gang_is_untouched(workload: dict, reason: str) -> None:
    outcome = admit(workload, "CREATE", Volcano())
    assert outcome.allowed and outcome.reason == reason and not outcome.patch


def test_operator_group_name_after_our_stamp_wins() -> None:
    """LWS with schedulerProvider sets its own group name on a pod our template already marked."""
    pod = b.pod(
        labels={
            "gangkeeper.io/group": "lws-x-0",
            "leaderworkerset.sigs.k8s.io/name": "x",
            "leaderworkerset.sigs.k8s.io/group-index": "0",
        },
        annotations={"scheduling.k8s.io/group-name": "x-0-abcde"},
    )
    outcome = admit(pod, "CREATE", Volcano())
    assert outcome.reason.startswith("already in a gang") and not outcome.patch
