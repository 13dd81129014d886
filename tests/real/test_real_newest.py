"""What only the newest Kubernetes minor the tier builds by default (K8S_NEWEST, 1.37) has, on a cluster
of its own beside the session's: the seeds' pinch on its native gang API (v1beta1), and a workload's
gangs kept in one domain by a CompositePodGroup, and a gang its native scheduler started whole that loses a
node requeued whole by gangkeeper (issue 78). Every assertion reads what the cluster reports."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.test_real_dra import a_gang_sharing_one_rack_link_starts_whole_in_its_rack
from tests.real.test_real_seeds import pinch_waits_whole_then_starts_whole
from tests.real.test_real_supervision import a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again
from tests.real.test_real_topology import RACK, blocker, racks_of
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, running, wait_until

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def newest_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A cluster of K8S_NEWEST with LeaderWorkerSet, started once for this module."""
    from tests.realcluster import operators
    from tests.realcluster.controlplane import ControlPlane, versions

    plane = ControlPlane(tmp_path_factory.mktemp("cluster-newest"), kubernetes_version=versions()["K8S_NEWEST"])
    reason = plane.missing()
    if reason:
        pytest.skip(reason)
    with Stack(plane, overlay="gate").running() as running_stack:
        lws = operators.lws()
        if lws.missing():
            pytest.skip(lws.missing())
        lws.install(plane)
        yield running_stack


@pytest.mark.parametrize("kind", ["job", "lws"])
def test_the_seeds_pinch_on_the_newest_native_api_waits_whole_then_starts_whole(newest_stack: Stack, kind: str) -> None:
    """The 1.37 smoke test: seed scenario 2 on the native backend, v1beta1 Workload and PodGroup."""
    assert newest_stack.plane.minor == "1.37"
    pinch_waits_whole_then_starts_whole(newest_stack, "native", kind)


def test_native_1_37_a_gang_that_loses_a_node_is_requeued_whole(newest_stack: Stack) -> None:
    """Issue 78 item 5 on 1.37's native gang API (v1beta1 Workload and PodGroup): a gang kube-scheduler
    started whole loses a node, is requeued whole after its recovery timeout and runs whole again."""
    assert newest_stack.plane.minor == "1.37"
    a_gang_that_loses_a_node_is_requeued_whole_and_runs_whole_again(newest_stack, "native")


def test_native_1_37_a_gang_sharing_one_rack_link_is_steered_whole_into_the_rack_that_holds_it(
    newest_stack: Stack,
) -> None:
    """Issue 78 item 3 on 1.37: the two racks of tests/real/test_real_dra.py, the gang steered into rack b."""
    assert newest_stack.plane.minor == "1.37"
    a_gang_sharing_one_rack_link_starts_whole_in_its_rack(newest_stack, "native")


BLOCK = "example.com/block"


def in_blocks_of_racks(index: int) -> dict[str, str]:
    """Racks of one node, blocks of two racks: nodes 0 and 1 in block b1, 2 and 3 in b2."""
    return {RACK: f"r{index + 1}", BLOCK: f"b{index // 2 + 1}"}


def blocks_of(stack: Stack, pods: list[dict[str, Any]]) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in stack.plane.get("node")}
    return sorted({nodes[p["spec"]["nodeName"]]["metadata"]["labels"][BLOCK] for p in pods})


def group_pods(stack: Stack, namespace: str, index: int) -> list[dict[str, Any]]:
    return stack.pods(namespace, f"leaderworkerset.sigs.k8s.io/group-index={index}")


def test_native_composite_pod_group_keeps_a_workloads_gangs_in_one_block(newest_stack: Stack) -> None:
    """Kubernetes 1.37 with CompositePodGroup: a LeaderWorkerSet asks for each group in one rack and the
    whole set in one block. Four 8-CPU nodes, a rack each, two racks per block; fillers leave 4 and 6 CPUs
    free in b1's racks r1 and r2, 2 in each of b2's. The first group of two 2-CPU pods fits only in b1 and
    takes r1, the tighter (kube-scheduler scores placements most-allocated first: noderesources/fit.go,
    placementScorer). Then b2's r3 frees to 4 CPUs, tighter for the next group than r2 (6 free), and the set
    grows by a group: without the CompositePodGroup it would take r3 in b2 (seen when the PodGroups' parent
    link is taken out); with it, it stays in b1, in r2. Asserted from the pods' nodes and labels and the
    objects the API server holds."""
    stack = newest_stack
    nodes = stack.replace_workers(4, cpu="8", labels=in_blocks_of_racks)
    namespace = stack.namespace("composite-native", "native")
    plain = stack.namespace("composite-fill", None, opted_in=False)
    fillers = [blocker(plain, f"fill-{i}", node, cpu) for i, (node, cpu) in enumerate(zip(nodes, "4266", strict=True))]
    stack.plane.apply(fillers)
    wait_until(lambda: len(running(stack.pods(plain))) == 4, "the fillers Running", 60)
    annotations = {"gangkeeper.io/topology-required": RACK, "gangkeeper.io/workload-topology-required": BLOCK}
    lws = workloads.leader_worker_set("set", namespace, 2, "2", replicas=1, annotations=annotations)
    stack.plane.apply(lws)
    composite = wait_until(
        lambda: stack.plane.get("compositepodgroups.scheduling.k8s.io", "lws-set", namespace=namespace),
        "the CompositePodGroup",
        60,
    )
    assert composite["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert composite["spec"]["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}, composite["spec"]
    workload = stack.plane.get("workloads.scheduling.k8s.io", "lws-set", namespace=namespace)
    (template,) = workload["spec"]["compositePodGroupTemplates"]
    assert template["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
    try:
        first = wait_until(
            lambda: (p := group_pods(stack, namespace, 0)) and len(running(p)) == 2 and p, "the first group", 120
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert racks_of(stack, first) == ["r1", "r1"], racks_of(stack, first)
    group = stack.plane.get(
        "podgroups.scheduling.k8s.io", first[0]["metadata"]["labels"]["gangkeeper.io/group"], namespace=namespace
    )
    assert group["spec"]["parentCompositePodGroupName"] == "lws-set", group["spec"]
    stack.plane.kubectl("-n", plain, "delete", "pod", "fill-2", "--wait=true")
    stack.plane.apply(blocker(plain, "fill-2-smaller", nodes[2], "4"))
    wait_until(lambda: len(running(stack.pods(plain))) == 4, "the smaller filler Running", 60)
    stack.plane.kubectl(
        "-n", namespace, "patch", "leaderworkerset", "set", "--type=merge", "-p", '{"spec":{"replicas":2}}'
    )
    try:
        second = wait_until(
            lambda: (p := group_pods(stack, namespace, 1)) and len(running(p)) == 2 and p, "the second group", 120
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert blocks_of(stack, second) == ["b1"] and racks_of(stack, second) == ["r2", "r2"], racks_of(stack, second)


def test_the_dra_pinch_on_the_newest_native_api_waits_whole_then_starts_whole(newest_stack: Stack) -> None:
    """The pinch with devices (tests/real/test_real_dra.py) on 1.37's native gang API."""
    from tests.real.test_real_dra import dra_pinch_waits_whole_then_starts_whole

    assert newest_stack.plane.minor == "1.37"
    dra_pinch_waits_whole_then_starts_whole(newest_stack, "native")
