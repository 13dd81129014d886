"""LeaderWorkerSet: every replica group (one leader plus size-1 workers) is its own gang."""

from __future__ import annotations

from dataclasses import replace

from webhook.gangs import common, limits
from webhook.gangs.kinds import WAIT, Kind, derived_name, register
from webhook.gangs.model import FieldError, GangId, Obj, Plan, TemplateStamp

KIND = "LeaderWorkerSet"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
# LWS creates a group's workers only once its leader is scheduled, to place them in the leader's
# topology domain (lws pkg/controllers/pod_controller.go): a gang of the whole group would never start
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"


# restartPolicy values under which LWS recreates a whole group when one of its pods fails or restarts
# (api/leaderworkerset/v1 RestartPolicyType; the CRD's default is RecreateGroupOnPodRestart)
RESTARTS_GROUP_WHOLE = frozenset({"RecreateGroupOnPodRestart", "RecreateGroupAfterStart"})


def restarts_whole(lwt: Obj) -> str:
    """What the LeaderWorkerSet's own restart policy does for a group that loses a member, for the Gang."""
    policy = lwt.get("restartPolicy") or "RecreateGroupOnPodRestart"
    if policy not in RESTARTS_GROUP_WHOLE:
        return ""
    return f"its LeaderWorkerSet recreates the group whole (spec.leaderWorkerTemplate.restartPolicy {policy})"


def identity(name: str, group_index: str | int) -> GangId:
    return common.gang_id(KIND, name, "group", group_index)


def analyze(obj: Obj) -> Plan:
    plan = Plan(kind=KIND)
    name = common.meta(obj).get("name") or ""
    spec = obj.get("spec") or {}
    lwt = spec.get("leaderWorkerTemplate") or {}
    size = common.as_int(lwt.get("size"), 1)
    replicas = common.as_int(spec.get("replicas"), 1)
    base = ("spec", "leaderWorkerTemplate")
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    leader_path = (*base, "leaderTemplate") if lwt.get("leaderTemplate") else (*base, "workerTemplate")
    errors: list[FieldError] = plan.errors
    members = [
        common.members_of(leader, 1, "leader", leader_path, errors),
        common.members_of(worker, size - 1, "worker", (*base, "workerTemplate"), errors, (*base, "size")),
    ]
    # as LWS's own gang integration sizes a group's PodGroup: leaderWorkerTemplate.size, or 1 under
    # startupPolicy LeaderReady (pkg/schedulerprovider/volcano_provider.go CreatePodGroupIfNotExists, v0.8.0)
    gang_size, reason = size, "the LeaderWorkerSet's leaderWorkerTemplate.size"
    if spec.get("startupPolicy") == "LeaderReady":
        # Workers are created only once the leader is ready: waiting for them would deadlock.
        gang_size = 1
        plan.warnings.append(
            f"{KIND} {name}: startupPolicy LeaderReady starts workers after the leader, "
            "so each group's gang is the leader alone"
        )
    elif common.annotations_of(obj).get(EXCLUSIVE_TOPOLOGY):
        gang_size, reason = 1, f"the leader alone: {EXCLUSIVE_TOPOLOGY} creates workers after the leader is scheduled"
        plan.warnings.append(
            f"{KIND} {name}: exclusive-topology creates workers after the leader is scheduled; each gang is the leader"
        )
    for path in {leader_path, (*base, "workerTemplate")}:
        plan.templates.append(TemplateStamp(path=path, gang=None, shape="crd"))  # the group index is per pod
    plan.templates.sort(key=lambda t: t.path)
    pods = max(replicas, 0) * max(size, 1)
    # checked before one gang per group is built: the counts are the tenant's to write. Each group is a
    # gang of its own, so the per-gang limit is on the size; the workload as a whole has its own bounds
    if size > limits.max_gang_pods():
        fix = "lower leaderWorkerTemplate.size (each group is one gang)"
        plan.errors.append(limits.too_many("spec.leaderWorkerTemplate.size", size, size, fix))
    elif replicas > limits.MAX_WORKLOAD_GANGS or pods > limits.MAX_WORKLOAD_PODS:
        plan.errors.append(
            FieldError(
                "spec.replicas",
                replicas,
                f"makes {replicas} groups and {pods} pods, above gangkeeper's bound of {limits.MAX_WORKLOAD_GANGS} "
                f"groups and {limits.MAX_WORKLOAD_PODS} pods per LeaderWorkerSet: split it into several",
            )
        )
    elif name:
        for index in range(replicas):
            gang = common.build_gang(
                obj, identity(name, index), members, gang_size, reason, plan, (leader.get("spec") or {})
            )
            plan.gangs.append(replace(gang, restarts_whole=restarts_whole(lwt)))
    return plan


def from_pod(pod: Obj) -> GangId | str | None:
    labels = common.labels_of(pod)
    name = labels.get(NAME_LABEL)
    if not name:
        return None
    index = labels.get(GROUP_INDEX_LABEL)
    return identity(name, index) if index is not None else WAIT


# the leader StatefulSet makes the leaders, each group's worker StatefulSet its workers
register(
    Kind(
        group="leaderworkerset.x-k8s.io",
        kind=KIND,
        spreads=True,
        volcano_groups_by_operator=True,
        analyze=analyze,
        identity=identity,
        pod_rule=from_pod,
        pod_owners=frozenset({"StatefulSet"}),
        # the leader StatefulSet has the LWS's name, each group's worker StatefulSet its leader pod's,
        # <lws>-<group index> (lws pkg/controllers/pod_controller.go)
        owner_name=derived_name,
        version="v1",
        plural="leaderworkersets",
        # a leader StatefulSet and a worker StatefulSet per group (lws pkg/controllers/leaderworkerset_controller.go)
        gang_parent=True,
        tag="lws",
    )
)


def volcano_scheduled(workload: Obj, scheduler: str) -> bool:
    """A LeaderWorkerSet whose templates gangkeeper gave Volcano's scheduler, named `scheduler` (its pods
    get their group names one by one, so no template carries one)."""
    template = ((workload.get("spec") or {}).get("leaderWorkerTemplate")) or {}
    if not isinstance(template, dict):
        return False
    return any(
        isinstance(t, dict) and isinstance(t.get("spec"), dict) and t["spec"].get("schedulerName") == scheduler
        for t in (template.get("leaderTemplate"), template.get("workerTemplate"))
    )
