"""Kueue beside gangkeeper, for real (tests/realcluster/operators.py runs Kueue as released): Kueue
admits a Job by its queue's quota (its webhook suspends the Job, its controller resumes it once the
Workload is admitted) and gangkeeper starts the admitted Job's pods whole, with no suspend and resume
between the two, on the gate and the native backend. A Job that does not fit the quota waits,
suspended, with no pods for gangkeeper to hold, and starts whole when the quota frees; a gang Kueue
evicts (its quota reclaimed by a higher priority) goes whole; one that cannot be placed is left to
Kueue's own timeout, never suspended by gangkeeper under it; Kueue's topology-aware scheduling and
gangkeeper's gate agree on one rack. Every assertion reads what the cluster reports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.test_real_dra import allocated_devices
from tests.real.test_real_recovery import priority_class
from tests.real.test_real_seeds import assert_started_together
from tests.real.test_real_topology import RACK, blocker, racks_of
from tests.realcluster import dra, operators, workloads
from tests.realcluster.multicluster import check_active, gang_fits_check
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def kueue(stack: Stack) -> Iterator[operators.Operator]:
    operator = operators.kueue()
    if operator.missing():
        pytest.skip(operator.missing())
    operator.install(stack.plane)
    yield operator
    operator.uninstall(stack.plane)


def queues(namespace: str, cpu: str, flavor: str = "default", **cluster_queue: Any) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue of `cpu` in `flavor` (its other spec fields from `cluster_queue`)
    and the namespace's LocalQueue `lq` pointing at it."""
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "default"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": f"cq-{namespace}"},
            "spec": {
                "namespaceSelector": {},
                **cluster_queue,
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": flavor,
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


def queued_job(
    name: str,
    namespace: str,
    size: int,
    cpu: str,
    run_for: str | None = None,
    pod_annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    job = workloads.job(
        name,
        namespace,
        size,
        cpu,
        annotations=annotations,
        pod_annotations={**(pod_annotations or {}), **({"gangkeeper.test/run-for": run_for} if run_for else {})},
    )
    job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "lq"}
    if priority_class:
        job["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return job


def kueue_workload(stack: Stack, namespace: str, job: str) -> dict[str, Any]:
    owned = [
        w
        for w in stack.plane.get("workloads.kueue.x-k8s.io", namespace=namespace)
        if w["metadata"]["ownerReferences"][0]["name"] == job
    ]
    assert len(owned) == 1, owned
    return owned[0]


def condition(workload: dict[str, Any], kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in workload.get("status", {}).get("conditions", []))


def events_of(stack: Stack, namespace: str) -> str:
    return str(stack.plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)


def job_pods(stack: Stack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.pods(namespace, selector=f"batch.kubernetes.io/job-name={job}")


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_kueue_admits_by_quota_and_gangkeeper_starts_each_job_whole(
    stack: Stack, kueue: operators.Operator, backend: str
) -> None:
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace(f"kueue-{backend}", backend)
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
    events = events_of(stack, namespace)
    assert "GangRequeued" not in events and "GangTimedOut" not in events  # no suspend and resume by gangkeeper
    for name in ("first", "second"):
        assert condition(kueue_workload(stack, namespace, name), "Admitted")


def test_a_gang_kueue_evicts_for_a_higher_priority_goes_whole_and_starts_whole_again(
    stack: Stack, kueue: operators.Operator
) -> None:
    """A ClusterQueue of 4 CPUs that preempts lower priorities: a running 4-pod gang is evicted by Kueue
    (its Job suspended, every pod removed by the Job controller) for a higher-priority 4-pod Job, which
    starts whole once none of the first gang's pods is left; when that one ends, Kueue admits the evicted
    Job again and gangkeeper starts it whole again. gangkeeper suspends and resumes nothing itself."""
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace("kueue-evict", "gate")
    stack.plane.apply(
        [priority_class("gangkeeper-test-kueue-low", 100), priority_class("gangkeeper-test-kueue-high", 1000)]
    )
    stack.plane.apply(queues(namespace, "4", preemption={"withinClusterQueue": "LowerPriority"}))
    stack.plane.apply(queued_job("low", namespace, 4, "1", priority_class="gangkeeper-test-kueue-low"))
    low = wait_until(
        lambda: (p := job_pods(stack, namespace, "low")) and len(running(p)) == 4 and p, "the low gang Running", 120
    )
    assert_started_together(low, 4)
    stack.plane.apply(queued_job("high", namespace, 4, "1", run_for="20s", priority_class="gangkeeper-test-kueue-high"))
    high = wait_until(
        lambda: (p := job_pods(stack, namespace, "high")) and len(running(p)) == 4 and p,
        "the high gang admitted by preemption and Running whole",
        120,
    )
    assert_started_together(high, 4)
    first_high_bound = min(p["metadata"]["creationTimestamp"] for p in high)
    assert not running(job_pods(stack, namespace, "low")), "the evicted gang left a member running"
    evicted = kueue_workload(stack, namespace, "low")
    assert condition(evicted, "Evicted") or condition(evicted, "Preempted"), evicted["status"]
    assert stack.plane.get("job", "low", namespace=namespace)["spec"]["suspend"] is True
    # the high Job ends; Kueue admits the evicted one again, and it starts whole again
    again = wait_until(
        lambda: (p := job_pods(stack, namespace, "low")) and len(running(p)) == 4 and p,
        "the evicted gang admitted again and Running whole",
        180,
    )
    assert_started_together(again, 4)
    assert all(p["metadata"]["creationTimestamp"] > first_high_bound for p in again)  # new pods, not survivors
    events = events_of(stack, namespace)
    assert "GangRequeued" not in events and "GangTimedOut" not in events


def test_a_released_gang_that_times_out_unbound_is_left_to_kueue_never_suspended_by_gangkeeper(
    stack: Stack, kueue: operators.Operator
) -> None:
    """Admitted by Kueue and released by the gate, but refused by kube-scheduler (a required pod affinity
    to a pod that does not exist yet: a constraint the gate's placement does not model): the release times
    out, and gangkeeper does not suspend a Job whose suspend field Kueue owns; it says so in an event and
    leaves the requeue to Kueue's waitForPodsReady. The Job stays admitted and unsuspended, no pod is
    evicted; once the pod it asks to be near exists, the gang binds."""
    stack.replace_workers(2, cpu="4")
    namespace = stack.namespace("kueue-timeout", "gate")
    stack.plane.apply(queues(namespace, "16"))
    job = queued_job("near", namespace, 2, "1", annotations={"gangkeeper.io/timeout-seconds": "5"})
    near_anchor = {"labelSelector": {"matchLabels": {"app": "anchor"}}, "topologyKey": "kubernetes.io/hostname"}
    job["spec"]["template"]["spec"]["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [near_anchor]}
    }
    stack.plane.apply(job)
    wait_until(lambda: "GangLeftToKueue" in events_of(stack, namespace), "gangkeeper leaving the timeout to Kueue", 90)
    members = job_pods(stack, namespace, "near")
    assert len(members) == 2 and not bound(members), stack.describe(namespace)
    assert stack.plane.get("job", "near", namespace=namespace)["spec"].get("suspend") is not True
    assert condition(kueue_workload(stack, namespace, "near"), "Admitted")
    anchor = blocker(namespace, "anchor", stack.workers[0], "1")
    anchor["metadata"]["labels"] = {"app": "anchor"}
    stack.plane.apply(anchor)
    near = wait_until(
        lambda: (p := job_pods(stack, namespace, "near")) and len(running(p)) == 2 and p,
        "the gang Running beside its anchor",
        120,
    )
    assert {p["metadata"]["uid"] for p in near} == {p["metadata"]["uid"] for p in members}  # none evicted
    events = events_of(stack, namespace)
    assert "GangRequeued" not in events and "GangTimedOut" not in events


def test_kueue_topology_aware_scheduling_and_the_gate_agree_on_one_rack(
    stack: Stack, kueue: operators.Operator
) -> None:
    """Kueue's TAS (a Topology of racks and hosts, a flavor bound to it) and gangkeeper's gate both hold
    the pods of a Job asking `kueue.x-k8s.io/podset-required-topology` for one rack; rack r1 cannot take
    four 2-CPU pods (3 CPUs taken there): Kueue assigns rack r2, and gangkeeper releases the gang whole
    there. Kueue's Workload carries its topology assignment."""
    nodes = stack.replace_workers(
        4, cpu="4", labels=lambda index: {RACK: f"r{index // 2 + 1}", "gangkeeper.test/tas": "on"}
    )
    namespace = stack.namespace("kueue-tas", "gate")
    stack.plane.apply(blocker(namespace, "blocker", nodes[0], "3"))
    wait_until(lambda: running(stack.pods(namespace)), "the blocker Running", 60)
    topology = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": "racks"},
        "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"gangkeeper.test/tas": "on"}, "topologyName": "racks"},
    }
    stack.plane.apply([topology, flavor, *queues(namespace, "16", flavor="tas")])
    annotations = {"kueue.x-k8s.io/podset-required-topology": RACK}
    stack.plane.apply(queued_job("train", namespace, 4, "2", pod_annotations=annotations))
    train = wait_until(
        lambda: (p := job_pods(stack, namespace, "train")) and len(running(p)) == 4 and p,
        "the gang placed by Kueue's TAS and Running whole",
        120,
    )
    assert_started_together(train, 4)
    assert racks_of(stack, train) == ["r2"] * 4
    admission = kueue_workload(stack, namespace, "train")["status"]["admission"]
    assert admission["podSetAssignments"][0].get("topologyAssignment"), admission


def check_state(workload: dict[str, Any], name: str = "gang-fits") -> dict[str, Any]:
    states = (workload.get("status") or {}).get("admissionChecks") or []
    return next((s for s in states if s["name"] == name), {})


def checked_namespace(stack: Stack, name: str) -> str:
    """A gate namespace whose ClusterQueue (16 CPUs) lists gangkeeper's check, the check marked Active."""
    namespace = stack.namespace(name, "gate")
    stack.plane.apply(gang_fits_check())
    # Kueue's API is watched from the controller's next discovery (within a minute of its install)
    wait_until(lambda: check_active(stack), "gangkeeper's controller marked its AdmissionCheck Active", 150)
    stack.plane.apply(queues(namespace, "16", admissionChecksStrategy={"admissionChecks": [{"name": "gang-fits"}]}))
    return namespace


def held_by_the_check(stack: Stack, namespace: str, job: str, fits: str) -> None:
    """Quota reserved for the Job, gangkeeper's check Pending saying `fits`, nothing admitted, no pod."""
    waiting = wait_until(
        lambda: (
            (w := kueue_workload(stack, namespace, job))
            and condition(w, "QuotaReserved")
            and fits in check_state(w).get("message", "")
            and w
        ),
        "quota reserved and gangkeeper's check Pending, naming what fits",
        90,
    )
    assert check_state(waiting)["state"] == "Pending" and not condition(waiting, "Admitted")
    assert stack.plane.get("job", job, namespace=namespace)["spec"]["suspend"] is True
    assert not job_pods(stack, namespace, job)


def test_gangkeepers_admission_check_has_kueue_admit_a_gang_only_once_its_nodes_hold_it_whole(
    stack: Stack, kueue: operators.Operator
) -> None:
    """Quota counts CPUs, not where they are: 16 CPUs of quota and one 4-CPU node reserve quota for a
    gang of 8 that cannot start. With gangkeeper's AdmissionCheck on the ClusterQueue, Kueue keeps the
    Job suspended (no pod made, nothing held) while the check says why, and admits it the moment a
    node brings the room: the gang then starts whole."""
    stack.replace_workers(1, cpu="4")
    namespace = checked_namespace(stack, "kueue-check")
    stack.plane.apply(queued_job("wide", namespace, 8, "1", run_for="30s"))
    held_by_the_check(stack, namespace, "wide", "4 of 8 pods")
    # another node: the whole gang fits; the check goes Ready, Kueue admits, the gang starts whole
    stack.add_worker_like(stack.workers[0])
    members = wait_until(
        lambda: (p := job_pods(stack, namespace, "wide")) and len(running(p)) == 8 and p,
        "the Job admitted once the room is there and Running whole",
        120,
    )
    assert_started_together(members, 8)
    admitted = kueue_workload(stack, namespace, "wide")
    assert check_state(admitted)["state"] == "Ready" and condition(admitted, "Admitted")
    assert "the whole gang fits" in check_state(admitted)["message"]


def test_gangkeepers_admission_check_counts_the_devices_a_gang_claims(stack: Stack, kueue: operators.Operator) -> None:
    """Kueue's quota counts CPUs; the pods also claim a GPU each (DRA, a ResourceClaimTemplate). Two nodes
    with CPU for all, GPUs published on one (4): the check stays Pending ("4 of 8 pods"), the Job
    suspended with no pod. GPUs published on the other: Ready, admitted, and the 8 start together,
    each with its own device."""
    nodes = stack.replace_workers(2)
    dra.publish(stack, nodes[:1], 4)
    namespace = checked_namespace(stack, "kueue-check-gpus")
    stack.plane.apply(dra.claim_template(namespace))
    stack.plane.apply(dra.claiming(queued_job("gpus", namespace, 8, "100m", run_for="30s")))
    held_by_the_check(stack, namespace, "gpus", "4 of 8 pods")
    dra.publish(stack, nodes[1:], 4)
    members = wait_until(
        lambda: (p := job_pods(stack, namespace, "gpus")) and len(running(p)) == 8 and p,
        "the Job admitted once the devices are there and Running whole",
        120,
    )
    assert_started_together(members, 8)
    devices = allocated_devices(stack, namespace)
    assert sorted(devices) == sorted(p["metadata"]["name"] for p in members)
    assert len({d for found in devices.values() for d in found}) == 8  # a device of its own each
