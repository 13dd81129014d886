"""Devices for the real tier's KWOK nodes, published as a DRA driver would: a DeviceClass, and one
ResourceSlice per node (its own pool, generation 1, `resourceSliceCount: 1`), owned by its Node so the
garbage collector removes it with the node. kube-scheduler reads only DeviceClasses, ResourceSlices and
ResourceClaims; KWOK never prepares devices, so no kubelet plugin is needed (kubernetes-sigs/kwok
site/content/en/docs/examples/dra.md)."""

from __future__ import annotations

from typing import Any

from tests.realcluster.stack import Stack

DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def node_slice(stack: Stack | None, node: str, count: int, model: str = "a100", unique: bool = False) -> dict[str, Any]:
    """One node's slice; owned by the node (read from `stack`) so it goes with it, or by nothing (None:
    a benchmark's thousands of nodes, each read once would take minutes). `unique`: each device with a
    UUID of its own (as real drivers publish) and one of eight `group`s."""
    meta: dict[str, Any] = {"name": f"{node}-gpus"}
    if stack is not None:
        uid = stack.plane.get("node", node)["metadata"]["uid"]
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]
    devices: list[dict[str, Any]] = [
        {
            "name": f"gpu-{i}",
            "attributes": {"model": {"string": model}, "index": {"int": i}},
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for i in range(count)
    ]
    for i, device in enumerate(devices if unique else ()):
        device["attributes"] |= {"uuid": {"string": f"GPU-{node}-{i}"}, "group": {"int": i % 8}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def publish(stack: Stack, nodes: list[str], per_node: int) -> None:
    stack.plane.apply([device_class(), *(node_slice(stack, node, per_node) for node in nodes)])


def claim_template(
    namespace: str,
    name: str = "one-gpu",
    count: int = 1,
    selector: str | None = None,
    distinct: str | None = None,
    request: str = "gpu",
) -> dict[str, Any]:
    """`distinct`: an attribute the claim's devices must each have a value of their own of."""
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": request, "exactly": exactly}]}
    if distinct:
        devices["constraints"] = [{"distinctAttribute": distinct}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


def claiming(manifest: dict[str, Any], template: str = "one-gpu") -> dict[str, Any]:
    """A workload whose pods each claim devices from the template (one claim per pod)."""
    spec = manifest["spec"]["template"]["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    for container in spec["containers"]:
        container.setdefault("resources", {})["claims"] = [{"name": "gpu"}]
    return manifest
