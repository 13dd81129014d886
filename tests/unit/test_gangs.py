"""Table tests for the gang rules of each workload kind (design.md, "How each workload kind forms a gang")."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests import builders as b
from webhook import gangs, resources
from webhook.gangs.model import Gang


def only_gang(obj: dict) -> Gang:
    plan = gangs.analyze(obj)
    assert not plan.errors, plan.errors
    assert len(plan.gangs) == 1, plan
    return plan.gangs[0]


@pytest.mark.parametrize(
    ("description", "parallelism", "completions", "extra", "size"),
    [
        ("parallel job without completions uses parallelism", 4, None, {}, 4),
        ("completions above parallelism: parallelism bounds the gang", 4, 10, {}, 4),
        ("completions below parallelism: completions bounds the gang", 8, 3, {}, 3),
        ("indexed job follows the same rule", 8, 8, {"completionMode": "Indexed"}, 8),
        ("unset parallelism defaults to one pod", None, None, {}, 1),
    ],
)
def test_job_gang_size(
    description: str, parallelism: int | None, completions: int | None, extra: dict, size: int
) -> None:
    gang = only_gang(b.job(parallelism=parallelism, completions=completions, **extra))
    assert gang.min_member == size, description
    assert gang.name == "job-train"


def test_statefulset_gang_is_its_replicas() -> None:
    gang = only_gang(b.statefulset(replicas=5))
    assert (gang.name, gang.min_member) == ("sts-db", 5)
    assert resources.render(gang.min_resources()) == {"cpu": "5", "memory": "5Gi"}


def test_seed_gang_test_lws_one_leader_three_workers() -> None:
    """Seed scenario 1: `gang-test`, 1 leader + 3 workers of 100m/128Mi, minMember 4."""
    gang = only_gang(b.lws("gang-test", size=4))
    assert (gang.name, gang.min_member, gang.total_members) == ("lws-gang-test-0", 4, 4)
    assert resources.render(gang.min_resources()) == {"cpu": "400m", "memory": "512Mi"}


def test_seed_gang_constrained_lws_needs_sixteen_cpus() -> None:
    """Seed scenario 2: `gang-constrained`, four pods of 4 CPU and 1Gi; the whole gang needs 16 CPU."""
    gang = only_gang(b.lws("gang-constrained", size=4, cpu="4", memory="1Gi"))
    assert gang.min_member == 4
    assert resources.render(gang.min_resources()) == {"cpu": "16", "memory": "4Gi"}


def test_seed_eight_replica_training_job_of_one_gpu_each() -> None:
    """Seed: the 8-replica training job, one GPU each: all 8 or none."""
    spec = b.pod_spec(
        b.container(
            "2", "8Gi", resources={"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1"}}
        )
    )
    gang = only_gang(b.job("training-job", parallelism=8, completions=8, spec=spec))
    assert gang.min_member == 8
    assert resources.render(gang.min_resources()) == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}


@pytest.mark.parametrize(
    ("policy", "said"),
    [(None, "RecreateGroupOnPodRestart"), ("RecreateGroupAfterStart", "RecreateGroupAfterStart"), ("None", "")],
)
def test_an_lws_that_recreates_its_groups_whole_says_so_on_each_gang(policy: str | None, said: str) -> None:
    """Its own restart policy (the CRD's default RecreateGroupOnPodRestart) is the group's recovery:
    gangkeeper says it on the Gang and does not fight it (issue 78 item 7b)."""
    obj = b.lws("vllm", size=2, replicas=2)
    if policy is not None:
        obj["spec"]["leaderWorkerTemplate"]["restartPolicy"] = policy
    plan = gangs.analyze(obj)
    assert len(plan.gangs) == 2
    for gang in plan.gangs:
        assert (said in gang.restarts_whole) if said else gang.restarts_whole == "", gang.restarts_whole


def test_lws_has_one_gang_per_replica_group() -> None:
    plan = gangs.analyze(b.lws("vllm", size=2, replicas=3))
    assert [(g.name, g.min_member, g.id.replica_key) for g in plan.gangs] == [
        ("lws-vllm-0", 2, "0"),
        ("lws-vllm-1", 2, "1"),
        ("lws-vllm-2", 2, "2"),
    ]
    assert {g.id.native_workload for g in plan.gangs} == {"lws-vllm"}


def test_lws_leader_ready_gang_is_the_leader_alone() -> None:
    plan = gangs.analyze(b.lws("lr", size=4, startup_policy="LeaderReady"))
    assert [g.min_member for g in plan.gangs] == [1]
    assert any("LeaderReady" in w for w in plan.warnings)


def test_lws_exclusive_topology_gang_is_the_leader_alone() -> None:
    """Workers of an exclusive-topology group are created after the leader is scheduled (the real tier's
    test_lws_exclusive_placement_starts deadlocked on the whole group's gang)."""
    obj = b.lws("ex", size=4)
    obj["metadata"]["annotations"] = {"leaderworkerset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"}
    plan = gangs.analyze(obj)
    assert [g.min_member for g in plan.gangs] == [1]
    assert any("exclusive-topology" in w and len(w) <= 120 for w in plan.warnings)


@pytest.mark.parametrize(
    ("value", "accepted"),
    [("1", True), ("3", True), ("4", True), ("0", False), ("5", False), ("-2", False), ("four", False), ("", False)],
)
def test_min_member_override_within_one_and_members(value: str, accepted: bool) -> None:
    plan = gangs.analyze(b.job(parallelism=4, annotations={"gangkeeper.io/min-member": value}))
    if accepted:
        assert not plan.errors and plan.gangs[0].min_member == int(value)
    else:
        assert [e.path for e in plan.errors] == ["metadata.annotations[gangkeeper.io/min-member]"]
        assert "between 1 and 4, the Job's parallelism" in str(plan.errors[0])


def test_min_member_error_reads_like_the_api_server() -> None:
    plan = gangs.analyze(b.job(parallelism=4, annotations={"gangkeeper.io/min-member": "10"}))
    assert str(plan.errors[0]) == (
        'metadata.annotations[gangkeeper.io/min-member]: Invalid value: "10": '
        "must be between 1 and 4, the Job's parallelism"
    )


def test_smaller_min_member_sums_only_that_many_members() -> None:
    gang = only_gang(b.job(parallelism=4, annotations={"gangkeeper.io/min-member": "2"}))
    assert resources.render(gang.min_resources()) == {"cpu": "2", "memory": "2Gi"}


def test_effective_requests_count_init_containers_sidecars_and_overhead() -> None:
    spec = b.pod_spec(
        b.container("1", "1Gi"),
        initContainers=[
            b.container("3", "256Mi", name="migrate"),  # init peak 3 cpu alone
            b.container("500m", "512Mi", name="proxy", restartPolicy="Always"),  # sidecar runs beside all
            b.container("2", "1Gi", name="warm"),  # 2 + 0.5 sidecar = 2.5 cpu
        ],
        overhead={"cpu": "250m", "memory": "64Mi"},
    )
    requests = resources.pod_requests(spec)
    # cpu: max(1 + 0.5, 3, 2.5) = 3, + 0.25 overhead; memory: max(1Gi + 512Mi, 256Mi, 1.5Gi) + 64Mi
    assert resources.render(requests) == {"cpu": "3250m", "memory": "1600Mi"}


def test_limits_stand_in_for_missing_requests() -> None:
    spec = b.pod_spec({"name": "a", "image": "x", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}})
    assert resources.pod_requests(spec) == {"cpu": Decimal(2), "nvidia.com/gpu": Decimal(1)}


def test_bad_quantity_is_a_field_error_not_a_crash() -> None:
    plan = gangs.analyze(b.job(spec=b.pod_spec(b.container(cpu="lots"))))
    assert plan.errors and "spec.template.spec.containers" in plan.errors[0].path


def test_missing_requests_are_a_warning() -> None:
    plan = gangs.analyze(b.job(spec=b.pod_spec(b.container(cpu=None, memory=None))))
    assert not plan.errors
    assert plan.warnings == [
        "gang job-train: member pods request no cpu or memory; minResources is incomplete, set resources.requests"
    ]


def test_bare_pods_form_a_gang_by_label_and_size_annotation() -> None:
    pod = b.pod(labels={"gangkeeper.io/group-name": "mpi"}, annotations={"gangkeeper.io/group-size": "3"})
    plan = gangs.analyze(pod)
    assert plan.pod_gang is not None and plan.pod_gang.name == "pg-mpi"
    assert plan.gangs[0].min_member == 3


@pytest.mark.parametrize("size", [None, "0", "x"])
def test_bare_pod_group_needs_a_valid_size(size: str | None) -> None:
    annotations = {"gangkeeper.io/group-size": size} if size is not None else None
    plan = gangs.analyze(b.pod(labels={"gangkeeper.io/group-name": "mpi"}, annotations=annotations))
    assert plan.errors and plan.errors[0].path == "metadata.annotations[gangkeeper.io/group-size]"


@pytest.mark.parametrize(
    ("workload", "pod"),
    [
        (b.job("train"), b.pod(labels={"batch.kubernetes.io/job-name": "train"}, owner=("batch/v1", "Job", "train"))),
        (
            b.statefulset("db"),
            b.pod(  # a StatefulSet's pods join through the stamp their template carries
                "db-0",
                labels={"apps.kubernetes.io/pod-index": "0", "gangkeeper.io/group": "sts-db"},
                annotations={"gangkeeper.io/workload": "StatefulSet/db"},
                owner=("apps/v1", "StatefulSet", "db"),
            ),
        ),
        (
            b.lws("gang-test"),
            b.pod(
                "gang-test-0",
                labels={
                    "leaderworkerset.sigs.k8s.io/name": "gang-test",
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                },
                owner=("apps/v1", "StatefulSet", "gang-test"),
            ),
        ),
    ],
    ids=["job", "statefulset", "lws"],
)
def test_pod_and_workload_agree_on_the_gang(workload: dict, pod: dict) -> None:
    assert gangs.analyze(pod).pod_gang == gangs.analyze(workload).gangs[0].id


def test_long_names_fit_a_label_value_and_stay_distinct() -> None:
    first, second = (only_gang(b.job("a" * 62 + suffix)).name for suffix in ("x", "y"))
    assert len(first) <= 63 and len(second) <= 63 and first != second
    assert only_gang(b.job("a" * 62 + "x")).name == first  # deterministic


def test_same_name_different_kinds_get_different_gangs() -> None:
    assert only_gang(b.job("x")).name != only_gang(b.statefulset("x")).name


@pytest.mark.parametrize("namespace", ["kube-system", "gangkeeper-system"])
def test_system_namespaces_are_never_managed(namespace: str) -> None:
    job = b.job()
    job["metadata"]["namespace"] = namespace
    assert gangs.analyze(job).skip == f"namespace {namespace} is never managed"


def test_skip_label_opts_an_object_out() -> None:
    job = b.job()
    job["metadata"]["labels"] = {"gangkeeper.io/skip": "true"}
    assert gangs.analyze(job).skip == "opted out with label gangkeeper.io/skip"


def test_a_spark_gang_is_its_driver_with_the_executors_resources_counted() -> None:
    """Only a running driver asks for executors: the gang waits for the driver alone."""
    app = {
        "apiVersion": "sparkoperator.k8s.io/v1beta2",
        "kind": "SparkApplication",
        "metadata": {"name": "pi", "namespace": "team-a"},
        "spec": {
            "type": "Scala",
            "driver": {"cores": 1, "memory": "512m"},
            "executor": {"cores": 2, "memory": "1g", "instances": 3},
        },
    }
    gang = only_gang(app)
    assert gang.min_member == 1 and [m.count for m in gang.later] == [3]
    assert resources.render(gang.min_resources())["cpu"] == "7"  # 1 driver core + 3 x 2 executor cores


def test_a_jobset_replicated_job_with_depends_on_is_a_gang_of_its_own() -> None:
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pipeline", "namespace": "team-a"},
        "spec": {
            "replicatedJobs": [
                {"name": "init", "template": {"spec": {"parallelism": 2, "template": b.template()}}},
                {
                    "name": "train",
                    "dependsOn": [{"name": "init", "status": "Complete"}],
                    "template": {"spec": {"parallelism": 4, "template": b.template()}},
                },
                {"name": "sidecar", "template": {"spec": {"parallelism": 1, "template": b.template()}}},
            ]
        },
    }
    sizes = {g.name: g.min_member for g in gangs.analyze(jobset).gangs}
    # init and sidecar start together; train is created after init completes (jobset depends_on.go)
    assert sorted(sizes.values()) == [3, 4] and sizes["jobset-pipeline"] == 3


def test_pod_level_requests_are_the_pods_requests() -> None:
    """KEP-2837: requests in spec.resources are the pod's, whatever its containers say."""
    spec = {"resources": {"requests": {"cpu": "4", "memory": "8Gi"}}, "containers": [b.container("1", "1Gi")]}
    assert resources.render(resources.pod_requests(spec)) == {"cpu": "4", "memory": "8Gi"}


@pytest.mark.parametrize(
    ("status", "size"),
    [
        ({}, 2),
        ({"succeeded": 1}, 2),  # 3 - 1 = 2 still to run
        ({"succeeded": 1, "failedIndexes": "1"}, 1),  # index 1 failed for good: only index 2 is left
        ({"failedIndexes": "0-1"}, 1),
        ({"failedIndexes": "garbage"}, 2),  # unreadable: counted as none
    ],
)
def test_an_indexed_jobs_failed_indexes_are_not_waited_for(status: dict[str, object], size: int) -> None:
    from webhook.gangs.batch import job_size

    spec = {"parallelism": 2, "completions": 3, "completionMode": "Indexed", "backoffLimitPerIndex": 0}
    assert job_size(spec, status)[0] == size
