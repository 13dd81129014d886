"""Gang synthesis: from one Kubernetes object to its gangs, a pure library.

Importing the package registers every workload kind (one module each).
"""

from __future__ import annotations

from webhook import contract
from webhook.gangs import apps, batch, common, jobset, kinds, kubeflow, lws, pod, ray, spark  # noqa: F401  (registration)
from webhook.gangs.model import FieldError, Gang, GangId, Members, Obj, Plan, TemplateStamp

__all__ = ["FieldError", "Gang", "GangId", "Members", "Obj", "Plan", "TemplateStamp", "analyze", "supported"]


def supported(api_version: str, kind: str) -> bool:
    return kinds.lookup(api_version, kind) is not None


def analyze(obj: Obj) -> Plan:
    """Everything gangkeeper concludes about `obj`; never raises for malformed objects."""
    api_version, kind_name = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    kind = kinds.lookup(api_version, kind_name)
    if kind is None:
        return Plan.leave(kind_name, f"{api_version} {kind_name} is not a kind gangkeeper handles")
    namespace = common.meta(obj).get("namespace")
    if namespace in contract.IGNORED_NAMESPACES:
        return Plan.leave(kind_name, f"namespace {namespace} is never managed")
    if common.labels_of(obj).get(contract.SKIP_LABEL) == "true":
        return Plan.leave(kind_name, f"opted out with label {contract.SKIP_LABEL}")
    return kind.analyze(obj)
