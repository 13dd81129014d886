"""Gangs whose pods claim devices through Dynamic Resource Allocation, on the real tier: kube-scheduler's
DynamicResources plugin allocates them from ResourceSlices published for KWOK nodes (tests/realcluster/
dra.py). The seeds' pinch with devices: a 12-pod gang, one device per pod, devices for 8 published. With
no gang mechanism 8 pods run and 4 wait for devices (the partial start); under gangkeeper none is bound
until devices for all 12 are there, then all start together. Every assertion reads what the cluster
reports: pods' nodes and phases, and the ResourceClaims kube-scheduler allocated."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.realcluster import dra, workloads
from tests.realcluster.stack import Stack, bound, gated, running, wait_until
from tests.test_real_seeds import Watch, assert_started_together, hold_pending

pytestmark = pytest.mark.cluster
SIZE = 12


def allocated_devices(stack: Stack, namespace: str) -> dict[str, list[str]]:
    """Pod name -> the devices its claims were allocated (as the ResourceClaims say)."""
    found: dict[str, list[str]] = {}
    for claim in stack.plane.get("resourceclaims.resource.k8s.io", namespace=namespace):
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for owner in claim["metadata"].get("ownerReferences") or []:
            if owner.get("kind") == "Pod":
                found.setdefault(owner["name"], []).extend(f"{r['pool']}/{r['device']}" for r in results)
    return found


def dra_pinch(stack: Stack, backend: str | None) -> tuple[str, list[str]]:
    """Four nodes with CPU for all; devices published on two of them (4 each): room for 8 of 12 pods."""
    nodes = stack.replace_workers(4)
    dra.publish(stack, nodes[:2], 4)
    namespace = stack.namespace(f"dra-{backend or 'floor'}", backend, opted_in=backend is not None)
    stack.plane.apply(dra.claim_template(namespace))
    stack.plane.apply(dra.claiming(workloads.job("train", namespace, SIZE, "100m")))
    return namespace, nodes


@pytest.mark.parametrize("backend", ["gate", "native"])
def test_a_dra_gang_waits_whole_for_devices_then_starts_whole(stack: Stack, backend: str) -> None:
    namespace, nodes = dra_pinch(stack, backend)
    started = time.monotonic()
    pods = hold_pending(stack, namespace, SIZE, seconds=15)
    if backend == "gate":
        assert len(gated(pods)) == SIZE
        gang = wait_until(lambda: stack.plane.get("gang", "job-train", namespace=namespace), "the Gang", 30)
        assert "8" in (gang.get("status") or {}).get("message", ""), gang.get("status")
    with Watch(stack, namespace) as watch:
        dra.publish(stack, nodes[2:], 4)
        pods = wait_until(
            lambda: (p := stack.pods(namespace)) and len(running(p)) == SIZE and p, "the gang Running", 120, every=1
        )
    took = time.monotonic() - started
    assert_started_together(pods, SIZE)
    assert not watch.partial, f"partly bound for {watch.longest_partial:.1f}s"
    devices = allocated_devices(stack, namespace)
    assert sorted(devices) == sorted(p["metadata"]["name"] for p in pods)
    assert all(len(d) == 1 for d in devices.values()), devices
    # each pod's device is on its own node, and no device went to two pods
    node_of = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}
    assert all(d[0].split("/")[0] == node_of[name] for name, d in devices.items()), (devices, node_of)
    assert len({d[0] for d in devices.values()}) == SIZE
    print(f"\n{backend}: apply to all {SIZE} Running, with devices published 15 s in: {took:.1f} s")


def test_without_a_gang_mechanism_the_dra_pinch_starts_part(stack: Stack) -> None:
    """The floor: a namespace not opted in, the same pinch: 8 pods get devices and run, 4 wait."""
    namespace, _ = dra_pinch(stack, None)
    wait_until(lambda: len(running(stack.pods(namespace))) == 8, "eight pods Running", 90)
    time.sleep(5)
    pods = stack.pods(namespace)
    assert len(running(pods)) == 8 and len(bound(pods)) == 8 and len(pods) == SIZE


def test_a_gang_asking_for_devices_no_node_has_waits_whole_saying_so(stack: Stack) -> None:
    """Bad input that can only be known in the cluster: a request selector no published device matches,
    and a template that does not exist. Nothing is bound; the Gang says why."""
    nodes = stack.replace_workers(2)
    dra.publish(stack, nodes, 4)
    namespace = stack.namespace("dra-impossible", "gate")
    h100 = 'device.attributes["gpu.example.com"].model == "h100"'
    stack.plane.apply(dra.claim_template(namespace, "h100", selector=h100))
    stack.plane.apply(dra.claiming(workloads.job("h100", namespace, 2, "100m"), "h100"))
    stack.plane.apply(dra.claiming(workloads.job("missing", namespace, 2, "100m"), "no-such-template"))

    def messages() -> dict[str, str] | None:
        gangs = {
            g["metadata"]["name"]: (g.get("status") or {}).get("message", "")
            for g in stack.plane.get("gangs", namespace=namespace)
        }
        return gangs if len(gangs) == 2 and all(gangs.values()) else None

    found: dict[str, Any] = wait_until(messages, "both Gangs saying why they wait", 60)
    assert "could hold 0" in found["job-h100"], found
    assert "ResourceClaimTemplate no-such-template does not exist" in found["job-missing"], found
    assert not bound(stack.pods(namespace))
