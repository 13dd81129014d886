"""KubeRay RayCluster (one gang: the head and the workers KubeRay starts) and RayJob (its cluster, as one gang)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from webhook.gangs import common
from webhook.gangs.kinds import Kind, derived_name, register
from webhook.gangs.model import GangId, Members, Obj, Path, Plan, TemplateStamp, WholeGroups

CLUSTER_LABEL = "ray.io/cluster"
GROUP_LABEL = "ray.io/group"  # the worker group's name on each of its pods
# a multi-host replica's name on each of its numOfHosts pods (KubeRay 1.5, feature gate RayMultiHostIndexing,
# beta and on from 1.6: ray-operator controllers/ray/utils/constant.go RayWorkerReplicaNameKey); KubeRay
# creates and deletes a replica's pods together (reconcileMultiHostWorkerGroup)
REPLICA_LABEL = "ray.io/worker-group-replica-name"
BATCH_SCHEDULER_LABEL = "ray.io/scheduler-name"  # KubeRay's own gang integration (--batch-scheduler), older
# KubeRay's opt-in to gang scheduling by its batch scheduler integration (kuberay#4305 retired the label above)
GANG_SCHEDULING_KEY = "ray.io/gang-scheduling-enabled"
ORIGIN_KIND_LABEL = "ray.io/originated-from-crd"
ORIGIN_NAME_LABEL = "ray.io/originated-from-cr-name"


def cluster_identity(name: str) -> GangId:
    return common.gang_id("RayCluster", name)


def rayjob_identity(name: str) -> GangId:
    return common.gang_id("RayJob", name)


# KubeRay's CRD defaults (ray-operator apis/ray/v1/raycluster_types.go WorkerGroupSpec)
MAX_REPLICAS_DEFAULT = 2**31 - 1
_SIZE_REASON = {
    False: "the {kind}'s head plus each worker group's desired replicas (in-tree autoscaling off)",
    True: "the {kind}'s head plus each worker group's minReplicas (in-tree autoscaling on)",
}


def group_pods(group: Obj, autoscaling: bool) -> int:
    """The pods of one worker group in the gang, as KubeRay's own gang integrations size it: with in-tree
    autoscaling off, the replicas KubeRay starts (utils.GetWorkerGroupDesiredReplicas: replicas kept
    within [minReplicas, maxReplicas], maxReplicas when the two cross); with it on, only minReplicas
    (utils.CalculateMinReplicas); times numOfHosts, and none for a suspended group. Both as
    calculatePodGroupParams in ray-operator controllers/ray/batchscheduler/volcano/volcano_scheduler.go."""
    if group.get("suspend") is True:
        return 0
    hosts = max(common.as_int(group.get("numOfHosts"), 1), 1)
    minimum = max(common.as_int(group.get("minReplicas"), 0), 0)
    if autoscaling:
        return minimum * hosts
    maximum = common.as_int(group.get("maxReplicas"), MAX_REPLICAS_DEFAULT)
    replicas = common.as_int(group.get("replicas"), 0)
    desired = maximum if minimum > maximum else min(max(replicas, minimum), maximum)
    return max(desired, 0) * hosts


def _cluster_plan(obj: Obj, cluster_spec: dict[str, Any], prefix: Path, kind: str, gid: GangId | None) -> Plan:
    plan = Plan(kind=kind)
    if common.labels_of(obj).get(BATCH_SCHEDULER_LABEL):
        return Plan.leave(kind, f"KubeRay makes this gang itself (label {BATCH_SCHEDULER_LABEL})")
    # KubeRay's batch-scheduler plugins test the label's presence, not its value (any value turns it on)
    if GANG_SCHEDULING_KEY in common.labels_of(obj) or GANG_SCHEDULING_KEY in common.annotations_of(obj):
        return Plan.leave(kind, f"KubeRay makes this gang itself ({GANG_SCHEDULING_KEY} is set)")
    head = (cluster_spec.get("headGroupSpec") or {}).get("template") or {}
    head_path = (*prefix, "headGroupSpec", "template")
    members: list[Members] = [common.members_of(head, 1, "head", head_path, plan.errors)]
    plan.templates.append(TemplateStamp(path=head_path, gang=gid, shape="crd"))
    autoscaling = cluster_spec.get("enableInTreeAutoscaling") is True
    hosts: list[tuple[str, int]] = []
    minimums: list[tuple[str, int]] = []  # each worker group: the whole replicas of it the gang's minimum holds
    for index, group in enumerate(cluster_spec.get("workerGroupSpecs") or []):
        path = (*prefix, "workerGroupSpecs", index, "template")
        count = group_pods(group, autoscaling)
        role = str(group.get("groupName") or f"workers-{index}")
        each = max(common.as_int(group.get("numOfHosts"), 1), 1)
        if each > 1:
            hosts.append((role, each))
        minimums.append((role, count // each))
        members.append(common.members_of(group.get("template") or {}, count, role, path, plan.errors))
        plan.templates.append(TemplateStamp(path=path, gang=gid, shape="crd"))
    if gid is not None:
        size = sum(m.count for m in members)
        gang = common.build_gang(
            obj, gid, members, size, _SIZE_REASON[autoscaling].format(kind=kind), plan, head.get("spec") or {}
        )
        if hosts or len(minimums) > 1:  # whole replicas, or roles whose minimums bind together (no stealing)
            rule = WholeGroups(REPLICA_LABEL, GROUP_LABEL, tuple(hosts), tuple(minimums) if len(minimums) > 1 else ())
            gang = replace(gang, whole_groups=rule)
        plan.gangs.append(gang)
        common.warn_missing_requests(plan, gang)
    return plan


def analyze_cluster(obj: Obj) -> Plan:
    name = common.meta(obj).get("name") or ""
    labels = common.labels_of(obj)
    owner = common.controller_of(obj)
    if labels.get(ORIGIN_KIND_LABEL) == "RayJob" and labels.get(ORIGIN_NAME_LABEL):
        gid: GangId | None = rayjob_identity(labels[ORIGIN_NAME_LABEL])
    elif owner and owner.get("kind") == "RayJob":
        gid = rayjob_identity(owner["name"])
    else:
        gid = cluster_identity(name) if name else None
    plan = _cluster_plan(obj, obj.get("spec") or {}, ("spec",), "RayCluster", gid)
    if gid is not None and gid.workload_kind == "RayJob":
        plan.gangs = []  # the RayJob's gang object is synthesized from the RayJob, its owner
    return plan


def analyze_rayjob(obj: Obj) -> Plan:
    name = common.meta(obj).get("name") or ""
    spec = obj.get("spec") or {}
    if not spec.get("rayClusterSpec"):
        return Plan.leave("RayJob", "the RayJob runs on an existing RayCluster (clusterSelector)")
    return _cluster_plan(
        obj, spec["rayClusterSpec"], ("spec", "rayClusterSpec"), "RayJob", rayjob_identity(name) if name else None
    )


def from_pod(pod: Obj) -> GangId | str | None:
    labels = common.labels_of(pod)
    cluster = labels.get(CLUSTER_LABEL)
    if not cluster:
        return None
    if labels.get(ORIGIN_KIND_LABEL) == "RayJob" and labels.get(ORIGIN_NAME_LABEL):
        return rayjob_identity(labels[ORIGIN_NAME_LABEL])
    return cluster_identity(cluster)


RAY_CLUSTERS = frozenset({"RayCluster"})  # KubeRay's pods, a RayJob's through the RayCluster it makes
register(
    Kind(
        group="ray.io",
        kind="RayCluster",
        analyze=analyze_cluster,
        identity=cluster_identity,
        pod_rule=from_pod,
        pod_owners=RAY_CLUSTERS,
        version="v1",
        plural="rayclusters",
        managed_by_path=("spec", "managedBy"),  # KubeRay: ray.io/kuberay-operator or MultiKueue's
        gang_parent=True,
        whole_group_label=REPLICA_LABEL,
        tag="raycluster",
    )
)
register(
    Kind(
        group="ray.io",
        kind="RayJob",
        analyze=analyze_rayjob,
        identity=rayjob_identity,
        pod_owners=RAY_CLUSTERS,
        # its RayCluster is <rayjob>-<random suffix> (kuberay ray-operator utils.GenerateRayClusterName)
        owner_name=derived_name,
        version="v1",
        plural="rayjobs",
        suspend_path=("spec", "suspend"),  # KubeRay RayJob spec.suspend
        managed_by_path=("spec", "managedBy"),
        gang_parent=True,  # its RayCluster
        tag="rayjob",
    )
)
