"""Pods: bare pod groups (`gangkeeper.io/group-name`) and the pods that workloads create.

A pod's gang is read from the labels and owner references its workload controller puts on it, so the
webhook needs no API call, and the name equals the one the workload-level mutation gives.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from webhook import contract
from webhook.gangs import common, kinds, limits
from webhook.gangs.model import FieldError, Gang, GangId, Obj, Plan

KIND = "Pod"


@dataclass(frozen=True)
class Mark:
    """Where a pod or template says which gang it joins, and the group it names."""

    where: str
    group: str

    def __str__(self) -> str:
        return f"{self.where}={self.group}" if self.group else self.where


def gang_mark(pod: Obj) -> Mark | None:
    """The marker by which the pod (or template) is already in a gang, gangkeeper's own or another's."""
    annotations, labels = common.annotations_of(pod), common.labels_of(pod)
    raw_spec = pod.get("spec")
    spec: Obj = raw_spec if isinstance(raw_spec, dict) else {}
    volcano, coscheduling = contract.VOLCANO_GROUP_ANNOTATION, contract.COSCHEDULING_GROUP_LABEL
    if volcano in annotations:
        return Mark(f"annotation {volcano}", str(annotations[volcano]))
    if coscheduling in labels:
        return Mark(f"label {coscheduling}", str(labels[coscheduling]))
    ref = spec.get("workloadRef")
    if ref:
        return Mark("spec.workloadRef", str(ref.get("name", "")) if isinstance(ref, dict) else "")
    group = spec.get("schedulingGroup")
    if group:
        return Mark("spec.schedulingGroup", str(group.get("podGroupName", "")) if isinstance(group, dict) else "")
    for key in contract.KAI_GROUP_KEYS:
        if key in labels or key in annotations:
            return Mark(f"KAI {key}", str(labels.get(key) or annotations.get(key) or ""))
    return None


def foreign_gang(pod: Obj, ours: GangId | None = None) -> Mark | None:
    """The mark by which some other controller put this pod in a gang; a mark naming the gang `ours`
    (gangkeeper's stamp from an earlier pass) is not foreign."""
    mark = gang_mark(pod)
    if mark is None or (ours is not None and mark.group in (ours.name, ours.native_workload)):
        return None
    return mark


def stamped_identity(pod: Obj) -> GangId | None:
    """The gang gangkeeper stamped on the pod's template, when the stamp is consistent."""
    group = common.labels_of(pod).get(contract.GROUP_LABEL)
    workload = common.annotations_of(pod).get(contract.WORKLOAD_ANNOTATION)
    if not group or not workload:
        return None
    kind_name, _, rest = workload.partition("/")
    kind = kinds.by_name(kind_name)
    if kind is None or not rest:
        return None
    name, *parts = rest.split("/")
    try:
        gid = kind.identity(name, *parts)
    except TypeError:
        return None
    return gid if gid.name == group else None


def workload_uid(pod: Obj) -> str:
    """The uid of the workload the pod was made for, where it can be told: its controller owner's when
    that owner is the workload itself (a Job's pod), else the one the webhook wrote on the template of
    the object its operator made for it (a JobSet's Job: gangs._with_owner_uid). "" when neither says:
    the pod is then a member by its owner's name alone (a LeaderWorkerSet's, whose templates carry no stamp).
    A pod no controller owns was written by a user, annotation and all: what it claims is not honoured
    ("" : it stands for no workload's uid, so it cannot speak for another's Kueue Workload)."""
    stamped = stamped_identity(pod)
    owner = common.controller_of(pod) or {}
    if not owner.get("uid"):
        return ""
    if stamped is not None and owner.get("kind") == stamped.workload_kind:
        return str(owner.get("uid") or "")
    return common.annotations_of(pod).get(contract.WORKLOAD_UID_ANNOTATION, "")


def workload_stamp(gid: GangId) -> str:
    """The `gangkeeper.io/workload` value from which `stamped_identity` rebuilds the gang."""
    return "/".join((gid.workload_kind, gid.workload_name, *gid.parts))


def bare_pod_gang(pod: Obj, group: str, plan: Plan) -> Gang | None:
    key = contract.GROUP_SIZE_ANNOTATION
    raw = common.annotations_of(pod).get(key)
    path = f"metadata.annotations[{key}]"
    if raw is None:
        plan.errors.append(FieldError(path, "", f"Required value: set the number of pods in group {group!r}"))
        return None
    try:
        size = int(str(raw).strip())
    except ValueError:
        size = 0
    if size < 1:
        plan.errors.append(FieldError(path, raw, "must be a whole number of pods, at least 1"))
        return None
    if size > limits.max_gang_pods():
        plan.errors.append(limits.too_many(path, raw, size, "lower the group size or split the group"))
        return None
    gid = common.gang_id(KIND, group)
    template = {"spec": pod.get("spec") or {}}
    members = [common.members_of(template, size, "member", (), plan.errors)]
    gang = common.build_gang(pod, gid, members, size, f"the group-size {size}", plan, pod.get("spec") or {})
    common.warn_missing_requests(plan, gang)
    # no pod owns the group: when one member goes, the rest still need it (the controller collects it)
    return replace(gang, owner=None)


def unowned_member(pod: Obj, gid: GangId) -> str | None:
    """Why the pod cannot be a member of the workload gang `gid`: a gang's members are the pods its
    workload's controllers create, each with a controller ownerReference to an object of a kind that
    creates them and of a name that workload gives it (kinds.Kind.owner_name). A pod that only carries
    the gang's labels (a copied pod YAML, a second Job from a copied template) would be counted as a
    member and released in a gang that does not fit. None when it is owned as members are (or cannot be
    checked)."""
    kind = kinds.by_name(gid.workload_kind)
    if kind is None or kind.pod_owners is None or gid.workload_kind == KIND:
        return None
    owner = common.controller_of(pod)
    owner_kind, owner_name = str((owner or {}).get("kind", "")), str((owner or {}).get("name", ""))
    if owner_kind in kind.pod_owners and kind.owner_name(gid.workload_name, owner_name):
        return None
    creators = " or ".join(sorted(kind.pod_owners))
    if not owner:
        found = "it has no controller ownerReference"
    elif owner_kind in kind.pod_owners:
        found = f"its controller is {owner_kind} {owner_name}, not one of {gid.workload_kind} {gid.workload_name}"
    else:
        found = f"its controller is a {owner_kind}"
    return (
        f"gang {gid.name} ({gid.workload_kind} {gid.workload_name}) counts only the pods its {creators} creates, "
        f"and {found}: remove the gang's labels and annotations ({contract.GROUP_LABEL}, "
        f"{contract.WORKLOAD_ANNOTATION} and the workload's own pod labels) to run it on its own, or use "
        f"{contract.GROUP_NAME_LABEL} for a group of bare pods"
    )


def member_group(pod: Obj) -> str:
    """The gang the pod is a member of, by identity: the group its stamp names, when the stamp is
    consistent and the pod's controller owner is that gang's workload (unowned_member); "" otherwise.
    A pod that reached no webhook (label gangkeeper.io/skip) is held to the same rule."""
    group = common.labels_of(pod).get(contract.GROUP_LABEL) or ""
    if not group:
        return ""
    stamped = stamped_identity(pod)
    if stamped is None or stamped.workload_kind == KIND:
        # a bare pod group's stamp (Pod/<group>) or one without its workload: bare pods own themselves
        return group if stamped is not None or contract.GROUP_NAME_LABEL in common.labels_of(pod) else ""
    return "" if unowned_member(pod, stamped) else group


def analyze(pod: Obj) -> Plan:
    plan = Plan(kind=KIND)
    labels = common.labels_of(pod)
    stamped = stamped_identity(pod)
    marker = foreign_gang(pod, stamped)
    if marker:
        # Another mutating webhook (LWS's, KubeRay's, an operator's) put the pod in its own gang after
        # gangkeeper stamped it or its template: that gang wins, and gangkeeper's stamp comes off so no
        # pod is counted in two gangs.
        plan = Plan.leave(KIND, f"already in a gang ({marker})")
        plan.unstamp = stamped is not None
        return plan
    if stamped is not None and stamped.workload_kind != KIND:
        plan.pod_gang = stamped
        return plan
    group = labels.get(contract.GROUP_NAME_LABEL)
    if group:
        gang = bare_pod_gang(pod, group, plan)
        if gang is not None:
            plan.pod_gang = gang.id
            plan.gangs.append(gang)
        return plan
    for kind, rule in kinds.POD_RULES:
        found = rule(pod)
        if found == kinds.WAIT:
            return Plan.leave(KIND, f"{kind} pod without its group labels yet; decided on reinvocation")
        if isinstance(found, GangId):
            plan.pod_gang = found
            return plan
    return Plan.leave(KIND, "not a member of any gang workload")


kinds.register(
    kinds.Kind(
        group="",
        kind=KIND,
        analyze=analyze,
        identity=lambda name: common.gang_id(KIND, name),
        # a workload owned by a pod is an operator's: LeaderWorkerSet's worker StatefulSets are owned by
        # their group's leader pod
        plural="pods",
        gang_parent=True,
        tag="pg",
    )
)
