"""Topology-aware gangs on the real control plane (tests/realcluster/): KWOK nodes labelled into racks,
the real kube-scheduler binding what gangkeeper releases (gate) or placing whole PodGroups itself
(native, TopologyPlacement). Every assertion reads the pods' nodes and those nodes' labels as the
cluster reports them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, bound, running, wait_until

pytestmark = pytest.mark.cluster
RACK = "example.com/rack"


def in_racks(per_rack: int) -> Any:
    return lambda index: {RACK: f"r{index // per_rack + 1}"}


def blocker(namespace: str, name: str, node: str, cpu: str) -> dict[str, Any]:
    """A pod outside any gang holding `cpu` on `node`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "containers": [workloads.container(cpu)]},
    }


def racks_of(stack: Stack, pods: list[dict[str, Any]]) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in stack.plane.get("node")}
    return sorted(nodes[p["spec"]["nodeName"]]["metadata"]["labels"][RACK] for p in pods)


def test_a_required_rack_gang_waits_whole_until_one_rack_frees_then_lands_in_it(stack: Stack) -> None:
    """Two racks of two 4-CPU nodes, 2 CPUs taken in each rack: 12 CPUs free, 6 per rack. A gang of four
    2-CPU pods (KAI's dialect on the workload) fits in aggregate but in no rack: it waits whole. One rack
    frees: the gang lands whole in it. A member lost later is replaced into the same rack, though the
    other rack has room."""
    nodes = stack.replace_workers(4, cpu="4", labels=in_racks(2))
    namespace = stack.namespace("topology-required", "gate")
    plain = stack.namespace("topology-fill", None, opted_in=False)
    stack.plane.apply([blocker(plain, "fill-r1", nodes[0], "2"), blocker(plain, "fill-r2", nodes[2], "2")])
    wait_until(lambda: len(running(stack.pods(plain))) == 2, "the fillers Running", 60)
    annotations = {"kai.scheduler/topology-required-placement": RACK, "gangkeeper.io/placement": "pack"}
    # backoffLimit: the member deleted below must not fail the Job (test_real_recovery.py says why)
    stack.plane.apply(workloads.job("train", namespace, 4, "2", annotations=annotations, backoffLimit=6))
    wait_until(lambda: len(stack.pods(namespace)) == 4, "the gang's pods", 60)
    # the first pass may see a node of r1 still arriving (CI saw "the best, r1, has room for 2" once):
    # the status is asserted once the controller's view has caught up with the cluster's
    gang = wait_until(
        lambda: (
            (g := stack.plane.get("gang", "job-train", namespace=namespace))
            and g.get("status", {}).get("state") == "WaitingForCapacity"
            and "has room for 3" in g["status"].get("message", "")
            and g
        ),
        "the gang waiting, naming a rack with room for 3 of its 4 pods",
        60,
        explain=lambda: str((stack.plane.get("gang", "job-train", namespace=namespace) or {}).get("status")),
    )
    assert f"no {RACK} domain has room for all 4 pods; the best" in gang["status"]["message"], gang["status"]
    assert not bound(stack.pods(namespace))
    stack.plane.kubectl("delete", "pod", "fill-r2", "-n", plain, "--wait=true", timeout=60)
    try:
        pods = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running whole", 90
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert_started_together(pods, 4)
    assert racks_of(stack, pods) == ["r2"] * 4
    gang = stack.plane.get("gang", "job-train", namespace=namespace)
    assert gang["status"].get("domain") == "r2", gang["status"]

    # a member lost: its replacement goes back to r2 (room there again), never to r1 (room for 3)
    victim = pods[0]["metadata"]["name"]
    stack.plane.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false")
    again = wait_until(
        lambda: (
            ((p := stack.pods(namespace)) and victim not in {x["metadata"]["name"] for x in p} and len(running(p)) == 4)
            and p
        ),
        "a replacement Running",
        90,
    )
    assert racks_of(stack, again) == ["r2"] * 4


def test_a_preferred_rack_gang_lands_in_the_fewest_racks(stack: Stack) -> None:
    """Racks of one node each: 4, 4 and 2 CPUs free. Four 2-CPU pods (Kueue's dialect on the pod
    template) cannot share a rack; preferred, they take two racks, where packing alone would start on the
    tightest node and use three."""
    nodes = stack.replace_workers(3, cpu="4", labels=in_racks(1))
    namespace = stack.namespace("topology-preferred", "gate")
    plain = stack.namespace("topology-fill-2", None, opted_in=False)
    stack.plane.apply(blocker(plain, "fill", nodes[2], "2"))
    wait_until(lambda: len(running(stack.pods(plain))) == 1, "the filler Running", 60)
    job = workloads.job(
        "spread",
        namespace,
        4,
        "2",
        annotations={"gangkeeper.io/placement": "pack"},
        pod_annotations={"kueue.x-k8s.io/podset-preferred-topology": RACK},
    )
    stack.plane.apply(job)
    pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 90)
    assert_started_together(pods, 4)
    assert sorted(set(racks_of(stack, pods))) == ["r1", "r2"]


def test_native_topology_placement_keeps_a_podgroup_in_one_rack(stack: Stack) -> None:
    """The native backend: gangkeeper's PodGroup carries schedulingConstraints.topology, and the real
    kube-scheduler's TopologyPlacement (TopologyAwareWorkloadScheduling) puts the whole gang in the one
    rack with room for it."""
    if stack.plane.minor == "1.35":
        pytest.skip("1.35 has no topology-aware workload scheduling")
    nodes = stack.replace_workers(4, cpu="4", labels=in_racks(2))
    namespace = stack.namespace("topology-native", "native")
    plain = stack.namespace("topology-fill-3", None, opted_in=False)
    stack.plane.apply(blocker(plain, "fill", nodes[0], "2"))
    wait_until(lambda: len(running(stack.pods(plain))) == 1, "the filler Running", 60)
    stack.plane.apply(workloads.job("train", namespace, 4, "2", annotations={"gangkeeper.io/topology-required": RACK}))
    group = wait_until(
        lambda: stack.plane.get("podgroups.scheduling.k8s.io", "job-train", namespace=namespace),
        "the PodGroup",
        60,
    )
    assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}, group["spec"]
    try:
        pods = wait_until(lambda: (p := stack.pods(namespace)) and len(running(p)) == 4 and p, "the gang Running", 120)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert racks_of(stack, pods) == ["r2"] * 4
