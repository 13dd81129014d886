"""A gang is its workload's pods by identity, on the real control plane (tests/realcluster/): a Job rerun
from `kubectl get job -o yaml` (which returns gangkeeper's stamp in the template) gets a gang of its own,
whether the original waits or has completed, and pods that only copy a gang's labels (a second Job's,
a pod that skips the webhooks with `gangkeeper.io/skip`) are never counted in it. The real Job
controller makes the pods; every assertion reads what the cluster reports."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from tests.realcluster import workloads
from tests.realcluster.stack import Stack, gated, running, wait_until

pytestmark = pytest.mark.cluster
JOB_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid", "batch.kubernetes.io/job-name", "job-name")


def rerun_yaml(job: dict[str, Any], name: str) -> dict[str, Any]:
    """What a user applies after `kubectl get job NAME -o yaml`: renamed, with what the API server would
    refuse taken out (its selector and the Job controller's labels, status, uid), gangkeeper's stamp kept."""
    again = copy.deepcopy(job)
    meta = again["metadata"]
    again["metadata"] = {"name": name, "namespace": meta["namespace"], "annotations": meta.get("annotations") or {}}
    again.pop("status", None)
    again["spec"].pop("selector", None)
    again["spec"].pop("suspend", None)
    template_labels = again["spec"]["template"]["metadata"].get("labels") or {}
    for key in JOB_LABELS:
        template_labels.pop(key, None)
    return again


def stamp_of(job: dict[str, Any]) -> tuple[str, str]:
    meta = job["spec"]["template"]["metadata"]
    return meta["labels"].get("gangkeeper.io/group", ""), meta["annotations"].get("gangkeeper.io/workload", "")


def job_pods(stack: Stack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.pods(namespace, selector=f"batch.kubernetes.io/job-name={job}")


def gang(stack: Stack, namespace: str, name: str) -> dict[str, Any] | None:
    found = stack.plane.get("gang", name, namespace=namespace)
    return found if isinstance(found, dict) else None


def test_a_rerun_of_a_waiting_job_gets_its_own_gang_and_copies_join_none(stack: Stack) -> None:
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("membership-rerun", "gate")
    # two pods of 5 CPUs on one node of 8: the gang waits, both pods gated
    stack.plane.apply(workloads.job("train", namespace, 2, "5"))
    wait_until(lambda: len(gated(job_pods(stack, namespace, "train"))) == 2, "train's two pods gated", 60)
    stored = stack.plane.get("job", "train", namespace=namespace)
    assert stamp_of(stored) == ("job-train", "Job/train")

    # the rerun from its YAML, smaller so it fits: its own gang, started whole; train still waits whole
    again = rerun_yaml(stored, "train-again")
    again["spec"]["parallelism"] = again["spec"]["completions"] = 1
    again["spec"]["template"]["spec"]["containers"][0]["resources"] = workloads.container("500m")["resources"]
    result = stack.plane.kubectl("apply", "-f", "-", stdin=__import__("json").dumps(again))
    assert "gets its own gang job-train-again" in result.stderr, result.stderr
    wait_until(lambda: len(running(job_pods(stack, namespace, "train-again"))) == 1, "the rerun Running", 90)
    assert stamp_of(stack.plane.get("job", "train-again", namespace=namespace)) == (
        "job-train-again",
        "Job/train-again",
    )
    (rerun_pod,) = job_pods(stack, namespace, "train-again")
    assert rerun_pod["metadata"]["labels"]["gangkeeper.io/group"] == "job-train-again"
    again_gang = wait_until(lambda: gang(stack, namespace, "job-train-again"), "the rerun's Gang", 60)
    assert again_gang["spec"]["minMember"] == 1

    # a pod that walks past every webhook with train's stamp: counted before, it let one of train's
    # members be released alone into the 6.5 CPUs left (1 of 2 "running", one more needed)
    skipper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "skipper",
            "namespace": namespace,
            "labels": {"gangkeeper.io/group": "job-train", "gangkeeper.io/skip": "true"},
            "annotations": {"gangkeeper.io/workload": "Job/train"},
        },
        "spec": {"containers": [workloads.container("1")]},
    }
    stack.plane.apply(skipper)
    wait_until(lambda: running([stack.plane.get("pod", "skipper", namespace=namespace)]), "the skipper Running", 60)
    deadline = time.monotonic() + 15  # several of the controller's passes
    while time.monotonic() < deadline:
        members = job_pods(stack, namespace, "train")
        assert len(gated(members)) == 2, stack.describe(namespace)
        time.sleep(1)
    train = wait_until(lambda: gang(stack, namespace, "job-train"), "train's Gang", 30)
    assert train["status"].get("running", 0) == 0, train["status"]
    assert train["spec"]["minMember"] == 2


def test_a_rerun_of_a_completed_job_runs_as_its_own_gang(stack: Stack) -> None:
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("membership-done", "gate")
    stack.plane.apply(workloads.job("done", namespace, 2, "1", pod_annotations={"gangkeeper.test/run-for": "2s"}))

    def completed() -> dict[str, Any] | None:
        job = stack.plane.get("job", "done", namespace=namespace)
        return job if (job.get("status") or {}).get("succeeded") == 2 else None

    stored = wait_until(completed, "Job done completed", 120)
    stack.plane.kubectl("apply", "-f", "-", stdin=__import__("json").dumps(rerun_yaml(stored, "done-again")))

    def rerun_completed() -> dict[str, Any] | None:
        job = stack.plane.get("job", "done-again", namespace=namespace)
        return job if job and (job.get("status") or {}).get("succeeded") == 2 else None

    wait_until(rerun_completed, "the rerun completed", 120)
    pods = job_pods(stack, namespace, "done-again")
    assert {p["metadata"]["labels"]["gangkeeper.io/group"] for p in pods} == {"job-done-again"}
    assert all(p["status"]["phase"] == "Succeeded" for p in pods)


def test_a_jobset_made_again_under_its_name_starts_its_own_pods_whole(stack: Stack) -> None:
    """The real JobSet controller's Jobs carry their JobSet's uid on their pod templates (the webhook
    writes it from each Job's controller ownerReference), so its pods say which JobSet they were made
    for: a JobSet deleted and applied again under its name has the same gang name, and only its new
    pods are counted in it (the old ones, by their old uid, are the garbage collector's)."""
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("membership-uid", "gate")
    jobset = workloads.job_set("js", namespace, "1", workers=2)
    for replicated in jobset["spec"]["replicatedJobs"]:
        replicated["template"]["spec"]["template"]["metadata"] = {"annotations": {"gangkeeper.test/run-for": "1h"}}

    def started_whole(uid: str) -> list[dict[str, Any]] | None:
        pods = [p for p in stack.pods(namespace) if not p["metadata"].get("deletionTimestamp")]
        mine = [p for p in pods if p["metadata"]["annotations"].get("gangkeeper.io/workload-uid") == uid]
        return mine if len(pods) == 3 and len(running(mine)) == 3 else None

    uids = []
    for _ in range(2):
        stack.plane.apply(jobset)
        uid = stack.plane.get("jobset", "js", namespace=namespace)["metadata"]["uid"]
        wait_until(lambda uid=uid: started_whole(uid), f"JobSet js ({uid}) Running whole", 120)
        for job in stack.plane.get("jobs", namespace=namespace):
            annotations = job["spec"]["template"]["metadata"]["annotations"]
            assert annotations["gangkeeper.io/workload-uid"] == uid, job["metadata"]["name"]
        uids.append(uid)
        stack.plane.kubectl("-n", namespace, "delete", "jobset", "js", "--wait=false")
        wait_until(lambda: not stack.plane.get("jobset", "js", namespace=namespace), "JobSet js gone", 60)
    assert uids[0] != uids[1]


def test_a_pod_copied_from_a_deleted_job_is_refused_by_its_namesake(stack: Stack) -> None:
    """`kubectl get pod -o yaml` of a member, applied again after its Job was deleted and made again
    under its name: the copy's ownerReference names the Job train, by kind and name its namesake's, by
    uid the deleted one. The webhook reads the Job's uid now and refuses the copy; the new Job's own
    pods, made just after the old ones, are admitted and run whole."""
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("membership-copy", "gate")
    job = workloads.job("train", namespace, 2, "1", pod_annotations={"gangkeeper.test/run-for": "1h"})
    stack.plane.apply(job)
    first = wait_until(lambda: running(job_pods(stack, namespace, "train")) or None, "train's pods Running", 90)
    saved = copy.deepcopy(first[0])
    old_uid = saved["metadata"]["ownerReferences"][0]["uid"]
    stack.plane.kubectl("-n", namespace, "delete", "job", "train", "--wait=true", timeout=120)
    wait_until(lambda: not job_pods(stack, namespace, "train"), "the old pods gone", 90)
    stack.plane.apply(job)
    new_uid = stack.plane.get("job", "train", namespace=namespace)["metadata"]["uid"]
    assert new_uid != old_uid
    wait_until(lambda: len(running(job_pods(stack, namespace, "train"))) == 2, "the new train Running whole", 90)

    meta = saved["metadata"]
    saved["metadata"] = {
        "name": "train-copy",
        "namespace": namespace,
        "labels": meta["labels"],
        "annotations": meta["annotations"],
        "ownerReferences": meta["ownerReferences"],
    }
    saved.pop("status", None)
    saved["spec"].pop("nodeName", None)
    result = stack.plane.kubectl("create", "-f", "-", stdin=__import__("json").dumps(saved), check=False)
    assert result.returncode != 0, result.stdout
    assert f"it was made for Job train with uid {old_uid}" in result.stderr, result.stderr
    assert "which is not the uid of a" in result.stderr and new_uid not in result.stderr, result.stderr
    assert not stack.plane.get("pod", "train-copy", namespace=namespace)
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in job_pods(stack, namespace, "train")} == {new_uid}
