"""Volcano: pod annotation scheduling.k8s.io/group-name and a scheduling.volcano.sh/v1beta1 PodGroup."""

from __future__ import annotations

from webhook import contract, resources
from webhook.backends.base import NamespaceInfo, Target, object_meta, stamp_common
from webhook.gangs.model import Gang, GangId, Obj

API_VERSION = "scheduling.volcano.sh/v1beta1"


class Volcano:
    name = "volcano"

    def __init__(self, scheduler_name: str = "volcano") -> None:
        self.scheduler_name: str | None = scheduler_name

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        target.set_scheduler_name(self.scheduler_name or "volcano")
        stamp_common(target, gang)
        if gang is not None:
            target.annotations()[contract.VOLCANO_GROUP_ANNOTATION] = gang.name

    def group_objects(self, gangs: list[Gang], namespace: NamespaceInfo) -> list[Obj]:
        return [self.pod_group(gang, namespace) for gang in gangs]

    def pod_group(self, gang: Gang, namespace: NamespaceInfo) -> Obj:
        spec: Obj = {"minMember": gang.min_member}
        min_resources = resources.render(gang.min_resources())
        if min_resources:
            spec["minResources"] = min_resources
        queue = gang.queue or namespace.annotations.get(contract.VOLCANO_QUEUE_NAMESPACE_ANNOTATION)
        if queue:
            spec["queue"] = queue
        if gang.priority_class:
            spec["priorityClassName"] = gang.priority_class
        return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": object_meta(gang), "spec": spec}
