"""Gang lifecycles on the real controllers (tests/realcluster/): the Job controller's waves, the
StatefulSet controller's scale-up, LeaderWorkerSet's exclusive placement, a node drain through the real
Eviction API, and the controller's leader handover. Assertions read what the cluster reports."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from tests.realcluster import workloads
from tests.realcluster.kubelet import SYSTEM_NODES
from tests.realcluster.stack import Stack, gated, running, wait_until

pytestmark = pytest.mark.cluster


def condition(obj: dict[str, object], kind: str) -> bool:
    status = obj.get("status") or {}
    return any(c["type"] == kind and c["status"] == "True" for c in status.get("conditions") or [])  # type: ignore[union-attr]


def test_job_waves_each_start_whole_and_the_job_completes(stack: Stack) -> None:
    """completions 6, parallelism 3: the Job controller runs two waves of three; each is a gang of
    min(parallelism, completions - succeeded) and the Job ends Complete with nothing failed."""
    stack.replace_workers(2)
    namespace = stack.namespace("waves", "gate")
    job = workloads.job("waves", namespace, 3, "1", pod_annotations={"gangkeeper.test/run-for": "3s"})
    job["spec"]["completions"] = 6
    stack.plane.apply(job)
    done = wait_until(
        lambda: (j := stack.plane.get("job", "waves", namespace=namespace)) and condition(j, "Complete") and j,
        "the Job Complete",
        120,
    )
    assert done["status"].get("succeeded") == 6 and not done["status"].get("failed"), done["status"]


def test_an_indexed_job_with_a_failed_index_runs_its_last_index_and_finishes(stack: Stack) -> None:
    """completions 3, parallelism 2, backoffLimitPerIndex 0: index 1 fails for good, so the Job controller
    starts index 2 alone (its failed indexes are not pending). The gang of that wave is one pod: gangkeeper
    releases it, and the Job ends with index 1 its only failure (reason FailedIndexes)."""
    stack.replace_workers(2)
    namespace = stack.namespace("failed-index", "gate")
    job = workloads.job("indexed", namespace, 2, "1", pod_annotations={"gangkeeper.test/fail-index-1": "2s"})
    job["spec"].update(completions=3, completionMode="Indexed", backoffLimitPerIndex=0)
    job["spec"].pop("backoffLimit")  # with a per-index limit the Job's own defaults to the largest int
    stack.plane.apply(job)
    done = wait_until(
        lambda: (j := stack.plane.get("job", "indexed", namespace=namespace)) and condition(j, "Failed") and j,
        "the Job finished (Failed: one index failed)",
        120,
    )
    assert done["status"].get("failedIndexes") == "1" and done["status"].get("succeeded") == 2, done["status"]
    reasons = [c.get("reason") for c in done["status"]["conditions"] if c["type"] == "Failed"]
    assert reasons == ["FailedIndexes"], done["status"]
    assert not gated(stack.pods(namespace)), stack.describe(namespace)


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_smaller_last_wave_starts_and_the_job_completes(stack: Stack, backend: str) -> None:
    """completions 3, parallelism 2: the last wave is one pod. The gate and native 1.37 (v1beta1) lower
    the gang for it; native 1.35/1.36 cannot (minCount is immutable, and a PodGroup pods name cannot be
    replaced: its podgroup-protection finalizer holds the deletion), so such a Job is refused there with
    the fix."""
    stack.replace_workers(2)
    namespace = stack.namespace(f"last-wave-{backend}", backend)
    job = workloads.job("waves", namespace, 2, "1", pod_annotations={"gangkeeper.test/run-for": "3s"})
    job["spec"]["completions"] = 3
    if backend == "native" and stack.plane.minor in ("1.35", "1.36"):
        refused = stack.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job), check=False)
        assert refused.returncode != 0 and "its last wave is 1 pods, fewer than the gang's 2" in refused.stderr
        job["metadata"]["annotations"]["gangkeeper.io/min-member"] = "1"  # the fix the message names
    stack.plane.apply(job)
    try:
        done = wait_until(
            lambda: (j := stack.plane.get("job", "waves", namespace=namespace)) and condition(j, "Complete") and j,
            "the Job Complete",
            150,
        )
    except AssertionError:
        groups = stack.plane.kubectl("get", "workloads,podgroups", "-n", namespace, "-o", "yaml", check=False)
        print(stack.describe(namespace), groups.stdout, groups.stderr)
        raise
    assert done["status"].get("succeeded") == 3 and not done["status"].get("failed"), done["status"]


def test_statefulset_parallel_scale_up_starts_the_new_size(stack: Stack) -> None:
    """A Parallel StatefulSet of 2 scaled to 4: the real StatefulSet controller creates the new pods,
    and all four end Running (the gang is replicas)."""
    stack.replace_workers(2)
    namespace = stack.namespace("sts", "gate")
    stack.plane.apply(workloads.statefulset("sts", namespace, 2, "1"))
    wait_until(lambda: len(running(stack.pods(namespace))) == 2, "two pods Running", 90)
    stack.plane.kubectl("-n", namespace, "scale", "statefulset/sts", "--replicas=4")
    wait_until(lambda: len(running(stack.pods(namespace))) == 4, "four pods Running after the scale-up", 120)


def test_drained_node_gang_comes_back_whole(stack: Stack) -> None:
    """`kubectl drain` (cordon, then the real Eviction API) of a node running half of a Parallel
    StatefulSet gang: the evicted pods come back gated and the gang runs whole on the nodes left."""
    nodes = stack.replace_workers(3)
    namespace = stack.namespace("drain", "gate")
    stack.plane.apply(workloads.statefulset("drain", namespace, 4, "2"))
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "four pods Running", 90)
    victim = pods[0]["spec"]["nodeName"]
    stack.plane.kubectl("drain", victim, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s", timeout=90)
    after = wait_until(
        lambda: (
            (p := stack.pods(namespace))
            and len(running(p)) == 4
            and all(x["spec"].get("nodeName") != victim for x in p)
            and p
        ),
        "the gang Running again off the drained node",
        120,
    )
    assert {p["spec"]["nodeName"] for p in after} <= set(nodes) - {victim}


def test_controller_leader_handover_keeps_releasing(stack: Stack) -> None:
    """A controller pod deleted: the ReplicaSet replaces it (on the system node: the fake nodes are
    gone meanwhile, so no fake replica takes capacity from later tests), a replica holds the Lease and
    a new gang is released."""
    stack.replace_workers(0)
    stack.cordon_system(False)
    selector = "app.kubernetes.io/component=controller"
    pods = stack.plane.get("pods", namespace="gangkeeper-system", selector=selector)
    assert len(pods) == 2
    stack.plane.kubectl("-n", "gangkeeper-system", "delete", "pod", pods[0]["metadata"]["name"], "--wait=false")
    stack.plane.kubectl(
        "-n",
        "gangkeeper-system",
        "rollout",
        "status",
        "deployment/gangkeeper-controller",
        "--timeout=120s",
        timeout=130,
    )
    wait_until(
        lambda: (
            {
                p["metadata"]["name"]
                for p in running(stack.plane.get("pods", namespace="gangkeeper-system", selector=selector))
            }
            - {pods[0]["metadata"]["name"]}
            and len(running(stack.plane.get("pods", namespace="gangkeeper-system", selector=selector))) == 2
        ),
        "two controller replicas Running again",
        120,
    )
    stack.cordon_system(True)
    replaced = stack.plane.get("pods", namespace="gangkeeper-system", selector=selector)
    assert {p["spec"]["nodeName"] for p in replaced} <= set(SYSTEM_NODES)
    stack.replace_workers(2)
    namespace = stack.namespace("handover", "gate")
    stack.plane.apply(workloads.job("after", namespace, 3, "1"))
    wait_until(lambda: len(running(stack.pods(namespace))) == 3, "the gang released after the handover", 120)
    assert stack.plane.get("lease", "gangkeeper-controller", namespace="gangkeeper-system")["spec"]["holderIdentity"]


def test_lws_exclusive_placement_starts(stack: Stack) -> None:
    """LWS creates an exclusive-topology group's workers only once its leader is scheduled (lws
    pkg/controllers/pod_controller.go); a gate holding the leader for its workers deadlocked the group.
    The gang is the leader alone: the group starts."""
    stack.replace_workers(2)
    namespace = stack.namespace("lws-exclusive", "gate")
    lws = workloads.leader_worker_set(
        "excl",
        namespace,
        4,
        "100m",
        annotations={"leaderworkerset.sigs.k8s.io/exclusive-topology": "kubernetes.io/hostname"},
    )
    stack.plane.apply(lws)
    wait_until(lambda: len(running(stack.pods(namespace))) == 4, "the exclusive group Running", 60)


def test_removing_the_opt_in_label_lifts_the_gates(stack: Stack) -> None:
    """A gang that cannot fit waits gated; the namespace's opt-in label removed, the controller lifts
    its gates and the pods are scheduled as any pod (here one of two fits)."""
    stack.replace_workers(1, cpu="4")
    namespace = stack.namespace("opt-out", "gate")
    stack.plane.apply(workloads.job("wide", namespace, 2, "4"))
    wait_until(lambda: len(gated(stack.pods(namespace))) == 2, "the gang gated", 60)
    stack.plane.kubectl("label", "namespace", namespace, "gangkeeper.io/enabled-")
    wait_until(lambda: (p := stack.pods(namespace)) and not gated(p), "every gate lifted", 60)
    wait_until(lambda: len(running(stack.pods(namespace))) == 1, "one pod Running, as without gangkeeper", 60)


def test_an_eviction_a_jobs_pod_failure_policy_ignores_is_no_failure(stack: Stack) -> None:
    """What gangkeeper relies on to evict a Job's late member alone: the real Eviction API marks the pod
    DisruptionTarget, and a podFailurePolicy rule `Ignore` on that condition makes the real Job
    controller count no failure (backoffLimit 0 would fail the Job on one) and replace the pod."""
    stack.replace_workers(2)
    namespace = stack.namespace("evict-ignored", "gate")
    job = workloads.job("tolerant", namespace, 2, "1")
    job["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    stack.plane.apply(job)
    first = wait_until(
        lambda: len(running(stack.pods(namespace))) == 2 and running(stack.pods(namespace)), "both Running", 90
    )
    victim = first[0]["metadata"]["name"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": namespace}}
    stack.plane.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{namespace}/pods/{victim}/eviction",
        "-f",
        "-",
        stdin=json.dumps(eviction),
    )
    wait_until(
        lambda: (
            victim not in {p["metadata"]["name"] for p in stack.pods(namespace)}
            and len(running(stack.pods(namespace))) == 2
        ),
        "the evicted pod replaced and running",
        90,
    )
    status = stack.plane.get("job", "tolerant", namespace=namespace)["status"]
    assert not status.get("failed") and not any(c["type"] == "Failed" for c in status.get("conditions") or []), status


def test_statefulset_parallel_scale_down_then_up_keeps_its_members_running(stack: Stack) -> None:
    """A Parallel StatefulSet of 3 scaled to 1 (the real controller deletes two), then back to 3: the
    member that stays is never touched, the Gang follows the size, and the new pods start."""
    stack.replace_workers(2)
    namespace = stack.namespace("sts-down", "gate")
    stack.plane.apply(workloads.statefulset("db", namespace, 3, "1"))
    wait_until(lambda: len(running(stack.pods(namespace))) == 3, "three pods Running", 90)
    first = stack.plane.get("pod", "db-0", namespace=namespace)["metadata"]["uid"]
    stack.plane.kubectl("-n", namespace, "scale", "statefulset/db", "--replicas=1")
    wait_until(lambda: len(stack.pods(namespace)) == 1, "two pods gone after the scale-down", 90)
    wait_until(
        lambda: (stack.plane.get("gang", "sts-db", namespace=namespace) or {}).get("spec", {}).get("minMember") == 1,
        "the Gang's minMember following the scale-down",
        60,
    )
    stack.plane.kubectl("-n", namespace, "scale", "statefulset/db", "--replicas=3")
    wait_until(lambda: len(running(stack.pods(namespace))) == 3, "three pods Running after the scale-up", 120)
    assert stack.plane.get("pod", "db-0", namespace=namespace)["metadata"]["uid"] == first  # never restarted


def test_a_jobset_restart_releases_its_new_generation(stack: Stack) -> None:
    """A JobSet (failurePolicy maxRestarts 1) whose workers fail: the real JobSet controller recreates
    every child Job; gangkeeper releases the new generation as a gang (its workers run and fail again),
    and the JobSet ends Failed after its one restart, nothing left gated."""
    stack.replace_workers(2)
    namespace = stack.namespace("jobset-restart", "gate")
    jobset = workloads.job_set("flaky", namespace, "1", workers=2)
    jobset["spec"]["failurePolicy"] = {"maxRestarts": 1}
    for replicated in jobset["spec"]["replicatedJobs"]:
        annotation = {"gangkeeper.test/fail-after": "3s"} if replicated["name"] == "workers" else {}
        replicated["template"]["spec"]["template"].setdefault("metadata", {})["annotations"] = annotation
    stack.plane.apply(jobset)
    done = wait_until(
        lambda: (j := stack.plane.get("jobset", "flaky", namespace=namespace)) and condition(j, "Failed") and j,
        "the JobSet Failed after its restart",
        180,
    )
    assert done["status"].get("restarts") == 1, done["status"]
    assert not gated(stack.pods(namespace)), stack.describe(namespace)


def test_cronjob_runs_that_overlap_are_gangs_of_their_own(stack: Stack) -> None:
    """The real CronJob controller, every minute, concurrencyPolicy Allow, each run a gang of 3 that
    fits only alone (4.5 CPUs of 8, one node): the first run starts whole, the second, created
    while the first still runs, waits whole behind it (never 1 of its 3 started beside the first) and
    starts whole once the first ends (its Job deleted, rather than waiting out a run). Each run has its
    own Gang object, owned by its own Job."""
    stack.replace_workers(1, cpu="8")
    namespace = stack.namespace("cron", "gate")
    template = workloads.job("unused", namespace, 3, "1500m", pod_annotations={"gangkeeper.test/run-for": "100s"})
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": namespace},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Allow",
            "jobTemplate": {"spec": template["spec"]},
        },
    }
    stack.plane.apply(cron)

    def runs() -> list[str]:
        return sorted(j["metadata"]["name"] for j in stack.plane.get("jobs", namespace=namespace))

    two = wait_until(lambda: len(runs()) >= 2 and runs(), "two runs of the CronJob", 200, every=2)
    first, second = two[0], two[1]

    def members(job: str) -> list[dict[str, object]]:
        return stack.pods(namespace, f"batch.kubernetes.io/job-name={job}")

    # while the first runs, the second waits whole: none of its pods bound
    wait_until(lambda: len(members(second)) == 3, "the second run's 3 pods", 60)
    assert len(running(members(first))) == 3, stack.describe(namespace)
    assert len(gated(members(second))) == 3, stack.describe(namespace)
    gangs = {g["metadata"]["name"]: g for g in stack.plane.get("gangs.gangkeeper.io", namespace=namespace)}
    for job in (first, second):
        owner = gangs[f"job-{job}"]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Job", job)
    # the first ends; the second then starts whole
    stack.plane.kubectl("-n", namespace, "delete", "job", first, "--wait=false")
    wait_until(lambda: len(running(members(second))) == 3, "the second run started whole", 90, every=1)
    wait_until(
        lambda: (
            (stack.plane.get("gangs.gangkeeper.io", f"job-{second}", namespace=namespace) or {})
            .get("status", {})
            .get("state")
            == "Running"
        ),
        "the second run's Gang Running",
        30,
    )
    stack.plane.kubectl("-n", namespace, "delete", "cronjob", "nightly")


def test_a_pods_run_time_counts_from_its_start_whatever_touches_it_while_it_runs(stack: Stack) -> None:
    """The tier's pods end `run-for` after they started, as a workload's container would: a label written
    on a running pod every second does not start its run again (KWOK counts a delay given as a duration
    from each update it sees; tests/realcluster/kwok-stages.yaml gives the end as a moment instead).
    Every replay figure rests on it: a gang mechanism that touches running pods would have them hold
    their GPUs for longer."""
    stack.replace_workers(1)
    namespace = stack.namespace("run-time", None, opted_in=False)
    stack.plane.apply(workloads.job("run", namespace, 1, "1", pod_annotations={"gangkeeper.test/run-for": "5s"}))
    pod = wait_until(lambda: running(stack.pods(namespace)) and stack.pods(namespace)[0], "the pod Running", 60)
    name = pod["metadata"]["name"]
    touches = 0
    for touches in range(1, 16):  # 15 s of touches: without the fix the pod would not end before they stop
        phase = stack.plane.get("pod", name, namespace=namespace)["status"].get("phase")
        if phase == "Succeeded":
            break
        stack.plane.kubectl("label", "pod", name, "-n", namespace, f"touched={touches}", "--overwrite")
        time.sleep(1)
    ended = stack.plane.get("pod", name, namespace=namespace)
    assert ended["status"].get("phase") == "Succeeded", (touches, stack.describe(namespace))
    assert touches >= 3, touches  # it was touched while it ran
