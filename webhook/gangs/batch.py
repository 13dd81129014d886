"""batch/v1 Job (one gang per Job) and CronJob (each child Job is a gang)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from webhook.gangs import common
from webhook.gangs.kinds import Kind, register
from webhook.gangs.model import GangId, Obj, Path, Plan, TemplateStamp, get_path

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")


def identity(name: str) -> GangId:
    return common.gang_id("Job", name)


def job_size(job_spec: Mapping[str, Any], job_status: Mapping[str, Any] | None = None) -> tuple[int, str]:
    """How many pods the Job can still run at once, with the field that bounds it (for messages).

    The Job controller keeps `min(parallelism, completions - succeeded)` pods active
    (pkg/controller/job/job_controller.go, manageJob): when completions exceed parallelism, the last
    wave is smaller, and a gang of `parallelism` would never fill. Succeeded pods do not count.
    An Indexed Job never runs an index again once it failed for good (backoffLimitPerIndex, or a
    FailIndex rule of its podFailurePolicy): those indexes, `status.failedIndexes`, are not pending
    either (firstPendingIndexes in the same file skips them), so they do not count.
    """
    parallelism = common.as_int(job_spec.get("parallelism"), 1)
    completions = job_spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        succeeded = common.as_int((job_status or {}).get("succeeded"), 0)
        failed = count_indexes((job_status or {}).get("failedIndexes"))
        remaining = max(completions - succeeded - failed, 1)
        if remaining < parallelism:
            if failed:
                return remaining, "the Job's indexes neither succeeded nor failed"
            return remaining, "the Job's completions" if not succeeded else "the Job's completions not yet succeeded"
    return parallelism, "the Job's parallelism"


MAX_INTERVALS = 100_000  # the Job API caps completions of a per-index Job at 100,000


def count_indexes(text: object) -> int:
    """How many indexes an interval list such as "1,3-5" names (the Job status's format); 0 when unreadable."""
    if not isinstance(text, str) or not text:
        return 0
    total = 0
    for part in text.split(",", MAX_INTERVALS)[:MAX_INTERVALS]:
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            return 0
        total += max(0, high - low + 1)
    return total


def last_wave(job_spec: Mapping[str, Any]) -> int | None:
    """Pods of the Job's last wave when it is smaller than the others (completions 5, parallelism 2:
    waves of 2, 2 and 1), else None."""
    parallelism = common.as_int(job_spec.get("parallelism"), 1)
    completions = common.as_int(job_spec.get("completions"), 0)
    if parallelism < 1 or completions <= parallelism or completions % parallelism == 0:
        return None
    return completions % parallelism


def analyze_job(obj: Obj) -> Plan:
    return _job_plan(obj, obj, (), "Job")


def _job_plan(obj: Obj, job: Obj, prefix: Path, kind: str) -> Plan:
    spec = get_path(job, ("spec",)) or {}
    if isinstance(spec, dict) and spec.get("scheduling"):
        # 1.37 WorkloadWithJob: the Job controller makes the Workload and PodGroup from the user's policy,
        # unless the template already names a group (k8s pkg/controller/job/job_scheduling_manager.go)
        return Plan.leave(kind, "the Job controller makes this gang itself (spec.scheduling, WorkloadWithJob)")
    plan = Plan(kind=kind)
    template_path: Path = (*prefix, "spec", "template")
    template = spec.get("template") or {}
    size, reason = job_size(spec, get_path(job, ("status",)) or {})
    name = common.meta(obj).get("name") or ""
    # A CronJob's children and a generateName Job get their names later: decide on each pod.
    gid = identity(name) if name and kind == "Job" else None
    plan.templates.append(TemplateStamp(path=template_path, gang=gid))
    if gid is not None:
        bound = "completions" if "completions" in reason else "parallelism"
        members = [common.members_of(template, size, "member", template_path, plan.errors, (*prefix, "spec", bound))]
        gang = common.build_gang(obj, gid, members, size, reason, plan, template.get("spec") or {})
        gang = replace(gang, smallest_wave=last_wave(spec))
        plan.gangs.append(gang)
        common.warn_missing_requests(plan, gang)
    return plan


def analyze_cronjob(obj: Obj) -> Plan:
    return _job_plan(obj, get_path(obj, ("spec", "jobTemplate")) or {}, ("spec", "jobTemplate"), "CronJob")


def job_pod(pod: Obj) -> GangId | str | None:
    labels = common.labels_of(pod)
    for key in JOB_NAME_LABELS:
        if labels.get(key):
            return identity(labels[key])
    owner = common.controller_of(pod)
    if owner and owner.get("kind") == "Job" and owner.get("name"):
        return identity(owner["name"])
    return None


JOBS = frozenset({"Job"})
register(
    Kind(
        group="batch",
        kind="Job",
        analyze=analyze_job,
        identity=identity,
        pod_rule=job_pod,
        generic_owner=True,
        pod_owners=JOBS,
        version="v1",
        plural="jobs",
        # batch/v1 Job spec.suspend (KEP-2232): the Job controller deletes a suspended Job's pods
        # without counting them failed, where an eviction would spend its backoffLimit
        suspend_path=("spec", "suspend"),
        managed_by_path=("spec", "managedBy"),  # batch/v1 Job spec.managedBy (KEP-4368)
        tag="job",
    )
)
register(
    Kind(
        group="batch",
        kind="CronJob",
        analyze=analyze_cronjob,
        identity=identity,
        pod_owners=JOBS,
        plural="cronjobs",
        managed_by_path=("spec", "jobTemplate", "spec", "managedBy"),  # the Jobs it creates
        tag="job",
    )
)
