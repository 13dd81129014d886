"""The seeds' story on a real cluster (tests/realcluster/): upstream kube-apiserver, controllers and
kube-scheduler, KWOK nodes, gangkeeper deployed from its manifests and called through its Service.

Every assertion reads what the cluster reports (pods' nodes and phases, group objects' status), never
gangkeeper's own state. Three fake nodes of 8 CPUs each hold two 4-CPU pods apiece.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

from tests.realcluster import workloads
from tests.realcluster.stack import Stack, bound, gated, running, wait_until

pytestmark = pytest.mark.cluster
BACKENDS = ["gate", "native"]


class Watch:
    """Polls a namespace's pods; remembers how long some were bound while others were not. A gang is
    bound pod by pod (the scheduler's binding cycles), so a partial state lasting a moment is the
    release itself; one that lasts is a partial start."""

    def __init__(self, stack: Stack, namespace: str) -> None:
        self.stack, self.namespace = stack, namespace
        self.longest_partial = 0.0  # seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.wait(0.2):
            pods = self.stack.pods(self.namespace)
            if 0 < len(bound(pods)) < len(pods):
                since = since if since is not None else time.monotonic()
                self.longest_partial = max(self.longest_partial, time.monotonic() - since)
            else:
                since = None

    @property
    def partial(self) -> bool:
        return self.longest_partial > 3


def scheduled_at(pod: dict[str, Any]) -> dt.datetime:
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    return dt.datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))


def assert_started_together(pods: list[dict[str, Any]], size: int) -> None:
    assert len(running(pods)) == size, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    times = sorted(scheduled_at(p) for p in pods)
    # one gang is bound in one go: the scheduler binds its members within a few seconds of each other
    assert (times[-1] - times[0]).total_seconds() <= 5, times


def wait_running(stack: Stack, namespace: str, size: int, timeout: float = 90) -> list[dict[str, Any]]:
    return wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == size and p,
        f"{size} pods Running in {namespace}",
        timeout,
    )


def hold_pending(stack: Stack, namespace: str, size: int, seconds: float = 15) -> list[dict[str, Any]]:
    """The gang's pods all exist and none is bound, for `seconds`."""
    wait_until(lambda: len(stack.pods(namespace)) == size, f"{size} pods in {namespace}", 60)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pods = stack.pods(namespace)
        assert not bound(pods), f"partial start: {[p['metadata']['name'] for p in bound(pods)]} bound"
        time.sleep(0.5)
    return stack.pods(namespace)


def workload(kind: str, namespace: str, cpu: str) -> dict[str, Any]:
    if kind == "job":
        return workloads.job("train", namespace, 4, cpu)
    if kind == "jobset":
        return workloads.job_set("train", namespace, cpu)
    return workloads.leader_worker_set("lws", namespace, 4, cpu)


@pytest.mark.parametrize("kind", ["job", "lws", "jobset"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_all_fit_start_together(stack: Stack, backend: str, kind: str) -> None:
    """Seed scenario 1: four pods that fit are held until all four exist, then start at once."""
    stack.replace_workers(3)
    namespace = stack.namespace(f"fit-{backend}-{kind}", backend)
    with Watch(stack, namespace) as watch:
        stack.plane.apply(workload(kind, namespace, "100m"))
        pods = wait_running(stack, namespace, 4)
    assert_started_together(pods, 4)
    assert not watch.partial, f"partly bound for {watch.longest_partial:.1f}s"
    if backend == "gate":  # each pod was created behind the gate, which the controller then lifted
        assert not gated(pods)


@pytest.mark.parametrize("kind", ["job", "lws"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_resource_pinch_waits_whole_then_starts_whole(stack: Stack, backend: str, kind: str) -> None:
    """Seed scenario 2: two of three nodes tainted, room for two 4-CPU pods: all four wait unbound;
    one taint removed, room for four: all four start together."""
    pinch_waits_whole_then_starts_whole(stack, backend, kind)


def pinch_waits_whole_then_starts_whole(stack: Stack, backend: str, kind: str) -> None:
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace(f"pinch-{backend}-{kind}", backend)
    stack.plane.apply(workload(kind, namespace, "4"))
    pods = hold_pending(stack, namespace, 4)
    if backend == "gate":
        assert len(gated(pods)) == 4
    else:  # the real gang plugin refuses the group: every pod Unschedulable, none bound
        assert all(
            c["reason"] == "Unschedulable"
            for p in pods
            for c in p["status"].get("conditions", [])
            if c["type"] == "PodScheduled"
        ), pods
    with Watch(stack, namespace) as watch:
        stack.plane.kubectl("taint", "nodes", nodes[1], "test=blocked:NoSchedule-")
        pods = wait_running(stack, namespace, 4)
    assert_started_together(pods, 4)
    assert not watch.partial, f"partly bound for {watch.longest_partial:.1f}s"
    assert {p["spec"]["nodeName"] for p in pods} == {nodes[1], nodes[2]}


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_default_scheduler_starts_part(stack: Stack, kind: str) -> None:
    """Seed scenario 3, the counter-example: a namespace not opted in, the same pinch: two pods run,
    two stay Pending for good."""
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace(f"no-gang-{kind}", None, opted_in=False)
    stack.plane.apply(workload(kind, namespace, "4"))
    wait_until(lambda: len(running(stack.pods(namespace))) == 2, "two pods Running", 60)
    time.sleep(5)
    pods = stack.pods(namespace)
    assert len(running(pods)) == 2 and len(pods) == 4
    assert all(
        p["spec"].get("schedulerName") == "default-scheduler" and not p["spec"].get("schedulingGates") for p in pods
    )


def test_native_min_count_starts_the_quorum(stack: Stack) -> None:
    """The native Workload's minCount (gangkeeper.io/min-member: 3 of 4), on three 4-CPU nodes:
    with two tainted (room for one) none is bound; untainted (room for three) the real gang plugin
    admits the group at three and the fourth waits."""
    nodes = stack.replace_workers(3, cpu="4")
    for node in nodes[1:]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace("native-min-count", "native")
    stack.plane.apply(workloads.job("train", namespace, 4, "4", annotations={"gangkeeper.io/min-member": "3"}))
    hold_pending(stack, namespace, 4, seconds=10)
    if stack.plane.minor == "1.35":  # v1alpha1: the groups live in the Workload
        workload = stack.plane.get("workloads.scheduling.k8s.io", namespace=namespace)
        counts = [g["policy"]["gang"]["minCount"] for w in workload for g in w["spec"]["podGroups"]]
    else:  # v1alpha2 and later: a PodGroup object per group
        groups = stack.plane.get("podgroups.scheduling.k8s.io", namespace=namespace)
        counts = [g["spec"]["schedulingPolicy"]["gang"]["minCount"] for g in groups]
    assert counts == [3], counts
    for node in nodes[1:]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule-")
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 3 and p, "three pods Running", 90)
    time.sleep(5)
    pods = stack.pods(namespace)
    assert len(running(pods)) == 3 and len(bound(pods)) == 3, [p["status"].get("phase") for p in pods]


def test_gate_timeout_never_fails_the_job(stack: Stack) -> None:
    """A gang released but not all bound (required anti-affinity, one node short) times out; the
    controller's requeue must not spend the Job's failures: with backoffLimit 0 the real Job
    controller fails the Job on the first pod it counts as failed."""
    stack.replace_workers(2)
    namespace = stack.namespace("gate-timeout", "gate")
    job = workloads.job("spread", namespace, 3, "100m", annotations={"gangkeeper.io/timeout-seconds": "10"})
    labels = {"app": "spread"}
    job["spec"]["template"]["metadata"]["labels"] = labels
    job["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": labels}}
            ]
        }
    }
    stack.plane.apply(job)
    try:
        wait_until(lambda: len(running(stack.pods(namespace))) == 2, "two of three pods Running", 60)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    # the timeout (10 s) passes, the controller requeues; watch the Job for 40 s
    deadline = time.monotonic() + 40
    requeued = False
    while time.monotonic() < deadline:
        found = stack.plane.get("job", "spread", namespace=namespace)
        status = found.get("status") or {}
        assert not status.get("failed"), f"the requeue counted as a failure: {status}\n{stack.describe(namespace)}"
        assert not any(c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions") or []), status
        requeued = requeued or bool(found["spec"].get("suspend"))
        time.sleep(1)
    events = stack.plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert requeued or "GangTimedOut" in events or "GangEvicted" in events or "GangRequeued" in events, events[-2000:]
