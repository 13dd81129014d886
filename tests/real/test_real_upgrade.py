"""A control plane upgraded under gangkeeper: Kubernetes 1.36 to 1.37 over the same etcd. 1.37 serves no
scheduling.k8s.io/v1alpha2 (k8s.io/api has no scheduling/v1alpha2 there), the version gangkeeper's native
gangs are written in on 1.36, so its objects must go before the upgrade (docs/install.md, Upgrading
Kubernetes). The path as documented: `kubectl gangkeeper upgrade-check` lists what would be lost,
the controller is stopped, `kubectl gangkeeper upgrade-prepare` deletes gangkeeper's own v1alpha2
objects, the control plane moves, the controller starts again and writes v1beta1. Every assertion reads
what the API server holds and what the pods report."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.real.test_real_chart import kubectl_gangkeeper
from tests.real.test_real_seeds import assert_started_together
from tests.realcluster import workloads
from tests.realcluster.stack import Stack, running, wait_until

pytestmark = pytest.mark.cluster
OLD, NEW = "podgroups.v1alpha2.scheduling.k8s.io", "podgroups.v1beta1.scheduling.k8s.io"
CONTROLLER = ("-n", "gangkeeper-system", "deployment/gangkeeper-controller")


@pytest.fixture(scope="module")
def upgrade_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A 1.36 cluster of its own (K8S_DEFAULT), to be moved to K8S_NEWEST by the test."""
    from tests.realcluster.controlplane import ControlPlane, versions

    v = versions()
    plane = ControlPlane(tmp_path_factory.mktemp("upgrade-cluster"), kubernetes_version=v["K8S_DEFAULT"])
    target = ControlPlane(tmp_path_factory.mktemp("upgrade-target"), kubernetes_version=v["K8S_NEWEST"])
    reason = plane.missing() or target.missing()
    if reason:
        pytest.skip(reason)
    with Stack(plane, overlay="gate").running() as running_stack:
        yield running_stack


def scale_controller(stack: Stack, replicas: int) -> None:
    """The controller Deployment scaled; a new pod may land on the system nodes only (the fake nodes,
    which run the gangs, are cordoned meanwhile)."""
    if replicas:
        stack.plane.kubectl("cordon", *stack.workers)
        stack.cordon_system(False)
    try:
        stack.plane.kubectl(*CONTROLLER[:2], "scale", CONTROLLER[2], f"--replicas={replicas}")
        if replicas:
            stack.plane.kubectl(*CONTROLLER[:2], "rollout", "status", CONTROLLER[2], "--timeout=120s", timeout=130)
        else:
            wait_until(
                lambda: not stack.pods("gangkeeper-system", "app.kubernetes.io/component=controller"),
                "the controller's pod gone",
                90,
            )
    finally:
        if replicas:
            stack.cordon_system(True)
            stack.plane.kubectl("uncordon", *stack.workers)


def gang_pods(stack: Stack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.pods(namespace, f"job-name={job}")


def test_a_running_native_gang_keeps_running_through_the_upgrade_to_1_37_and_a_new_gang_starts_whole(
    upgrade_stack: Stack,
) -> None:
    from tests.realcluster.controlplane import versions

    stack = upgrade_stack
    stack.replace_workers(2, cpu="8")
    namespace = stack.namespace("upgrade-native", "native")
    stack.plane.apply(workloads.job("before", namespace, 4, "2"))
    before = wait_until(
        lambda: (p := gang_pods(stack, namespace, "before")) and len(running(p)) == 4 and p, "the gang Running", 120
    )
    assert_started_together(before, 4)
    assert stack.plane.get(OLD, "job-before", namespace=namespace)
    # someone else's v1alpha2 object is named as lost, and the check says so in its exit code
    theirs = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "theirs", "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    stack.plane.apply(theirs)
    check = kubectl_gangkeeper(stack, "upgrade-check")
    assert check.returncode == 1, check
    assert f"gangkeeper's  podgroups {namespace}/job-before" in check.stdout, check.stdout
    assert f"gangkeeper's  workloads {namespace}/job-before" in check.stdout, check.stdout
    assert f"not gangkeeper's  podgroups {namespace}/theirs: lost" in check.stdout, check.stdout
    stack.plane.kubectl("-n", namespace, "delete", OLD, "theirs")  # its owner takes it away
    # the running controller would re-make what is deleted: refused until it is stopped
    refused = kubectl_gangkeeper(stack, "upgrade-prepare")
    assert refused.returncode == 1 and "stop it first" in refused.stderr, refused
    scale_controller(stack, 0)
    prepared = kubectl_gangkeeper(stack, "upgrade-prepare")
    assert prepared.returncode == 0, prepared
    assert "0 gangkeeper's, 0 others'" in prepared.stdout, prepared.stdout
    assert not stack.plane.get(OLD, namespace=namespace)
    assert not stack.plane.get("workloads.v1alpha2.scheduling.k8s.io", namespace=namespace)
    stack.plane.upgrade(versions()["K8S_NEWEST"])
    served = stack.plane.kubectl("api-versions").stdout.split()
    assert "scheduling.k8s.io/v1beta1" in served and "scheduling.k8s.io/v1alpha2" not in served, served
    assert kubectl_gangkeeper(stack, "upgrade-check").returncode == 0
    scale_controller(stack, 1)
    # the gang that ran through it all: its group objects made again, in v1beta1, its pods untouched
    group = wait_until(lambda: stack.plane.get(NEW, "job-before", namespace=namespace), "v1beta1 PodGroup", 90)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}, group["spec"]
    assert stack.plane.get("workloads.v1beta1.scheduling.k8s.io", "job-before", namespace=namespace)
    still = gang_pods(stack, namespace, "before")
    assert sorted(p["metadata"]["uid"] for p in still) == sorted(p["metadata"]["uid"] for p in before)
    assert len(running(still)) == 4
    # and a new native gang on 1.37 starts whole, in the room left
    stack.plane.apply(workloads.job("after", namespace, 4, "2"))
    try:
        after = wait_until(
            lambda: (p := gang_pods(stack, namespace, "after")) and len(running(p)) == 4 and p, "the new gang", 120
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.describe(namespace)}") from None
    assert_started_together(after, 4)
    assert stack.plane.get(NEW, "job-after", namespace=namespace)
