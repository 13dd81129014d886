"""JobSet (one gang, or one per replicatedJob under InOrder start-up) and TrainJob (through its JobSet)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from webhook.gangs import common
from webhook.gangs.batch import job_size
from webhook.gangs.kinds import Kind, derived_name, register
from webhook.gangs.model import GangId, Members, Obj, Plan, TemplateStamp

KIND = "JobSet"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def identity(name: str, replicated_job: str | None = None) -> GangId:
    return common.gang_id(KIND, name) if replicated_job is None else _per_job(name, replicated_job)


def _per_job(name: str, replicated_job: str) -> GangId:
    gid = common.gang_id(KIND, name, replicated_job, replicated_job)
    # Each replicatedJob is its own pod group template of the one Workload, not a replica of one.
    return replace(gid, replica_key=None)


def analyze(obj: Obj) -> Plan:
    plan = Plan(kind=KIND)
    name = common.meta(obj).get("name") or ""
    spec = obj.get("spec") or {}
    policy = spec.get("startupPolicy")  # an object here (LWS's startupPolicy is a string)
    in_order = isinstance(policy, dict) and policy.get("startupPolicyOrder") == "InOrder"
    groups: list[tuple[GangId | None, list[Members], dict[str, Any]]] = []
    whole = identity(name) if name else None
    for index, rj in enumerate(spec.get("replicatedJobs") or []):
        gid, member, template, separate = _replicated_job(plan, name, index, rj, in_order, whole)
        together = next((group for group in groups if group[0] == whole and not separate), None)
        if together is None:
            groups.append((gid, [member], template.get("spec") or {}))
        else:
            together[1].append(member)
    for gid, members, first_spec in groups:
        if gid is None:
            continue
        size = sum(m.count for m in members)
        gang = common.build_gang(obj, gid, members, size, "the JobSet's pod count", plan, first_spec)
        plan.gangs.append(gang)
        common.warn_missing_requests(plan, gang)
    return plan


def _replicated_job(
    plan: Plan, name: str, index: int, rj: Obj, in_order: bool, whole: GangId | None
) -> tuple[GangId | None, Members, Obj, bool]:
    """One replicatedJob: its gang (the JobSet's, or one of its own), its members, its pod template, and
    whether it is a gang apart."""
    rj_name = str(rj.get("name") or index)
    # A replicatedJob with dependsOn is created only once those it depends on are Ready or Complete
    # (jobset pkg/controllers/depends_on.go); counting it into the first gang would deadlock, so it
    # is a gang of its own, as each replicatedJob is under InOrder start-up.
    separate = in_order or bool(rj.get("dependsOn"))
    job_spec = (rj.get("template") or {}).get("spec") or {}
    per_job, _ = job_size(job_spec)
    count = common.as_int(rj.get("replicas"), 1) * per_job
    path = ("spec", "replicatedJobs", index, "template", "spec", "template")
    template = job_spec.get("template") or {}
    member = common.members_of(template, count, rj_name, path, plan.errors, (*path[:-1], "parallelism"))
    gid = (_per_job(name, rj_name) if separate else whole) if name else None
    plan.templates.append(TemplateStamp(path=path, gang=gid, shape="crd"))
    return gid, member, template, separate


def from_pod(pod: Obj) -> GangId | str | None:
    name = common.labels_of(pod).get(JOBSET_NAME_LABEL)
    return identity(name) if name else None


def analyze_trainjob(obj: Obj) -> Plan:
    """A TrainJob runs as a JobSet of the same name; its gang is that JobSet's."""
    plan = Plan(kind="TrainJob")
    name = common.meta(obj).get("name") or ""
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    nodes = trainer.get("numNodes")
    if not name or not isinstance(nodes, int):
        plan.skip = "the TrainJob's size comes from its runtime; the gang is formed on its JobSet"
        return plan
    template = {"spec": {"containers": [{"name": "node", "resources": trainer.get("resourcesPerNode") or {}}]}}
    members = [
        common.members_of(template, nodes, "node", ("spec", "trainer"), plan.errors, ("spec", "trainer", "numNodes"))
    ]
    plan.gangs.append(common.build_gang(obj, identity(name), members, nodes, "the TrainJob's numNodes", plan))
    return plan


# a JobSet's pods (and a TrainJob's, through its JobSet) are its child Jobs' pods
register(
    Kind(
        group="jobset.x-k8s.io",
        kind=KIND,
        analyze=analyze,
        identity=identity,
        pod_rule=from_pod,
        pod_owners=frozenset({"Job"}),
        # a Job per replicatedJob replica, <jobset>-<replicatedJob>-<index> (jobset GenJobName)
        owner_name=derived_name,
        version="v1alpha2",
        plural="jobsets",
        suspend_path=("spec", "suspend"),
        suspended_through="TrainJob",
        managed_by_path=("spec", "managedBy"),
        gang_parent=True,  # a Job per replicatedJob (jobset pkg/controllers/jobset_controller.go)
        tag="jobset",
    )
)
register(
    Kind(
        group="trainer.kubeflow.org",
        kind="TrainJob",
        analyze=analyze_trainjob,
        identity=identity,
        pod_owners=frozenset({"Job"}),
        owner_name=derived_name,  # its JobSet's Jobs, named as above
        # never a gang's own workload (its JobSet is); read and suspended on the JobSet's behalf; not a
        # gang parent: its gang is the JobSet it creates
        version="v1alpha1",
        plural="trainjobs",
        suspend_path=("spec", "suspend"),
        managed_by_path=("spec", "managedBy"),
        tag="jobset",
    )
)
