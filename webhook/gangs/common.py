"""Helpers shared by the workload kinds: annotations, integers, members of a pod template."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook import contract, naming, resources
from webhook.gangs import kinds
from webhook.gangs.model import FieldError, Gang, GangId, Members, Obj, Path, Plan, get_path, render_path


def meta(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def as_int(value: object, default: int) -> int:
    """Integers as written in manifests; anything else falls back to the API default."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    return default


def members_of(
    template: Any, count: int, role: str, path: Path, errors: list[FieldError], count_field: Path | None = None
) -> Members:
    """Members built from the PodTemplateSpec at `path`; bad quantities become field errors. Their number
    is set by `count_field`, by default the template's sibling `replicas` (StatefulSet, Kubeflow's
    replica specs, Ray's worker groups)."""
    spec = get_path(template, ("spec",)) if isinstance(template, dict) else None
    spec = spec if isinstance(spec, dict) else {}
    try:
        requests = resources.pod_requests(spec)
        has_requests = resources.has_requests(spec)
    except ValueError as exc:
        errors.append(FieldError(render_path((*path, "spec", "containers")), "resources", f"{exc}"))
        requests, has_requests = {}, False
    if count_field is None:
        count_field = (*path[:-1], "replicas") if path and path[-1] == "template" else path
    shared = shared_claims_of(spec)
    return Members(
        role,
        max(count, 0),
        requests,
        has_requests,
        render_path(path),
        render_path(count_field),
        shared,
        bool(spec.get("resourceClaims")),
        tuple(
            (i, str(entry["resourceClaimTemplateName"]))
            for i, entry in enumerate(spec.get("resourceClaims") or [])
            if isinstance(entry, dict) and entry.get("resourceClaimTemplateName")
        ),
    )


def controller_of(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The owner reference marked controller, as workload controllers set on what they create."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return dict(ref)
    return None


def owner_reference(obj: Mapping[str, Any]) -> Obj | None:
    """An ownerReference to `obj`, or None before the API server has given it a uid."""
    metadata = meta(obj)
    if not metadata.get("uid") or not metadata.get("name"):
        return None
    return {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": False,
        "blockOwnerDeletion": True,
    }


def gang_id(kind: str, name: str, template: str = "gang", *index: str | int) -> GangId:
    """The identity of a gang of workload `kind/name`; `index` names one replica group."""
    replica_key = "-".join(str(i) for i in index) if index else None
    return GangId(
        name=naming.gang_name(kinds.tag_of(kind), name, *index),
        workload_kind=kind,
        workload_name=name,
        native_workload=naming.gang_name(kinds.tag_of(kind), name),
        template=naming.dns_label(template),
        replica_key=replica_key,
        parts=tuple(str(i) for i in index),
    )


def min_member(obj: Mapping[str, Any], default: int, total: int, what: str, errors: list[FieldError]) -> int:
    """The gang size: `default`, or the `gangkeeper.io/min-member` override within 1..total.

    `what` explains the upper bound in the error, e.g. "the Job's parallelism".
    """
    raw = annotations_of(obj).get(contract.MIN_MEMBER_ANNOTATION)
    if raw is None:
        return default
    path = f"metadata.annotations[{contract.MIN_MEMBER_ANNOTATION}]"
    try:
        value = int(str(raw).strip())
    except ValueError:
        errors.append(FieldError(path, raw, f"must be an integer between 1 and {total}, {what}"))
        return default
    if not 1 <= value <= total:
        errors.append(FieldError(path, raw, f"must be between 1 and {total}, {what}"))
        return default
    return value


# a day: a longer timeout is no timeout, and a value past int32 would be refused by the group objects
MAX_TIMEOUT_SECONDS = 86_400


def positive_int_annotation(
    obj: Mapping[str, Any], key: str, errors: list[FieldError], most: int = MAX_TIMEOUT_SECONDS
) -> int | None:
    raw = annotations_of(obj).get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        errors.append(FieldError(f"metadata.annotations[{key}]", raw, "must be a positive whole number of seconds"))
        return None
    if value > most:
        errors.append(FieldError(f"metadata.annotations[{key}]", raw, f"must be at most {most} seconds (a day)"))
        return None
    return value


def build_gang(
    obj: Mapping[str, Any],
    gid: GangId,
    members: list[Members],
    size: int,
    size_reason: str,
    plan: Plan,
    template_spec: Mapping[str, Any] | None = None,
) -> Gang:
    """A gang of `obj` with the common overrides (min-member, queue, timeout) applied."""
    total = sum(m.count for m in members)
    size = min_member(obj, min(size, total) if total else size, max(total, 1), size_reason, plan.errors)
    spec = template_spec or {}
    return Gang(
        id=gid,
        namespace=meta(obj).get("namespace") or "",
        min_member=max(size, 1),
        members=tuple(members),
        owner=owner_reference(obj),
        queue=annotations_of(obj).get(contract.QUEUE_ANNOTATION),
        priority_class=spec.get("priorityClassName"),
        timeout_seconds=positive_int_annotation(obj, contract.TIMEOUT_ANNOTATION, plan.errors),
        recovery_seconds=positive_int_annotation(obj, contract.RECOVERY_ANNOTATION, plan.errors),
    )


def warn_missing_requests(plan: Plan, gang: Gang) -> None:
    for members in gang.members:
        if members.count and not members.has_requests:
            plan.warnings.append(
                f"gang {gang.name}: {members.role} pods request no cpu or memory; "
                "minResources is incomplete, set resources.requests"
            )


def shared_claims_of(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(entry name, ResourceClaim) of each claim a pod spec names directly: one its gang's pods may share,
    where a template's (resourceClaimTemplateName) is each pod's own."""
    return tuple(
        (str(entry["name"]), str(entry["resourceClaimName"]))
        for entry in spec.get("resourceClaims") or []
        if isinstance(entry, dict) and entry.get("name") and entry.get("resourceClaimName")
    )
