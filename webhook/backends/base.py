"""What every backend shares: the stamps gangkeeper itself puts on every managed pod or template."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook import contract
from webhook.gangs import kinds
from webhook.gangs.common import shared_claims_of
from webhook.gangs.model import Gang, GangId, Obj, Topology
from webhook.gangs.pod import workload_stamp
from webhook.gangs.topology import DEFAULT_LEVELS

# the Kubernetes minor whose native generation is assumed where none is discovered (offline, the CLI)
DEFAULT_KUBERNETES_VERSION = "1.37"


@dataclass(frozen=True)
class Served:
    """Resources served per group-version, e.g. {"scheduling.volcano.sh/v1beta1": {"podgroups"}}."""

    resources: Mapping[str, frozenset[str]]

    def has(self, group_version: str, resource: str) -> bool:
        return resource in self.resources.get(group_version, frozenset())

    @staticmethod
    def from_documents(resource_lists: list[Mapping[str, Any]]) -> Served:
        """From APIResourceList documents as /api/v1 and /apis/<group>/<version> return them."""
        found: dict[str, frozenset[str]] = {}
        for doc in resource_lists:
            names = frozenset(str(r["name"]) for r in doc.get("resources") or [] if "/" not in str(r["name"]))
            found[str(doc["groupVersion"])] = names
        return Served(found)


@dataclass(frozen=True)
class Settings:
    """What the platform team configured, alike for every mechanism: scheduler names by mechanism (the
    flags, or a namespace's annotation), the native generation assumed offline, the topology levels."""

    scheduler_names: Mapping[str, str] = field(default_factory=dict)
    offline_kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS
    # offline only (`gangkeeper mutate --volcano-hypernodes`): a Volcano assumed to serve HyperNodes
    volcano_hypernodes: bool = False
    # the platform's word that its Volcano allocates DRA claims (v1.12+, the predicates plugin's
    # DynamicResourceAllocationEnable): discovery cannot tell, and Volcano 1.10 binds pods without them
    volcano_devices: bool = False

    def scheduler(self, mechanism: str, default: str) -> str:
        return self.scheduler_names.get(mechanism) or default


@dataclass(frozen=True)
class NamespaceInfo:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as an object to write into; a null there (JSON's "unset") becomes an empty one."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = parent[key] = {}
    return value


class Target:
    """A place pods are described: a pod, a PodTemplateSpec, or a SparkApplication role."""

    def __init__(self, obj: Obj, shape: str) -> None:
        self.obj, self.shape = obj, shape

    @property
    def is_spark_role(self) -> bool:
        return self.shape == "spark"

    def labels(self) -> dict[str, str]:
        holder = self.obj if self.is_spark_role else _child(self.obj, "metadata")
        return _child(holder, "labels")

    def annotations(self) -> dict[str, str]:
        holder = self.obj if self.is_spark_role else _child(self.obj, "metadata")
        return _child(holder, "annotations")

    def pod_spec(self) -> dict[str, Any] | None:
        """The PodSpec whose gang fields (gates, workload links) may be set here, or None.

        A CRD embeds a copy of PodSpec from the release it was built with; the API server prunes
        fields that copy lacks (the JobSet CRD has no workloadRef), so inside CRDs those fields are
        set on each pod at creation instead.
        """
        return _child(self.obj, "spec") if self.shape == "pod" else None

    def scheduler_name(self) -> str | None:
        holder = self.obj if self.is_spark_role else (self.obj.get("spec") or {})
        value = holder.get("schedulerName")
        return str(value) if value else None

    def set_scheduler_name(self, name: str) -> None:
        holder = self.obj if self.is_spark_role else _child(self.obj, "spec")
        holder["schedulerName"] = name


class Backend(Protocol):
    """One gang mechanism as configured for a cluster: a value (equal when configured alike)."""

    @property
    def name(self) -> str: ...

    @property
    def scheduler_name(self) -> str | None:
        """The scheduler its pods go to; None keeps the default scheduler."""

    @property
    def gangkeeper_places(self) -> bool:
        """Whether gangkeeper's controller places and releases its gangs (else another scheduler does,
        and the controller supervises: controller/act/supervise.py)."""

    @property
    def autoscaler_sees_part(self) -> bool:
        """Whether an autoscaler sees only part of a gang of it that waits for room (placeholders show it
        the whole gang)."""

    @property
    def stops_retrying(self) -> bool:
        """Whether its scheduler stops retrying a gang it refused until something wakes it."""

    @property
    def steers_shared_claims(self) -> bool:
        """Whether a gang of it whose pods share a ResourceClaim is steered: its scheduler allocates the
        claim for the first pod it places, which may trap the rest where the claim's device reaches too
        few nodes, so the pods wait behind gangkeeper's gate until its model finds where one allocation
        holds the whole gang, and are narrowed there (controller/run/steer.py)."""

    @property
    def shared_claims_allocated_first(self) -> bool:
        """Whether a steered gang's shared claim must be allocated before its pods reach its scheduler: one
        that holds the first pod at Permit while its DynamicResources plugin refuses the others a claim "in
        the process of being allocated" never starts such a gang (controller/act/claim_holders.py)."""

    @property
    def hands_over_all_at_once(self) -> bool:
        """Whether its scheduler refuses a gang while any pod of it is gated, so the steps and groups
        gangkeeper holds for it are handed over all at once, never part of what is held
        (controller/run/steer.py)."""

    def stamp(self, target: Target, gang: GangId | None, is_pod: bool) -> None:
        """Put the mechanism's membership on a pod or a template (gang None: per-pod, not known yet)."""

    def marks(self, pod: Obj) -> bool:
        """Whether `pod` carries this mechanism's membership, as its `stamp` wrote it."""

    def group_kinds(self) -> list[tuple[str, str]]:
        """(apiVersion, kind) of every group object `group_objects` may return: what the controller watches."""

    def group_objects(self, gangs: list[Gang], namespace: NamespaceInfo) -> list[Obj]:
        """The group objects the mechanism needs for these gangs, ready to create."""

    def topology_gap(self, topology: Topology) -> Gap | None:
        """What of this topology intent the mechanism would not honour (None: all of it)."""

    def workload_topology_gap(self, topology: Topology) -> Gap | None:
        """The same for a level shared by all the gangs of one workload."""


@dataclass(frozen=True)
class Gap:
    """A topology intent a mechanism does not honour: `why`, and whether a required one is refused at
    apply (else a warning: the gang still starts whole, just not inside one domain)."""

    why: str
    refuse: bool = True


# who keeps a gang inside one domain, for the messages that send users elsewhere
TOPOLOGY_BACKENDS = (
    "gate (any cluster), native on Kubernetes 1.36 and later (feature gate TopologyAwareWorkloadScheduling), "
    "Volcano 1.11 and later (HyperNodes)"
)


def stamp_common(target: Target, gang: GangId | None) -> None:
    if gang is None:
        return
    target.labels()[contract.GROUP_LABEL] = gang.name
    target.annotations()[contract.WORKLOAD_ANNOTATION] = workload_stamp(gang)


def hold_for_steering(spec: Obj | None, is_pod: bool, labels: Mapping[str, str] | None = None) -> None:
    """Gangkeeper's gate on a pod that names a shared ResourceClaim, for a mechanism that `steers_shared_claims`:
    held until the controller pins it where one allocation of that claim holds the whole gang
    (controller/run/steer.py); and on a pod of a group useful only whole (a KubeRay multi-host replica,
    gangs/kinds.py `in_whole_group`), which that mechanism binds pod by pod above a gang's minimum: held
    until the controller hands its group over whole, pinned where it fits. A pod's only, never a
    template's (a gate on a template would be copied to pods the controller does not steer, see gate.py)."""
    if spec is None or not is_pod or not (shared_claims_of(spec) or kinds.in_whole_group(labels or {})):
        return
    gates = spec.setdefault("schedulingGates", [])
    if not any(g.get("name") == contract.GATE for g in gates):
        gates.append({"name": contract.GATE})


def remove_stamp(pod: Obj) -> None:
    """Take gangkeeper's own marks off a pod that another controller's gang claimed (the scheduling gate
    too: nothing of gangkeeper's would ever lift it)."""
    meta = pod.get("metadata") or {}
    stamps = ((meta.get("labels"), contract.GROUP_LABEL), (meta.get("annotations"), contract.WORKLOAD_ANNOTATION))
    for holder, key in stamps:
        if isinstance(holder, dict):
            holder.pop(key, None)
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates")
    if isinstance(gates, list):
        kept = [g for g in gates if not (isinstance(g, dict) and g.get("name") == contract.GATE)]
        if kept:
            spec["schedulingGates"] = kept
        else:
            spec.pop("schedulingGates", None)


def marks_of(backend: Backend, shape: str, gang: GangId | None) -> Obj:
    """What `backend.stamp` writes into a template of this shape, as an otherwise empty template."""
    marks: Obj = {}
    backend.stamp(Target(marks, shape), gang, is_pod=False)
    return marks


def remove_marks(template: Obj, marks: Obj) -> None:
    """Take off `template` each value of `marks` it holds as written (a value the user changed stays)."""
    for key, mark in marks.items():
        held = template.get(key)
        if isinstance(mark, dict) and isinstance(held, dict) and mark != held:
            remove_marks(held, mark)
        elif held == mark:
            del template[key]


def object_meta(gang: Gang, name: str | None = None) -> Obj:
    meta: Obj = {"name": name or gang.name, "labels": {contract.GROUP_LABEL: gang.name}}
    if gang.namespace:
        meta["namespace"] = gang.namespace
    if gang.owner:
        meta["ownerReferences"] = [dict(gang.owner)]
    return meta


class Mechanism(Protocol):
    """A gang mechanism's class, as the registry (webhook/backends/__init__.py) holds it: its name, what
    it needs served, and how it is configured from discovery and the platform's settings."""

    @property
    def name(self) -> str: ...

    @property
    def group_versions(self) -> tuple[str, ...]:
        """The group-versions its discovery reads (GET /apis/<group>/<version>)."""

    @property
    def needs(self) -> str:
        """What the API server must serve for it, as a refusal names it."""

    @property
    def how_to_enable(self) -> str:
        """What a platform team installs or turns on to have it."""

    def configured(self, settings: Settings) -> Backend:
        """The mechanism as configured where nothing was discovered (offline): taken as fully served."""

    def discover(self, served: Served, settings: Settings) -> Backend | None:
        """The mechanism configured for a cluster serving `served`; None where it is not served."""
