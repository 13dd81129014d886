"""What one pass works on (the snapshot), and the reuse of a waiting gang's decision: a gang that waited
last pass is placed again only when something its decision depended on changed (its pods, its workload,
the nodes, the queue ahead, or room where its pods could go)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from webhook import contract
from webhook.controller.decide import shapes
from webhook.controller.decide.eligibility import Eligibility
from webhook.controller.decide.pods import PodView
from webhook.controller.decide.queue import Ending
from webhook.controller.decide.shapes import HostPort, Node, Shape
from webhook.controller.decide.situation import Decision, GangState
from webhook.controller.observe.cluster import ClusterIndex
from webhook.controller.observe.gangview import GangView
from webhook.controller.observe.resolve import Resolved
from webhook.gangs.model import Obj


@dataclass(frozen=True, slots=True)
class Generations:
    """The index's generations a pass's snapshot was taken at, as kube-scheduler stamps its snapshot
    (pkg/scheduler/backend/cache/cache.go UpdateSnapshot): `nodes` moves whenever a node's figures or
    devices change, `room` whenever a node gains room or changes. What a decision reuses is checked
    against the generations it read (`Read`), never against a copy."""

    nodes: int
    room: int


@dataclass(frozen=True, slots=True)
class Read:
    """What a waiting decision rested on, each by its generation: the gang's pods (its roster version),
    its workload (uid, resourceVersion and what was read of it), the nodes, the nodes it avoids, and its
    place in the queue (the queue's context, and whether the room was the whole free room)."""

    gang: int
    workload: tuple[object, ...]
    nodes: int
    avoid: frozenset[str]
    queue: tuple[object, ...]


@dataclass
class Snapshot:
    """What one pass works on: nodes, a copy of the free capacity it may promise from, and the gangs,
    stamped with the generations it was taken at."""

    nodes: list[Node]
    free: dict[str, dict[str, int]]
    gangs: dict[str, GangView]
    stray_gated: list[tuple[PodView, Obj]]
    ports: dict[str, Counter[HostPort]]
    eligibility: Eligibility
    index: ClusterIndex
    generations: Generations
    grown: set[str] = field(default_factory=set)
    _relaxed: dict[int, Mapping[str, Mapping[str, int]] | None] = field(default_factory=dict)
    _by_workload: dict[tuple[str, str], set[str]] | None = None
    _released: list[tuple[GangView, list[str]]] = field(default_factory=list)

    @staticmethod
    def of(index: ClusterIndex, live: dict[str, GangView]) -> Snapshot:
        """The index's figures, shared; the free capacity copied: a pass replaces a node's figures when
        it promises capacity."""
        return Snapshot(
            nodes=index.node_list(),
            free=dict(index.free),
            gangs=live,
            stray_gated=list(index.stray_gated.values()),
            ports=dict(index.ports),
            eligibility=index.eligibility(),
            index=index,
            generations=Generations(index.nodes_epoch, index.room_epoch),
            grown=index.take_grown(),
        )

    def workload_nodes(self, gang: GangView) -> frozenset[str]:
        """The nodes the other gangs of this gang's workload hold (bound or promised), built once a pass
        and only when a gang with a workload topology asks."""
        if self._by_workload is None:
            self._by_workload = {}
            for view in self.gangs.values():
                for pod in view.pods:
                    stamp = pod.annotations.get(contract.WORKLOAD_ANNOTATION)
                    node = pod.holds_node
                    if stamp and node and not pod.terminal:
                        self._by_workload.setdefault((view.namespace, _workload(stamp)), set()).add(node)
            for released, nodes in self._released:
                self._add(released, nodes)
        found: set[str] = set()
        for stamp in self._stamps(gang):
            found |= self._by_workload.get((gang.namespace, stamp), set())
        return frozenset(found)

    def released(self, gang: GangView, nodes: Iterable[str]) -> None:
        """Nodes promised to a gang this pass: its workload's next gang in the same pass joins them."""
        if self._by_workload is None:  # kept until a gang asks (most passes none does)
            self._released.append((gang, list(nodes)))
        else:
            self._add(gang, nodes)

    def _add(self, gang: GangView, nodes: Iterable[str]) -> None:
        assert self._by_workload is not None
        for stamp in self._stamps(gang):
            self._by_workload.setdefault((gang.namespace, stamp), set()).update(nodes)

    @staticmethod
    def _stamps(gang: GangView) -> set[str]:
        return {_workload(str(s)) for p in gang.pods if (s := p.annotations.get(contract.WORKLOAD_ANNOTATION))}

    def without_lower_priority(self, priority: int) -> Mapping[str, Mapping[str, int]] | None:
        if priority not in self._relaxed:
            self._relaxed[priority] = self.index.free_without_priorities_below(priority)
        return self._relaxed[priority]


@dataclass
class Waiting:
    """A waiting gang's last decision and what it depended on: reused until one of those changes."""

    read: Read
    decision: Decision
    # per shape of its gated pods: how many it needs, and how many fit on each node ("": the total),
    # updated as nodes gain room; placed again only once some shape could have enough
    capacity: dict[Shape, tuple[int, dict[str, int]]]


def resolved_key(resolved: Resolved) -> tuple[object, ...]:
    """What a decision took from the workload: the periodic resync reads it again, which must not count
    as a change unless it is one."""
    meta = (resolved.workload or {}).get("metadata") or {}
    return (resolved.spec, resolved.problem, resolved.gone, meta.get("uid"), meta.get("resourceVersion"))


def capacity(
    gang: GangView, eligibility: Eligibility, room: Mapping[str, Mapping[str, int]], min_member: int | None = None
) -> dict[Shape, tuple[int, dict[str, int]]]:
    """Per shape of the gang's gated pods: the fewest of them that must fit for the gang to start, and
    how many fit on each node now. The fewest, not all: a gang with more gated pods than it needs (a
    Job of parallelism 3 with min-member 2) starts once enough of them fit, so it is decided again then."""
    gated: dict[Shape, int] = {}
    active = 0
    for pod in gang.pods:
        if pod.gated and not pod.terminal:
            gated[pod.shape] = gated.get(pod.shape, 0) + 1
        elif not pod.terminal:
            active += 1
    all_gated = sum(gated.values())
    short = all_gated if min_member is None else max(min_member - active, 1)
    # at least this many of one shape, whatever the gang's other shapes contribute
    needed = {shape: min(count, max(short - (all_gated - count), 1)) for shape, count in gated.items()}
    found = {}
    for shape, count in needed.items():
        fits = {}
        for node in eligibility(shape)[0]:
            node_room = room.get(node.name)
            if node_room is not None and (fit := shapes.fit_count(shape, node_room)) > 0:
                fits[node.name] = fit
        fits[""] = sum(fits.values())
        found[shape] = (count, fits)
    return found


def still_valid(waiting: Waiting, read: Read, snapshot: Snapshot, room: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether a waiting decision holds this pass: nothing it read moved (`read`, by generation), and
    where it waits for capacity, no shape of its gated pods could have enough where nodes grew."""
    if waiting.read != read:
        return False
    if waiting.decision.state != GangState.WAITING_FOR_CAPACITY:
        return True  # waiting for members, or too large for the cluster: only the above changes that
    # capacity only shrank, or grew too little where its pods could go: the gang still does not fit
    for shape, (needed, fits) in waiting.capacity.items():
        eligible = snapshot.eligibility.names(shape)
        total = fits.pop("", 0)
        for node in snapshot.grown:
            node_room = room.get(node)
            if node_room is not None and node in eligible:
                now_fits = shapes.fit_count(shape, node_room)
                total += now_fits - fits.get(node, 0)
                fits[node] = now_fits
        fits[""] = total
        if total >= needed:
            return False
    return True


def _workload(stamp: str) -> str:
    """Kind/name of a workload stamp: "LeaderWorkerSet/serve/0" (a group's gang) is LeaderWorkerSet/serve."""
    return "/".join(stamp.split("/")[:2])


def running_endings(
    gangs: Mapping[str, GangView], resolved_of: Callable[[str, GangView], Resolved | None], now: dt.datetime
) -> list[Ending]:
    """When the capacity held by running gangs returns: from each released pod's release time plus its
    workload's expected run time (gangs whose workload does not say are never expected to end)."""
    found = []
    for key, gang in gangs.items():
        if not any(p.holds_node and p.released_at for p in gang.pods):
            continue
        resolved = resolved_of(key, gang)
        spec = resolved.spec if resolved is not None else None
        if spec is None or spec.expected_seconds is None:
            continue
        for pod in gang.pods:
            node = pod.holds_node
            if node is None or pod.released_at is None:
                continue
            end = pod.released_at.timestamp() + spec.expected_seconds
            # a pod still running past the run time its workload claimed: that claim is no longer
            # believed (its end is unknown), so no gang is backfilled on the promise of its capacity
            if end > now.timestamp():
                found.append(Ending(end, node, pod.units))
    return found
