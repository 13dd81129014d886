"""The controller's list-and-watch caches (webhook.informer): what it keeps of pods and nodes, and the
informers as the reconciler's source. A failed watch is counted in the controller's metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from webhook import contract
from webhook.controller import interning, metrics
from webhook.controller.decide.device_slices import COLUMNS, SKELETON, Skeleton, columns_of, skeleton_of
from webhook.controller.decide.pods import CLAIM_IN_FLIGHT
from webhook.informer import Informer, identity
from webhook.kube import Api, Resource

log = logging.getLogger("gangkeeper.controller.informer")


def _keep(value: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: value[k] for k in keys if isinstance(value, dict) and k in value}


# what placement and release read of any pod (it only counts against its node), and of a gang's pod
OTHER_POD_SPEC = ("nodeName", "overhead", "nodeSelector", "schedulingGates", "resources", "priority")
GANG_POD_SPEC = (
    "nodeName",
    "nodeSelector",
    "schedulingGates",
    "overhead",
    "resources",  # pod-level requests (KEP-2837)
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulerName",
    "priorityClassName",
    "priority",
    "preemptionPolicy",  # Never: the gang preempts nothing (preemptor.py)
    "hostNetwork",
    "resourceClaims",
    # the native gang link: which mechanism the pod was stamped for (backends.Mechanisms.of_pod)
    "workloadRef",
    "schedulingGroup",
)
OTHER_POD_META = ("name", "namespace", "resourceVersion", "deletionTimestamp")
GANG_POD_META = (*OTHER_POD_META, "uid", "labels", "annotations", "ownerReferences", "creationTimestamp")


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Only what placement and release read: a cluster's worth of full pods would not fit in memory.

    Pods of gangs keep what release needs; every other pod only counts against its node's capacity.
    """
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    managed = contract.GROUP_LABEL in labels or contract.PLACEHOLDER_LABEL in labels
    meta = _keep(metadata, GANG_POD_META if managed else OTHER_POD_META)
    if "namespace" in meta:
        meta["namespace"] = interning.text(meta["namespace"])
    spec = _trim_pod_spec(pod.get("spec") or {}, managed)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": _trim_pod_status(pod, managed)}


def trim_kueue_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """A Kueue Workload as gangkeeper's AdmissionCheck reads it (controller/decide/kueue_check.py): its
    podSets' counts and what placement reads of their pods, its admission, checks and conditions' states,
    its owner and the cluster MultiKueue chose (a manager's Gang says it)."""
    metadata, spec = workload.get("metadata") or {}, workload.get("spec") or {}
    pod_sets = [
        {
            "name": s.get("name"),
            "count": s.get("count"),
            "template": {"spec": _trim_pod_spec(((s.get("template") or {}).get("spec")) or {}, True)},
        }
        for s in spec.get("podSets") or []
        if isinstance(s, dict)
    ]
    status = workload.get("status") or {}
    kept = _keep(status, ("admission", "admissionChecks", "clusterName", "nominatedClusterNames"))
    if isinstance(status.get("conditions"), list):  # whether admitted, ready, finished: not their messages
        kept["conditions"] = [_keep(c, ("type", "status")) for c in status["conditions"] if isinstance(c, dict)]
    return {
        "metadata": _keep(
            metadata, ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "ownerReferences")
        ),
        "spec": {"podSets": pod_sets},
        "status": kept,
    }


def _trim_pod_spec(spec: dict[str, Any], managed: bool) -> dict[str, Any]:
    trimmed = _keep(spec, GANG_POD_SPEC if managed else OTHER_POD_SPEC)
    if managed and spec.get("volumes"):  # only whether a claim may tie the pod to nodes
        trimmed["volumes"] = [
            {"persistentVolumeClaim": v["persistentVolumeClaim"]}
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        ]
    container_keys = ("resources", "restartPolicy", "ports") if managed else ("resources", "restartPolicy")
    for key in ("containers", "initContainers"):
        if spec.get(key):
            trimmed[key] = interning.canonical([_keep(c, container_keys) for c in spec[key]])
    if "nodeName" in trimmed:
        trimmed["nodeName"] = interning.text(trimmed["nodeName"])
    if trimmed.get("resourceClaims"):  # a gang's pods name the same claims: one copy, and a cache key
        trimmed["resourceClaims"] = interning.canonical(trimmed["resourceClaims"])
    return trimmed


def _trim_pod_status(pod: dict[str, Any], managed: bool) -> dict[str, Any]:
    status = pod.get("status") or {}
    trimmed: dict[str, Any] = {"phase": interning.text(status["phase"])} if status.get("phase") else {}
    if managed:  # whether the scheduler refused a released pod
        scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        if scheduled:
            trimmed["conditions"] = [
                {**_keep(c, ("type", "status", "reason")), **_transient(c.get("message"))} for c in scheduled
            ]
    return trimmed


def _transient(message: Any) -> dict[str, Any]:
    """The scheduler's message, kept only where it says the refusal is for a moment (a few words of it,
    not every pod's full text: a cluster's worth of messages would not fit in memory)."""
    text = str(message or "")
    return {"message": CLAIM_IN_FLIGHT} if CLAIM_IN_FLIGHT in text else {}


def trim_node(node: dict[str, Any]) -> dict[str, Any]:
    """Nodes carry image lists and conditions placement never reads."""
    return {
        "metadata": _keep(node.get("metadata") or {}, ("name", "labels", "resourceVersion")),
        "spec": _keep(node.get("spec") or {}, ("taints", "unschedulable")),
        "status": _keep(node.get("status") or {}, ("allocatable",)),
    }


SLICE_META = ("name", "uid", "resourceVersion")  # a slice's name in problems; uid and version: parsed once
MAX_SLICES_SHARED = 4  # the devices of this many slices kept, most recent first, for the next slices alike
# the recent slices' (devices, sharedCounters, Skeleton, columns), replaced whole (read and written by the slices'
# informer)
_recent_slices: list[tuple[tuple[Any, Any, Skeleton | None, Any], ...]] = [()]


def trim_slice(resource_slice: dict[str, Any]) -> dict[str, Any]:
    """A ResourceSlice without managedFields, its devices and shared counters those of a recent slice when
    equal: a driver publishes the nodes of one model alike and the API lists them in a row, so 5,000 such
    nodes hold one copy (8-9 KB each, as the API gives 8 GPUs), and the pools tell them alike by identity
    (device_slices.alike_devices). With its devices' Skeleton, the same object for slices alike but in
    their attributes' values (each GPU's UUID): made here, once per slice as it arrives, not in every
    pass's reading. Never modified: the informer holds what it is given."""
    spec = resource_slice.get("spec")
    trimmed = {"metadata": _keep(resource_slice.get("metadata") or {}, SLICE_META), "spec": spec}
    if type(spec) is not dict:
        return trimmed
    devices, counters = spec.get("devices"), spec.get("sharedCounters")
    if type(devices) is not list:
        return trimmed
    recent = _recent_slices[0]
    for kept in recent:
        if kept[0] == devices and kept[1] == counters:
            shared = {**spec, "devices": kept[0]}
            if "sharedCounters" in spec:
                shared["sharedCounters"] = kept[1]
            trimmed["spec"] = shared
            trimmed[SKELETON], trimmed[COLUMNS] = kept[2], kept[3]
            if kept is not recent[0]:
                _recent_slices[0] = (kept, *(k for k in recent if k is not kept))
            return trimmed
    skeleton = skeleton_of(devices)
    if skeleton is not None:
        skeleton = next((k[2] for k in recent if k[2] is not None and k[2] == skeleton), skeleton)
        trimmed[SKELETON], trimmed[COLUMNS] = skeleton, columns_of(devices, skeleton)
    _recent_slices[0] = ((devices, counters, skeleton, trimmed.get(COLUMNS)), *recent[: MAX_SLICES_SHARED - 1])
    return trimmed


def count_watch_error(status: int) -> None:
    metrics.API_ERRORS.labels("watch", str(status)).inc()


def controller_informer(
    api: Api,
    resource: Resource,
    transform: Callable[[dict[str, Any]], dict[str, Any]] = identity,
    changed: threading.Event | None = None,
) -> Informer:
    """An informer whose failed watches the controller's metrics count (gangkeeper_api_errors_total)."""
    return Informer(api, resource, transform=transform, changed=changed, on_error=count_watch_error)


class InformerSource:
    """Pods and nodes from informers, for the reconciler."""

    def __init__(self, pods: Informer, nodes: Informer) -> None:
        self._pods, self._nodes = pods, nodes

    def pods(self) -> list[dict[str, Any]]:
        return self._pods.items()

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes.items()

    def changes(self) -> tuple[dict[str, dict[str, Any] | None], dict[str, dict[str, Any] | None]]:
        """Pods and nodes changed since the last call (everything, the first time)."""
        return self._pods.drain(), self._nodes.drain()
