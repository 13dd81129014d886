"""The seeds' scenarios under Volcano (its scheduler and controller manager, real): gangkeeper gives an
opted-in namespace's pods `schedulerName: volcano` and the group annotation, its controller makes the
PodGroup in the `default` queue, and Volcano's gang plugin binds the group whole or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.realcluster import operators, volcano, workloads
from tests.realcluster.stack import Stack, bound, running, wait_until
from tests.test_real_seeds import Watch, assert_started_together, hold_pending

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def vc(stack: Stack) -> Iterator[Stack]:
    reason = volcano.missing()
    if reason:
        pytest.skip(reason)
    processes = volcano.start(stack.plane)
    yield stack
    volcano.stop(stack.plane, processes)


def admitted(stack: Stack, manifest: dict[str, Any]) -> None:
    # the webhook's API discovery refreshes each minute: until it sees Volcano's API the backend is
    # refused, naming what is missing (the CRDs were installed a moment ago)
    wait_until(lambda: stack.plane.apply(manifest), f"{manifest['kind']} admitted", 90, every=5)


def podgroups(stack: Stack, namespace: str) -> list[dict[str, Any]]:
    return list(stack.plane.get("podgroups.scheduling.volcano.sh", namespace=namespace))


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_volcano_all_fit_start_together(vc: Stack, kind: str) -> None:
    """Seed scenario 1 under Volcano: room for all four, bound together by its gang plugin."""
    stack = vc
    stack.replace_workers(3)
    namespace = stack.namespace(f"volcano-fit-{kind}", "volcano")
    manifest = (
        workloads.job("train", namespace, 4, "100m")
        if kind == "job"
        else workloads.leader_worker_set("lws", namespace, 4, "100m")
    )
    admitted(stack, manifest)
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "all four Running", 120)
    assert {p["spec"]["schedulerName"] for p in pods} == {volcano.SCHEDULER_NAME}
    assert_started_together(pods, 4)


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_volcano_pinch_holds_the_gang_then_starts_it_whole(vc: Stack, kind: str) -> None:
    stack = vc
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace(f"volcano-pinch-{kind}", "volcano")
    manifest = (
        workloads.job("train", namespace, 4, "4")
        if kind == "job"
        else workloads.leader_worker_set("lws", namespace, 4, "4")
    )
    admitted(stack, manifest)
    with Watch(stack, namespace) as watch:
        pods = hold_pending(stack, namespace, 4, seconds=10)
        assert {p["spec"]["schedulerName"] for p in pods} == {volcano.SCHEDULER_NAME}
        (group,) = wait_until(lambda: podgroups(stack, namespace), "the PodGroup gangkeeper made", 60)
        assert group["spec"]["minMember"] == 4 and group["spec"].get("queue", "default") == "default"
        names = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
        assert names == {group["metadata"]["name"]}
        for node in nodes[:2]:
            stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule-")
        pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "all four Running", 120)
    assert not watch.partial
    assert_started_together(pods, 4)
    wait_until(
        lambda: (g := podgroups(stack, namespace)) and g[0].get("status", {}).get("phase") == "Running",
        "the PodGroup Running",
        60,
    )


def test_volcano_gang_larger_than_the_cluster_never_starts_part(vc: Stack) -> None:
    """Six 4-CPU pods on two 8-CPU nodes (room for four): Volcano's gang plugin keeps every pod unbound
    rather than start four of six."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-too-big", "volcano")
    admitted(stack, workloads.job("train", namespace, 6, "4"))
    hold_pending(stack, namespace, 6, seconds=15)
    assert not bound(stack.pods(namespace))


@pytest.fixture
def lws_makes_volcano_gangs(vc: Stack) -> Iterator[Stack]:
    """LWS with `gangSchedulingManagement.schedulerProvider: volcano`: its pod webhook names each group's
    PodGroup and its pod controller creates it (lws pkg/schedulerprovider/volcano_provider.go), from the
    leader pod: Volcano's pod validation, which refuses that pod until the PodGroup exists, is off meanwhile
    (volcano.without_pod_validation: the two cannot run together upstream)."""
    saved = volcano.without_pod_validation(vc.plane)
    operators.replace_running(vc.plane, operators.lws("volcano"))
    yield vc
    operators.replace_running(vc.plane, operators.lws())
    vc.plane.apply(saved)


def test_lws_own_volcano_gang_wins_over_gangkeepers(lws_makes_volcano_gangs: Stack) -> None:
    """gangkeeper's webhook stamps each pod first (configurations run in name order), LWS's webhook then
    names its own PodGroup, and gangkeeper, called again (reinvocationPolicy IfNeeded), takes its stamp
    off: every pod of the group is in LWS's one PodGroup, none in a second, and the group starts whole."""
    stack = lws_makes_volcano_gangs
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-lws-provider", "volcano")
    admitted(stack, workloads.leader_worker_set("lws", namespace, 4, "1"))
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the group Running", 150)
    names = {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}
    assert len(names) == 1 and names != {"lws-lws-0"}, names
    assert not [p for p in pods if "gangkeeper.io/group" in (p["metadata"].get("labels") or {})]
    assert not [
        p for p in pods if any(g["name"] == "gangkeeper.io/gang-gate" for g in p["spec"].get("schedulingGates") or [])
    ]
    groups = podgroups(stack, namespace)
    assert [g["metadata"]["name"] for g in groups] == sorted(names), "one PodGroup, LWS's"
    assert groups[0]["spec"]["minMember"] == 4


def test_a_missing_queue_is_a_warning_at_apply_and_the_jobs_pods_are_refused_by_volcano(vc: Stack) -> None:
    """The webhook sees Volcano's queues: kubectl prints the warning; Volcano's own pod admission then
    refuses each pod (the Job controller's FailedCreate event names the queue); creating the queue lets
    the gang start whole, with no change to the Job."""
    stack = vc
    stack.replace_workers(2)
    namespace = stack.namespace("volcano-no-queue", "volcano")
    job = workloads.job("train", namespace, 3, "100m", annotations={"gangkeeper.io/queue": "research"})
    applied = wait_until(
        lambda: (
            (r := stack.plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job), check=False)).returncode == 0 and r
        ),
        "Job admitted",
        90,
        every=5,
    )
    assert "Warning: Volcano queue 'research' does not exist" in applied.stderr, applied.stderr

    def refused() -> bool:
        events = stack.plane.get("events", namespace=namespace)
        return any(e.get("reason") == "FailedCreate" and "research" in e.get("message", "") for e in events)

    wait_until(refused, "Volcano refusing the pods (FailedCreate naming the queue)", 90)
    assert stack.pods(namespace) == []
    stack.plane.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "research"},
            "spec": {"weight": 1},
        }
    )
    pods = wait_until(
        lambda: (p := stack.pods(namespace)) and len(running(p)) == 3 and p, "the gang Running", 240, every=2
    )
    assert len({p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods}) == 1
