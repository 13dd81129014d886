"""`gangkeeper mutate`: admission of a YAML stream without a cluster."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook import backends, contract
from webhook.admission.decide import admit, describe
from webhook.backends import NamespaceInfo
from webhook.gangs.model import Obj


@dataclass
class Result:
    objects: list[Obj] = field(default_factory=list)  # admitted objects, then synthesized group objects
    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    originals: list[Obj] = field(default_factory=list)


def mutate_stream(
    documents: list[Any],
    backend_name: str,
    kubernetes_version: str = "1.37",
    namespace: str = "default",
    scheduler_name: str | None = None,
) -> Result:
    """Every object as admission would leave it, in input order, followed by the gang objects."""
    backend = backends.make(backend_name, scheduler_name=scheduler_name, kubernetes_version=kubernetes_version)
    info = NamespaceInfo(labels={contract.NAMESPACE_ENABLED_LABEL: "true"})
    result = Result()
    groups: dict[tuple[str, str, str, str], Obj] = {}
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        outcome = admit(doc, "CREATE", backend, (doc.get("metadata") or {}).get("namespace") or namespace, info)
        result.warnings.extend(f"{describe(doc)}: {w}" for w in outcome.warnings)
        if not outcome.allowed:
            result.denials.append(outcome.message)
            continue
        result.originals.append(doc)
        result.objects.append(outcome.mutated if outcome.mutated is not None else doc)
        for group in outcome.group_objects:
            meta = group["metadata"]
            groups.setdefault((group["apiVersion"], group["kind"], meta.get("namespace", ""), meta["name"]), group)
    result.objects.extend(groups.values())
    return result


def dump(objects: list[Obj]) -> str:
    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)


def diff(result: Result) -> str:
    before = dump(result.originals)
    after = dump(result.objects)
    return "".join(
        difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), "input", "admitted")
    )
