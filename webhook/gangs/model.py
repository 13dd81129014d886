"""The gang model: what every workload kind is reduced to, independent of any gang mechanism."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from webhook import resources

Obj = dict[str, Any]
Path = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldError:
    """One invalid field, rendered the way the API server renders field errors."""

    path: str
    value: object
    detail: str

    def __str__(self) -> str:
        return f"{self.path}: Invalid value: {json.dumps(str(self.value))}: {self.detail}"


@dataclass(frozen=True)
class GangId:
    """Where a pod belongs; computable from the workload or from one of its pods, with equal results."""

    name: str  # group object name and `gangkeeper.io/group` label value
    workload_kind: str
    workload_name: str
    native_workload: str  # scheduling.k8s.io Workload object name
    template: str  # native pod group (template) name inside that Workload
    replica_key: str | None = None  # distinguishes replicas of one template (LWS groups)
    parts: tuple[str, ...] = ()  # the index parts given to the kind's identity(name, *parts)


@dataclass(frozen=True)
class Members:
    """`count` identical members built from one pod spec."""

    role: str
    count: int
    requests: Mapping[str, Decimal]
    has_requests: bool
    path: str = ""  # the pod template they are built from, for error messages
    count_field: str = ""  # the field that sets how many there are: what a user changes to have fewer
    # the ResourceClaims their template shares by name (spec.resourceClaims[] with resourceClaimName):
    # (the entry's name, the claim's name); one claim for every pod that names it, not one per pod
    shared_claims: tuple[tuple[str, str], ...] = ()
    claims_devices: bool = False  # the template's pods claim devices through DRA (spec.resourceClaims)
    # the ResourceClaimTemplates their template names: (the entry's index in spec.resourceClaims, the name)
    claim_templates: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class WholeGroups:
    """Pods of the gang that are useful only together: those with one value of the pod label `label`
    (a KubeRay multi-host replica's name) make a group of the size `sizes` gives for their value of the
    label `by` (their worker group's numOfHosts). The gate releases such a group whole or not at all."""

    label: str
    by: str
    sizes: tuple[tuple[str, int], ...]  # (value of `by`, pods in each of its groups), only sizes above 1
    # (value of `by`: a role, the whole groups of it the gang's minimum holds): every role's minimum binds
    # at once, before any group above a minimum (a RayCluster's worker groups, each its minReplicas);
    # empty: the gang's minimum is any minMember pods, as for a flat gang
    minimums: tuple[tuple[str, int], ...] = ()

    @cached_property
    def _size_by(self) -> dict[str, int]:
        return dict(self.sizes)

    @cached_property
    def _minimum_by(self) -> dict[str, int]:
        return dict(self.minimums)

    def size_of(self, labels: Mapping[str, str]) -> tuple[str, int] | None:
        """(the group, its size) of a pod with these labels; None for a pod in no group of several."""
        group = labels.get(self.label)
        size = self._size_by.get(labels.get(self.by, "")) if group else None
        return (f"{labels.get(self.by, '')}/{group}", size) if group and size else None

    def unit_of(self, name: str, labels: Mapping[str, str]) -> tuple[str, str, int] | None:
        """(its role, its group, the group's size) for a pod of a role with a minimum (a pod alone is a
        group of one where its role's groups are single pods); None for a pod of no role (the head)."""
        role = labels.get(self.by, "")
        if role not in self._minimum_by:
            return None
        found = self.size_of(labels)
        return (role, *found) if found is not None else (role, f"{role}/\x00{name}", 1)


@dataclass(frozen=True)
class Topology:
    """All of the gang's pods on nodes sharing one value of the label `key`: always (required), or as far
    as capacity allows, in the fewest domains (preferred). `field` is where the user said so."""

    key: str
    required: bool
    field: str

    @property
    def word(self) -> str:
        return "required" if self.required else "preferred"


@dataclass(frozen=True)
class Gang:
    id: GangId
    namespace: str
    min_member: int
    members: tuple[Members, ...]
    owner: Obj | None = None  # ownerReference to the workload, when its uid is known
    queue: str | None = None
    priority_class: str | None = None
    # every PriorityClass its pod templates name ("" for none: the cluster's default), when more than one
    priority_classes: tuple[str, ...] = ()
    timeout_seconds: int | None = None
    recovery_seconds: int | None = None  # gangkeeper.io/recovery-timeout-seconds, when set
    # the workload's own policy that recreates the gang whole when a member fails or restarts (LWS
    # RecreateGroupOnPodRestart), in words for the Gang: said while the gang is short, never fought
    restarts_whole: str = ""
    topology: Topology | None = None  # one domain of a node label for all its pods (topology.py)
    workload_topology: Topology | None = None  # one domain of a broader label for all the workload's gangs
    schedule_timeout_seconds: int | None = None
    # Members the workload creates only once the first ones run (a Spark driver asks for its executors):
    # not waited for, but their resources count, and the gate releases only when they would fit too.
    later: tuple[Members, ...] = ()
    # pods in the smallest group the workload starts later (a Job's last wave, when completions exceed
    # parallelism): a gang that cannot lower minCount for it would wait for ever
    smallest_wave: int | None = None
    whole_groups: WholeGroups | None = None  # pods released only together, group by group (ray.py)

    @property
    def name(self) -> str:
        return self.id.name

    @property
    def total_members(self) -> int:
        return sum(m.count for m in self.members)

    @property
    def shared_claims(self) -> tuple[tuple[str, str], ...]:
        """The claims every member's template shares (same entry name, same ResourceClaim): the gang's
        own, as a native PodGroup's `spec.resourceClaims` can hold them (at most 4: k8s.io/api
        scheduling/v1alpha2 MaxPodGroupResourceClaims)."""
        common = set(self.members[0].shared_claims) if self.members else set()
        for members in self.members[1:]:
            common &= set(members.shared_claims)
        return tuple(sorted(common))[:4]

    def min_resources(self) -> dict[str, Decimal]:
        """Requests of the first minMember members, in the order the kind lists its roles."""
        remaining = self.min_member
        parts: list[tuple[Mapping[str, Decimal], int]] = []
        for members in self.members:
            take = min(remaining, members.count)
            parts.append((members.requests, take))
            remaining -= take
            if remaining == 0:
                break
        parts += [(members.requests, members.count) for members in self.later]
        return resources.total(parts)


@dataclass(frozen=True)
class TemplateStamp:
    """A pod template inside a workload, and the gang its pods join (None: decided on each pod)."""

    path: Path
    gang: GangId | None
    # "pod": a PodTemplateSpec of a built-in kind; "crd": one inside a custom resource (metadata and
    # schedulerName only); "spark": a SparkApplication role with labels/annotations/schedulerName.
    shape: str = "pod"


@dataclass
class Plan:
    """What gangkeeper concludes about one object."""

    kind: str
    gangs: list[Gang] = field(default_factory=list)
    templates: list[TemplateStamp] = field(default_factory=list)
    pod_gang: GangId | None = None  # set when the object is a pod that belongs to a gang
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skip: str | None = None  # why the object is left alone
    unstamp: bool = False  # left alone, and gangkeeper's stamp from an earlier pass must come off
    # left alone as its owner's: the uid of that owner (the gang's workload), to be written on these
    # pod templates (contract.WORKLOAD_UID_ANNOTATION)
    owner_uid: str = ""
    owner_uid_templates: list[Path] = field(default_factory=list)

    @staticmethod
    def leave(kind: str, reason: str, warning: str | None = None) -> Plan:
        return Plan(kind=kind, skip=reason, warnings=[warning] if warning else [])


def get_path(obj: Any, path: Path) -> Any:
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or step >= len(obj):
                return None
        elif not isinstance(obj, dict):
            return None
        obj = obj[step] if isinstance(step, int) else obj.get(step)
    return obj


def render_path(path: Path) -> str:
    text = ""
    for step in path:
        text += f"[{step}]" if isinstance(step, int) else (f".{step}" if text else step)
    return text
