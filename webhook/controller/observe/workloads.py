"""Where each workload kind lives in the API, to read the gang a pod's stamp names."""

from __future__ import annotations

from typing import Any

from webhook import contract, gangs  # noqa: F401  (importing gangs registers every kind)
from webhook.gangs import kinds
from webhook.kube import Resource

SUSPENDED_ANNOTATION = f"{contract.PREFIX}/suspended"  # set while gangkeeper holds the workload suspended

# Where each workload kind lives, what other versions it is served at, and its suspend field: each
# from the kind's own record (webhook/gangs/kinds.py), so a new kind is described in one place.
WORKLOAD_RESOURCES = {k.kind: Resource(k.api_version, k.plural) for k in kinds.REGISTRY.values() if k.version}
OTHER_VERSIONS = {
    k.kind: tuple(Resource(f"{k.group}/{version}", k.plural) for version in k.other_versions)
    for k in kinds.REGISTRY.values()
    if k.other_versions
}


def all_workload_resources() -> list[Resource]:
    return [*WORKLOAD_RESOURCES.values(), *(r for versions in OTHER_VERSIONS.values() for r in versions)]


def group_resource(api_version: str, kind: str) -> Resource:
    """The collection of a synthesized group object (PodGroup, Workload)."""
    return Resource(api_version, kind.lower() + "s")


SUSPEND_PATHS = {k.kind: k.suspend_path for k in kinds.REGISTRY.values() if k.suspend_path}


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """{"spec": {"runPolicy": {"suspend": value}}} for ("spec", "runPolicy", "suspend")."""
    for key in reversed(path):
        value = {key: value}
    return value  # type: ignore[no-any-return]
