"""scheduler-plugins coscheduling: pod label scheduling.x-k8s.io/pod-group and its v1alpha1 PodGroup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from webhook import contract, resources
from webhook.backends.base import (
    TOPOLOGY_BACKENDS,
    Gap,
    NamespaceInfo,
    Served,
    Settings,
    Target,
    hold_for_steering,
    object_meta,
    stamp_common,
)
from webhook.gangs.model import Gang, GangId, Obj, Topology

API_VERSION = "scheduling.x-k8s.io/v1alpha1"
# the second scheduler scheduler-plugins' Helm chart installs (manifests/install/charts/as-a-second-scheduler)
DEFAULT_SCHEDULER = "scheduler-plugins-scheduler"


@dataclass(frozen=True)
class Coscheduling:
    name: ClassVar[str] = "coscheduling"
    group_versions: ClassVar[tuple[str, ...]] = (API_VERSION,)
    needs: ClassVar[str] = API_VERSION
    how_to_enable: ClassVar[str] = "install scheduler-plugins with the coscheduling plugin and its PodGroup CRD"
    gangkeeper_places: ClassVar[bool] = False
    autoscaler_sees_part: ClassVar[bool] = False
    # a gang it refused sits in its backoff until an event wakes it: gangkeeper wakes it when its model
    # sees the gang fit (controller/act/wakeup.py)
    stops_retrying: ClassVar[bool] = True
    # its scheduler (kube-scheduler's framework with the DynamicResources plugin) allocates a claim the gang
    # shares for the first pod it places, and Permit then waits for members that cannot follow: steered
    steers_shared_claims: ClassVar[bool] = True
    # ... and it holds the first pod at Permit while refusing the rest the claim that pod is allocated:
    # the claim is allocated first, by a holder pod (controller/act/claim_holders.py)
    shared_claims_allocated_first: ClassVar[bool] = True
    # its PreFilter refuses a PodGroup any of whose pods is gated ("cannot proceed due to gated pods in
    # the same PodGroup", scheduler-plugins 0.34 pkg/coscheduling/core/core.go): nothing held is handed
    # over apart
    hands_over_all_at_once: ClassVar[bool] = True

    scheduler_name: str = DEFAULT_SCHEDULER

    @classmethod
    def configured(cls, settings: Settings) -> Coscheduling:
        return cls(settings.scheduler(cls.name, DEFAULT_SCHEDULER))

    @classmethod
    def discover(cls, served: Served, settings: Settings) -> Coscheduling | None:
        return cls.configured(settings) if served.has(API_VERSION, "podgroups") else None

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        target.set_scheduler_name(self.scheduler_name)
        stamp_common(target, gang)
        if gang is not None:
            target.labels()[contract.COSCHEDULING_GROUP_LABEL] = gang.name
            hold_for_steering(target.pod_spec(), is_pod, target.labels())

    def group_kinds(self) -> list[tuple[str, str]]:
        return [(API_VERSION, "PodGroup")]

    def marks(self, pod: Obj) -> bool:
        return contract.COSCHEDULING_GROUP_LABEL in ((pod.get("metadata") or {}).get("labels") or {})

    def group_objects(self, gangs: list[Gang], namespace: NamespaceInfo) -> list[Obj]:
        objects = []
        for gang in gangs:
            spec: Obj = {"minMember": gang.min_member}
            min_resources = resources.render(gang.min_resources())
            if min_resources:
                spec["minResources"] = min_resources
            if gang.timeout_seconds:
                spec["scheduleTimeoutSeconds"] = gang.timeout_seconds
            objects.append({"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": object_meta(gang), "spec": spec})
        return objects

    def topology_gap(self, topology: Topology) -> Gap | None:
        # scheduler-plugins' PodGroup (apis/scheduling/v1alpha1/types.go) has no topology field, and
        # Coscheduling only waits at Permit: each pod is still placed alone
        return Gap(f"scheduler-plugins coscheduling has no topology constraint; the gangs of {TOPOLOGY_BACKENDS} do")

    def workload_topology_gap(self, topology: Topology) -> Gap | None:
        return self.topology_gap(topology)
