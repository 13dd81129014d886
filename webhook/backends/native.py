"""Native Kubernetes gang scheduling (scheduling.k8s.io), each API generation exactly as served.

- 1.35, v1alpha1: one Workload with `podGroups`; pods link with `spec.workloadRef`.
- 1.36, v1alpha2: Workload `podGroupTemplates` plus a runtime PodGroup per gang; pods link with
  `spec.schedulingGroup.podGroupName`.
- 1.37, v1beta1: as 1.36, the PodGroup pointing at its template with `spec.workloadRef`. Where the
  cluster also serves v1alpha3 CompositePodGroups (gate CompositePodGroup), a workload whose gangs must
  share one domain gets a composite template, one CompositePodGroup carrying that constraint, and
  PodGroups naming it as their parent (a two-level gang, as kube-scheduler reads it).
Pods keep the default scheduler; the pod link is immutable, so it is set when the pod is created.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from webhook import contract
from webhook.backends.base import (
    DEFAULT_KUBERNETES_VERSION,
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

GROUP = "scheduling.k8s.io"
COMPOSITE_GROUP_VERSION = f"{GROUP}/v1alpha3"


@dataclass(frozen=True)
class Generation:
    kubernetes: str
    version: str
    # a gang preempted whole, never a member alone, in this generation's words (k8s.io/api
    # scheduling/<version>/types.go, DisruptionMode): None where the API has no such field
    whole_gang_disruption: object = None
    # what must be on for kube-scheduler to preempt whole gangs by priority (pkg/features/kube_features.go)
    preemption_gates: tuple[str, ...] = ()
    # the group-version serving CompositePodGroup, a level over several PodGroups: None where it has none
    composite_group_version: str | None = None


GENERATIONS = {
    "1.35": Generation("1.35", "v1alpha1"),
    # 1.36: DisruptionMode "Pod" | "PodGroup" and priorityClassName, alpha behind WorkloadAwarePreemption
    # (which needs GangScheduling); with the gate off the API server drops both fields
    # (pkg/registry/scheduling/podgroup/strategy.go, dropDisabledPodGroupSpecFields)
    "1.36": Generation(
        "1.36", "v1alpha2", "PodGroup", ("GenericWorkload", "GangScheduling", "WorkloadAwarePreemption")
    ),
    # 1.37: DisruptionMode is a union, {single: {}} (the default) or {all: {}}; part of the beta API
    # 1.37 also serves CompositePodGroup in v1alpha3 only (k8s.io/api scheduling/v1alpha3/types.go), alpha
    # behind CompositePodGroup, which needs GenericWorkload and TopologyAwareWorkloadScheduling
    # (pkg/features/kube_features.go); the v1beta1 Workload and PodGroup name it
    "1.37": Generation("1.37", "v1beta1", {"all": {}}, ("GenericWorkload",), COMPOSITE_GROUP_VERSION),
}
# the gates and API a CompositePodGroup needs, for the messages that say how to get one
COMPOSITE_ENABLING = (
    "Kubernetes 1.37 or later with the feature gates CompositePodGroup, GenericWorkload and "
    "TopologyAwareWorkloadScheduling on the API server and kube-scheduler, and "
    "--runtime-config=scheduling.k8s.io/v1alpha3=true"
)
# the one composite template of a Workload whose gangs share a domain (a DNS label, unique in the Workload:
# gang templates are named after their roles, never this)
COMPOSITE_TEMPLATE = "all-gangs"
# pod groups (1.35) or pod group templates (1.36, 1.37) one Workload may hold: k8s.io/api
# scheduling/v1alpha2/types.go WorkloadMaxPodGroupTemplates, `+k8s:maxItems=8` in every generation
MAX_TEMPLATES = 8
# Best first: discovery picks the newest version the cluster serves.
VERSIONS_BEST_FIRST = ("v1beta1", "v1alpha2", "v1alpha1")


def generation_for_version(version: str) -> Generation:
    return next(g for g in GENERATIONS.values() if g.version == version)


def served_generation(served: Served) -> Generation | None:
    """The newest generation whose Workload the cluster serves."""
    for version in VERSIONS_BEST_FIRST:
        if served.has(f"{GROUP}/{version}", "workloads"):
            return generation_for_version(version)
    return None


@dataclass(frozen=True)
class Native:
    name: ClassVar[str] = "native"
    gangkeeper_places: ClassVar[bool] = False
    autoscaler_sees_part: ClassVar[bool] = False
    stops_retrying: ClassVar[bool] = False
    # kube-scheduler allocates a claim the gang shares for its first pod, wherever that pod lands (its
    # DynamicResources plugin, pod by pod; kubernetes/kubernetes#140053): the gang is steered
    steers_shared_claims: ClassVar[bool] = True
    shared_claims_allocated_first: ClassVar[bool] = False
    hands_over_all_at_once: ClassVar[bool] = False
    group_versions: ClassVar[tuple[str, ...]] = (
        *(f"{GROUP}/{version}" for version in VERSIONS_BEST_FIRST),
        COMPOSITE_GROUP_VERSION,
    )
    needs: ClassVar[str] = f"{GROUP} Workload (v1alpha1, v1alpha2 or v1beta1)"
    how_to_enable: ClassVar[str] = (
        "enable the feature gates GenericWorkload and GangScheduling (1.35, 1.36; 1.37 merged "
        "GangScheduling into GenericWorkload) on the API server and kube-scheduler, without which pods are "
        "scheduled one by one, and serve the API with --runtime-config=scheduling.k8s.io/v1alpha1=true (1.35), "
        "v1alpha2 (1.36) or v1beta1 (1.37); for whole-gang preemption by priority also WorkloadAwarePreemption "
        "on 1.36 (1.37 has it in GenericWorkload); for gangs kept in one topology domain also "
        "TopologyAwareWorkloadScheduling (alpha in 1.36 and 1.37); for a workload's gangs kept in one domain "
        f"{COMPOSITE_ENABLING}"
    )
    scheduler_name: ClassVar[None] = None

    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    # whether the cluster serves CompositePodGroups (discovery): only then is a workload level written
    composite_groups: bool = False
    generation: Generation = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        generation = GENERATIONS[self.kubernetes_version]
        object.__setattr__(self, "generation", generation)
        object.__setattr__(self, "composite_groups", self.composite_groups and bool(generation.composite_group_version))

    @classmethod
    def configured(cls, settings: Settings) -> Native:
        # offline, the generation is taken as fully enabled (CompositePodGroups where it has them)
        return cls(settings.offline_kubernetes_version, composite_groups=True)

    @classmethod
    def discover(cls, served: Served, settings: Settings) -> Native | None:
        generation = served_generation(served)
        if generation is None:
            return None
        return cls(generation.kubernetes, served.has(COMPOSITE_GROUP_VERSION, "compositepodgroups"))

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.generation.version}"

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        stamp_common(target, gang)
        spec = target.pod_spec()
        if spec is None or gang is None:
            return
        if self.generation.version == "v1alpha1":
            ref = {"name": gang.native_workload, "podGroup": gang.template}
            if gang.replica_key is not None:
                ref["podGroupReplicaKey"] = gang.replica_key
            spec["workloadRef"] = ref
        else:
            spec["schedulingGroup"] = {"podGroupName": gang.name}
        hold_for_steering(spec, is_pod, target.labels())

    def group_kinds(self) -> list[tuple[str, str]]:
        kinds = [(self.api_version, "PodGroup"), (self.api_version, "Workload")]
        if self.composite_groups:
            kinds.append((str(self.generation.composite_group_version), "CompositePodGroup"))
        return kinds

    def marks(self, pod: Obj) -> bool:
        """The pod's link in this generation's words: workloadRef (1.35) or schedulingGroup (1.36 on)."""
        link = "workloadRef" if self.generation.version == "v1alpha1" else "schedulingGroup"
        return bool((pod.get("spec") or {}).get(link))

    def too_many_templates(self, gangs: list[Gang]) -> str | None:
        """Why the API server would refuse these gangs' Workload (its gangs would then never start)."""
        templates = {g.id.template for g in gangs}
        if len(templates) <= MAX_TEMPLATES:
            return None
        key = "podGroups" if self.generation.version == "v1alpha1" else "podGroupTemplates"
        return (
            f"its {len(templates)} gangs need {len(templates)} pod groups in one Workload, and "
            f"{GROUP}/{self.generation.version} Workload.spec.{key} holds at most {MAX_TEMPLATES}: "
            "use at most 8 (for a JobSet: 8 replicatedJobs, or startupPolicyOrder AnyOrder for one gang), "
            "or another backend (label gangkeeper.io/backend)"
        )

    def unshrinkable(self, gangs: list[Gang]) -> str | None:
        """Why a gang could not start its last, smaller wave here: minCount is immutable before v1beta1
        (k8s.io/api scheduling v1alpha1 Workload.spec, v1alpha2 `+k8s:immutable`). The Job controller's
        own WorkloadWithJob makes gangs only where completions equal parallelism for the same reason."""
        if self.generation.version not in ("v1alpha1", "v1alpha2"):
            return None
        for gang in gangs:
            if gang.smallest_wave is not None and gang.min_member > gang.smallest_wave:
                return (
                    f"spec.completions: its last wave is {gang.smallest_wave} pods, fewer than the gang's "
                    f"{gang.min_member}, and {GROUP}/{self.generation.version} cannot lower a gang's minCount: "
                    "that wave would wait for ever. Set completions to a multiple of parallelism, or "
                    f"annotation gangkeeper.io/min-member to {gang.smallest_wave}, or use the gate backend"
                )
        return None

    def group_objects(self, gangs: list[Gang], namespace: NamespaceInfo) -> list[Obj]:
        objects: list[Obj] = []
        by_workload: dict[str, list[Gang]] = {}
        for gang in gangs:
            by_workload.setdefault(gang.id.native_workload, []).append(gang)
        for members in by_workload.values():
            objects.append(self.workload(members))
            if self.shared_topology(members[0]) is not None:  # the parent before the PodGroups naming it
                objects.append(self.composite_pod_group(members[0]))
            if self.generation.version != "v1alpha1":
                objects.extend(self.pod_group(gang) for gang in members)
        return objects

    def shared_topology(self, gang: Gang) -> Topology | None:
        """The workload-wide domain this mechanism writes for `gang` (as a CompositePodGroup), or None."""
        shared = gang.workload_topology
        return shared if self.composite_groups and shared is not None and shared.required else None

    def workload(self, gangs: list[Gang]) -> Obj:
        first = gangs[0]
        templates: dict[str, Obj] = {}
        for gang in gangs:  # replicas of one template (LWS groups) share it
            policy = {"gang": {"minCount": gang.min_member}}
            if self.generation.version == "v1alpha1":
                templates.setdefault(gang.id.template, {"name": gang.id.template, "policy": policy})
            else:
                template = {
                    "name": gang.id.template,
                    "schedulingPolicy": policy,
                    **self.preemption(gang),
                    **self.constraints(gang),
                }
                templates.setdefault(gang.id.template, template)
        key = "podGroups" if self.generation.version == "v1alpha1" else "podGroupTemplates"
        spec: Obj = {key: list(templates.values())}
        shared = self.shared_topology(first)
        if shared is not None:
            # exactly one of podGroupTemplates and compositePodGroupTemplates (v1beta1 WorkloadSpec): the
            # gangs' templates move under the composite one
            composite = {"name": COMPOSITE_TEMPLATE, **self.composite_spec(first, shared)}
            spec = {"compositePodGroupTemplates": [{**composite, "podGroupTemplates": list(templates.values())}]}
        if first.owner:
            group = first.owner["apiVersion"].rpartition("/")[0] if "/" in first.owner["apiVersion"] else ""
            spec["controllerRef"] = {"apiGroup": group, "kind": first.owner["kind"], "name": first.owner["name"]}
        meta = object_meta(first, first.id.native_workload)
        meta["labels"] = {**meta["labels"], contract.WORKLOAD_ANNOTATION: first.id.native_workload}
        return {"apiVersion": self.api_version, "kind": "Workload", "metadata": meta, "spec": spec}

    def pod_group(self, gang: Gang) -> Obj:
        spec: Obj = {"schedulingPolicy": {"gang": {"minCount": gang.min_member}}}
        if self.generation.version == "v1alpha2":
            spec["podGroupTemplateRef"] = {
                "workload": {"workloadName": gang.id.native_workload, "podGroupTemplateName": gang.id.template}
            }
        else:
            spec["workloadRef"] = {"workloadName": gang.id.native_workload, "templateName": gang.id.template}
        spec.update(self.preemption(gang))
        spec.update(self.constraints(gang))
        spec.update(self.claims(gang))
        if self.shared_topology(gang) is not None:
            spec["parentCompositePodGroupName"] = gang.id.native_workload
        return {"apiVersion": self.api_version, "kind": "PodGroup", "metadata": object_meta(gang), "spec": spec}

    def claims(self, gang: Gang) -> Obj:
        """The claims the gang's pods share, as the PodGroup's own (KEP-5729, DRAWorkloadResourceClaims:
        alpha in 1.36, beta and off in 1.37; k8s.io/api scheduling/v1alpha2 and v1beta1 PodGroupSpec
        ResourceClaims): kube-scheduler then allocates the claim for the group and reserves it for the
        group, not pod by pod. A pod shares the group's claim by an entry of the same name and source,
        which is where these come from. With the gate off the API server drops the field."""
        if self.generation.version == "v1alpha1" or not gang.shared_claims:
            return {}
        return {"resourceClaims": [{"name": name, "resourceClaimName": claim} for name, claim in gang.shared_claims]}

    def composite_spec(self, gang: Gang, shared: Topology) -> Obj:
        """What the composite template and its CompositePodGroup share: the gangs are scheduled each on
        its own (basic: a group is not held for its siblings, as the gate places a workload's gangs one
        after another) but all inside one domain of the shared key, which kube-scheduler's
        TopologyPlacement reads from the CompositePodGroup and applies to every PodGroup under it
        (pkg/scheduler/framework/plugins/topologyaware/topology_placement.go, getTopologyKey)."""
        spec: Obj = {
            "schedulingPolicy": {"basic": {}},
            "schedulingConstraints": {"topology": [{"key": shared.key}]},
        }
        if gang.priority_class:
            spec["priorityClassName"] = gang.priority_class
        return spec

    def composite_pod_group(self, gang: Gang) -> Obj:
        """The CompositePodGroup over all of a workload's PodGroups (k8s.io/api scheduling/v1alpha3
        CompositePodGroupSpec: workloadRef is required), named as its Workload."""
        shared = self.shared_topology(gang)
        assert shared is not None
        spec = {
            "workloadRef": {"workloadName": gang.id.native_workload, "templateName": COMPOSITE_TEMPLATE},
            **self.composite_spec(gang, shared),
        }
        meta = object_meta(gang, gang.id.native_workload)
        meta["labels"] = {**meta["labels"], contract.WORKLOAD_ANNOTATION: gang.id.native_workload}
        return {
            "apiVersion": self.generation.composite_group_version,
            "kind": "CompositePodGroup",
            "metadata": meta,
            "spec": spec,
        }

    def preemption(self, gang: Gang) -> Obj:
        """The fields by which kube-scheduler's workload-aware preemption (KEP-5710) treats the gang as
        one: its priority class (the admission plugin resolves `priority` from it) and a disruption mode
        that evicts it whole, never a member alone."""
        fields: Obj = {}
        if self.generation.whole_gang_disruption is not None:
            fields["disruptionMode"] = self.generation.whole_gang_disruption
        if gang.priority_class:
            fields["priorityClassName"] = gang.priority_class
        return fields

    def constraints(self, gang: Gang) -> Obj:
        """A required topology as the PodGroup's (and its template's) schedulingConstraints: k8s.io/api
        scheduling/v1alpha2 and v1beta1 PodGroupSchedulingConstraints, one TopologyConstraint{key}.
        kube-scheduler's TopologyPlacement honours it with TopologyAwareWorkloadScheduling on; with the
        gate off the API server drops the field (pkg/registry/scheduling/podgroup/strategy.go,
        dropDisabledSchedulingConstraintsFields)."""
        if gang.topology is None or not gang.topology.required or self.generation.version == "v1alpha1":
            return {}
        return {"schedulingConstraints": {"topology": [{"key": gang.topology.key}]}}

    def topology_gap(self, topology: Topology) -> Gap | None:
        if self.generation.version == "v1alpha1":
            return Gap(
                "Kubernetes 1.35's scheduling.k8s.io/v1alpha1 Workload has no topology constraint (it came in "
                f"1.36): the gang starts whole but anywhere; the gangs of {TOPOLOGY_BACKENDS} keep it in one domain",
                refuse=False,
            )
        if not topology.required:
            return Gap(
                "the native PodGroup's topology constraint is required only (k8s.io/api scheduling "
                f"{self.generation.version} TopologyConstraint): a preferred key is not honoured here; make it "
                "required, or use the gate backend",
                refuse=False,
            )
        return None

    def workload_topology_gap(self, topology: Topology) -> Gap | None:
        # one level over several PodGroups is a CompositePodGroup (k8s.io/api scheduling/v1beta1
        # CompositePodGroupTemplate, v1alpha3 CompositePodGroup; feature gate CompositePodGroup, alpha in 1.37)
        if not self.composite_groups:
            served = "this cluster does not serve scheduling.k8s.io/v1alpha3 CompositePodGroups"
            if self.generation.composite_group_version is None:
                served = f"Kubernetes {self.generation.kubernetes} has no CompositePodGroup"
            return Gap(
                "the native API keeps several PodGroups in one domain only through a CompositePodGroup, and "
                f"{served}: it needs {COMPOSITE_ENABLING}; or use the gate backend, which keeps a workload's gangs "
                "in one domain on any cluster"
            )
        if not topology.required:
            return Gap(
                "a CompositePodGroup's topology constraint is required only (k8s.io/api scheduling v1alpha3 "
                "CompositePodGroupSchedulingConstraints): a preferred key is not honoured here; make it required, "
                "or use the gate backend",
                refuse=False,
            )
        return None
