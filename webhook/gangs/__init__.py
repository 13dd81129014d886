"""Gang synthesis: from one Kubernetes object to its gangs, a pure library.

Importing the package registers every workload kind (one module each).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from webhook import contract
from webhook.gangs import common, kinds, limits, pod, shape, topology, values
from webhook.gangs.model import FieldError, Gang, GangId, Members, Obj, Plan, TemplateStamp, get_path

# every module of the package is imported, so each kind's module registers its record: a new kind is
# one new module (its record carries everything the webhook, the controller and the chart need)
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# Operators whose gang takes in the pods of the workloads they create: those children are never
# grouped again (each kind's record says so: kinds.Kind.gang_parent). Not CronJob (each child Job is its
# own gang) nor TrainJob (its gang is the JobSet it creates).
GANG_PARENTS = kinds.gang_parents()

BUILT_IN_GROUPS = frozenset({"", "batch", "apps"})

__all__ = ["FieldError", "Gang", "GangId", "Members", "Obj", "Plan", "TemplateStamp", "analyze", "supported"]


def supported(api_version: str, kind: str) -> bool:
    return kinds.lookup(api_version, kind) is not None


def analyze(obj: Obj) -> Plan:
    """Everything gangkeeper concludes about `obj`; never raises for malformed objects."""
    api_version, kind_name = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    kind = kinds.lookup(api_version, kind_name)
    if kind is None:
        return Plan.leave(kind_name, f"{api_version} {kind_name} is not a kind gangkeeper handles")
    if kind.group not in BUILT_IN_GROUPS:  # typed by the API server only after mutating admission
        wrong = shape.check(obj)
        if wrong is not None:
            return Plan(kind=kind_name, errors=[wrong])
    namespace = common.meta(obj).get("namespace")
    if namespace in contract.IGNORED_NAMESPACES:
        return Plan.leave(kind_name, f"namespace {namespace} is never managed")
    if common.labels_of(obj).get(contract.SKIP_LABEL) == "true":
        return Plan.leave(kind_name, f"opted out with label {contract.SKIP_LABEL}")
    owner = common.controller_of(obj)
    if kind_name != pod.KIND and owner and owner.get("kind") in GANG_PARENTS:
        left = Plan.leave(
            kind_name, f"created by {owner['kind']} {owner.get('name')}, whose gang its pods join: not grouped again"
        )
        return _with_owner_uid(left, obj, kind, owner)
    try:
        plan = kind.analyze(obj)
    except (TypeError, AttributeError, ValueError, KeyError) as error:  # a shape shape.check does not know
        detail = f"does not have the shape of a {kind_name} ({type(error).__name__}: {error}); check it against its CRD"
        return Plan(kind=kind_name, errors=[FieldError("spec", "...", detail)])
    if kind_name != pod.KIND:  # a key written wrong is refused even where the workload is left alone
        plan.errors.extend(values.errors(obj))
    limits.refuse_oversized(plan)
    _with_topology(obj, plan)
    _with_priority_classes(obj, plan)
    marked = _marked_template(obj, plan)
    if marked:
        plan = _with_owner_uid(Plan(kind=kind_name, skip=marked, warnings=plan.warnings), obj, kind, owner or {})
    return plan


def _with_owner_uid(plan: Plan, obj: Obj, kind: kinds.Kind, owner: Mapping[str, Any]) -> Plan:
    """An object an operator made for a workload whose gang its pods join (a JobSet's Job, an MPIJob's
    launcher): its pod templates that carry that workload's stamp get the workload's uid too, from the
    object's controller ownerReference. Its pods' own owner is this object, not the workload, and a
    workload deleted and made again under its name keeps the name but not the uid: the controller
    counts a pod whose stamped uid is not its workload's in no gang (pod.workload_uid, GangView.made_for)."""
    uid = str(owner.get("uid") or "")
    if not uid:
        return plan
    try:
        stamps = kind.analyze(obj).templates
    except (TypeError, AttributeError, ValueError, KeyError):
        return plan
    for stamp in stamps:
        template = get_path(obj, stamp.path)
        stamped = pod.stamped_identity(template) if isinstance(template, dict) and stamp.shape != "spark" else None
        made_by = (owner.get("kind"), owner.get("name"))
        if stamped is not None and (stamped.workload_kind, stamped.workload_name) == made_by:
            plan.owner_uid_templates.append(stamp.path)
    plan.owner_uid = uid if plan.owner_uid_templates else ""
    return plan


def _with_topology(obj: Obj, plan: Plan) -> None:
    """Every gang of the plan with the workload's topology intent (topology.py), or its field errors."""
    if not plan.gangs:
        return
    templates = []
    for stamp in plan.templates:
        template = get_path(obj, stamp.path)
        if isinstance(template, dict):
            where = ".".join(str(p) for p in stamp.path)
            held = template.get("annotations") if stamp.shape == "spark" else common.annotations_of(template)
            templates.append((where, held if isinstance(held, dict) else {}))
    intent, errors = topology.read(common.annotations_of(obj), templates)
    outer, outer_errors = topology.read(common.annotations_of(obj), [], topology.WORKLOAD_SOURCES)
    plan.errors.extend([*errors, *outer_errors])
    if intent is not None or outer is not None:
        plan.gangs = [replace(gang, topology=intent, workload_topology=outer) for gang in plan.gangs]


def _with_priority_classes(obj: Obj, plan: Plan) -> None:
    """A gang whose templates name different PriorityClasses (a Kubeflow role, an LWS leader, a JobSet's
    job) has one priority all the same, its least important pod's (the controller's gang_priority): said
    at apply, so its author is not surprised that the higher class lends the gang nothing."""
    for index, gang in enumerate(plan.gangs):
        named = set()
        for stamp in plan.templates:
            template = get_path(obj, stamp.path)
            # a template stamped per pod (gang None: an LWS group, a CronJob's Job) serves every gang of the plan
            if stamp.gang in (gang.id, None) and isinstance(template, dict) and stamp.shape != "spark":
                spec = template.get("spec")
                named.add(str((spec if isinstance(spec, dict) else {}).get("priorityClassName") or ""))
        if len(named) < 2:
            continue
        classes = tuple(sorted(named))
        plan.gangs[index] = replace(gang, priority_classes=classes)
        shown = ", ".join(c or "(none: the cluster's default)" for c in classes)
        plan.warnings.append(
            f"gang {gang.name}: its pods name different PriorityClasses ({shown}); a gang has one priority, "
            "its least important pod's: it preempts, is preempted and is queued at that one"
        )


def _marked_template(obj: Obj, plan: Plan) -> str | None:
    """A pod template that already says which gang its pods join, other than the one gangkeeper would
    give: an operator's own gang (Volcano, coscheduling, native, KAI marks) or a parent workload's
    gangkeeper stamp. Those marks win; overwriting them would split or double the gang. A stamp of a
    workload that is not this object's controller owner was copied with the object (`kubectl get job
    train -o yaml`, renamed, applied again): the copy gets its own gang, with a warning."""
    owner = common.controller_of(obj) or {}
    for stamp in plan.templates:
        template = get_path(obj, stamp.path)
        if not isinstance(template, dict):
            continue
        if stamp.shape == "spark":
            # a Spark role carries its pods' labels and annotations itself (Volcano's own Spark samples
            # name their PodGroup on the executor: scheduling.k8s.io/group-name)
            template = {"metadata": {k: template.get(k) for k in ("labels", "annotations")}}
        where = ".".join(str(p) for p in stamp.path)
        stamped = pod.stamped_identity(template)
        if stamped is not None and stamp.gang is not None and stamped != stamp.gang:
            by_owner = owner.get("kind") == stamped.workload_kind and owner.get("name") == stamped.workload_name
            copied = f"{stamped.workload_kind} {stamped.workload_name}"
            if by_owner:
                return f"{where} already belongs to gang {stamped.name} of {copied}"
            # short: the API server's warnings are cut at about 120 characters (review.MAX_WARNING)
            plan.warnings.append(f"gets its own gang {stamp.gang.name}: {where} had a copied stamp of {copied}")
        marker = pod.foreign_gang(template, stamped)
        if marker:
            return f"{where} is already in a gang ({marker})"
    return None
