"""Kueue beside gangkeeper, for real (tests/realcluster/operators.py runs Kueue as released): Kueue
admits a Job by its queue's quota (its webhook suspends the Job, its controller resumes it once the
Workload is admitted) and gangkeeper starts the admitted Job's pods whole, with no suspend and resume
between the two. A Job that does not fit the quota waits, suspended, with no pods for gangkeeper to
hold, and starts whole when the quota frees. Every assertion reads what the cluster reports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.realcluster import operators, workloads
from tests.realcluster.stack import Stack, bound, running, wait_until
from tests.test_real_seeds import assert_started_together

pytestmark = pytest.mark.cluster


@pytest.fixture
def kueue(stack: Stack) -> Iterator[operators.Operator]:
    operator = operators.kueue()
    if operator.missing():
        pytest.skip(operator.missing())
    operator.install(stack.plane)
    yield operator
    operator.uninstall(stack.plane)


def queues(namespace: str, cpu: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{namespace}"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": f"cq-{namespace}"},
        },
    ]


def queued_job(name: str, namespace: str, size: int, cpu: str, run_for: str | None = None) -> dict[str, Any]:
    job = workloads.job(
        name, namespace, size, cpu, pod_annotations={"gangkeeper.test/run-for": run_for} if run_for else None
    )
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    return job


def job_pods(stack: Stack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.pods(namespace, selector=f"batch.kubernetes.io/job-name={job}")


def test_kueue_admits_by_quota_and_gangkeeper_starts_each_job_whole(stack: Stack, kueue: operators.Operator) -> None:
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace("kueue-gate", "gate")
    stack.plane.apply(queues(namespace, "8"))
    stack.plane.apply(queued_job("first", namespace, 4, "1", run_for="30s"))
    first = wait_until(
        lambda: (p := job_pods(stack, namespace, "first")) and len(running(p)) == 4 and p,
        "the first Job admitted by Kueue and Running whole",
        120,
    )
    assert_started_together(first, 4)
    assert stack.plane.get("gang", "job-first", namespace=namespace)["spec"]["minMember"] == 4
    # 6 CPUs more than the quota has left: Kueue keeps it suspended; gangkeeper has no pod to hold
    stack.plane.apply(queued_job("second", namespace, 6, "1"))
    wait_until(
        lambda: (j := stack.plane.get("job", "second", namespace=namespace)) and j["spec"].get("suspend") is True,
        "the second Job suspended by Kueue",
        60,
    )
    assert not job_pods(stack, namespace, "second")
    # the first ends; Kueue admits the second, and gangkeeper starts it whole
    second = wait_until(
        lambda: (p := job_pods(stack, namespace, "second")) and len(running(p)) == 6 and p,
        "the second Job admitted once the quota freed, Running whole",
        180,
    )
    assert_started_together(second, 6)
    assert not bound(job_pods(stack, namespace, "first")) or all(
        p["status"]["phase"] == "Succeeded" for p in job_pods(stack, namespace, "first")
    )
    events = str(stack.plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)
    assert "GangRequeued" not in events and "GangTimedOut" not in events  # no suspend and resume by gangkeeper
    for name in ("first", "second"):
        workload_of = [
            w
            for w in stack.plane.get("workloads.kueue.x-k8s.io", namespace=namespace)
            if w["metadata"]["ownerReferences"][0]["name"] == name
        ]
        assert workload_of and any(
            c["type"] == "Admitted" and c["status"] == "True" for c in workload_of[0]["status"]["conditions"]
        )
