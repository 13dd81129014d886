"""The shape of a custom resource, checked before gangkeeper reads it.

Mutating admission runs before the API server validates a custom resource against its CRD's schema
(built-in kinds are decoded into typed structs first), so a JobSet may arrive with `replicatedJobs: 5`
or a template that is a list. The fields gangkeeper reads, wherever they appear, must have the type
every upstream CRD gives them; the first that does not becomes a field error naming its path.
"""

from __future__ import annotations

from typing import Any

from webhook.gangs.model import FieldError

OBJECTS = frozenset(
    {
        "metadata",
        "spec",
        "template",
        "jobTemplate",
        "leaderWorkerTemplate",
        "leaderTemplate",
        "workerTemplate",
        "headGroupSpec",
        "rayClusterSpec",
        "driver",
        "executor",
        "dynamicAllocation",
        "runPolicy",
        "schedulingPolicy",
        "resources",
        "requests",
        "limits",
        "labels",
        "annotations",
    }
)
LISTS = frozenset({"replicatedJobs", "workerGroupSpecs", "containers", "initContainers", "ownerReferences"})
INTEGERS = frozenset(
    {
        "replicas",
        "size",
        "parallelism",
        "completions",
        "instances",
        "minReplicas",
        "minExecutors",
        "numOfHosts",
    }
)
STRINGS = frozenset(
    {
        "name",
        "namespace",
        "generateName",
        "schedulerName",
        "priorityClassName",
        "startupPolicyOrder",
        "batchScheduler",
        "memory",
    }
)
# maps whose keys are the user's own (resource names, label keys): their entries are not fields
FREE_MAPS = frozenset({"requests", "limits", "labels", "annotations", "nodeSelector", "rayStartParams"})
MAX_DEPTH = 40
# Inside a pod template's spec only what gangkeeper reads is checked (webhook/resources.py: containers'
# and the pod's resources, the scheduler and priority class); the rest of a PodSpec (volumes, a CSI
# volume's `driver`, affinity, ...) is the API server's to check against the CRD's own copy of PodSpec,
# where a field named like one above may be anything.
POD_SPEC_READ = frozenset(
    {"containers", "initContainers", "resources", "overhead", "schedulerName", "priorityClassName"}
)
CONTAINER_READ = frozenset({"name", "resources"})
# core Volumes outside a pod template (a SparkApplication's `spec.volumes`): gangkeeper reads none of
# them, and a CSI volume's `driver` is a string there, not a Spark role (it was refused so)
NEVER_READ = frozenset({"volumes"})


def check(obj: dict[str, Any]) -> FieldError | None:
    """The first field of `obj` whose type is not the one its CRD gives it."""
    return _walk(obj, "", 0)


def _walk(value: Any, path: str, depth: int, within: frozenset[str] | None = None) -> FieldError | None:
    """`within`: the only keys of this object that are read (a PodSpec's, a container's); None: all."""
    if depth > MAX_DEPTH:
        return FieldError(path, "...", "nested too deeply")
    if isinstance(value, list):
        problems = (_walk(item, f"{path}[{index}]", depth + 1, within) for index, item in enumerate(value))
        return next((problem for problem in problems if problem), None)
    if not isinstance(value, dict):
        return None
    # a PodTemplateSpec's spec; a JobTemplateSpec's (a JobSet's replicatedJobs) holds the next template
    if within is None and path.lower().endswith("template.spec") and "template" not in value:
        within = POD_SPEC_READ
    for key, item in value.items():
        if (within is not None and key not in within) or key in NEVER_READ:
            continue
        where = f"{path}.{key}" if path else str(key)
        found = _entry_problem(str(key), item, where)
        if found is None and key not in FREE_MAPS:
            found = _descend(str(key), item, where, depth, within)
        if found:
            return found
    return None


def _entry_problem(key: str, item: Any, where: str) -> FieldError | None:
    """What is wrong with this one entry itself (its type; a free map's values; a Kubeflow role)."""
    wrong = _wrong_type(key, item) if item is not None else None
    if wrong:
        return FieldError(where, _shown(item), f"must be {wrong}")
    if key in ("labels", "annotations") and isinstance(item, dict):
        bad = next((k for k, v in item.items() if not isinstance(v, str)), None)
        if bad is not None:
            return FieldError(f"{where}[{bad}]", _shown(item[bad]), "must be a string")
    if key.endswith("ReplicaSpecs") and isinstance(item, dict):  # Kubeflow: role -> replica spec
        bad = next((k for k, v in item.items() if v is not None and not isinstance(v, dict)), None)
        if bad is not None:
            return FieldError(f"{where}.{bad}", _shown(item[bad]), "must be an object")
    return None


def _descend(key: str, item: Any, where: str, depth: int, within: frozenset[str] | None) -> FieldError | None:
    """The entry's own fields, as far as they are read: a PodSpec's containers by what a container's
    reads, a container's resources whole, anything else whole."""
    if within is POD_SPEC_READ and key in ("containers", "initContainers"):
        return _walk(item, where, depth + 1, CONTAINER_READ)
    if within is CONTAINER_READ:
        return _walk(item, where, depth + 1) if key == "resources" else None
    return _walk(item, where, depth + 1)


def _wrong_type(key: str, value: Any) -> str | None:
    if key in OBJECTS or key.endswith("ReplicaSpecs"):
        return None if isinstance(value, dict) else "an object"
    if key in LISTS:
        return None if isinstance(value, list) and all(isinstance(i, dict) for i in value) else "a list of objects"
    if key in INTEGERS:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if key in STRINGS:
        return None if isinstance(value, str) else "a string"
    return None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
