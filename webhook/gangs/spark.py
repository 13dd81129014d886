"""Spark operator SparkApplication: the driver plus its executors form one gang.

The application has no pod templates: driver and executor carry `labels`, `annotations` and
`schedulerName` fields of their own, which the operator copies onto the pods it launches.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any

from webhook import resources
from webhook.gangs import common
from webhook.gangs.kinds import Kind, register
from webhook.gangs.model import FieldError, GangId, Members, Obj, Plan, TemplateStamp

KIND = "SparkApplication"
APP_NAME_LABEL = "sparkoperator.k8s.io/app-name"
_MIB = Decimal(2**20)
_SPARK_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}
_MIN_OVERHEAD = 384 * _MIB  # Spark's floor for spark.{driver,executor}.memoryOverhead


def identity(name: str) -> GangId:
    return common.gang_id(KIND, name)


def spark_memory(text: str) -> Decimal:
    """Spark's JVM memory strings ("512m", "2g"; a bare number is MiB) in bytes."""
    raw = text.strip().lower().removesuffix("b")
    if raw and raw[-1] in _SPARK_UNITS:
        return Decimal(raw[:-1]) * _SPARK_UNITS[raw[-1]]
    return Decimal(raw) * _MIB


def role_requests(role: dict[str, Any], app: dict[str, Any]) -> dict[str, Decimal]:
    requests: dict[str, Decimal] = {}
    cpu = role.get("coreRequest") or role.get("cores")
    if cpu is not None:
        requests["cpu"] = resources.parse(cpu)
    if role.get("memory"):
        memory = spark_memory(str(role["memory"]))
        if role.get("memoryOverhead"):
            overhead = spark_memory(str(role["memoryOverhead"]))
        else:
            non_jvm = str(app.get("type", "")).lower() in {"python", "r"}
            factor = Decimal(str(app.get("memoryOverheadFactor") or ("0.4" if non_jvm else "0.1")))
            overhead = max(_MIN_OVERHEAD, (memory * factor).to_integral_value())
        requests["memory"] = memory + overhead
    gpu = role.get("gpu") or {}
    if gpu.get("name") and gpu.get("quantity"):
        requests[str(gpu["name"])] = Decimal(int(gpu["quantity"]))
    return requests


def analyze(obj: Obj) -> Plan:
    name = common.meta(obj).get("name") or ""
    spec = obj.get("spec") or {}
    if spec.get("batchScheduler"):
        return Plan.leave(KIND, f"the Spark operator makes this gang itself (batchScheduler {spec['batchScheduler']})")
    plan = Plan(kind=KIND)
    driver, executor = spec.get("driver") or {}, spec.get("executor") or {}
    dynamic = spec.get("dynamicAllocation") or {}
    if dynamic.get("enabled"):
        executors, count_path = common.as_int(dynamic.get("minExecutors"), 0), "spec.dynamicAllocation.minExecutors"
    else:
        executors, count_path = common.as_int(executor.get("instances"), 1), "spec.executor.instances"
    members: list[Members] = []
    roles = (("driver", 1, driver, "spec.driver"), ("executor", max(executors, 0), executor, count_path))
    for role, count, role_spec, path in roles:
        try:
            requests = role_requests(role_spec, spec)
        except (ValueError, ArithmeticError):
            plan.errors.append(
                FieldError(
                    f"spec.{role}.memory", role_spec.get("memory"), "must be a Spark memory size such as 512m or 2g"
                )
            )
            requests = {}
        members.append(Members(role, count, requests, bool(requests), path))
        plan.templates.append(TemplateStamp(path=("spec", role), gang=identity(name) if name else None, shape="spark"))
    if name:
        # Only a running driver asks for executors, so waiting for them before the driver would deadlock:
        # the gang is the driver, with the executors' resources counted and checked at release, as the
        # Spark operator's own Volcano integration sizes its PodGroup (minMember 1, minResources of all:
        # internal/scheduler/volcano/scheduler.go syncPodGroupInClusterMode, spark-operator v2.5.0).
        gang = common.build_gang(
            obj, identity(name), members[:1], 1, "the driver (it creates the executors)", plan, driver
        )
        plan.gangs.append(replace(gang, later=tuple(members[1:])))
    return plan


def from_pod(pod: Obj) -> GangId | str | None:
    name = common.labels_of(pod).get(APP_NAME_LABEL)
    return identity(name) if name else None


register(
    Kind(
        group="sparkoperator.k8s.io",
        kind=KIND,
        analyze=analyze,
        identity=identity,
        pod_rule=from_pod,
        version="v1beta2",
        plural="sparkapplications",
        tag="spark",
    )
)
