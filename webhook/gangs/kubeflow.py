"""Kubeflow training-operator v1 jobs (PyTorchJob, TFJob, XGBoostJob, JAXJob, MPIJob): one gang per job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from webhook.gangs import common
from webhook.gangs.kinds import Kind, derived_name, register, same_name
from webhook.gangs.model import GangId, Members, Obj, Plan, TemplateStamp

GROUP = "kubeflow.org"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_SPECS = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}
# Coordinators first, so a smaller minMember keeps them in minResources.
_ROLE_ORDER = ("launcher", "master", "chief", "ps", "evaluator", "worker")


def _role_rank(role: str) -> int:
    lowered = role.lower()
    return _ROLE_ORDER.index(lowered) if lowered in _ROLE_ORDER else len(_ROLE_ORDER)


def make_identity(kind: str) -> Callable[[str], GangId]:
    def identity(name: str) -> GangId:
        return common.gang_id(kind, name)

    return identity


def make_analyze(kind: str) -> Callable[[Obj], Plan]:
    def analyze(obj: Obj) -> Plan:
        plan = Plan(kind=kind)
        name = common.meta(obj).get("name") or ""
        spec = obj.get("spec") or {}
        replica_specs = spec.get(REPLICA_SPECS[kind]) or {}
        members: list[Members] = []
        first_spec: dict[str, object] = {}
        for role in sorted(replica_specs, key=_role_rank):
            rs = replica_specs[role] or {}
            path = ("spec", REPLICA_SPECS[kind], role, "template")
            template = rs.get("template") or {}
            members.append(common.members_of(template, common.as_int(rs.get("replicas"), 1), role, path, plan.errors))
            first_spec = first_spec or (template.get("spec") or {})
            plan.templates.append(
                TemplateStamp(path=path, gang=common.gang_id(kind, name) if name else None, shape="crd")
            )
        # As training-operator's own gang integration sizes its PodGroup: every replica
        # (k8sutil.GetTotalReplicas), or runPolicy.schedulingPolicy.minAvailable when set; an elastic
        # PyTorchJob's elasticPolicy.minReplicas does not change it (pkg/controller.v1/common/job.go,
        # ReconcileJobs, v1.9.2): the operator starts every replica. mpi-operator v2's MPIJob the same:
        # the workers + 1 launcher, or minAvailable (pkg/controller/podgroup.go calculateMinAvailable, v0.8.0)
        total = sum(m.count for m in members)
        size, reason = total, f"the {kind}'s total replicas"
        policy = (spec.get("runPolicy") or {}).get("schedulingPolicy") or {}
        if isinstance(policy.get("minAvailable"), int):
            size, reason = policy["minAvailable"], "runPolicy.schedulingPolicy.minAvailable"
        elif kind == "MPIJob" and spec.get("launcherCreationPolicy") == "WaitForWorkersReady":
            # mpi-operator v2 sizes its PodGroup as the workers + 1 launcher, or minAvailable
            # (pkg/controller/podgroup.go calculateMinAvailable, v0.8.0), whatever the policy; but under
            # WaitForWorkersReady it creates the launcher only once every worker is ready
            # (mpi_job_controller.go, syncHandler): a gang that waits for the launcher would hold the
            # workers for ever behind the gate, so this gang is the workers alone.
            launchers = sum(m.count for m in members if m.role.lower() == "launcher")
            size, reason = total - launchers, "the MPIJob's workers"
            members = [m for m in members if m.role.lower() != "launcher"] + [
                m for m in members if m.role.lower() == "launcher"
            ]
        if name:
            gang = common.build_gang(obj, common.gang_id(kind, name), members, size, reason, plan, first_spec)
            if policy.get("queue") and not gang.queue:
                gang = replace(gang, queue=str(policy["queue"]))
            plan.gangs.append(gang)
            common.warn_missing_requests(plan, gang)
        return plan

    return analyze


def from_pod(pod: Obj) -> GangId | str | None:
    owner = common.controller_of(pod)
    if owner and owner.get("kind") in REPLICA_SPECS and owner.get("name"):
        return common.gang_id(owner["kind"], owner["name"])
    return None


for _kind in REPLICA_SPECS:
    register(
        Kind(
            group=GROUP,
            kind=_kind,
            analyze=make_analyze(_kind),
            identity=make_identity(_kind),
            pod_rule=from_pod if _kind == "PyTorchJob" else None,
            # training-operator makes each replica's pods itself; an MPIJob's launcher may be a Job
            pod_owners=frozenset({_kind, "Job"} if _kind == "MPIJob" else {_kind}),
            # the launcher Job is <mpijob>-launcher (mpi-operator pkg/controller/mpi_job_controller.go)
            owner_name=derived_name if _kind == "MPIJob" else same_name,
            version="v1",
            plural=_kind.lower() + "s",
            # mpi-operator v2 serves MPIJob at v2beta1 (training-operator served v1): watched where served
            other_versions=("v2beta1",) if _kind == "MPIJob" else (),
            suspend_path=("spec", "runPolicy", "suspend"),  # training-operator and mpi-operator runPolicy
            managed_by_path=("spec", "runPolicy", "managedBy"),
            gang_parent=True,  # mpi-operator v2's launcher Job (pkg/controller/mpi_job_controller.go)
            tag=_kind.lower(),
        )
    )
