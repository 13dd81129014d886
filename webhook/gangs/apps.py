"""apps/v1 StatefulSet (one gang per set) and Deployment (only when the Deployment opts in)."""

from __future__ import annotations

from webhook import contract
from webhook.gangs import common
from webhook.gangs.kinds import Kind, derived_name, register
from webhook.gangs.model import GangId, Obj, Plan, TemplateStamp


def sts_identity(name: str) -> GangId:
    return common.gang_id("StatefulSet", name)


def deployment_identity(name: str) -> GangId:
    return common.gang_id("Deployment", name)


def _replicated(obj: Obj, gid: GangId | None, kind: str) -> Plan:
    plan = Plan(kind=kind)
    spec = obj.get("spec") or {}
    replicas = common.as_int(spec.get("replicas"), 1)
    template = spec.get("template") or {}
    path = ("spec", "template")
    plan.templates.append(TemplateStamp(path=path, gang=gid))
    if gid is not None:
        members = [common.members_of(template, replicas, "member", path, plan.errors)]
        gang = common.build_gang(
            obj, gid, members, replicas, f"the {kind}'s replicas", plan, template.get("spec") or {}
        )
        plan.gangs.append(gang)
        common.warn_missing_requests(plan, gang)
    return plan


def analyze_statefulset(obj: Obj) -> Plan:
    name = common.meta(obj).get("name") or ""
    spec = obj.get("spec") or {}
    policy = spec.get("podManagementPolicy") or "OrderedReady"
    if policy != "Parallel" and common.as_int(spec.get("replicas"), 1) > 1:
        # OrderedReady (the default) creates pod N+1 only once pod N is Running and Ready
        # (kubernetes pkg/controller/statefulset/stateful_set_control.go): a gang of all replicas could
        # never fill, under any backend. KEP-6277 likewise requires Parallel for a gang.
        return Plan.leave(
            "StatefulSet",
            "OrderedReady creates one pod at a time; no gang",
            f"StatefulSet {name}: podManagementPolicy OrderedReady (the default) starts pods one at a time, "
            "so it gets no gang; set spec.podManagementPolicy: Parallel for all-or-nothing",
        )
    return _replicated(obj, sts_identity(name) if name else None, "StatefulSet")


def analyze_deployment(obj: Obj) -> Plan:
    name = common.meta(obj).get("name") or ""
    if common.annotations_of(obj).get(contract.DEPLOYMENT_GANG_ANNOTATION) != "true":
        return Plan.leave(
            "Deployment",
            f"Deployments form a gang only with the annotation {contract.DEPLOYMENT_GANG_ANNOTATION}: "
            '"true" (a rolling update under a gang can deadlock)',
        )
    if not name:
        return Plan.leave("Deployment", "a generateName Deployment cannot be given a stable gang name")
    plan = _replicated(obj, deployment_identity(name), "Deployment")
    strategy = (obj.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        plan.warnings.append(
            f"Deployment {name}: a rolling update makes new pods that wait for a whole gang; "
            "set spec.strategy.type: Recreate to avoid a deadlock"
        )
    return plan


def statefulset_pod(pod: Obj) -> GangId | str | None:
    """None: a StatefulSet's pods join its gang through the stamp on its template only. The pod cannot
    tell an OrderedReady set (never a gang) from a Parallel one, nor a set made before its namespace
    opted in."""
    return None


register(
    Kind(
        group="apps",
        kind="StatefulSet",
        spreads=True,
        analyze=analyze_statefulset,
        identity=sts_identity,
        pod_rule=statefulset_pod,
        generic_owner=True,
        pod_owners=frozenset({"StatefulSet"}),
        version="v1",
        plural="statefulsets",
        tag="sts",
    )
)
register(
    Kind(
        group="apps",
        kind="Deployment",
        spreads=True,
        analyze=analyze_deployment,
        identity=deployment_identity,
        pod_owners=frozenset({"ReplicaSet"}),
        # ReplicaSets are named <deployment>-<pod-template-hash> (k8s pkg/controller/deployment/sync.go)
        owner_name=derived_name,
        version="v1",
        plural="deployments",
        tag="deploy",
    )
)
