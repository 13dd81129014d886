"""What the admission rules look at beyond the gang itself, each a pure function of the object and the
cluster's settings: a scheduler of another, the Volcano queue a gang names and whether the namespace may
use it, the PriorityClasses of a gang's members, the topology it asks for against the cluster's levels,
the ResourceClaimTemplates and DeviceClasses its pods' claims name, and the group objects named ahead of a
workload's pods. The rules in decide.py call these."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import replace

from webhook import contract, naming
from webhook.backends import Backend, NamespaceInfo, Target
from webhook.backends.discovery import Unavailable
from webhook.backends.volcano import API_VERSION as VOLCANO_API
from webhook.gangs import topology
from webhook.gangs.model import Gang, Obj, Plan, get_path

OWN_SCHEDULERS = {"", "default-scheduler"}  # the schedulers a pod names when it names none of a gang mechanism


def other_scheduler(obj: Obj, plan: Plan, backend: Backend) -> str | None:
    ours = OWN_SCHEDULERS | ({backend.scheduler_name} if backend.scheduler_name else set())
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


ANY_QUEUE = "*"


def queue_not_allowed(
    plan: Plan, backend: Backend, namespace: NamespaceInfo, name: str | None, cluster_queues: frozenset[str]
) -> str | None:
    """A Volcano queue the namespace may not use: queues are shared between tenants, and a tenant who
    names another team's queue would take its share. A namespace may use the queues its owner lists
    (the namespace annotation), else its own default queue (Volcano's scheduling.volcano.sh/queue-name
    annotation, else "default") and the ones the platform allows every namespace (--volcano-queues,
    "*" for any)."""
    if backend.name != "volcano":
        return None
    listed = namespace.annotations.get(contract.NAMESPACE_QUEUES_ANNOTATION)
    default = namespace.annotations.get(contract.VOLCANO_QUEUE_NAMESPACE_ANNOTATION) or "default"
    if listed is not None:
        allowed, source = {q.strip() for q in listed.split(",") if q.strip()}, contract.NAMESPACE_QUEUES_ANNOTATION
    elif ANY_QUEUE in cluster_queues:
        return None
    else:
        allowed = {default, *cluster_queues}
        source = "its default queue and the cluster's --volcano-queues; the namespace's owner may list more with " + (
            contract.NAMESPACE_QUEUES_ANNOTATION
        )
    for gang in plan.gangs:
        queue = gang.queue or default
        if queue not in allowed:
            return (
                f"metadata.annotations[{contract.QUEUE_ANNOTATION}]: Forbidden: Volcano queue {queue!r} is not one "
                f"namespace {name} may use: {', '.join(sorted(allowed))} ({source})"
            )
    return None


def queue_warnings(group_objects: list[Obj], queues: Mapping[str, str]) -> list[str]:
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


# Karpenter's pod annotation: it does not consolidate, drift or voluntarily disrupt a node running a pod
# with it (karpenter pkg/apis/v1/labels.go DoNotDisruptAnnotationKey), so it takes no member of a running
# gang away one node at a time. A pod that says otherwise ("false") keeps its word.
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
# A duration there is a bound: the pod may be disrupted once it has run that long since its startTime
# (karpenter pkg/utils/pod/scheduling.go IsDoNotDisruptActive; parsed by Go's time.ParseDuration and
# positive, parseDoNotDisrupt; Karpenter 1.15 reads it, one that reads only "true" sees no protection)
GO_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))+")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float | None:
    """A Go duration ("90m", "1h30m", "2.5h") in seconds; None for anything else or a value not positive."""
    if not GO_DURATION.fullmatch(text):
        return None
    seconds = sum(
        float(number) * _UNIT_SECONDS[unit] for number, unit in re.findall(r"([\d.]+)(ns|us|µs|ms|s|m|h)", text)
    )
    return seconds if seconds > 0 else None


def protection(value: object) -> str:
    """A protectFromDisruption setting as the annotation says it: "true" (for as long as the pod runs),
    "false" (not marked), or a positive duration that bounds it; ValueError for anything else."""
    text = str(value).lower() if isinstance(value, bool) else str(value).strip()
    if text in ("true", "false") or duration_seconds(text) is not None:
        return text
    raise ValueError(f"{value!r} is not true, false or a positive duration such as 12h or 90m")


def mark_not_disrupted(pod: Obj, value: str = "true") -> None:
    annotations = pod.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.setdefault(DO_NOT_DISRUPT, value)


def at_lowest_class(gang: Gang, known: Collection[str] | None) -> Gang:
    """A gang of several PriorityClasses gets the lowest in its group object (native, Volcano), the same
    rule the gate applies to its pods' priorities; when the classes' values are not known, the one its
    first template names."""
    if not gang.priority_classes or not isinstance(known, Mapping):
        return gang
    values = {c: known.get(c, known.get("", 0)) for c in gang.priority_classes}
    lowest = min(gang.priority_classes, key=lambda c: (values[c], c))
    return replace(gang, priority_class=lowest or None)


def priority_warnings(gangs: list[Gang], known: Collection[str]) -> list[str]:
    """A gang whose PriorityClass does not exist: the API server refuses each of its pods (Priority
    admission), so it would never start. Said at apply (a warning: the class may be created next)."""
    missing = sorted({g.priority_class for g in gangs if g.priority_class and g.priority_class not in known})
    return [
        f"priorityClassName {name!r}: no such PriorityClass; the API server refuses this workload's pods until "
        "it exists (kubectl get priorityclasses), and its gang never starts"
        for name in missing[:3]
    ]


def topology_verdict(plan: Plan, backend: Backend, levels: tuple[str, ...]) -> tuple[str | None, list[str]]:
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


def named_ahead(obj: Obj, operation: str, backend: Backend | Unavailable) -> Obj:
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
