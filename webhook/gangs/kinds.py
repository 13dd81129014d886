"""The registry of workload kinds: each knows its gangs, its pod templates and how to spot its pods."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from webhook.gangs.model import GangId, Obj, Plan, get_path

# A pod of the kind yields its gang, None when the pod is not one of this kind's, or WAIT when it is
# but the operator has not yet put the labels that identify the gang (a later reinvocation will).
WAIT = "wait"
PodRule = Callable[[Obj], "GangId | str | None"]


def same_name(workload: str, owner: str) -> bool:
    """The pods' owner is the workload itself, or an object of the workload's own name (a Job's pods)."""
    return owner == workload


def derived_name(workload: str, owner: str) -> bool:
    """The pods' owner is an object the operator names after the workload: `<workload>-<suffix>`."""
    return owner == workload or owner.startswith(f"{workload}-")


OwnerName = Callable[[str, str], bool]


@dataclass(frozen=True)
class Kind:
    group: str  # API group ("" for core)
    kind: str
    analyze: Callable[[Obj], Plan]
    identity: Callable[..., GangId]  # (workload name, *index parts) -> GangId
    pod_rule: PodRule | None = None
    # Pods of operator kinds also look like pods of the built-in kinds they use (a JobSet's pods
    # belong to Jobs): specific rules (0) are checked before generic owners (1).
    generic_owner: bool = False
    # the kinds whose objects create this kind's member pods, as each pod's controller ownerReference
    # shows at CREATE (a Job's pods: Job; a LeaderWorkerSet's: its StatefulSets); None where an owner
    # may be set after creation (the Spark operator's driver pods), so membership cannot be checked
    pod_owners: frozenset[str] | None = None
    # (workload name, owner name): whether a pod's controller owner of a kind in pod_owners is one that
    # this workload made, by name. A pod is a member by identity, never by copyable labels: a second
    # workload with a copied template (or a copied pod) is never counted in the first one's gang.
    owner_name: OwnerName = same_name
    # its resource (the webhook's rules admit it), and the version the controller reads it at (none:
    # never read, as a Pod or CronJob, whose gangs come from elsewhere); versions another operator serves
    plural: str = ""
    version: str = ""
    other_versions: tuple[str, ...] = ()
    # its suspend field, when it has one: a timed-out gang of it is requeued whole by suspending and
    # resuming it, so its owner deletes the pods without counting them as failures (requeue.py)
    suspend_path: tuple[str, ...] = ()
    # the kind of a controller owner whose suspend field this kind's object follows: a TrainJob's JobSet
    # is suspended through its TrainJob (Kubeflow Trainer keeps the JobSet's suspend in step with it)
    suspended_through: str = ""
    # its gangs spread one pod per node unless told to pack (`gangkeeper.io/placement`): serving
    # replicas, where a node lost takes one replica, not many
    spreads: bool = False
    # under Volcano its operator makes the gang's PodGroups itself (LWS's Volcano provider, lws
    # pkg/schedulerprovider/volcano_provider.go): gangkeeper's own are not made for it
    volcano_groups_by_operator: bool = False
    # its managedBy field, when it has one: a value in DISPATCHERS means the object is dispatched to
    # another cluster, whose own admission gives it its gang (the pods are never made here)
    managed_by_path: tuple[str, ...] = ()
    # it creates workloads (Jobs, StatefulSets, a RayCluster) whose pods join its own gang: those
    # children are never grouped again
    gang_parent: bool = False
    tag: str = ""  # the short tag in its gangs' names (a Job and a StatefulSet may share a name)
    # a pod label naming the group of several pods the pod is useful only with (a KubeRay multi-host
    # replica): mechanisms that bind pods above a gang's minimum one by one get such pods handed over a
    # whole group at a time (backends/base.py hold_for_steering, controller/run/steer.py)
    whole_group_label: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# managedBy values that hand an object to another cluster: Kueue's MultiKueue keeps the manager's
# controllers off it and creates its copy, managedBy cleared, on the worker it admits it in (kueue
# pkg/controller/jobs/job/job_multikueue_adapter.go SyncJob; the value is kueue.MultiKueueControllerName)
DISPATCHERS = {"kueue.x-k8s.io/multikueue": "Kueue's MultiKueue"}

REGISTRY: dict[tuple[str, str], Kind] = {}
POD_RULES: list[tuple[str, PodRule]] = []  # checked in this order: operator kinds, then generic owners


def register(kind: Kind) -> Kind:
    REGISTRY[(kind.group, kind.kind)] = kind
    if kind.pod_rule is not None:
        POD_RULES.append((kind.kind, kind.pod_rule))
        POD_RULES.sort(key=lambda rule: REGISTRY[_key_of(rule[0])].generic_owner)
    return kind


def _key_of(kind_name: str) -> tuple[str, str]:
    return next(key for key, kind in REGISTRY.items() if kind.kind == kind_name)


def lookup(api_version: str, kind: str) -> Kind | None:
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    return REGISTRY.get((group, kind))


def dispatched_by(obj: Obj) -> str | None:
    """The multi-cluster dispatcher (DISPATCHERS) that manages `obj`, None when it runs here."""
    entry = lookup(str(obj.get("apiVersion") or ""), str(obj.get("kind") or ""))
    if entry is None or not entry.managed_by_path:
        return None
    value = get_path(obj, entry.managed_by_path)
    return DISPATCHERS.get(value) if isinstance(value, str) else None


def tag_of(kind: str) -> str:
    entry = by_name(kind)
    return entry.tag if entry is not None and entry.tag else kind.lower()


def gang_parents() -> frozenset[str]:
    return frozenset(k.kind for k in REGISTRY.values() if k.gang_parent)


def by_name(kind: str) -> Kind | None:
    for entry in REGISTRY.values():
        if entry.kind == kind:
            return entry
    return None


def suspend_owner(workload: Obj | None) -> tuple[str, str] | None:
    """(kind, name) of the controller owner whose suspend field stops this workload, when its kind is
    suspended through one (`Kind.suspended_through`): read that object instead of the workload."""
    meta = (workload or {}).get("metadata") or {}
    record = next((k for k in REGISTRY.values() if k.kind == (workload or {}).get("kind")), None)
    if record is None or not record.suspended_through:
        return None
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None or owner.get("kind") != record.suspended_through or not owner.get("name"):
        return None
    return record.suspended_through, str(owner["name"])


def spreads(kind: str) -> bool:
    """Whether gangs of this kind spread by default (`Kind.spreads`)."""
    return any(k.spreads for k in REGISTRY.values() if k.kind == kind)


def volcano_groups_by_operator(kind: str) -> bool:
    """Whether the operator of this kind makes its gangs' Volcano PodGroups (`Kind.volcano_groups_by_operator`)."""
    return any(k.volcano_groups_by_operator for k in REGISTRY.values() if k.kind == kind)


def in_whole_group(labels: Mapping[str, str]) -> bool:
    """Whether a pod with these labels belongs to a group useful only whole (`Kind.whole_group_label`),
    which gangkeeper hands over whole where its mechanism binds pods above a gang's minimum one by one.
    A Deployment's or StatefulSet's steps are not held so: on 5,000 nodes, holding a 1,000-pod
    StatefulSet under native made it start in 106 s against 52 s (bench/cluster.py --scenarios step)."""
    return any(k.whole_group_label and k.whole_group_label in labels for k in REGISTRY.values())
