"""Volcano: pod annotation scheduling.k8s.io/group-name and a scheduling.volcano.sh/v1beta1 PodGroup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from webhook import contract, resources
from webhook.backends.base import (
    TOPOLOGY_BACKENDS,
    Gap,
    NamespaceInfo,
    Served,
    Settings,
    Target,
    object_meta,
    stamp_common,
)
from webhook.gangs.model import Gang, GangId, Obj, Topology
from webhook.gangs.topology import DEFAULT_LEVELS, HOSTNAME

API_VERSION = "scheduling.volcano.sh/v1beta1"
# Volcano serves HyperNodes from the release whose PodGroup has spec.networkTopology (v1.11,
# pkg/apis/topology/v1alpha1 in volcano-sh/apis): the one tells of the other
TOPOLOGY_API_VERSION = "topology.volcano.sh/v1alpha1"


@dataclass(frozen=True)
class Volcano:
    name: ClassVar[str] = "volcano"
    group_versions: ClassVar[tuple[str, ...]] = (API_VERSION, TOPOLOGY_API_VERSION)
    needs: ClassVar[str] = API_VERSION
    how_to_enable: ClassVar[str] = "install Volcano (its scheduling.volcano.sh/v1beta1 PodGroup CRD and scheduler)"
    gangkeeper_places: ClassVar[bool] = False
    # it marks the pods it could place Schedulable, so an autoscaler sees only part of a gang that waits
    # for room: gangkeeper's placeholders show it the whole gang (act/placeholders.py hand_over)
    autoscaler_sees_part: ClassVar[bool] = True
    stops_retrying: ClassVar[bool] = False
    steers_shared_claims: ClassVar[bool] = False
    shared_claims_allocated_first: ClassVar[bool] = False
    hands_over_all_at_once: ClassVar[bool] = False

    scheduler_name: str = "volcano"
    network_topology: bool = False  # HyperNodes served: a gang's domain becomes its PodGroup's networkTopology
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    allocates_devices: bool = False  # Settings.volcano_devices

    @classmethod
    def configured(cls, settings: Settings) -> Volcano:
        return cls(
            settings.scheduler(cls.name, "volcano"),
            settings.volcano_hypernodes,
            settings.topology_levels,
            settings.volcano_devices,
        )

    @classmethod
    def discover(cls, served: Served, settings: Settings) -> Volcano | None:
        if not served.has(API_VERSION, "podgroups"):
            return None
        topology = served.has(TOPOLOGY_API_VERSION, "hypernodes")
        return cls(
            settings.scheduler(cls.name, "volcano"), topology, settings.topology_levels, settings.volcano_devices
        )

    def tier(self, key: str) -> int | None:
        """The HyperNode tier a topology key stands for: the configured levels, broadest first, end at
        the node; tier 1 is the HyperNodes right above nodes (Volcano docs, network topology aware
        scheduling), so the level just above hostname is tier 1, the next 2. None: no tier."""
        if key not in self.topology_levels or key == HOSTNAME:
            return None
        above_nodes = [level for level in self.topology_levels if level != HOSTNAME]
        return len(above_nodes) - above_nodes.index(key)

    def workload_topology_gap(self, topology: Topology) -> Gap | None:
        # networkTopology is a field of one PodGroup: nothing ties a workload's PodGroups to one HyperNode
        return Gap(
            "Volcano places each PodGroup within its own HyperNode tier; no constraint spans the PodGroups of "
            "one workload: the gate backend keeps a workload's gangs in one domain"
        )

    def topology_gap(self, topology: Topology) -> Gap | None:
        if not self.network_topology:
            return Gap(
                "this cluster's Volcano serves no HyperNodes (topology.volcano.sh), so its PodGroups have no "
                f"networkTopology (Volcano 1.11 and later); the gangs of {TOPOLOGY_BACKENDS} do"
            )
        if self.tier(topology.key) is None:
            return Gap(
                f"Volcano keeps gangs within HyperNode tiers, and {topology.key!r} is not a level above the node "
                f"in this cluster's topology levels ({', '.join(self.topology_levels)}): use one of those, or "
                "another backend"
            )
        return None

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        target.set_scheduler_name(self.scheduler_name)
        stamp_common(target, gang)
        if gang is not None:
            target.annotations()[contract.VOLCANO_GROUP_ANNOTATION] = gang.name

    def group_kinds(self) -> list[tuple[str, str]]:
        return [(API_VERSION, "PodGroup")]

    def marks(self, pod: Obj) -> bool:
        return contract.VOLCANO_GROUP_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})

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
        tier = self.tier(gang.topology.key) if gang.topology is not None and self.network_topology else None
        if gang.topology is not None and tier is not None:
            # hard: never across a HyperNode above that tier; soft: as low a tier as it can get
            spec["networkTopology"] = {"mode": "hard" if gang.topology.required else "soft", "highestTierAllowed": tier}
        return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": object_meta(gang), "spec": spec}


def volcano_groups_in(workload: Obj, depth: int = 12) -> set[str]:
    """The Volcano group names on the pod templates gangkeeper stamped inside a workload (a template
    carries gangkeeper's workload stamp beside the group annotation; an operator's own groups do not)."""
    found: set[str] = set()

    def walk(node: Any, level: int) -> None:
        if level > depth:
            return
        if isinstance(node, dict):
            meta = node.get("metadata") if "spec" in node else None
            annotations = meta.get("annotations") if isinstance(meta, dict) else None
            if isinstance(annotations, dict) and contract.WORKLOAD_ANNOTATION in annotations:
                group = annotations.get(contract.VOLCANO_GROUP_ANNOTATION)
                if isinstance(group, str) and group:
                    found.add(group)
            for value in node.values():
                walk(value, level + 1)
        elif isinstance(node, list):
            for value in node:
                walk(value, level + 1)

    walk(workload.get("spec"), 0)
    return found
