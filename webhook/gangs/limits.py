"""The largest workload gangkeeper takes on: every admission and controller cost is bounded by it.

Replica counts are tenant input (a LeaderWorkerSet may ask for 1,000,000 groups, a SparkApplication for
2^31 executors, both schema-valid): a workload whose pods exceed the limit is refused at admission and
left alone by the controller, before anything proportional to its counts is built.
"""

from __future__ import annotations

from webhook.gangs.model import FieldError, Plan

DEFAULT_MAX_GANG_PODS = 10_000
# A workload of many gangs (a LeaderWorkerSet's groups) is bounded on its own: each gang is capped by
# the limit above, and the whole workload by these, so serving 5,001 groups of 2 is fine while a
# million groups is refused before one gang is built (each is a group object the controller writes).
MAX_WORKLOAD_GANGS = 10_000
MAX_WORKLOAD_PODS = 100_000
CEILING = 10_000  # the Gang CRD's maxProperties of status.released (charts/gangkeeper/templates/crd.yaml)
FLAG = "--max-gang-pods"

_max_gang_pods = DEFAULT_MAX_GANG_PODS


def max_gang_pods() -> int:
    return _max_gang_pods


def set_max_gang_pods(limit: int) -> None:
    """Set once at start, from the command line (before the webhook's workers fork)."""
    global _max_gang_pods
    if not 1 <= limit <= CEILING:
        raise ValueError(
            f"{FLAG} must be between 1 and {CEILING}, not {limit} (a Gang object records each released pod, and "
            "the API server keeps an object to about 1.5 MiB)"
        )
    _max_gang_pods = limit


def too_many(path: str, value: object, pods: int, fix: str) -> FieldError:
    """The tenant's field and the cluster's limit: the flag that sets it is the operator's, not theirs."""
    return FieldError(
        path, value, f"makes {pods} pods, above this cluster's limit of {_max_gang_pods} pods per gang: {fix}"
    )


def refuse_oversized(plan: Plan) -> None:
    """Replace the plan's gangs by a field error when one of them has more pods than the limit."""
    for gang in plan.gangs:
        roles = [*gang.members, *gang.later]
        pods = sum(m.count for m in roles)
        if pods > _max_gang_pods:
            largest = max(roles, key=lambda m: m.count)
            where = largest.count_field or largest.path or "spec"
            fix = f"lower the number of {largest.role} pods ({largest.count}) or split the workload"
            plan.errors.append(too_many(where, largest.count, pods, fix))
            plan.gangs = []
            return
