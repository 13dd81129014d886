"""Pods as the real operators create them join the same gang the workload-level mutation names."""

from __future__ import annotations

import pytest

from tests import builders as b
from tests.schemas import EXAMPLES, load_all, validate
from webhook import gangs
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.decide import admit
from webhook.backends import make


def first(example: str) -> dict:
    return load_all(EXAMPLES / example)[0]


CASES = [
    (
        "jobset/pytorch-mnist.yaml",
        b.pod(
            "pytorch-pytorch-0-0-x",
            labels={
                "jobset.sigs.k8s.io/jobset-name": "pytorch",
                "jobset.sigs.k8s.io/replicatedjob-name": "pytorch",
                "batch.kubernetes.io/job-name": "pytorch-pytorch-0",
            },
            owner=("batch/v1", "Job", "pytorch-pytorch-0"),
        ),
    ),
    (
        "kubeflow/pytorchjob-simple.yaml",
        b.pod(
            "pytorch-simple-worker-0",
            labels={"training.kubeflow.org/job-name": "pytorch-simple", "training.kubeflow.org/replica-type": "worker"},
            owner=("kubeflow.org/v1", "PyTorchJob", "pytorch-simple"),
        ),
    ),
    (
        "kubeflow/tfjob-simple.yaml",
        b.pod(
            "tfjob-simple-worker-1",
            labels={"training.kubeflow.org/job-name": "tfjob-simple"},
            owner=("kubeflow.org/v1", "TFJob", "tfjob-simple"),
        ),
    ),
    (
        "kubeflow/mpijob-tensorflow-mnist.yaml",
        b.pod(
            "tensorflow-mnist-launcher",
            labels={"training.kubeflow.org/job-name": "tensorflow-mnist", "training.kubeflow.org/job-role": "launcher"},
            owner=("kubeflow.org/v1", "MPIJob", "tensorflow-mnist"),
        ),
    ),
    (
        "ray/raycluster-sample.yaml",
        b.pod(
            "raycluster-kuberay-head-abc",
            labels={"ray.io/cluster": "raycluster-kuberay", "ray.io/group": "headgroup", "ray.io/node-type": "head"},
            owner=("ray.io/v1", "RayCluster", "raycluster-kuberay"),
        ),
    ),
    (
        "ray/rayjob-pytorch-mnist.yaml",
        b.pod(
            "rayjob-pytorch-mnist-raycluster-x-head",
            labels={
                "ray.io/cluster": "rayjob-pytorch-mnist-raycluster-x",
                "ray.io/originated-from-crd": "RayJob",
                "ray.io/originated-from-cr-name": "rayjob-pytorch-mnist",
            },
            owner=("ray.io/v1", "RayCluster", "rayjob-pytorch-mnist-raycluster-x"),
        ),
    ),
    (
        "spark/spark-pi.yaml",
        b.pod(
            "spark-pi-driver",
            labels={
                "sparkoperator.k8s.io/app-name": "spark-pi",
                "spark-role": "driver",
                "spark-app-selector": "spark-0001",
            },
        ),
    ),
    (
        "lws/vllm-gpu.yaml",
        b.pod(
            "vllm-0",
            labels={
                "leaderworkerset.sigs.k8s.io/name": "vllm",
                "leaderworkerset.sigs.k8s.io/group-index": "0",
                "leaderworkerset.sigs.k8s.io/worker-index": "0",
            },
            owner=("apps/v1", "StatefulSet", "vllm"),
        ),
    ),
]


@pytest.mark.parametrize(("example", "pod"), CASES, ids=[c[0] for c in CASES])
def test_operator_pod_joins_the_workload_gang(example: str, pod: dict) -> None:
    workload_gangs = {g.id.name for g in gangs.analyze(first(example)).gangs}
    member = gangs.analyze(pod).pod_gang
    assert member is not None and member.name in workload_gangs


@pytest.mark.parametrize("backend", ["volcano", "coscheduling", "gate", "native"])
@pytest.mark.parametrize(("example", "pod"), CASES, ids=[c[0] for c in CASES])
def test_operator_pod_mutation_is_valid_and_idempotent(example: str, pod: dict, backend: str) -> None:
    for version in ("1.35", "1.36", "1.37"):
        chosen = make(backend, kubernetes_version=version)
        outcome = admit(pod, "CREATE", chosen, "team-a")
        assert outcome.mutated is not None
        validate(outcome.mutated, version)
        assert admit(outcome.mutated, "CREATE", chosen, "team-a").patch == []


def test_cronjob_children_are_gangs_of_their_own() -> None:
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {
            "schedule": "0 2 * * *",
            "jobTemplate": {"spec": {"parallelism": 3, "template": b.template(b.pod_spec(restartPolicy="Never"))}},
        },
    }
    outcome = admit(cronjob, "CREATE", make("volcano"), "team-a")
    assert outcome.mutated is not None and outcome.group_objects == []
    validate(outcome.mutated)
    template = outcome.mutated["spec"]["jobTemplate"]["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert "gangkeeper.io/group" not in (template.get("metadata") or {}).get("labels", {})
    child = b.job("nightly-29000000", parallelism=3)
    assert gangs.analyze(child).gangs[0].name == "job-nightly-29000000"


def test_deployment_needs_its_own_opt_in() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": b.template(labels={"app": "web"}),
        },
    }
    left = admit(deployment, "CREATE", make("volcano"), "team-a")
    assert left.allowed and "gangkeeper.io/gang" in left.reason and not left.patch
    deployment["metadata"]["annotations"] = {"gangkeeper.io/gang": "true"}
    opted = admit(deployment, "CREATE", make("volcano"), "team-a")
    assert opted.mutated is not None and opted.group_objects[0]["spec"]["minMember"] == 3
    validate(opted.mutated)
    assert any("spec.strategy.type: Recreate" in w for w in opted.warnings)
    pod = b.pod(
        "web-abc-123",
        labels=opted.mutated["spec"]["template"]["metadata"]["labels"],
        annotations=opted.mutated["spec"]["template"]["metadata"]["annotations"],
        owner=("apps/v1", "ReplicaSet", "web-abc"),
    )
    pod["spec"]["schedulerName"] = "volcano"
    assert gangs.analyze(pod).pod_gang == gangs.analyze(deployment).gangs[0].id
    # stamped by its template already: only Karpenter's do-not-disrupt is added, on the pod
    assert [op["path"] for op in admit(pod, "CREATE", make("volcano"), "team-a").patch] == [
        "/metadata/annotations/karpenter.sh~1do-not-disrupt"
    ]


def test_jobset_in_order_has_one_gang_per_replicated_job() -> None:
    jobset = first("jobset/paralleljobs.yaml")
    jobset["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    plan = gangs.analyze(jobset)
    assert [(g.name, g.min_member) for g in plan.gangs] == [
        ("jobset-paralleljobs-workers", 4),
        ("jobset-paralleljobs-driver", 1),
    ]
    outcome = admit(jobset, "CREATE", make("native", kubernetes_version="1.36"), "team-a")
    workload = outcome.group_objects[0]
    assert [t["name"] for t in workload["spec"]["podGroupTemplates"]] == ["workers", "driver"]
    for obj in outcome.group_objects:
        validate(obj, "1.36")


def test_pytorch_elastic_min_replicas_and_min_available() -> None:
    """As training-operator's PodGroup: every replica (it starts them all), elastic or not; minAvailable
    when the job's scheduling policy sets it."""
    job = first("kubeflow/pytorchjob-simple.yaml")
    replicas = sum(rs.get("replicas", 1) for rs in job["spec"]["pytorchReplicaSpecs"].values())
    job["spec"]["elasticPolicy"] = {"minReplicas": 1}
    assert gangs.analyze(job).gangs[0].min_member == replicas
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2, "queue": "q"}}
    gang = gangs.analyze(job).gangs[0]
    assert (gang.min_member, gang.queue) == (2, "q")


def test_mpi_launcher_waiting_for_workers_is_not_counted() -> None:
    job = first("kubeflow/mpijob-tensorflow-mnist.yaml")
    job["spec"]["launcherCreationPolicy"] = "WaitForWorkersReady"
    assert gangs.analyze(job).gangs[0].min_member == 2


def test_spark_dynamic_allocation_uses_min_executors() -> None:
    app = first("spark/spark-pi.yaml")
    app["spec"]["dynamicAllocation"] = {"enabled": True, "minExecutors": 3, "maxExecutors": 10}
    gang = gangs.analyze(app).gangs[0]
    # the driver is the gang; the minimum executors are counted as members to come
    assert gang.min_member == 1 and [m.count for m in gang.later] == [3]


@pytest.mark.parametrize(("example", "pod"), CASES, ids=[c[0] for c in CASES])
def test_operator_pod_admission_review_over_the_handler(example: str, pod: dict) -> None:
    """The same pods as AdmissionReviews through the webhook's handler: patched, valid, same gang."""
    import json

    from webhook.admission.handler import Handler

    status, document = Handler(build_resolver(WebhookSettings(backend="volcano"))).handle(
        "mutate", json.dumps(b.review(pod, uid="u")).encode()
    )
    assert status == 200 and document["response"]["allowed"] is True
    patched = b.patched(pod, document["response"])
    validate(patched)
    workload_gangs = {g.id.name for g in gangs.analyze(first(example)).gangs}
    assert patched["metadata"]["annotations"]["scheduling.k8s.io/group-name"] in workload_gangs
