"""A gang's topology intent: keep all its pods inside one domain of a node label (one rack, one block,
one zone), required or preferred, read from what users already write.

One intent, three dialects, each a row of `SOURCES`:
- gangkeeper's own annotations on the workload;
- Kueue's topology-aware scheduling annotations, on the workload or a pod template
  (kueue pkg/controller/jobframework: kueue.x-k8s.io/podset-required-topology, -preferred-topology);
- KAI's on the workload (kai-scheduler docs/topology: kai.scheduler/topology-required-placement,
  -preferred-placement; the Topology object they refer to, kai.scheduler/topology, names the levels).

Every value is a node label key: checked here as the API server checks label keys (a DNS subdomain
prefix, a name of at most 63 characters), so a typo is refused at apply, not waited on for ever. A
workload's gangs all share its intent; a LeaderWorkerSet's groups, each its own gang, each get it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook import contract
from webhook.gangs.model import FieldError, Topology

REQUIRED_ANNOTATION = contract.TOPOLOGY_REQUIRED_ANNOTATION
PREFERRED_ANNOTATION = contract.TOPOLOGY_PREFERRED_ANNOTATION
HOSTNAME = "kubernetes.io/hostname"
# the default hierarchy, broadest first (Kueue's Topology levels are listed the same way)
DEFAULT_LEVELS = ("topology.kubernetes.io/zone", HOSTNAME)


@dataclass(frozen=True)
class Source:
    annotation: str
    required: bool
    on_templates: bool  # also read from pod templates' annotations (Kueue puts it on each pod set)


SOURCES = (
    Source(REQUIRED_ANNOTATION, True, False),
    Source(PREFERRED_ANNOTATION, False, False),
    Source("kueue.x-k8s.io/podset-required-topology", True, True),
    Source("kueue.x-k8s.io/podset-preferred-topology", False, True),
    Source("kai.scheduler/topology-required-placement", True, False),
    Source("kai.scheduler/topology-preferred-placement", False, False),
)
# one level up, across the gangs of a workload: gangkeeper's own words only (Kueue and KAI place one
# pod set or pod group at a time)
WORKLOAD_SOURCES = (
    Source(contract.WORKLOAD_TOPOLOGY_REQUIRED_ANNOTATION, True, False),
    Source(contract.WORKLOAD_TOPOLOGY_PREFERRED_ANNOTATION, False, False),
)
ANNOTATIONS = frozenset(source.annotation for source in (*SOURCES, *WORKLOAD_SOURCES))


# k8s.io/apimachinery pkg/util/validation: IsQualifiedName (prefix: a DNS-1123 subdomain)
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why `key` is not a valid label key, as the API server would say, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return "its prefix must be a DNS subdomain (lower case, at most 253 characters), e.g. topology.kubernetes.io"
    if not name or len(name) > 63 or not _NAME.match(name):
        return "its name must be at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return None


def read(
    annotations: Mapping[str, Any],
    template_annotations: Iterable[tuple[str, Mapping[str, Any]]],
    sources: tuple[Source, ...] = SOURCES,
) -> tuple[Topology | None, list[FieldError]]:
    """The intent of a workload with these annotations and pod templates ((path, annotations) each),
    or the field errors that make it ambiguous or invalid."""
    found: list[Topology] = []
    errors: list[FieldError] = []
    places = [("metadata", annotations), *((f"{path}.metadata", a) for path, a in template_annotations)]
    for source in sources:
        for where, values in places:
            if where != "metadata" and not source.on_templates:
                continue
            raw = values.get(source.annotation) if isinstance(values, Mapping) else None
            if raw is None:
                continue
            field = f"{where}.annotations[{source.annotation}]"
            key = str(raw).strip()
            problem = label_key_problem(key)
            if problem is not None:
                errors.append(FieldError(field, str(raw)[:80], f"must be a node label key: {problem}"))
                continue
            found.append(Topology(key, source.required, field))
    if errors or not found:
        return None, errors
    first = found[0]
    for other in found[1:]:
        if other.required != first.required:
            errors.append(
                FieldError(
                    other.field,
                    other.key,
                    f"{first.field} already asks for a {first.word} topology: a gang is either required or "
                    "preferred to share a domain; remove one",
                )
            )
        elif other.key != first.key:
            errors.append(
                FieldError(
                    other.field,
                    other.key,
                    f"{first.field} asks for {first.key}: a gang has one {first.word} topology key; make them equal",
                )
            )
    return (None if errors else first), errors


def nesting_warning(gang: Topology | None, workload: Topology, levels: tuple[str, ...]) -> str | None:
    """The workload's level must be broader than each gang's: earlier in the configured levels."""
    if gang is None or gang.key not in levels or workload.key not in levels:
        return None
    if levels.index(workload.key) < levels.index(gang.key):
        return None
    return (
        f"{workload.field}: {workload.key!r} is not a broader level than the gang's {gang.key!r} "
        f"(topology levels, broadest first: {', '.join(levels)}): each gang is already within one such domain"
    )


def level_warning(topology: Topology, levels: tuple[str, ...]) -> str | None:
    """A warning when the key is not one of the cluster's configured levels (Configuration
    topologyLevels): nodes may not carry it, and a required gang would then wait for ever."""
    if topology.key in levels:
        return None
    return (
        f"{topology.field}: {topology.key!r} is not one of this cluster's topology levels "
        f"({', '.join(levels)}); nodes without that label are never used for this gang"
        + (" and it waits until one domain fits it whole" if topology.required else "")
        + ": use one of the levels, or ask the platform team to add it (Configuration topologyLevels)"
    )
