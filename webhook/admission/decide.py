"""The admission decision for one object: pure, shared by the webhook and `gangkeeper mutate`.

The mutator edits a copy and the patch is computed once, by diffing the object as received against
that copy (webhook.admission.patch), so fields gangkeeper does not know are never touched.
"""

from __future__ import annotations

import marshal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook import contract, gangs, naming
from webhook.admission import forgery, keys
from webhook.admission.controller_lease import ControllerHealth
from webhook.admission.patch import diff
from webhook.backends import Backend, NamespaceInfo, Target
from webhook.backends.base import remove_stamp
from webhook.backends.discovery import Unavailable
from webhook.backends.native import Native
from webhook.backends.volcano import API_VERSION as VOLCANO_API
from webhook.gangs import topology
from webhook.gangs.model import Gang, Obj, Plan, get_path
from webhook.gangs.pod import unowned_member
from webhook.gangs.topology import DEFAULT_LEVELS

_OWN_SCHEDULERS = {"", "default-scheduler"}


@dataclass
class Outcome:
    allowed: bool
    reason: str  # one line for the log: why this decision
    mutated: Obj | None = None
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    code: int = 200
    message: str = ""
    gangs: list[Gang] = field(default_factory=list)
    group_objects: list[Obj] = field(default_factory=list)
    plan: Plan | None = None


def json_copy(value: Any) -> Any:
    """Deep copy of JSON data: marshal's C round trip, twice as fast as a Python walk on a large object
    and never recursing in Python (JSON holds only types marshal knows)."""
    return marshal.loads(marshal.dumps(value))


def describe(obj: Obj) -> str:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = (meta or {}).get("name") or (meta or {}).get("generateName") or "<unnamed>"
    return f'{obj.get("kind", "object")} "{name}"'


def _with_namespace(obj: Obj, namespace: str | None) -> Obj:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    if not namespace or (meta or {}).get("namespace"):
        return obj
    return {**obj, "metadata": {**(meta or {}), "namespace": namespace}}


def _foreign_scheduler(obj: Obj, plan: Plan, backend: Backend) -> str | None:
    ours = _OWN_SCHEDULERS | ({backend.scheduler_name} if backend.scheduler_name else set())
    targets = (
        [Target(obj, "pod")]
        if plan.pod_gang
        else [Target(get_path(obj, t.path) or {}, t.shape) for t in plan.templates]
    )
    for target in targets:
        name = target.scheduler_name()
        if name and name not in ours:
            return name
    return None


def _queue_not_allowed(plan: Plan, backend: Backend, namespace: NamespaceInfo, name: str | None) -> str | None:
    """A Volcano queue the namespace may not use: queues are shared between tenants, and a tenant who
    names another team's queue would take its share. Allowed when the namespace names no list."""
    listed = namespace.annotations.get(contract.NAMESPACE_QUEUES_ANNOTATION)
    if backend.name != "volcano" or listed is None:
        return None
    allowed = {q.strip() for q in listed.split(",") if q.strip()}
    default = namespace.annotations.get(contract.VOLCANO_QUEUE_NAMESPACE_ANNOTATION) or "default"
    for gang in plan.gangs:
        queue = gang.queue or default
        if queue not in allowed:
            return (
                f"metadata.annotations[{contract.QUEUE_ANNOTATION}]: Forbidden: Volcano queue {queue!r} is not one "
                f"namespace {name} may use ({contract.NAMESPACE_QUEUES_ANNOTATION}: {', '.join(sorted(allowed))})"
            )
    return None


def _queue_warnings(group_objects: list[Obj], queues: Mapping[str, str]) -> list[str]:
    """Volcano's pod admission refuses a pod whose PodGroup's queue is missing or not Open (volcano
    pkg/webhooks/admission/pods/validate/admit_pod.go, checkPGQueueState): the workload would get no pods.
    Said at apply time, when the webhook can see the queues (a warning: the queue may come next)."""
    warnings = []
    for group in group_objects:
        if group.get("apiVersion") != VOLCANO_API:
            continue
        queue = str((group.get("spec") or {}).get("queue") or "default")
        state = queues.get(queue)
        if state is None:
            warnings.append(
                f"Volcano queue {queue!r} does not exist: Volcano refuses the pods of PodGroup "
                f"{group['metadata']['name']} until it does (kubectl get queues)"
            )
        elif state != "Open":
            warnings.append(
                f"Volcano queue {queue!r} is {state}: PodGroup {group['metadata']['name']} waits until it opens"
            )
    return warnings


def _priority_warnings(gangs: list[Gang], known: frozenset[str]) -> list[str]:
    """A gang whose PriorityClass does not exist: the API server refuses each of its pods (Priority
    admission), so it would never start. Said at apply (a warning: the class may be created next)."""
    missing = sorted({g.priority_class for g in gangs if g.priority_class and g.priority_class not in known})
    return [
        f"priorityClassName {name!r}: no such PriorityClass; the API server refuses this workload's pods until "
        "it exists (kubectl get priorityclasses), and its gang never starts"
        for name in missing[:3]
    ]


def _topology_verdict(plan: Plan, backend: Backend, levels: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """A required topology the backend cannot honour is refused (the gang would start scattered, the
    one thing its author ruled out); a preferred one, or one the backend only partly honours, is warned
    about; a key that is none of the cluster's levels is warned about on every backend."""
    gang = next((g for g in plan.gangs if g.topology is not None or g.workload_topology is not None), None)
    if gang is None:
        return None, []
    warnings: list[str] = []
    for intent in (gang.topology, gang.workload_topology):
        if intent is None:
            continue
        if (warning := topology.level_warning(intent, levels)) is not None:
            warnings.append(warning)
        gap = backend.topology_gap(intent) if intent is gang.topology else backend.workload_topology_gap(intent)
        if gap is None:
            continue
        if intent.required and gap.refuse:
            return f"{intent.field}: Invalid value: {intent.key!r}: {gap.why}", warnings
        warnings.append(
            f"{intent.field}: {intent.word} topology {intent.key!r} on the {backend.name} backend: {gap.why}"
        )
    if gang.workload_topology is not None:
        if len(plan.gangs) == 1:
            warnings.append(
                f"{gang.workload_topology.field}: this workload is one gang; its workload topology is its gang's"
            )
        elif (nesting := topology.nesting_warning(gang.topology, gang.workload_topology, levels)) is not None:
            warnings.append(nesting)
    return None, warnings


def _named_ahead(obj: Obj, operation: str, backend: Backend | Unavailable) -> Obj:
    """A workload created with only `generateName` has no name at admission, so its gang cannot be named
    and, under Volcano, no PodGroup made ahead of its pods, which Volcano's pod admission then refuses
    (volcano pkg/webhooks/admission/pods/validate/admit_pod.go, checkPG). The name is chosen here, as the
    API server would choose it (it generates one only when admission left metadata.name empty)."""
    meta = obj.get("metadata")
    if (
        operation != "CREATE"
        or isinstance(backend, Unavailable)
        or backend.name != "volcano"
        or obj.get("kind") == "Pod"  # a pod's gang comes from its owner's labels, not its own name
        or not isinstance(meta, dict)
        or meta.get("name")
        or not isinstance(meta.get("generateName"), str)
        or not meta["generateName"]
    ):
        return obj
    return {**obj, "metadata": {**meta, "name": naming.generated_name(meta["generateName"])}}


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
    priority_classes: frozenset[str] | None = None,
) -> Outcome:
    """Decide about `obj`; with `mutate`, also stamp a copy and compute the patch.

    `controller` is what is known of gangkeeper's controller (None: unknown, as offline); a pod is
    never gated when no controller has run, since nothing would lift its gate.
    """
    received, obj = obj, _named_ahead(obj, operation, backend) if mutate else obj
    plan = gangs.analyze(_with_namespace(obj, namespace))
    plan.warnings[:0] = keys.object_warnings(obj)
    if operation == "UPDATE" and old is not None and obj.get("kind") == "Pod":
        moved = forgery.membership_changed(obj, old)
        if moved:
            fields = ", ".join(f"{path}: Invalid value: field is immutable" for path in moved)
            message = f"{describe(obj)} is invalid: {fields} (a pod's gang is set when it is created)"
            return Outcome(False, "gang membership changed", code=422, message=message, plan=plan)
    if operation == "CREATE":
        written = forgery.forged(obj)
    elif operation == "UPDATE" and old is not None and not forgery.is_controller(user):
        written = forgery.forged_on_update(obj, old)
    else:
        written = []
    if written:
        message = (
            f"{describe(obj)} is forbidden: "
            + ", ".join(f"{path}: Forbidden" for path in written)
            + ": only gangkeeper's controller writes its state; remove these annotations"
        )
        return Outcome(False, "controller state written by a client", code=403, message=message, plan=plan)
    impostor = unowned_member(obj, plan.pod_gang) if operation == "CREATE" and plan.pod_gang is not None else None
    if impostor:  # at CREATE only: an owner a later update removes (orphaning) is not refused
        message = f"{describe(obj)} is forbidden: metadata.ownerReferences: Forbidden: {impostor}"
        return Outcome(
            False, "a gang's labels on a pod its workload does not own", code=403, message=message, plan=plan
        )
    if plan.errors:
        message = f"{describe(obj)} is invalid: " + "; ".join(str(e) for e in plan.errors)
        return Outcome(False, "invalid gang settings", code=422, message=message, warnings=plan.warnings, plan=plan)
    if plan.skip:
        outcome = Outcome(True, plan.skip, warnings=plan.warnings, plan=plan)
        if plan.unstamp and operation == "CREATE" and mutate:
            outcome.mutated = json_copy(received)
            remove_stamp(outcome.mutated)
            outcome.patch = diff(received, outcome.mutated)
        return outcome
    if isinstance(backend, Unavailable):
        return Outcome(
            False,
            "gang backend unavailable",
            code=403,
            plan=plan,
            message=f"{describe(obj)} cannot be given a gang: {backend.message}",
        )
    forbidden = _queue_not_allowed(plan, backend, namespace_info or NamespaceInfo(), namespace)
    if forbidden:
        return Outcome(False, "queue not allowed", code=403, plan=plan, message=f"{describe(obj)}: {forbidden}")
    if operation != "CREATE":
        return Outcome(
            True,
            "gang membership is set at creation; updates are only validated",
            warnings=plan.warnings if operation == "UPDATE" else [],
            plan=plan,
        )
    if isinstance(backend, Native):
        problem = backend.too_many_templates(plan.gangs) or backend.unshrinkable(plan.gangs)
        if problem:
            return Outcome(
                False, "no native gang can hold it", code=422, plan=plan, message=f"{describe(obj)}: {problem}"
            )
    refused, topology_warnings = _topology_verdict(plan, backend, topology_levels)
    if refused:
        return Outcome(
            False, "topology not honoured", code=422, plan=plan, message=f"{describe(obj)} is invalid: {refused}"
        )
    plan.warnings.extend(topology_warnings)
    foreign = _foreign_scheduler(obj, plan, backend)
    if foreign:
        warning = (
            f"{describe(obj)} uses scheduler {foreign!r}, not the {backend.name} gang backend's; left without a gang"
        )
        return Outcome(True, f"schedulerName {foreign} belongs to another scheduler", warnings=[warning], plan=plan)
    gating = backend.name == "gate" and plan.pod_gang is not None
    if gating and controller is not None and controller.refusal():
        return Outcome(
            False,
            "no controller to lift the gate",
            code=403,
            plan=plan,
            message=f"{describe(obj)} cannot be gated: {controller.refusal()}",
        )
    outcome = Outcome(True, "gang stamped", warnings=plan.warnings, gangs=plan.gangs, plan=plan)
    if gating and controller is not None and controller.warning():
        outcome.warnings = [*outcome.warnings, str(controller.warning())]
    outcome.group_objects = backend.group_objects(plan.gangs, namespace_info or NamespaceInfo())
    if queues is not None:
        outcome.warnings = [*outcome.warnings, *_queue_warnings(outcome.group_objects, queues)]
    if priority_classes is not None:
        outcome.warnings = [*outcome.warnings, *_priority_warnings(plan.gangs, priority_classes)]
    if not mutate:
        return outcome
    mutated: Obj = json_copy(obj)
    if plan.pod_gang is not None:
        backend.stamp(Target(mutated, "pod"), plan.pod_gang, is_pod=True)
    for stamp in plan.templates:
        template = get_path(mutated, stamp.path)
        if isinstance(template, dict):
            backend.stamp(Target(template, stamp.shape), stamp.gang, is_pod=False)
    outcome.mutated = mutated
    outcome.patch = diff(received, mutated)
    if not outcome.patch:
        outcome.reason = "already stamped"
    return outcome
