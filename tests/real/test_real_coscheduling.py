"""The seeds' scenarios under scheduler-plugins' Coscheduling (a second scheduler, real), gangkeeper
choosing it for an opted-in namespace: pods get its schedulerName and PodGroup label, the controller
makes the PodGroup, and the real plugin holds or binds the group whole."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.realcluster import coscheduling, workloads
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster


def test_coscheduling_pinch_then_all_start(cosched: Stack) -> None:
    stack = cosched
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace("cosched-pinch", "coscheduling")
    # the webhook's API discovery refreshes each minute: until then the backend is refused, naming the
    # missing API (the CRD was installed a moment ago)
    wait_until(lambda: stack.plane.apply(workloads.job("train", namespace, 4, "4")), "the Job admitted", 90, every=5)
    wait_until(lambda: len(stack.pods(namespace)) == 4, "four pods", 60)
    pods = stack.pods(namespace)
    assert {p["spec"]["schedulerName"] for p in pods} == {coscheduling.SCHEDULER_NAME}
    group = wait_until(
        lambda: stack.plane.get("podgroups.scheduling.x-k8s.io", namespace=namespace),
        "the PodGroup gangkeeper made",
        60,
    )
    assert group[0]["spec"]["minMember"] == 4
    for _ in range(20):  # room for two of four: the plugin binds none
        assert not bound(stack.pods(namespace))
        time.sleep(0.5)
    stack.plane.kubectl("taint", "nodes", nodes[1], "test=blocked:NoSchedule-")
    # every pod was last refused by Coscheduling, which kube-scheduler retries on a PodGroup update, not
    # on a node's: gangkeeper's controller touches the PodGroup once its model sees the gang fit
    wait_until(lambda: len(running(stack.pods(namespace))) == 4, "all four Running", 120)


@pytest.fixture
def as_default_scheduler(stack: Stack) -> Iterator[Stack]:
    """scheduler-plugins' production install: its scheduler runs as `default-scheduler`, Coscheduling in
    that profile, in place of kube-scheduler (put back afterwards)."""
    reason = coscheduling.missing()
    if reason:
        pytest.skip(reason)
    plane = stack.plane
    stock = next(p for p in plane.processes if p.name == "kube-scheduler")
    stock.stop()
    plane.processes.remove(stock)
    process = coscheduling.start(plane, scheduler_name="default-scheduler")
    try:
        yield stack
    finally:
        process.stop()
        plane.processes.remove(process)
        plane.start_scheduler()


def test_coscheduling_in_the_default_schedulers_profile(as_default_scheduler: Stack) -> None:
    """A namespace that names `default-scheduler` (gangkeeper.io/scheduler-name) gets coscheduling gangs
    for the default scheduler: the pods keep its name, carry the PodGroup label, and start whole."""
    stack = as_default_scheduler
    nodes = stack.replace_workers(3)
    for node in nodes[:2]:
        stack.plane.kubectl("taint", "nodes", node, "test=blocked:NoSchedule")
    namespace = stack.namespace("cosched-default", "coscheduling")
    stack.plane.kubectl("annotate", "namespace", namespace, "gangkeeper.io/scheduler-name=default-scheduler")
    wait_until(lambda: stack.plane.apply(workloads.job("train", namespace, 4, "4")), "the Job admitted", 90, every=5)
    wait_until(lambda: len(stack.pods(namespace)) == 4, "four pods", 60)
    pods = stack.pods(namespace)
    assert {p["spec"]["schedulerName"] for p in pods} == {"default-scheduler"}
    assert {p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") for p in pods} == {"job-train"}
    wait_until(
        lambda: stack.plane.get("podgroups.scheduling.x-k8s.io", namespace=namespace),
        "the PodGroup gangkeeper made",
        60,
    )
    for _ in range(20):  # room for two of four: the plugin in the default profile binds none
        assert not bound(stack.pods(namespace))
        time.sleep(0.5)
    stack.plane.kubectl("taint", "nodes", nodes[1], "test=blocked:NoSchedule-")
    # as above: started by the PodGroup gangkeeper's controller touches once its model sees the gang fit
    wait_until(lambda: len(running(stack.pods(namespace))) == 4, "all four Running", 120)


def test_coscheduling_a_dra_gang_waits_whole_for_devices_then_starts_whole(cosched: Stack) -> None:
    """The pinch with devices (tests/real/test_real_dra.py) under scheduler-plugins' Coscheduling: its
    scheduler (kube-scheduler 1.34's framework) has the DynamicResources plugin, and Coscheduling's
    Permit holds the pods that got devices until the whole group can."""
    from tests.real.test_real_dra import dra_pinch_waits_whole_then_starts_whole

    dra_pinch_waits_whole_then_starts_whole(cosched, "coscheduling")


def test_coscheduling_a_gang_sharing_one_rack_link_starts_whole_in_the_rack_that_holds_it(cosched: Stack) -> None:
    """#78's two racks under Coscheduling: its scheduler allocates the shared link for the first pod it
    places (rack a, the most free CPU), and Permit then waits for members that can never join it; steered,
    all four run in rack b, the link allocated once."""
    from tests.real.test_real_dra import a_gang_sharing_one_rack_link_starts_whole_in_its_rack

    a_gang_sharing_one_rack_link_starts_whole_in_its_rack(cosched, "coscheduling")
