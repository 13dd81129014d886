"""gangkeeper's Kueue AdmissionCheck (`gangkeeper.io/gang-fits`): whether a Workload that reserved quota
has room on the nodes for its whole gang now. Quota is a count; a gang also needs the room to be where its
pods can go at once. Kueue admits a Workload only when all its checks are Ready (kueue
pkg/workload/admissionchecks.go), and MultiKueue dispatches to the worker whose copy is admitted first
(kueue pkg/controller/admissionchecks/multikueue/workload.go, MultiKueueWaitForWorkloadAdmitted, beta and
on in 0.16 and 0.17): a worker whose nodes cannot hold the gang never takes it. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.controller.decide.packing import Placing, pack
from webhook.controller.decide.shapes import HostPort, Node, Shape, static_reason
from webhook.gangs.model import Obj

MAX_CHECKED_PODS = 10_000  # a Workload asking for more is answered without placing each pod
# how long a Workload told Ready keeps its room in the next answers while its pods are not all ready yet
# (Kueue's PodsReady condition): admitted, its pods are made and bound within seconds; until then the
# nodes still look free, and a second Workload told Ready on the same room would wait for it
HELD_SECONDS = 60.0


@dataclass(frozen=True)
class PodSetDemand:
    name: str
    count: int
    shape: Shape


@dataclass(frozen=True)
class Verdict:
    fits: bool
    message: str
    taken: Mapping[str, Mapping[str, int]]  # the nodes' room left once the gang is placed (when it fits)


def waiting_check(workload: Obj, checks: Iterable[str]) -> str | None:
    """The name of one of `checks` this Workload waits on: quota reserved (status.admission set, as
    Kueue sets it with QuotaReserved) and the check still Pending."""
    status = workload.get("status") or {}
    if not status.get("admission"):
        return None
    wanted = set(checks)
    for state in status.get("admissionChecks") or []:
        if isinstance(state, dict) and state.get("name") in wanted and state.get("state") == "Pending":
            return str(state["name"])
    return None


def holds_room(workload: Obj, checks: Iterable[str], now: float) -> bool:
    """Told Ready by one of `checks` less than HELD_SECONDS ago, still admitted, its pods not all ready."""
    status = workload.get("status") or {}
    if not status.get("admission"):
        return False
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    if conditions.get("PodsReady") == "True" or conditions.get("Finished") == "True":
        return False
    wanted = set(checks)
    for state in status.get("admissionChecks") or []:
        if isinstance(state, dict) and state.get("name") in wanted and state.get("state") == "Ready":
            since = _seconds(state.get("lastTransitionTime"))
            return since is not None and now - since < HELD_SECONDS
    return False


def _seconds(stamp: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def demands(workload: Obj) -> list[PodSetDemand] | str:
    """Each podSet's pods as admitted (a partial admission's count, kueue PodSetAssignment.count), or why
    they cannot be read."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    admitted = {
        str(a.get("name")): a.get("count")
        for a in (status.get("admission") or {}).get("podSetAssignments") or []
        if isinstance(a, dict) and a.get("count") is not None
    }
    found: list[PodSetDemand] = []
    for pod_set in spec.get("podSets") or []:
        if not isinstance(pod_set, dict):
            return "spec.podSets holds something that is not a podSet"
        name = str(pod_set.get("name", ""))
        count = admitted.get(name, pod_set.get("count"))
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return f"podSet {name}: its count is not a number"
        template = pod_set.get("template") or {}
        try:
            shape = Shape.from_pod_spec(template.get("spec") or {})
        except (ValueError, ArithmeticError, TypeError, AttributeError) as error:
            return f"podSet {name}: its requests cannot be read ({error})"
        found.append(PodSetDemand(name, count, shape))
    return found


def gang_fits(
    wanted: Sequence[PodSetDemand],
    nodes: Sequence[Node],
    free: Mapping[str, Mapping[str, int]],
    ports: Mapping[str, Iterable[HostPort]],
) -> Verdict:
    """Whether every pod of every podSet fits at once, each podSet packed onto the nodes it may use
    (nodeSelector, required node affinity, taints, cordons) in the room the others left."""
    total = sum(d.count for d in wanted)
    if total > MAX_CHECKED_PODS:
        return Verdict(False, f"{total} pods: more than the {MAX_CHECKED_PODS} this check places", {})
    placing = Placing(free, ports)
    for demand in wanted:
        if demand.count == 0:
            continue
        eligible = [n for n in nodes if static_reason(demand.shape, n) is None]
        candidates, base = placing.candidates(demand.shape, demand.count, eligible)
        names = [f"{demand.name}-{i}" for i in range(demand.count)]
        placed = placing.take(demand.shape, names, pack(candidates, demand.count), base)
        if placed < demand.count:
            return Verdict(
                False,
                f"podSet {demand.name}: {placed} of {demand.count} pods ({demand.shape.describe_requests()}) "
                f"fit the {len(eligible)} nodes they may use now; waiting for room for the whole gang",
                {},
            )
    pods = ", ".join(f"{d.count} {d.name}" for d in wanted)
    return Verdict(True, f"the whole gang fits the nodes now ({pods})", placing.remaining)
