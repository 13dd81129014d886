"""The admission decision for one object: pure, shared by the webhook and `gangkeeper mutate`.

The mutator edits a copy and the patch is computed once, by diffing the object as received against
that copy (webhook.admission.patch), so fields gangkeeper does not know are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from webhook import contract, gangs
from webhook.admission import forgery, keys
from webhook.admission.checks import (
    at_lowest_class,
    mark_not_disrupted,
    named_ahead,
    other_scheduler,
    priority_warnings,
    queue_not_allowed,
    queue_warnings,
)
from webhook.admission.patch import diff
from webhook.admission.under_review import Admission, Outcome, describe, json_copy
from webhook.backends import Backend, NamespaceInfo, Target
from webhook.backends.base import marks_of, remove_marks, remove_stamp
from webhook.backends.discovery import Unavailable
from webhook.backends.native import Native
from webhook.backends.volcano import Volcano
from webhook.gangs.common import controller_of
from webhook.gangs.model import Obj, get_path
from webhook.gangs.pod import unowned_member, workload_uid
from webhook.gangs.topology import DEFAULT_LEVELS

if TYPE_CHECKING:  # the decision only asks it; the Lease is read at admission's edge
    from webhook.admission.controller_lease import ControllerHealth


def _with_namespace(obj: Obj, namespace: str | None) -> Obj:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if not namespace or (meta or {}).get("namespace"):
        return obj
    return {**obj, "metadata": {**(meta or {}), "namespace": namespace}}


def membership_moved(a: Admission) -> Outcome | None:
    """A pod's gang is set when it is created: an update that moves it to another is invalid."""
    if a.operation != "UPDATE" or a.old is None or a.obj.get("kind") != "Pod":
        return None
    moved = forgery.membership_changed(a.obj, a.old)
    if not moved:
        return None
    fields = ", ".join(f"{path}: Invalid value: field is immutable" for path in moved)
    message = f"{describe(a.obj)} is invalid: {fields} (a pod's gang is set when it is created)"
    return a.refuse("gang membership changed", 422, message)


def made_by_rewritten(a: Admission) -> Outcome | None:
    """Who made a pod is written once, by the webhook at its creation: an update that adds, changes or
    removes it is refused (a tenant's copy of a member pod would pass for the controller's)."""
    if a.operation != "UPDATE" or a.old is None or a.obj.get("kind") != "Pod" or forgery.is_controller(a.user):
        return None
    if not forgery.made_by_changed(a.obj, a.old):
        return None
    path = f"metadata.annotations[{contract.MADE_BY_ANNOTATION}]"
    message = f"{describe(a.obj)} is invalid: {path}: Invalid value: field is immutable (the webhook writes it)"
    return a.refuse("who made a pod changed", 422, message)


def state_forged(a: Admission) -> Outcome | None:
    """Only gangkeeper's controller writes its state annotations: a client that writes them is refused."""
    if a.operation == "CREATE":
        written = forgery.forged(a.obj)
    elif a.operation == "UPDATE" and a.old is not None and not forgery.is_controller(a.user):
        written = forgery.forged_on_update(a.obj, a.old)
    else:
        written = []
    if not written:
        return None
    message = (
        f"{describe(a.obj)} is forbidden: "
        + ", ".join(f"{path}: Forbidden" for path in written)
        + ": only gangkeeper's controller writes its state; remove these annotations"
    )
    return a.refuse("controller state written by a client", 403, message)


def impostor_member(a: Admission) -> Outcome | None:
    """A pod created with a gang's labels that its workload does not own (at CREATE only: an owner a
    later update removes, orphaning it, is not refused)."""
    if a.operation != "CREATE" or a.plan.pod_gang is None:
        return None
    impostor = unowned_member(a.obj, a.plan.pod_gang)
    if not impostor:
        return None
    message = f"{describe(a.obj)} is forbidden: metadata.ownerReferences: Forbidden: {impostor}"
    return a.refuse("a gang's labels on a pod its workload does not own", 403, message)


def made_for_another(a: Admission) -> Outcome | None:
    """A pod made for an earlier workload of its gang workload's name (deleted and made again while its
    pods wait for the garbage collector, or a pod copied from one): a gang is its own workload's pods,
    by uid. A workload of that name found with another uid and one found absent get the same answer (a
    forged review learns nothing of another namespace's objects). When the workload's uid cannot be read
    now, the pod is admitted and the controller's count, which holds the same rule, leaves it out."""
    gid = a.plan.pod_gang
    if a.operation != "CREATE" or gid is None or a.workload_uids is None or not a.namespace:
        return None
    claimed = workload_uid(a.obj)
    if not claimed:
        return None
    current = a.workload_uids(gid.workload_kind, a.namespace, gid.workload_name, claimed)
    if current is None or current == claimed:
        return None
    workload = f"{gid.workload_kind} {gid.workload_name}"
    message = (
        f"{describe(a.obj)} is forbidden: metadata.ownerReferences: Forbidden: it was made for {workload} "
        f"with uid {claimed}, which is not the uid of a {gid.workload_kind} of that name now: gang {gid.name} "
        "counts only the pods of the workload that has its name now"
    )
    return a.refuse("a pod made for an earlier workload of its name", 403, message)


def invalid_settings(a: Admission) -> Outcome | None:
    """The workload's gang settings are wrong: each error names the field and the fix."""
    if not a.plan.errors:
        return None
    message = f"{describe(a.obj)} is invalid: " + "; ".join(str(e) for e in a.plan.errors)
    return a.refuse("invalid gang settings", 422, message, warnings=a.plan.warnings)


def no_gang(a: Admission) -> Outcome | None:
    """Nothing to group (not a workload gangkeeper groups, already grouped elsewhere, ...): allowed; a
    copied stamp of another workload's gang is removed at creation."""
    if not a.plan.skip:
        return None
    outcome = Outcome(True, a.plan.skip, warnings=a.plan.warnings, plan=a.plan)
    if (a.plan.unstamp or a.plan.owner_uid) and a.operation == "CREATE" and a.mutate:
        outcome.mutated = json_copy(a.received)
        if a.plan.unstamp:
            remove_stamp(outcome.mutated)
        for path in a.plan.owner_uid_templates:
            template = get_path(outcome.mutated, path)
            if isinstance(template, dict):
                Target(template, "pod").annotations()[contract.WORKLOAD_UID_ANNOTATION] = a.plan.owner_uid
        outcome.patch = diff(a.received, outcome.mutated)
    return outcome


def dispatched_elsewhere(a: Admission) -> Outcome | None:
    """A workload a multi-cluster dispatcher manages (MultiKueue's managedBy) makes no pods here: it is
    validated and previewed, never stamped, gated or given group objects. Its copy in the worker cluster
    the dispatcher admits it in is a new object there, whose own gangkeeper gives it its gang, its stamps
    and its membership by that copy's uid (nothing of this cluster's rides along to be taken for it)."""
    dispatcher = gangs.kinds.dispatched_by(a.obj)
    if dispatcher is None:
        return None
    warnings = list(a.plan.warnings)
    if a.operation == "CREATE":
        sizes = ", ".join(f"gang {g.name}: {g.min_member} pods to start together" for g in a.plan.gangs)
        warnings.append(
            f"{describe(a.obj)} is dispatched by {dispatcher}: its pods are made in the worker cluster it is "
            f"admitted in, whose gangkeeper starts them whole ({sizes}); nothing is gated here"
        )
    outcome = Outcome(True, f"dispatched by {dispatcher}", warnings=warnings, gangs=list(a.plan.gangs), plan=a.plan)
    if a.mutate and a.operation == "CREATE" and not isinstance(a.backend, Unavailable):
        # called again after Kueue's webhook defaulted managedBy (its configuration's name sorts after
        # gangkeeper's, kueue pkg/controller/jobframework/defaults.go ApplyDefaultForManagedBy): the
        # first call's marks come off, or the copy would carry this cluster's mechanism to the worker
        outcome.mutated = json_copy(a.received)
        for stamp in a.plan.templates:
            template = get_path(outcome.mutated, stamp.path)
            if isinstance(template, dict):
                remove_marks(template, marks_of(a.backend, stamp.shape, stamp.gang))
        outcome.patch = diff(a.received, outcome.mutated)
        if not outcome.patch:
            outcome.mutated = None
    return outcome


def backend_unavailable(a: Admission) -> Outcome | None:
    """No gang mechanism can serve the namespace (the one it names is not installed): refused with why."""
    if not isinstance(a.backend, Unavailable):
        return None
    return a.refuse("gang backend unavailable", 403, f"{describe(a.obj)} cannot be given a gang: {a.backend.message}")


def queue_forbidden(a: Admission) -> Outcome | None:
    forbidden = queue_not_allowed(a.plan, a.served, a.namespace_info, a.namespace, a.volcano_queues)
    return a.refuse("queue not allowed", 403, f"{describe(a.obj)}: {forbidden}") if forbidden else None


def update_validated(a: Admission) -> Outcome | None:
    """Gang membership is set at creation: updates (and deletes) are only validated."""
    if a.operation == "CREATE":
        return None
    warnings = a.plan.warnings if a.operation == "UPDATE" else []
    return Outcome(
        True, "gang membership is set at creation; updates are only validated", warnings=warnings, plan=a.plan
    )


def no_native_gang(a: Admission) -> Outcome | None:
    """The native API holds a bounded number of pod templates per Workload, and a gang that cannot shrink."""
    backend = a.served
    if not isinstance(backend, Native):
        return None
    problem = backend.too_many_templates(a.plan.gangs) or backend.unshrinkable(a.plan.gangs)
    return a.refuse("no native gang can hold it", 422, f"{describe(a.obj)}: {problem}") if problem else None


def devices_unheld(a: Admission) -> Outcome | None:
    """Pods that claim devices through DRA under a Volcano not known to allocate them: Volcano before
    v1.12 has no DRA in its predicates, and binds such pods with their claims unallocated (seen on the
    real tier with 1.10: all 12 of a 12-pod gang bound, 4 on a node with no device, no claim allocated)."""
    backend = a.served
    if not isinstance(backend, Volcano) or backend.allocates_devices:
        return None
    claiming = [m.path for g in a.plan.gangs for m in g.members if m.claims_devices]
    if not claiming:
        return None
    message = (
        f"{describe(a.obj)} is invalid: {claiming[0]}.spec.resourceClaims: Forbidden: its pods claim devices "
        "through Dynamic Resource Allocation, which this cluster's Volcano is not known to allocate (Volcano "
        "binds them without their devices before v1.12): label the namespace gangkeeper.io/backend=gate or "
        "native, or, with Volcano v1.12 or later and its predicates plugin's DynamicResourceAllocationEnable, "
        "set volcanoAllocatesDevices: true in gangkeeper's Configuration"
    )
    return a.refuse("devices Volcano would not allocate", 422, message)


def topology_refused(a: Admission) -> Outcome | None:
    """A required topology the backend cannot honour (the gang would start scattered)."""
    refused, _ = a.topology
    return a.refuse("topology not honoured", 422, f"{describe(a.obj)} is invalid: {refused}") if refused else None


def foreign_scheduler(a: Admission) -> Outcome | None:
    """A template that names another scheduler is that scheduler's business: left without a gang."""
    foreign = other_scheduler(a.obj, a.plan, a.served)
    if not foreign:
        return None
    warning = (
        f"{describe(a.obj)} uses scheduler {foreign!r}, not the {a.served.name} gang backend's; left without a gang"
    )
    return Outcome(True, f"schedulerName {foreign} belongs to another scheduler", warnings=[warning], plan=a.plan)


def no_controller(a: Admission) -> Outcome | None:
    """A pod is never gated when no controller has run, since nothing would lift its gate."""
    refusal = a.controller.refusal() if a.gating and a.controller is not None else None
    if not refusal:
        return None
    return a.refuse("no controller to lift the gate", 403, f"{describe(a.obj)} cannot be gated: {refusal}")


def stamped(a: Admission) -> Outcome:
    """The last rule: the gang's marks written into a copy (with `mutate`), the group objects it needs,
    and every soft problem as a warning."""
    backend, plan = a.served, a.plan
    warnings = [*plan.warnings, *a.topology[1]]
    if a.gating and a.controller is not None and a.controller.warning():
        warnings.append(str(a.controller.warning()))
    gangs = [at_lowest_class(g, a.priority_classes) for g in plan.gangs]
    outcome = Outcome(True, "gang stamped", warnings=warnings, gangs=gangs, plan=plan)
    outcome.group_objects = backend.group_objects(gangs, a.namespace_info)
    if a.queues is not None:
        outcome.warnings.extend(queue_warnings(outcome.group_objects, a.queues))
    if a.priority_classes is not None:
        outcome.warnings.extend(priority_warnings(plan.gangs, a.priority_classes))
    if not a.mutate:
        return outcome
    mutated: Obj = json_copy(a.obj)
    if plan.pod_gang is not None:
        backend.stamp(Target(mutated, "pod"), plan.pod_gang, is_pod=True)
        stamp_made_by(mutated, a)
        if a.disruption_mark is not None:
            mark_not_disrupted(mutated, a.disruption_mark)
    for stamp in plan.templates:
        template = get_path(mutated, stamp.path)
        if isinstance(template, dict):
            backend.stamp(Target(template, stamp.shape), stamp.gang, is_pod=False)
            # a workload's uid on its own template was copied with it (kubectl get -o yaml): not its own
            holder = template if stamp.shape == "spark" else template.get("metadata")
            held = holder.get("annotations") if isinstance(holder, dict) else None
            if isinstance(held, dict):
                held.pop(contract.WORKLOAD_UID_ANNOTATION, None)
    outcome.mutated = mutated
    outcome.patch = diff(a.received, mutated)
    if not outcome.patch:
        outcome.reason = "already stamped"
    return outcome


def stamp_made_by(pod: Obj, a: Admission) -> None:
    """A workload's member pod, at its creation: who made it, from the review's user, over whatever the
    pod itself said (a copy of a member carries its annotations)."""
    made_by = forgery.made_by(a.user, a.namespace or str((pod.get("metadata") or {}).get("namespace") or ""))
    if a.operation != "CREATE" or made_by is None or controller_of(pod) is None:
        return
    meta = pod.setdefault("metadata", {})
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict):
        annotations = meta["annotations"] = {}
    annotations[contract.MADE_BY_ANNOTATION] = made_by


# The admission rules, in order: the first that returns an outcome decides.
ADMISSION_RULES: tuple[Callable[[Admission], Outcome | None], ...] = (
    membership_moved,
    made_by_rewritten,
    state_forged,
    impostor_member,
    made_for_another,
    invalid_settings,
    no_gang,
    dispatched_elsewhere,
    backend_unavailable,
    queue_forbidden,
    update_validated,
    no_native_gang,
    devices_unheld,
    topology_refused,
    foreign_scheduler,
    no_controller,
    stamped,
)


def admit(
    obj: Obj,
    operation: str,
    backend: Backend | Unavailable,
    namespace: str | None = None,
    namespace_info: NamespaceInfo | None = None,
    mutate: bool = True,
    controller: ControllerHealth | None = None,
    queues: Mapping[str, str] | None = None,
    old: Obj | None = None,
    user: str | None = None,
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
    priority_classes: Collection[str] | None = None,
    volcano_queues: frozenset[str] = frozenset(),
    protect_from_disruption: str = "true",
    workload_uids: Callable[[str, str, str, str], str | None] | None = None,
) -> Outcome:
    """Decide about `obj` by the first of ADMISSION_RULES that applies; with `mutate`, also stamp a
    copy and compute the patch.

    `controller` is what is known of gangkeeper's controller (None: unknown, as offline); a pod is
    never gated when no controller has run, since nothing would lift its gate.
    """
    named = named_ahead(obj, operation, backend) if mutate else obj
    plan = gangs.analyze(_with_namespace(named, namespace))
    plan.warnings[:0] = keys.object_warnings(named)
    admission = Admission(
        received=obj,
        obj=named,
        operation=operation,
        backend=backend,
        plan=plan,
        namespace=namespace,
        namespace_info=namespace_info or NamespaceInfo(),
        mutate=mutate,
        controller=controller,
        queues=queues,
        old=old,
        user=user,
        topology_levels=topology_levels,
        priority_classes=priority_classes,
        volcano_queues=volcano_queues,
        protect_from_disruption=protect_from_disruption,
        workload_uids=workload_uids,
    )
    for rule in ADMISSION_RULES:
        outcome = rule(admission)
        if outcome is not None:
            outcome.rule = rule.__name__
            return outcome
    raise AssertionError("stamped always decides")
