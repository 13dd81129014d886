"""Replica counts are tenant input: a workload above --max-gang-pods is refused before anything
proportional to its counts is built, and the controller leaves it with the reason."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests import builders as b
from tests.apiserver import TestApiServer
from tests.cluster import Clock, add_job, add_job_pods, node
from tests.schemas import validate
from webhook.admission.bootstrap import WebhookSettings, build_resolver
from webhook.admission.handler import Handler
from webhook.controller.run.reconciler import Controller
from webhook.gangs import analyze, limits
from webhook.kube import Api
from webhook.serving.limits import usable_cpus

SPARK_PI = Path(__file__).resolve().parents[3] / "shared" / "examples" / "spark" / "spark-pi.yaml"


@pytest.fixture
def limit() -> Iterator[None]:
    yield
    limits.set_max_gang_pods(limits.DEFAULT_MAX_GANG_PODS)


def review_response(obj: dict) -> dict:
    status, document = Handler(build_resolver(WebhookSettings(backend="volcano"))).handle(
        "mutate", json.dumps(b.review(obj)).encode()
    )
    assert status == 200
    response: dict = document["response"]
    return response


def test_a_million_leaderworkerset_groups_are_refused_naming_replicas() -> None:
    lws = b.lws(size=4, replicas=1_000_000)  # the CRD's maximum, and schema-valid
    validate(lws)

    plan = analyze(lws)
    response = review_response(lws)

    assert plan.gangs == []
    assert response["allowed"] is False and response["status"]["code"] == 422
    message = response["status"]["message"]
    assert 'spec.replicas: Invalid value: "1000000": makes 1000000 groups and 4000000 pods' in message
    assert "bound of 10000 groups and 100000 pods per LeaderWorkerSet: split it" in message


def test_a_serving_leaderworkerset_of_many_small_groups_is_capped_per_group() -> None:
    """Each group is a gang of its own: 5,001 groups of 2 pods is 10,002 pods, none of its gangs above
    the per-gang limit, and is admitted; one group larger than the limit is refused naming the size."""
    many = b.lws(size=2, replicas=5_001)
    assert len(analyze(many).gangs) == 5_001
    assert review_response(many)["allowed"] is True
    huge = b.lws(size=10_001, replicas=1)
    message = review_response(huge)["status"]["message"]
    assert 'spec.leaderWorkerTemplate.size: Invalid value: "10001": makes 10001 pods' in message
    assert "limit of 10000 pods per gang" in message


def test_two_billion_spark_executors_are_refused_naming_the_executor() -> None:
    app = yaml.safe_load(SPARK_PI.read_text())
    app["spec"]["executor"]["instances"] = 2_147_483_647
    validate(app)

    response = review_response(app)

    assert response["allowed"] is False
    message = response["status"]["message"]
    assert 'spec.executor.instances: Invalid value: "2147483647": makes 2147483648 pods' in message


@pytest.mark.parametrize(
    ("workload", "field"),
    [
        (b.job(parallelism=1_000_000), 'spec.parallelism: Invalid value: "1000000"'),
        (b.job(parallelism=20_000, completions=15_000), 'spec.completions: Invalid value: "15000"'),
        (b.statefulset(replicas=20_000), 'spec.replicas: Invalid value: "20000"'),
    ],
)
def test_an_oversized_gang_is_refused_naming_the_count_a_tenant_changes(workload: dict, field: str) -> None:
    """The field that sets the number of pods, not the template, and the cluster's limit, not the
    operator's flag (which a tenant cannot set)."""
    message = review_response(workload)["status"]["message"]
    assert field in message and "above this cluster's limit of 10000 pods per gang" in message, message
    assert "--max-gang-pods" not in message


def test_a_pod_group_size_above_the_limit_is_refused_on_the_annotation() -> None:
    pod = b.pod(labels={"gangkeeper.io/group-name": "g"}, annotations={"gangkeeper.io/group-size": "10001"})
    response = review_response(pod)
    assert response["allowed"] is False
    assert 'metadata.annotations[gangkeeper.io/group-size]: Invalid value: "10001"' in response["status"]["message"]


@pytest.mark.usefixtures("limit")
def test_the_limit_is_inclusive_and_configurable() -> None:
    limits.set_max_gang_pods(8)
    at_limit, above = b.job(parallelism=8), b.job(parallelism=9)

    allowed = review_response(at_limit)
    refused = review_response(above)

    assert allowed["allowed"] and allowed.get("patch")
    validate(b.patched(at_limit, allowed))
    assert refused["allowed"] is False
    message = refused["status"]["message"]
    assert (
        'spec.parallelism: Invalid value: "9": makes 9 pods, above this cluster\'s limit of 8 pods per gang' in message
    )


def test_the_flag_sets_the_limit_and_refuses_zero(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import build_parser

    assert build_parser().parse_args(["controller", "--max-gang-pods", "50"]).max_gang_pods == 50
    with pytest.raises(SystemExit):
        build_parser().parse_args(["controller", "--max-gang-pods", "0"])
    assert "must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a Gang records each released pod: its status has room for 10,000
        build_parser().parse_args(["controller", "--max-gang-pods", "10001"])
    assert "must be at most 10000" in capsys.readouterr().err


@pytest.mark.usefixtures("limit")
def test_the_controller_leaves_a_gang_grown_past_the_limit_with_the_reason(apiserver: TestApiServer, api: Api) -> None:
    """Pods admitted while the Job was small; its parallelism raised past the limit afterwards."""
    limits.set_max_gang_pods(8)
    apiserver.store.create("v1", "nodes", "", node("worker1", cpu="64"))
    job = add_job(apiserver.store, parallelism=4, cpu="1")
    add_job_pods(apiserver.store, job)
    apiserver.store.patch("batch/v1", "jobs", "team-a", "train", {"spec": {"parallelism": 2_147_483_647}})

    decision = Controller(api, clock=Clock()).reconcile_once()["team-a/job-train"]

    assert decision.state == "Unknown"
    assert "makes 2147483647 pods, above this cluster's limit of 8 pods per gang" in decision.message


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"cpu.max": "200000 100000\n"}, 2),  # a pod limited to 2 CPUs
        ({"cpu.max": "150000 100000\n"}, 2),  # 1.5 CPUs: rounded up
        ({"cpu.max": "max 100000\n"}, None),  # no limit: the affinity mask
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),  # cgroup v1
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
)
def test_the_default_worker_count_follows_the_pods_cpu_limit_not_the_nodes(
    tmp_path: Path, files: dict[str, str], expected: int | None
) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert usable_cpus(tmp_path) == (expected or len(os.sched_getaffinity(0)))
