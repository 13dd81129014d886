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

from webhook.controller.decide.devices import Inventory, claims_devices, with_demand
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


def told_ready(workload: Obj, checks: Iterable[str]) -> tuple[str, float] | None:
    """One of `checks` that told this Workload Ready, and since when, while Kueue still holds it admitted
    and its pods are not all ready nor done; None otherwise."""
    status = workload.get("status") or {}
    if not status.get("admission"):
        return None
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    if any(conditions.get(kind) == "True" for kind in ("PodsReady", "Finished", "Evicted")):
        return None  # started, done, or Kueue is taking it back already
    wanted = set(checks)
    for state in status.get("admissionChecks") or []:
        if isinstance(state, dict) and state.get("name") in wanted and state.get("state") == "Ready":
            since = _seconds(state.get("lastTransitionTime"))
            return None if since is None else (str(state["name"]), since)
    return None


def holds_room(workload: Obj, checks: Iterable[str], now: float) -> bool:
    """Told Ready by one of `checks` less than HELD_SECONDS ago, still admitted, its pods not all ready."""
    told = told_ready(workload, checks)
    return told is not None and now - told[1] < HELD_SECONDS


def overdue(workload: Obj, checks: Iterable[str], started: bool, timeout_seconds: float, now: float) -> str | None:
    """The name of one of `checks` to set Retry: it told this Workload Ready more than `timeout_seconds`
    ago, Kueue admitted it, and no pod of its gang has started (none released or bound): the room it
    was admitted on went to others before its pods came. Retry makes Kueue evict it, count the retry and
    queue it again with the check Pending (kueue pkg/controller/core/workload_controller.go
    reconcileCheckBasedEviction, pkg/workload/admissionchecks.go resetChecksOnEviction); on a MultiKueue
    worker, the manager then dispatches it again (pkg/controller/admissionchecks/multikueue/workload.go,
    MultiKueueRedoAdmissionOnEvictionInWorker, on in 0.17)."""
    told = None if started else told_ready(workload, checks)
    return told[0] if told is not None and now - told[1] > timeout_seconds else None


def _seconds(stamp: Any) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def demands(workload: Obj, inventory: Inventory | None = None) -> list[PodSetDemand] | str:
    """Each podSet's pods as admitted (a partial admission's count, kueue PodSetAssignment.count), or why
    they cannot be read. With the cluster's DRA `inventory`, a pod's claims count as the gate's placement
    counts them: the devices of each class (with its selectors) the claims' first choices take, against
    each node's devices (the nodes' allocatable carries them: observe/cluster.py)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    namespace = str((workload.get("metadata") or {}).get("namespace") or "")
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
        pod_spec = template.get("spec") or {}
        try:
            shape = Shape.from_pod_spec(pod_spec)
        except (ValueError, ArithmeticError, TypeError, AttributeError) as error:
            return f"podSet {name}: its requests cannot be read ({error})"
        if inventory is not None and claims_devices(pod_spec):
            claimed = inventory.demand(namespace, pod_spec)
            if claimed.problems:  # a template not there yet: nothing to count the devices by
                return f"podSet {name}: {'; '.join(claimed.problems)}"
            shape = with_demand(shape, claimed)
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


# the controllerName of MultiKueue's AdmissionCheck (kueue apis/kueue/v1beta2/multikueue_types.go)
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"


@dataclass(frozen=True)
class Dispatched:
    """Where a gang MultiKueue dispatches runs, as the manager's Gang says it: read from the manager's
    Workload, whose status Kueue alone writes (`clusterName` once a worker admitted it, immutable;
    `nominatedClusterNames` while its copies wait in the workers; kueue workload_types.go)."""

    owner: Mapping[str, str]  # the Workload's controller: the manager's Job (apiVersion, kind, name, uid)
    pods: int  # every podSet's count
    state: str
    message: str
    cluster: str | None


def dispatched(workload: Obj, multikueue_checks: Iterable[str]) -> Dispatched | None:
    """The gang of a Workload one of `multikueue_checks` dispatches, None for any other Workload (or one
    with no controller to own its Gang)."""
    status = workload.get("status") or {}
    wanted = set(multikueue_checks)
    if not any(isinstance(s, dict) and s.get("name") in wanted for s in status.get("admissionChecks") or []):
        return None
    owner = next(
        (
            r
            for r in (workload.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(r, dict) and r.get("controller") is True and all(r.get(k) for k in OWNER_KEYS)
        ),
        None,
    )
    if owner is None:
        return None
    pods = sum(
        s["count"]
        for s in (workload.get("spec") or {}).get("podSets") or []
        if isinstance(s, dict) and isinstance(s.get("count"), int) and not isinstance(s.get("count"), bool)
    )
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    cluster = status.get("clusterName") if isinstance(status.get("clusterName"), str) else None
    nominated = [str(n) for n in status.get("nominatedClusterNames") or [] if isinstance(n, str)]
    if cluster and conditions.get("Finished") == "True":
        state, message = "Finished", f"finished in worker cluster {cluster} (Kueue MultiKueue)"
    elif cluster:
        state, message = "Dispatched", f"runs in worker cluster {cluster}: Kueue's MultiKueue sent it there whole"
    elif nominated:
        state = "WaitingForCluster"
        message = f"waiting for one of the worker clusters {', '.join(nominated)} to admit the whole gang"
    else:
        state, message = "WaitingForCluster", "waiting for Kueue's MultiKueue to choose a worker cluster"
    return Dispatched({k: str(owner[k]) for k in OWNER_KEYS}, pods, state, message, cluster)


OWNER_KEYS = ("apiVersion", "kind", "name", "uid")
