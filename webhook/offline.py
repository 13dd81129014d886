"""`gangkeeper mutate`: admission of a YAML stream without a cluster."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook import contract
from webhook.admission import keys
from webhook.admission.decide import admit
from webhook.admission.resolve import BackendResolver, StaticNamespaces
from webhook.admission.under_review import Outcome, describe
from webhook.backends import DEFAULT_KUBERNETES_VERSION, NamespaceInfo
from webhook.backends.discovery import Unavailable
from webhook.gangs import supported
from webhook.gangs.model import Gang, Obj
from webhook.gangs.topology import DEFAULT_LEVELS


@dataclass
class Result:
    objects: list[Obj] = field(default_factory=list)  # admitted objects, then synthesized group objects
    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    originals: list[Obj] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a mechanism does that no object shows
    # one line per gang found (name, pods by role, backend) and per workload left alone, with why
    summary: list[str] = field(default_factory=list)


def mutate_stream(
    documents: list[Any],
    backend_name: str = "auto",
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    namespace: str = "default",
    scheduler_name: str | None = None,
    topology_levels: tuple[str, ...] = DEFAULT_LEVELS,
    volcano_hypernodes: bool = False,
) -> Result:
    """Every object as admission would leave it, in input order, followed by the gang objects.

    Backends are chosen as the webhook chooses them with no API discovery: a Namespace in the stream
    that carries `gangkeeper.io/backend` decides for its objects, else `backend_name`, where `auto`
    means gate (the one mechanism that needs nothing installed). A Namespace in the stream without the
    opt-in label leaves its objects as they are, as the webhook never sees them; a namespace not in the
    stream counts as opted in. `topology_levels` and `volcano_hypernodes` stand for the cluster's
    Configuration and for a Volcano that serves HyperNodes (topology.volcano.sh), which offline
    discovery cannot see.
    """
    schedulers = {"volcano_scheduler": scheduler_name, "coscheduling_scheduler": scheduler_name}
    resolver = BackendResolver(
        default=backend_name,
        namespaces=StaticNamespaces(_namespaces_in(documents)),
        offline_version=kubernetes_version,
        topology_levels=topology_levels,
        volcano_hypernodes=volcano_hypernodes,
        **{k: v for k, v in schedulers.items() if v},  # type: ignore[arg-type]
    )
    in_stream = _namespaces_in(documents)
    result = Result()
    groups: dict[tuple[str, str, str, str], Obj] = {}
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "Namespace" and doc.get("apiVersion") == "v1":
            # a namespace's keys are namespace keys: the webhook's namespaces rule checks them, no other
            result.warnings.extend(f"{describe(doc)}: {w}" for w in keys.namespace_warnings(doc))
            result.originals.append(doc)
            result.objects.append(doc)
            continue
        target = (doc.get("metadata") or {}).get("namespace") or namespace
        if target in in_stream and in_stream[target].labels.get(contract.NAMESPACE_ENABLED_LABEL) != "true":
            result.warnings.append(
                f"{describe(doc)}: namespace {target} is not opted in "
                f"({contract.NAMESPACE_ENABLED_LABEL}=true): the webhook never sees it; left as it is"
            )
            result.originals.append(doc)
            result.objects.append(doc)
            continue
        info = resolver.namespace_info(target)
        info = NamespaceInfo({**info.labels, contract.NAMESPACE_ENABLED_LABEL: "true"}, info.annotations)
        backend = resolver.resolve(target)
        if isinstance(backend, Unavailable):
            result.denials.append(f"{describe(doc)} cannot be given a gang: {backend.message}")
            continue
        outcome = admit(doc, "CREATE", backend, target, info, topology_levels=topology_levels)
        result.warnings.extend(f"{describe(doc)}: {w}" for w in outcome.warnings)
        if not outcome.allowed:
            result.denials.append(outcome.message)
            continue
        result.originals.append(doc)
        result.objects.append(outcome.mutated if outcome.mutated is not None else doc)
        result.summary.extend(_summary(doc, outcome, backend.name))
        if backend.name == "gate":  # the gate's placement is the controller's: say what it will keep
            result.notes.extend(
                f"{describe(doc)}: gang {gang.name}: the gate controller places all its pods inside one "
                f"{gang.topology.key} domain ({gang.topology.word}, {gang.topology.field})"
                for gang in outcome.gangs
                if gang.topology is not None
            )
            result.notes.extend(
                f"{describe(doc)}: gang {gang.name}: the gate controller releases each {role} replica's "
                f"{size} pods together or none of them (by their {gang.whole_groups.label} label)"
                for gang in outcome.gangs
                if gang.whole_groups is not None
                for role, size in gang.whole_groups.sizes
            )
            result.notes.extend(
                f"{describe(doc)}: gang {gang.name}: nothing binds until every role's minimum fits at once "
                f"({', '.join(f'{role} {groups} whole' for role, groups in gang.whole_groups.minimums)}); "
                "groups above a minimum start whole when they fit, never on the room a minimum needs"
                for gang in outcome.gangs
                if gang.whole_groups is not None and gang.whole_groups.minimums
            )
        for group in outcome.group_objects:
            meta = group["metadata"]
            groups.setdefault((group["apiVersion"], group["kind"], meta.get("namespace", ""), meta["name"]), group)
    result.objects.extend(groups.values())
    return result


def _summary(doc: Obj, outcome: Outcome, backend: str) -> list[str]:
    if outcome.gangs:
        return [
            f"{describe(doc)}: gang {gang.name}: {gang.min_member} pods to start together "
            f"({', '.join(f'{m.role} {m.count}' for m in gang.members)}), backend {backend}" + _claims(gang)
            for gang in outcome.gangs
        ]
    if supported(str(doc.get("apiVersion") or ""), str(doc.get("kind") or "")) and doc.get("kind") != "Pod":
        return [f"{describe(doc)}: left alone: {outcome.reason}"]
    return []


def _claims(gang: Gang) -> str:
    """What the preview says of the devices a gang's pods claim through DRA (docs/devices.md)."""
    if not any(m.claims_devices for m in gang.members):
        return ""
    shared = ", ".join(claim for _, claim in gang.shared_claims)
    return "; its pods claim devices (DRA): started only once devices for every pod are free" + (
        f", ResourceClaim {shared} shared by the whole gang" if shared else ""
    )


def _namespaces_in(documents: list[Any]) -> dict[str, NamespaceInfo]:
    found = {}
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "Namespace" and doc.get("apiVersion") == "v1":
            meta = doc.get("metadata") or {}
            found[str(meta.get("name", ""))] = NamespaceInfo(
                labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {})
            )
    return found


def dump(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)


def diff(result: Result) -> str:
    before = dump(result.originals)
    after = dump(result.objects)
    return "".join(
        difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), "input", "admitted")
    )
