"""Past one cluster, for real: Kueue's MultiKueue on a manager cluster dispatches Jobs to two worker
clusters (each its own API server, etcd, scheduler and KWOK nodes; tests/realcluster/multicluster.py),
gangkeeper deployed on all three as its manifests install it. On the manager a dispatched Job is only
validated (MultiKueue keeps its pods off the manager); on the workers, gangkeeper's Kueue AdmissionCheck
lets a copy be admitted only where its whole gang fits, so MultiKueue sends the gang to the worker that
can hold it and it starts whole there. Worker 1 is too small for the gang (its quota says otherwise);
worker 2 holds it. Every assertion reads what the clusters report."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.real.test_real_kueue import condition, job_pods, queued_job, queues
from tests.real.test_real_seeds import assert_started_together, scheduled_at
from tests.real.test_real_topology import blocker
from tests.realcluster import operators
from tests.realcluster.multicluster import MANAGER_KUEUE, condition_true, dispatch_to, workers_with_kueue
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster
GANG, CPU = 8, "1"  # 8 one-CPU pods: worker 1 has 4 CPUs, worker 2 has 16
NEVER = 20  # more than either worker's nodes hold
FIGURES: dict[str, float] = {}


@dataclass
class Fleet:
    manager: Stack
    workers: dict[str, Stack]

    def stacks(self) -> list[Stack]:
        return [self.manager, *self.workers.values()]


@pytest.fixture(scope="module")
def fleet(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    manager_kueue = operators.kueue(more=MANAGER_KUEUE)
    if manager_kueue.missing():
        pytest.skip(manager_kueue.missing())
    stack.replace_workers(0)  # the manager runs no pod of these Jobs: MultiKueue keeps them off it
    manager_kueue.install(stack.plane)
    with workers_with_kueue(tmp_path_factory.mktemp("workers"), stack.plane.kubernetes_version) as workers:
        dispatch_to(stack.plane, workers)
        try:
            yield Fleet(stack, workers)
        finally:
            # before the workers stop: the manager's watches on a worker held its API server's exit until
            # the 15 s kill (twice 15 s of this module's teardown)
            manager_kueue.uninstall(stack.plane)
    if FIGURES:
        print(
            "\nMultiKueue, apply on the manager -> all Running on a worker: "
            + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in FIGURES.items())
        )


@pytest.fixture(autouse=True)
def no_gang_left_partly_bound_on_a_worker(fleet: Fleet) -> Iterator[None]:
    """As tests/conftest.py asserts of the first cluster: after each test, no gang on either worker was
    seen partly bound for longer than gangkeeper lets it (tests/realcluster/partial.py)."""
    yield
    for name, member in fleet.workers.items():
        seen = member.watch.take() if member.watch is not None else []
        assert not seen, f"gangs left partly bound on {name}: {seen}"


def prepare(fleet: Fleet, name: str, backend: str | None, checked: bool = True, held: str | None = None) -> str:
    """The namespace `name` on every cluster, its queues (the manager's dispatching through MultiKueue,
    the workers' answering gangkeeper's check when `checked`; the worker `held` admits nothing), and the
    workers' nodes: worker 1 one node of 4 CPUs, worker 2 two of 8."""
    fleet.workers["worker1"].replace_workers(1, cpu="4")
    fleet.workers["worker2"].replace_workers(2, cpu="8")
    manager = fleet.manager
    manager.namespace(name, backend, opted_in=backend is not None)
    manager.plane.apply(queues(name, "64", admissionChecksStrategy={"admissionChecks": [{"name": "multikueue"}]}))
    for worker_name, member in fleet.workers.items():
        member.namespace(name, backend, opted_in=backend is not None)
        spec: dict[str, Any] = {}
        if checked:
            spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": "gang-fits"}]}
        if worker_name == held:
            spec["stopPolicy"] = "Hold"
        # the quota of both says 32 CPUs: worker 1's nodes have 4, worker 2's 16
        member.plane.apply(queues(name, "32", **spec))
    return name


def where_it_runs(fleet: Fleet, namespace: str) -> tuple[str, list[dict[str, Any]]] | None:
    for worker_name, member in fleet.workers.items():
        pods = job_pods(member, namespace, "wide")
        if pods and len(running(pods)) == GANG:
            return worker_name, pods
    return None


def timeline(fleet: Fleet, namespace: str, worker_name: str, members: list[dict[str, Any]]) -> str:
    """Where the time went, from the objects' own timestamps (whole seconds), from the manager's Job."""
    manager_job = fleet.manager.plane.get("job", "wide", namespace=namespace)
    start = dt.datetime.fromisoformat(manager_job["metadata"]["creationTimestamp"])
    member = fleet.workers[worker_name]
    steps: list[tuple[str, str]] = []
    for w in member.plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []:
        for c in (w.get("status") or {}).get("conditions") or []:
            steps.append((f"worker {c['type']}", c["lastTransitionTime"]))
        for a in (w.get("status") or {}).get("admissionChecks") or []:
            steps.append((f"check {a['name']} {a['state']}", a["lastTransitionTime"]))
    copy = member.plane.get("job", "wide", namespace=namespace)
    steps.append(("worker Job made", copy["metadata"]["creationTimestamp"]))
    steps.append(("last pod made", max(p["metadata"]["creationTimestamp"] for p in members)))
    steps.append(("last pod bound", max(scheduled_at(p).isoformat() for p in members)))
    at = {what: (dt.datetime.fromisoformat(when) - start).total_seconds() for what, when in steps}
    return ", ".join(f"{what} +{seconds:.0f}s" for what, seconds in sorted(at.items(), key=lambda item: item[1]))


def bound_anywhere(fleet: Fleet, namespace: str, but: str) -> int:
    return sum(len(bound(job_pods(m, namespace, "wide"))) for n, m in fleet.workers.items() if n != but)


def test_with_no_gang_mechanism_a_dispatched_gang_starts_partly_on_a_worker_too_small_for_it(fleet: Fleet) -> None:
    """The floor: MultiKueue by quota alone, nothing gang-aware on the workers. Worker 2's queue held, so
    worker 1 admits the gang: 4 of its 8 pods start and the rest wait for room that never comes."""
    namespace = prepare(fleet, "mk-floor-partly", None, checked=False, held="worker2")
    fleet.manager.plane.apply(queued_job("wide", namespace, GANG, CPU, run_for="600s"))
    one = fleet.workers["worker1"]
    partly = wait_until(
        lambda: (p := job_pods(one, namespace, "wide")) and len(p) == GANG and len(running(p)) == 4 and p,
        "worker 1 running 4 of the gang's 8 pods",
        120,
    )
    time.sleep(5)  # and no more come
    assert len(running(job_pods(one, namespace, "wide"))) == 4 == len(running(partly))
    fleet.manager.plane.kubectl("delete", "job", "wide", "-n", namespace, "--wait=false")


@pytest.mark.parametrize("backend", ["floor", "gate", "native"])
def test_a_dispatched_gang_runs_whole_on_the_worker_whose_nodes_hold_it(fleet: Fleet, backend: str) -> None:
    """On the manager the Job is only validated (no stamp, no gate: MultiKueue makes its pods elsewhere).
    Both workers reserve quota; gangkeeper's check keeps worker 1's copy from being admitted (4 CPUs of
    nodes for 8 pods) and lets worker 2's be: MultiKueue dispatches there, and the gang starts whole.
    The floor (no gangkeeper on the workers, worker 1's queue held so it goes to worker 2) times the same."""
    gangkeeper = backend != "floor"
    namespace = prepare(
        fleet,
        f"mk-{backend}",
        backend if gangkeeper else None,
        checked=gangkeeper,
        held=None if gangkeeper else "worker1",
    )
    job = queued_job("wide", namespace, GANG, CPU, run_for="600s")
    started = time.monotonic()
    fleet.manager.plane.apply(job)
    on_manager = fleet.manager.plane.get("job", "wide", namespace=namespace)
    assert on_manager["spec"].get("managedBy") == "kueue.x-k8s.io/multikueue"  # defaulted by Kueue's webhook
    template = on_manager["spec"]["template"]
    assert "gangkeeper.io/group" not in (template.get("metadata") or {}).get("labels", {}), template
    assert not template["spec"].get("schedulingGroup") and not template["spec"].get("schedulingGates")
    ran = wait_until(lambda: where_it_runs(fleet, namespace), "the gang Running whole on a worker", 180, every=0.5)
    FIGURES[backend] = time.monotonic() - started
    worker_name, members = ran
    print(f"\n{backend}: {timeline(fleet, namespace, worker_name, members)}")
    assert worker_name == "worker2"
    assert bound_anywhere(fleet, namespace, but="worker2") == 0
    assert_started_together(members, GANG)
    two = fleet.workers["worker2"]
    copy = two.plane.get("job", "wide", namespace=namespace)
    if gangkeeper:
        # the worker's copy got its own gang there, owned by that copy
        gang = two.plane.get("gang", "job-wide", namespace=namespace)
        assert gang["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
        assert gang["spec"]["minMember"] == GANG
        one_workload = [
            w for w in fleet.workers["worker1"].plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []
        ]
        assert all(not condition(w, "Admitted") for w in one_workload)
        # the manager's Gang says where it runs, owned by the manager's Job
        said = wait_until(
            lambda: (
                (g := fleet.manager.plane.get("gang", "job-wide", namespace=namespace))
                and (g.get("status") or {}).get("cluster")
                and g
            ),
            "the manager's Gang naming the worker that runs it",
            90,  # Kueue installed on the manager is watched from the controller's next discovery
        )
        assert said["metadata"]["ownerReferences"][0]["uid"] == on_manager["metadata"]["uid"]
        assert (said["spec"]["backend"], said["status"]["state"], said["status"]["cluster"]) == (
            "multikueue",
            "Dispatched",
            "worker2",
        )
    else:  # a namespace that did not opt in gets nothing from gangkeeper on the manager either
        assert fleet.manager.plane.get("gang", "job-wide", namespace=namespace) is None
    # the manager's Job shows the worker's status (MultiKueue copies it back)
    wait_until(
        lambda: (
            (fleet.manager.plane.get("job", "wide", namespace=namespace) or {}).get("status", {}).get("active") == GANG
        ),
        "the manager's Job showing the worker's 8 active pods",
        60,
    )
    fleet.manager.plane.kubectl("delete", "job", "wide", "-n", namespace, "--wait=false")
    wait_until(lambda: not job_pods(two, namespace, "wide"), "the worker's copy gone with the manager's Job", 120)


def test_a_gang_no_worker_can_hold_waits_on_the_manager_and_is_bounced_nowhere(fleet: Fleet) -> None:
    """20 pods: more than either worker's nodes. Neither copy is admitted, no Job is made on any worker,
    and each worker's check says why; the Job waits suspended on the manager."""
    namespace = prepare(fleet, "mk-never", "gate")
    fleet.manager.plane.apply(queued_job("wide", namespace, NEVER, CPU))
    for member in fleet.workers.values():
        wait_until(
            lambda m=member: any(
                f"of {NEVER} pods" in s.get("message", "")
                for w in m.plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []
                for s in (w.get("status") or {}).get("admissionChecks") or []
            ),
            "each worker's check naming how much of the gang fits",
            90,
        )
    time.sleep(10)
    for member in fleet.workers.values():
        assert member.plane.get("job", "wide", namespace=namespace) is None
    assert fleet.manager.plane.get("job", "wide", namespace=namespace)["spec"]["suspend"] is True
    fleet.manager.plane.kubectl("delete", "job", "wide", "-n", namespace, "--wait=false")


def lost_worker_comes_back(fleet: Fleet, namespace: str) -> None:
    one = fleet.workers["worker1"]
    waiting = wait_until(
        lambda: [
            w
            for w in one.plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []
            if condition(w, "QuotaReserved")
        ],
        "the Job dispatched again, to worker 1, after the manager lost worker 2",
        180,
        every=2,
    )
    assert waiting and not job_pods(one, namespace, "wide")  # held by the check: nothing made, nothing partial
    one.add_worker_like(one.workers[0], cpu="8")
    members = wait_until(
        lambda: (p := job_pods(one, namespace, "wide")) and len(running(p)) == GANG and p,
        "the gang Running whole on worker 1 once the room is there",
        180,
    )
    assert_started_together(members, GANG)


def test_a_gang_whose_room_is_taken_before_it_starts_is_handed_back_and_runs_whole_on_the_other_worker(
    fleet: Fleet,
) -> None:
    """Worker 2's check says Ready on room it has, Kueue admits there and MultiKueue dispatches there; the
    gang's pods cannot be made for a moment (a ResourceQuota of 0 pods: anything that delays them) and
    another team's pods take the room meanwhile. The gang waits gated, whole: no pod starts on worker 2.
    Its timeout (15 s here, counted from Ready) passes, gangkeeper's check says Retry, Kueue evicts the
    Workload there and MultiKueue dispatches it again; worker 2 now says Pending, and the gang starts
    whole on worker 1 once a node brings the room there."""
    namespace = prepare(fleet, "mk-back", "gate")
    two = fleet.workers["worker2"]
    no_pods = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-pods-yet", "namespace": namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    two.plane.apply(no_pods)
    job = queued_job("wide", namespace, GANG, CPU, run_for="600s", annotations={"gangkeeper.io/timeout-seconds": "15"})
    fleet.manager.plane.apply(job)
    wait_until(
        lambda: two.plane.get("job", "wide", namespace=namespace),
        "the Job dispatched to worker 2",
        180,
        explain=lambda: explain_dispatch(fleet, namespace),
    )
    other = two.namespace("mk-back-other", None, opted_in=False)
    two.plane.apply([blocker(other, f"other-{i}", node, "7") for i, node in enumerate(two.workers)])
    wait_until(
        lambda: len(running(two.pods(other))) == 2,
        "another team's pods Running on worker 2's room",
        120,
        explain=lambda: two.plane.kubectl("get", "pods,events,nodes", "-A", "-o", "wide", check=False).stdout,
    )
    two.plane.kubectl("delete", "resourcequota", "no-pods-yet", "-n", namespace)
    bound_on_two: list[int] = []

    def handed_back() -> bool:
        bound_on_two.append(len(bound(job_pods(two, namespace, "wide"))))
        copies = fleet.workers["worker1"].plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []
        return any(condition(w, "QuotaReserved") for w in copies)

    wait_until(handed_back, "the gang handed back by worker 2's check and dispatched again", 120, every=1)
    assert max(bound_on_two) == 0, bound_on_two
    events = fleet.manager.plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "evicted on worker cluster" in events, "MultiKueue on the manager saw the eviction on worker 2"
    lost_worker_comes_back(fleet, namespace)
    assert bound_anywhere(fleet, namespace, but="worker1") == 0
    fleet.manager.plane.kubectl("delete", "job", "wide", "-n", namespace, "--wait=false")


# last in the module: nothing after it waits on a worker whose API server came back
def test_a_gang_whose_worker_is_lost_comes_back_whole_on_the_other_once_room_is_made(fleet: Fleet) -> None:
    """The gang runs whole on worker 2; worker 2's API server goes away. After MultiKueue's
    workerLostTimeout the manager requeues the Job and dispatches it again: only worker 1 answers, and
    gangkeeper's check holds it there (no pod made) until a node brings the room; then it starts whole."""
    namespace = prepare(fleet, "mk-lost", "gate")
    fleet.manager.plane.apply(queued_job("wide", namespace, GANG, CPU, run_for="600s"))
    ran = wait_until(lambda: where_it_runs(fleet, namespace), "the gang Running whole on worker 2", 180, every=0.5)
    assert ran[0] == "worker2"
    with fleet.workers["worker2"].plane.api_server_stopped():
        lost_worker_comes_back(fleet, namespace)
    back_in_service(fleet, "worker2")


def explain_dispatch(fleet: Fleet, namespace: str) -> str:
    """Where a dispatch stands: each cluster's Workloads (their conditions), Jobs, pods and events, and
    its gangkeeper controller's last words."""
    parts = []
    for name, member in {"manager": fleet.manager, **fleet.workers}.items():
        workloads = member.plane.get("workloads.kueue.x-k8s.io", namespace=namespace) or []
        conditions = {
            w["metadata"]["name"]: [
                (c["type"], c["status"], c.get("reason"), c.get("message", "")[:200])
                for c in (w.get("status") or {}).get("conditions") or []
            ]
            + [
                (a.get("name"), a.get("state"), a.get("message", "")[:200])
                for a in (w.get("status") or {}).get("admissionChecks") or []
            ]
            for w in workloads
        }
        parts.append(f"=== {name}: workloads {conditions}\n{member.describe(namespace)}")
    return "\n".join(parts)


def back_in_service(fleet: Fleet, name: str) -> None:
    """A worker whose API server came back, before the next test counts on it: the manager reaches it
    again, and it runs a pod (its scheduler and KWOK watch it again)."""
    member = fleet.workers[name]
    wait_until(
        lambda: condition_true(fleet.manager.plane.get("multikueuecluster", name) or {}, "Active"),
        f"the manager's MultiKueueCluster {name} Active again",
        180,
        every=1,
    )
    # its kube-controller-manager lost the API server too: its informers come back after their backoff,
    # on a loaded machine once more than a minute after the server (a whole run's one failure, 2026-12-07)
    probe = member.namespace("probe", None, opted_in=False, settle=300)
    anywhere = blocker(probe, "probe", member.workers[0], "10m")
    del anywhere["spec"]["nodeSelector"]  # the lost gang may still fill a node: any node with room
    member.plane.apply(anywhere)
    wait_until(
        lambda: running(member.pods(probe)),
        f"a pod Running on {name} again",
        120,
        explain=lambda: member.plane.kubectl("get", "pods,events,nodes", "-A", "-o", "wide", check=False).stdout,
    )
